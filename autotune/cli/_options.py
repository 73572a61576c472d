"""Options shared by several commands, declared once (Annotated aliases), and how they are read."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer

ModelYaml = Annotated[
    Path, typer.Argument(help="The YAML file: model, workload, space, study, baseline.")
]
BestYaml = Annotated[
    Path, typer.Argument(help="trials/<name>/best.yaml written by autotune search.")
]
Device = Annotated[
    Optional[str], typer.Option(help="cuda or cpu; default cuda when a GPU is visible, else cpu.")
]
Storage = Annotated[
    Optional[str],
    typer.Option(
        help=(
            "Optuna storage: sqlite:///f.db, postgresql://user@host/db, journal:PATH (search: "
            "overrides study.storage; the same command on several nodes makes them workers of one "
            "study)."
        )
    ),
]
Gpus = Annotated[
    Optional[str],
    typer.Option(
        help=(
            "GPUs: 0,1,2,3 or all. search: one trial per GPU (or group of world_size) at once; "
            "nccl: the group (default all). On the CPU: search runs that many trials at once, "
            "nccl that many gloo ranks (default 2)."
        )
    ),
]
Out = Annotated[
    Path,
    typer.Option(
        help="Output folder: search writes OUT/<name>/, nccl writes OUT/nccl.json and logs."
    ),
]


def finite(value: float | None) -> float | None:
    """Typer callback: a float option must be a finite number ('inf' and 'nan' parse as floats)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


# search's options (declared once, as the others above)
Trials = Annotated[
    Optional[int],
    typer.Option(min=1, max=100_000, help="Trials to measure (overrides study.trials)."),
]
TimeoutMin = Annotated[
    Optional[float],
    typer.Option(
        min=0.01,
        max=525_600,
        callback=finite,
        help="Stop launching trials after M minutes (overrides study.timeout_min).",
    ),
]
Fresh = Annotated[bool, typer.Option(help="Archive an existing study of this name and start anew.")]
ShowAll = Annotated[
    bool,
    typer.Option(
        "--all",
        help="validate, --dry-run: show every knob, also those that cannot act in this task and "
        "world size (FSDP on one GPU).",
    ),
]
DryRun = Annotated[
    bool, typer.Option(help="Print the resolved space, its size and the baseline; run nothing.")
]
WarmStart = Annotated[
    Optional[Path],
    typer.Option(
        help="Begin with the measured trials of the study in this folder (same model, workload, "
        "GPU and torch) that lie in this space; they are not measured again and count no budget."
    ),
]
Mlflow = Annotated[
    Optional[str],
    typer.Option(
        "--mlflow",
        metavar="TRACKING_URI",
        help="Log each trial to MLflow at this tracking URI (overrides "
        "study.tracking.mlflow.tracking_uri; needs the mlflow extra).",
    ),
]
Wandb = Annotated[
    Optional[str],
    typer.Option(
        "--wandb",
        metavar="PROJECT",
        help=(
            "Log each trial to this Weights & Biases project (overrides "
            "study.tracking.wandb.project; needs the wandb extra; WANDB_MODE=offline writes it "
            "locally)."
        ),
    ),
]
