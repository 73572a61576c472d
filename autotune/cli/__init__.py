"""The `autotune` command line: a thin Typer shell over the library, one module a command, one error
funnel.

Exit codes are defined once, in autotune.errors (ExitCode, EXIT_MEANINGS). Importing this package
loads nothing else: `main` sets Ctrl-C handling up before Typer, Rich and the commands are imported,
so an early Ctrl-C is a one-line exit 130 too.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import MutableMapping
from typing import Any

__all__ = ["app", "main"]


def _load_app() -> Any:
    from autotune.cli import check, export, hw, nccl, report, search  # noqa: F401  (each registers its commands)
    from autotune.cli._app import app

    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        return _load_app()
    raise AttributeError(f"module 'autotune.cli' has no attribute {name!r}")


def _interrupted(signum: int, frame: object) -> None:
    """Ctrl-C before a command's funnel runs: nothing is under way yet, so leave at once (a
    SystemExit raised from a signal handler can land where Python only reports it and carries
    on)."""
    import os

    sys.stderr.write("interrupted\n")
    sys.stderr.flush()
    os._exit(130)


def _leave(code: int) -> None:
    """Exit with the command's code: a Ctrl-C that comes once the result is decided changes nothing.
    After an interruption the exit skips the interpreter's teardown: CPython would otherwise kill
    itself with SIGINT when a C extension printed the KeyboardInterrupt on its way (numpy at import
    does), and exit -2."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if code in (130, 143):
        import os

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


# The terminal sizes every console (autotune's, Typer's help) renders at: Rich takes COLUMNS and
# LINES as they are (at COLUMNS=0 it prints nothing, every message lost; "²" passes its isdigit()
# and fails its int(): a traceback); past the most is a typo, not a terminal
SIZES = {"COLUMNS": (20, 10_000), "LINES": (5, 10_000)}


def _hold_sizes(environ: MutableMapping[str, str]) -> None:
    """COLUMNS and LINES held to SIZES; removed where they are not a number (Rich then asks the
    terminal, else takes 80 x 25)."""
    for name, (least, most) in SIZES.items():
        value = environ.get(name, "").strip()
        if value.isascii() and value.isdigit():
            environ[name] = str(min(max(int(value), least), most))
        else:
            environ.pop(name, None)


def main() -> None:
    """The `autotune` command: usage errors (an unknown option, a value out of range) are one line
    too."""
    # Until a command's funnel takes over (it makes Ctrl-C a KeyboardInterrupt that ends trials and
    # keeps the study), Ctrl-C is one line and exit 130: while importing, and while Typer parses. An
    # ignored SIGINT (a background job) stays ignored.
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _interrupted)
    _hold_sizes(os.environ)
    import typer

    from autotune.errors import printable

    app = _load_app()
    try:
        code = app(standalone_mode=False)  # an exit code, when a command (or --help) ended with one
    except typer.Exit as e:
        _leave(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("interrupted\n")
        _leave(130)
    except Exception as e:
        # not one of click's usage errors
        if not hasattr(e, "format_message") or not hasattr(e, "exit_code"):
            raise
        if type(e).__name__ == "NoArgsIsHelpError":  # `autotune` alone: the help
            e.show()  # type: ignore[attr-defined]
        else:
            ctx = getattr(e, "ctx", None)
            where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
            sys.stderr.write(
                f"error: {printable(' '.join(e.format_message().split()), newlines=False)}{where}\n"
            )
        _leave(e.exit_code)
    _leave(code if isinstance(code, int) else 0)
