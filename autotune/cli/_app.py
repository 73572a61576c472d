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


@app.callback()
def _main(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False) -> None:
    state["debug"] = debug
