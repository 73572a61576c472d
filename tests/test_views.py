"""The live view of a search (views.LiveProgress): what it says as each result arrives."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import optuna
from rich.console import Console

from autotune.config_load import load_config
from autotune.record import Metric, TrialRecord
from autotune.search.history import History
from autotune.search.loop import _Search
from autotune.space import resolve_space
from autotune.views import LiveProgress
from conftest import tiny

# tokens/s by micro-batch size and precision: each trial beats the one before, so a lagging "best" shows
SPEED = {(2, "fp32"): 100.0, (4, "fp32"): 200.0, (8, "fp32"): 300.0, (2, "bf16"): 400.0, (4, "bf16"): 500.0,
         (8, "bf16"): 600.0}


class _Watched(LiveProgress):
    """The real live view, noting after each result which trial it shows as best and the count it shows."""

    def __init__(self, console: Console, searched: list[str]) -> None:
        super().__init__(console, searched)
        self.seen: list[tuple[int, int, int]] = []  # (trial, the best shown, trials measured shown)

    def trial_finished(self, record: TrialRecord, history: History) -> None:
        super().trial_finished(record, history)
        self.seen.append((record.number, self.best["number"], self.measured))


def _measure(bench: Any, knobs: dict[str, Any], run_dir: Path, *, number: int = 0, **_: Any) -> TrialRecord:
    value = SPEED[(knobs["micro_batch_size"], knobs["precision"])]
    return TrialRecord(number, knobs, "ok", wall_s=0.0, metrics={Metric.TOKENS_PER_GPU: value, Metric.MFU: None})


def test_views_best_is_each_result_as_it_arrives_with_autotune_s_count(write_yaml, tmp_path: Path) -> None:
    cfg = load_config(write_yaml(tiny(study={"trials": 6, "sampler": "grid"})))
    out = io.StringIO()
    view = _Watched(Console(file=out, width=200), ["micro_batch_size", "precision"])
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(direction="maximize")
    search = _Search(cfg, resolve_space(cfg, "cpu"), study, tmp_path / "s", "cpu", None, 6, view,
                     measure_fn=_measure)
    search.optimize(600.0, "memory")
    values = {t.number: t.value for t in study.get_trials()}
    for i, (number, best, measured) in enumerate(view.seen):  # the best so far, this result included
        assert best == max((n for n, _, _ in view.seen[: i + 1]), key=values.get), view.seen
        assert measured == i + 1
    assert len(view.seen) == 6
    assert "trial 1 of 6 (#0) ok" in out.getvalue() and "trial 6 of 6 (#" in out.getvalue()
    assert "6 of 6 trials measured" in "".join(str(r) for r in view._render().renderables)
