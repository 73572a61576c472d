"""The Typer app every command module registers on, and the --debug switch."""

from __future__ import annotations

from typing import Annotated

import typer

from autotune.errors import exit_codes_help

app = typer.Typer(
    name="autotune",
    help="Measured auto-tuning of LLM training on NVIDIA GPUs. " + exit_codes_help(),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
state = {"debug": False}


def _show_version(value: bool) -> None:
    """--version: the installed package's version, then exit (eager: before any command is looked
    for)."""
    if value:
        import autotune

        typer.echo(f"autotune {autotune.__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_show_version,
            help="Show autotune's version and exit.",
        ),
    ] = False,
) -> None:
    state["debug"] = debug
