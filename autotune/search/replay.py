"""Replay a recorded landscape through the search loop: samplers compared without a GPU.

A landscape (benchmarks/landscapes/*.json) holds every point of a space as measured on a GPU: its
knobs and its raw step times. The replay runs the real loop (`loop.Search`: claims, duplicates
answered by the nearest unmeasured point, configuration failures PRUNED) with the measurement
replaced by a draw from the point's recorded samples (a bootstrap resample of its step times, their
median), so a sampler meets the same noise the GPU showed. What a run is judged by is the true value
(the recorded median) of the points it measured: trials until one within 97% (99%) of the
landscape's optimum was measured.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from autotune.documents.record import Metric, TrialRecord, is_predicted, knobs_of, status_of
from autotune.job import load_config
from autotune.protocol import Knobs
from autotune.search.loop import Search
from autotune.search.observer import Observer
from autotune.space import resolve_space
from autotune.status import Status
from autotune.study.history import key

if TYPE_CHECKING:
    from autotune.launch.runner import Bench


@dataclass
class Landscape:
    """Every point of a space as measured: knobs, status, raw step times."""

    name: str
    yaml: str
    tokens_per_step: int
    points: dict[Any, dict[str, Any]] = field(default_factory=dict)
    searched: tuple[str, ...] = ()

    @classmethod
    def load(cls, path: str | Path) -> Landscape:
        doc = json.loads(Path(path).read_text())
        searched = tuple(doc["points"][0]["knobs"])
        points = {key(p["knobs"]): p for p in doc["points"]}
        return cls(doc["name"], doc["yaml"], doc["tokens_per_step"], points, searched)

    def point(self, knobs: Knobs) -> dict[str, Any]:
        return self.points[key({k: knobs[k] for k in self.searched})]

    def true_value(self, knobs: Knobs) -> float | None:
        p = self.point(knobs)
        return (
            self.tokens_per_step / statistics.median(p["step_times_s"])
            if p["status"] == Status.OK
            else None
        )

    @property
    def optimum(self) -> float:
        best: float = max(
            self.tokens_per_step / statistics.median(p["step_times_s"])
            for p in self.points.values()
            if p["status"] == Status.OK
        )
        return best


def _replayed_measure(landscape: Landscape, rng: random.Random) -> Callable[..., TrialRecord]:
    def measure(
        bench: Bench, knobs: Knobs, run_dir: Path, *, number: int = 0, **_: object
    ) -> TrialRecord:
        p = landscape.point(knobs)
        record = TrialRecord(number, knobs, p["status"], p.get("reason", ""), wall_s=0.0)
        # the knob values that caused the failure: the rule the search learns
        record.cause = p.get("cause")
        if p["status"] == Status.OK:
            steps = p["step_times_s"]
            drawn = statistics.median(rng.choice(steps) for _ in steps)
            record.metrics = {Metric.TOKENS_PER_GPU: landscape.tokens_per_step / drawn}
        return record

    return measure


def replay(
    landscape: Landscape,
    sampler: optuna.samplers.BaseSampler | None,
    seed: int,
    budget: int,
    root: Path | None = None,
    patience: int | None = 0,
) -> list[float | None]:
    """One search of `budget` trials over the landscape (sampler None: autotune's default); the true
    values of the points measured, in launch order. patience: study.patience (0: the whole budget,
    what the trials to a target are counted over; None: the study's default)."""
    cfg = load_config(Path(root or ".") / landscape.yaml)
    # the sampler is the one given (a landscape recorded with sampler grid would otherwise replay
    # its queue)
    update = {"seed": seed, "confirm_top": 0, "trials": budget, "sampler": "tpe"}
    # a recorded landscape holds the listed points only: nothing past the edge to replay
    update.update(patience=patience, extend_edges=False)
    cfg = cfg.model_copy(update={"study": cfg.study.model_copy(update=update)})
    space = resolve_space(cfg, "cuda")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(direction="maximize")
    with tempfile.TemporaryDirectory() as tmp:
        search = Search(
            cfg,
            space,
            study,
            Path(tmp),
            "cuda",
            None,
            budget,
            Observer(),
            sampler=sampler,
            measure_fn=_replayed_measure(landscape, random.Random(seed)),
        )
        search.optimize(math.inf, "memory")
    launched = sorted(
        (
            t
            for t in study.get_trials(deepcopy=False)
            if status_of(t) not in (None, "duplicate", "skipped") and not is_predicted(t)
        ),
        key=lambda t: t.number,
    )
    return [landscape.true_value(knobs_of(t)) for t in launched]


def trials_to(values: list[float | None], target: float) -> int | None:
    """The 1-based trial at which a point of true value >= target was first measured (None:
    never)."""
    return next((i + 1 for i, v in enumerate(values) if v is not None and v >= target), None)
