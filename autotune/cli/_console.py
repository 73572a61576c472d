"""The CLI's consoles: user text is printed as text (no Rich markup, no emoji codes), credentials masked."""

from __future__ import annotations

import sys

from rich.console import Console

from autotune.redact import MaskingWriter


def console(stderr: bool = False) -> Console:
    """A Rich console that never reads markup or emoji codes in what it prints (a '[/x]' in a path is
    printed as it is) and masks every credential it writes (redact.mask)."""
    return Console(file=MaskingWriter(sys.stderr if stderr else sys.stdout), markup=False, emoji=False,
                   highlight=False)
