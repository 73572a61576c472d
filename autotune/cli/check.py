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
        "process-to-process spread, at most 30%; 5% with a one-sample baseline). Given, a step "
        "in the nightly series smaller than it is not flagged either. With --reset-baseline or "
        "--update: a baseline spread past what this tolerance can use is not recorded (exit 3).",
    ),
]
MaxLoad = Annotated[
    float,
    typer.Option(
        min=0.0,
        max=10_000.0,
        callback=finite,
        envvar="AUTOTUNE_MAX_LOAD",
        help=(
            "Host load per CPU core (1-minute load average / CPUs) past which the check is "
            "unreliable (exit 3), pass or regression, as another process on the GPU makes it, "
            "and so is a repeat whose processes waited for a CPU over 20% of the time they were "
            "ready to run; --reset-baseline is refused then (exit 3). 0: neither is judged (a "
            "host shared by design, such as a test suite's). Default from AUTOTUNE_MAX_LOAD."
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
                "the CI machine). Refused, nothing recorded (exit 3), when the repeats were "
                "disturbed (--max-load) or spread more than the gate can use (--tolerance)."
            )
        ),
    ] = False,
) -> None:
    """Re-measure the chosen configuration against its baseline.

    Exit 0 only when it rules out a slowdown past the tolerance, 1 on a regression, 5 when
    inconclusive, 3 if unmeasurable or disturbed (or its baseline not recorded)."""
    with funnel():
        from autotune.check import regress
        from autotune.check.views import baseline_recorded, repeat_line, verdict_lines
        from autotune.errors import CheckInterrupted

        console, progress = out_console(), out_console(stderr=True)

        # each repeat as it ends, on stderr: stdout's first line is the verdict
        def on_repeat(event: dict[str, Any]) -> None:
            progress.print(repeat_line(event), highlight=False)

        try:
            if reset_baseline:
                samples, failures = regress.reset_baseline(
                    best_yaml,
                    model_yaml=model,
                    repeats=repeats,
                    tolerance_pct=tolerance,
                    max_load=max_load,
                    on_repeat=on_repeat,
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
        except CheckInterrupted as stop:  # check's words, not the search's (the funnel's)
            progress.print(stop.message, highlight=False, soft_wrap=True)
            # an exit the funnel lets through as it is (it would say the search's words instead)
            raise SystemExit(stop.exit_code) from None
        for line in verdict_lines(verdict, best_yaml, repeats, update):
            console.print(line, highlight=False, soft_wrap=True)
    raise typer.Exit(verdict.exit_code)
