"""The `autotune` command line: a thin Typer shell over the library, one module a command, one error funnel.

Exit codes are defined once, in autotune.errors (ExitCode, EXIT_MEANINGS).
"""

from __future__ import annotations

from autotune.cli import check, hw, nccl, report, search  # noqa: F401  (each registers its commands)
from autotune.cli._app import app

__all__ = ["app", "main"]


def main() -> None:
    """The `autotune` command: usage errors (an unknown option, a value out of range) are one line too."""
    import sys

    import typer

    try:
        code = app(standalone_mode=False)  # an exit code, when a command (or --help) ended with one
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except Exception as e:
        if not hasattr(e, "format_message") or not hasattr(e, "exit_code"):  # not one of click's usage errors
            raise
        if type(e).__name__ == "NoArgsIsHelpError":  # `autotune` alone: the help
            e.show()  # type: ignore[attr-defined]
        else:
            ctx = getattr(e, "ctx", None)
            where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
            sys.stderr.write(f"error: {' '.join(e.format_message().split())}{where}\n")
        sys.exit(e.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
