"""The CLI's consoles: user text is printed as text (no Rich markup, no emoji codes), credentials
masked."""

from __future__ import annotations

import sys
from typing import IO, Any, cast

from rich.console import Console

from autotune.errors import printable
from autotune.redact import MaskingWriter


class _TextConsole(Console):
    """Every string it renders (print arguments, table cells) has its control characters escaped
    first."""

    def render_str(self, text: str, **kwargs: Any) -> Any:
        return super().render_str(printable(text), **kwargs)


def console(stderr: bool = False) -> Console:
    """A Rich console that never reads markup or emoji codes in what it prints (a '[/x]' in a path
    is printed as it is), escapes control characters in it (an ESC in a file name does not reach the
    terminal) and masks every credential it writes (redact.mask)."""
    # MaskingWriter has what Rich calls on its file (write, flush, isatty, fileno), not all of IO
    stream = cast(IO[str], MaskingWriter(sys.stderr if stderr else sys.stdout))
    return _TextConsole(
        file=stream,
        markup=False,
        emoji=False,
        highlight=False,
    )
