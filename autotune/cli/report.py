"""`autotune report`: what a study found."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from autotune.cli._app import app
from autotune.cli._errors import funnel
from autotune.cli._options import Storage
from autotune.errors import ConfigError


@app.command()
def report(
    study_dir: Annotated[Optional[Path], typer.Argument(help="trials/<name> (holds study.db).")] = None,
    study: Annotated[Optional[str], typer.Option(help="Study name in --storage.")] = None,
    storage: Storage = None,
    format: Annotated[str, typer.Option("--format", help="rich, json or markdown.")] = "rich",
    html: Annotated[Optional[Path], typer.Option(help="Write report.html and PNG plots to this folder.")] = None,
    no_html: Annotated[bool, typer.Option("--no-html", help="Do not write the HTML report.")] = False,
) -> None:
    """What a study found (also while it runs): trials, failures, knob importance, time; HTML with plots."""
    from rich.console import Console

    from autotune import report as rep

    console = Console()
    with funnel():
        if format not in ("rich", "json", "markdown"):
            raise ConfigError(f"--format: {format!r} is not allowed; use rich, json or markdown")
        opened, folder = rep.load_study(study_dir, study, storage)
        data = rep.collect(opened, folder)
        if format == "json":
            print(rep.to_json(data))
        elif format == "markdown":
            print(rep.to_markdown(data), end="")
        else:
            rep.render_rich(data, console)
        target = html or ((folder / "report") if folder is not None and format == "rich" else None)
        if target is not None and not no_html:
            path = rep.write_html(data, target)
            if format == "rich":
                console.print(f"HTML report: {path}")
