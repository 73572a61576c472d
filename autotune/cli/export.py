"""`autotune export`: the winner of a study, ready to paste into your own training setup."""

from __future__ import annotations

from typing import Annotated

import typer

from autotune.cli._app import command
from autotune.cli._console import console as out_console
from autotune.cli._errors import funnel
from autotune.cli._options import BestYaml

Formats = Annotated[
    list[str] | None,
    typer.Option(
        "--format",
        "-f",
        metavar="FORMAT",
        help=(
            "command, torchrun, hf, lightning, torchtitan, json, or all (every one that applies); "
            "repeat for several (default: those that fit the study: a command study's command, "
            "its framework's form and json)."
        ),
    ),
]


@command("autotune export trials/tiny/best.yaml --format torchrun")
def export(best_yaml: BestYaml, format: Formats = None) -> None:
    """Print the winner as your command, HF TrainingArguments, Lightning, torchrun, torchtitan."""
    with funnel():
        from autotune.export import export as export_winner

        console = out_console()
        forms = export_winner(best_yaml, format)
        for form in forms:
            if len(forms) > 1:
                console.print(f"# ==== {form.format} ====", style="bold", highlight=False)
            console.out(form.text, end="", highlight=False)
