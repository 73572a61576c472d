"""`autotune check`: the nightly regression gate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from autotune.check.conditions import HOST_LOAD_LIMIT
from autotune.cli._app import command
from autotune.cli._console import console as out_console
from autotune.cli._errors import funnel
from autotune.cli._options import BestYaml, finite

# The slowdown tolerated and the host's load judged (regress_conditions), declared once here.
Tolerance = Annotated[
    Optional[float],
    typer.Option(
        min=0.0,
        max=100.0,
        callback=finite,
        help="Slowdown in percent tolerated: pass needs the ratio's 95% interval above 1 minus "
        "it, a regression below (default: the larger of 2% and 3x the baseline's "
        "process-to-process spread; 5% with a one-sample baseline). Given, a step "
        "in the nightly series smaller than it is not flagged either.",
    ),
]
MaxLoad = Annotated[
    float,
    typer.Option(
        min=0.0,
        max=10_000.0,
        callback=finite,
        help=(
            "Host load per CPU core (1-minute load average / CPUs) past which the check is "
            "unreliable (exit 3), pass or regression, as another process on the GPU makes it; 0: "
            "the load is not judged."
        ),
    ),
]
MaxRepeats = Annotated[
    Optional[int],
    typer.Option(
        min=0,
        max=1000,
        help=(
            "The most repeats started, failed ones too: while the verdict is inconclusive, one "
            "more at a time (default 3x --repeats, at most 20; 0 or --repeats: no extra repeat). "
            "At least --repeats."
        ),
    ),
]


@command(
    "autotune check trials/tiny/best.yaml --junit check.xml",
    "autotune check trials/tiny/best.yaml --reset-baseline",
)
def check(
    best_yaml: BestYaml,
    model: Annotated[
        Optional[Path],
        typer.Option(help="MODEL_YAML whose model and workload replace best.yaml's."),
    ] = None,
    repeats: Annotated[
        int,
        typer.Option(
            min=1,
            max=1000,
            help="Measurements first, each in a fresh process (then more while inconclusive, "
            "up to --max-repeats).",
        ),
    ] = 5,
    max_repeats: MaxRepeats = None,
    tolerance: Tolerance = None,
    junit: Annotated[
        Optional[Path],
        typer.Option(
            help="Write a JUnit XML file with one test case: a failure on a regression, an error "
            "when inconclusive, unreliable or every repeat failed. "
            "An existing file is replaced only if it is a JUnit report; a file autotune reads or "
            "keeps (the study's storage, a best.yaml, MODEL_YAML) is refused before measuring."
        ),
    ] = None,
    update: Annotated[
        bool,
        typer.Option(
            help="On pass or faster, record this check's samples as the new baseline (never on "
            "a disturbed or inconclusive check)."
        ),
    ] = False,
    max_load: MaxLoad = HOST_LOAD_LIMIT,
    reset_baseline: Annotated[
        bool,
        typer.Option(
            help=(
                "Measure and record the samples as the baseline, compare nothing (do this once on "
                "the CI machine)."
            )
        ),
    ] = False,
) -> None:
    """Re-measure the chosen configuration against its baseline.

    Exit 0 only when it rules out a slowdown past the tolerance, 1 on a regression, 5 when
    inconclusive, 3 if unmeasurable or disturbed."""
    with funnel():
        from autotune.check import regress
        from autotune.check.views import baseline_recorded, repeat_line, verdict_lines

        console, progress = out_console(), out_console(stderr=True)

        # each repeat as it ends, on stderr: stdout's first line is the verdict
        def on_repeat(event: dict[str, Any]) -> None:
            progress.print(repeat_line(event), highlight=False)

        if reset_baseline:
            samples, failures = regress.reset_baseline(
                best_yaml, model_yaml=model, repeats=repeats, on_repeat=on_repeat
            )
            for line in baseline_recorded(best_yaml, samples, failures):
                console.print(line, highlight=False)
            return
        verdict = regress.check(
            best_yaml,
            model_yaml=model,
            repeats=repeats,
            max_repeats=max_repeats,
            tolerance_pct=tolerance,
            junit=junit,
            update=update,
            max_load=max_load,
            on_repeat=on_repeat,
        )
        for line in verdict_lines(verdict, best_yaml, repeats, update):
            console.print(line, highlight=False, soft_wrap=True)
    raise typer.Exit(verdict.exit_code)
