"""The `autotune` command line: a thin Typer shell over the library, one module a command, one error funnel.

Exit codes are defined once, in autotune.errors (ExitCode, EXIT_MEANINGS).
"""

from __future__ import annotations

from autotune.cli import check, hw, nccl, report, search  # noqa: F401  (each registers its commands)
from autotune.cli._app import app

__all__ = ["app", "main"]


def main() -> None:
    app()
