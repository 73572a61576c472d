"""`autotune report`: what a study found."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from autotune import paths
from autotune.cli._app import command
from autotune.cli._console import console as out_console
from autotune.cli._errors import funnel
from autotune.cli._options import Storage
from autotune.errors import ConfigError


@command(
    "autotune report trials/tiny",
    "autotune report trials/tiny --format markdown --no-html",
)
def report(
    study_dir: Annotated[
        Optional[Path], typer.Argument(help="trials/<name> (holds study.db).")
    ] = None,
    study: Annotated[Optional[str], typer.Option(help="Study name in --storage.")] = None,
    storage: Storage = None,
    format: Annotated[str, typer.Option("--format", help="rich, json or markdown.")] = "rich",
    html: Annotated[
        Optional[Path], typer.Option(help="Write report.html and its plots to this folder.")
    ] = None,
    no_html: Annotated[
        bool, typer.Option("--no-html", help="Do not write the HTML report.")
    ] = False,
    wide: Annotated[
        bool,
        typer.Option("--wide", help="The whole trials table, past the terminal's width."),
    ] = False,
    train_tokens: Annotated[
        Optional[float],
        typer.Option(
            "--train-tokens",
            help="Tokens of the full training run: its hours and GPU-hours at the baseline and "
            "chosen, against the search's cost (default: the YAML's study.train_tokens).",
        ),
    ] = None,
) -> None:
    """What a study found (also while it runs): the chosen configuration, what was left out."""
    with funnel():
        from autotune import report as rep

        console = out_console()
        if format not in ("rich", "json", "markdown"):
            raise ConfigError(f"--format: {format!r} is not allowed; use rich, json or markdown")
        if html is not None and not no_html:
            paths.writable_dir(html, "--html")
        _tokens_allowed(train_tokens)
        opened, folder = rep.load_study(study_dir, study, storage)
        if folder is not None:  # what it reads and writes there is the study's, never a link's
            paths.no_links(folder)
        data = rep.collect(opened, folder, train_tokens=train_tokens)
        if format == "json":
            console.out(rep.to_json(data), highlight=False)
        elif format == "markdown":
            console.out(rep.to_markdown(data), end="", highlight=False)
        else:
            rep.render_rich(data, console, wide=wide)
        default = folder / "report" if folder is not None and format == "rich" else None
        if (
            html is None
            and default is not None
            and not os.access(default if default.exists() else default.parent, os.W_OK)
        ):
            # a study read from a read-only place: no HTML unless asked for with --html
            default = None
        target = html or default
        if target is not None and not no_html:
            out = paths.study_folder(folder, target) if folder is not None else target
            path = rep.write_html(data, out, study=opened)
            if format == "rich":
                console.print(f"HTML report: {path}")


def _tokens_allowed(train_tokens: float | None) -> None:
    """--train-tokens as the YAML's study.train_tokens allows it: finite, at least 1, at most
    MAX_TRAIN_TOKENS."""
    from autotune.config.study import MAX_TRAIN_TOKENS

    if train_tokens is None or 1 <= train_tokens <= MAX_TRAIN_TOKENS:  # NaN fails both
        return
    raise ConfigError(
        f"--train-tokens: {train_tokens:g} is not allowed; use the tokens of the full training "
        f"run, a number from 1 to {MAX_TRAIN_TOKENS:g} (e.g. 2e12)"
    )
