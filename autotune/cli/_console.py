"""The CLI's consoles: user text is printed as text (no Rich markup, no emoji codes, control and
bidirectional characters visible), credentials masked."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import IO, Any, cast

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from autotune.errors import printable
from autotune.redact import MaskingWriter


class _TextConsole(Console):
    """Every string it renders (print arguments, table cells) and every Text (a report's line in
    a Padding) has its control and bidirectional characters escaped first (errors.printable)."""

    def render_str(self, text: str, **kwargs: Any) -> Any:
        return super().render_str(printable(text), **kwargs)

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        # Rich renders what a renderable holds through this method too: a Text anywhere is
        # escaped here, before it is measured and wrapped
        shown = _printable(renderable) if isinstance(renderable, Text) else renderable
        yield from super().render(shown, options)


def _printable(text: Text) -> Text:
    """The Text with its control and bidirectional characters escaped, each span's style kept."""
    if printable(text.plain) == text.plain:
        return text
    bounds = sorted({i for span in text.spans for i in (span.start, span.end)})
    out = text.blank_copy()
    for part in text.divide(bounds):
        shown = Text(printable(part.plain), style=part.style)
        for span in part.spans:  # divided at every span's ends: each covers all of its part
            shown.stylize(span.style)
        out.append_text(shown)
    return out


def console(stderr: bool = False) -> Console:
    """A Rich console that never reads markup or emoji codes in what it prints (a '[/x]' in a path
    is printed as it is), escapes control and bidirectional characters in it (an ESC in a file name
    does not reach the terminal, a U+202E is shown as <U+202E>) and masks every credential it writes
    (redact.mask)."""
    # MaskingWriter has what Rich calls on its file (write, flush, isatty, fileno), not all of IO
    stream = cast(IO[str], MaskingWriter(sys.stderr if stderr else sys.stdout))
    return _TextConsole(
        file=stream,
        markup=False,
        emoji=False,
        highlight=False,
    )
