"""`autotune export`: the winner of a study, ready to paste into your own training setup."""

from __future__ import annotations

from typing import Annotated

import typer

from autotune.cli._app import command
from autotune.cli._console import console as out_console
from autotune.cli._errors import funnel
from autotune.cli._options import BestYaml
from autotune.export import ALL, FORMS

Formats = Annotated[
    list[str] | None,
    typer.Option(
        "--format",
        "-f",
        metavar="FORMAT",
        help=(
            f"{', '.join(FORMS)}, or {ALL} (every one that applies); repeat for several (default: "
            "those that fit the study: a command study's command, its framework's form and json)."
        ),
    ),
]


@command("autotune export trials/tiny/best.yaml --format torchrun")
def export(best_yaml: BestYaml, format: Formats = None) -> None:
    """Print the winner ready to paste, in the forms that fit the study (--format: each form)."""
    with funnel():
        from autotune.export import export as export_winner

        console = out_console()
        forms = export_winner(best_yaml, format)
        for form in forms:
            if len(forms) > 1:
                console.print(f"# ==== {form.format} ====", style="bold", highlight=False)
            console.out(form.text, end="", highlight=False)
