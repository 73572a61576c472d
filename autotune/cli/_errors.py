"""The one error funnel: a known error becomes one line on stderr and its exit code; tracebacks only with --debug."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import typer

from autotune.cli._app import state
from autotune.errors import AutotuneError, ExitCode


@contextlib.contextmanager
def funnel() -> Iterator[None]:
    from rich.console import Console

    err = Console(stderr=True)
    try:
        yield
    except AutotuneError as e:
        if state["debug"]:
            raise
        err.print(f"[red]error:[/] {e}", soft_wrap=True, highlight=False)
        raise typer.Exit(e.exit_code) from None
    except KeyboardInterrupt:
        err.print("interrupted: the study is kept; run the same command again to resume")
        raise typer.Exit(ExitCode.INTERRUPTED) from None
