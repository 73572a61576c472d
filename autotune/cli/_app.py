"""The Typer app every command module registers on, and the --debug switch."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, TypeVar

import typer

from autotune.errors import exit_codes_help


def example(*commands: str) -> str:
    """A help's epilog: its example commands, each on a line of its own (click's \\b keeps them
    unwrapped)."""
    return "Example:\n\n\b\n" + "\n".join(f"  $ {c}" for c in commands)


# rich_markup_mode=None: click's plain help, wrapped to the terminal (at least 50 columns); Typer's
# Rich panels crop what does not fit a column with "…" (a storage URL, --no-reset-baseline at 80
# columns) and read "<name>" in a help as markup, as our consoles never do
app = typer.Typer(
    name="autotune",
    help="Measured auto-tuning of LLM training on NVIDIA GPUs.\n\n" + exit_codes_help(),
    epilog=example(
        "autotune validate search_spaces/tiny.yaml",
        "autotune search search_spaces/tiny.yaml --device cpu --trials 4",
        "autotune report trials/tiny",
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)
state = {"debug": False}
Command = TypeVar("Command", bound=Callable[..., None])


def command(*examples: str) -> Callable[[Command], Command]:
    """Registers a command on the app with its examples as the help's epilog; `autotune --help`
    lists it by its docstring's first paragraph, whole (click cuts a summary it makes with
    "...")."""

    def register(function: Command) -> Command:
        summary = " ".join((inspect.getdoc(function) or "").split("\n\n")[0].split())
        return app.command(short_help=summary, epilog=example(*examples))(function)

    return register


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
