"""The live view of a search (views.LiveProgress): what it says as each result arrives."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import optuna
from conftest import tiny
from rich.console import Console

from autotune.documents.record import Metric, TrialRecord
from autotune.job import load_config
from autotune.search.loop import Search
from autotune.space import resolve_space
from autotune.study.history import History
from autotune.views import LiveProgress

# tokens/s by micro-batch size and precision: each trial beats the one before, so a lagging "best"
# shows
SPEED = {
    (2, "fp32"): 100.0,
    (4, "fp32"): 200.0,
    (8, "fp32"): 300.0,
    (2, "bf16"): 400.0,
    (4, "bf16"): 500.0,
    (8, "bf16"): 600.0,
}


class _Watched(LiveProgress):
    """The real live view, noting after each result which trial it shows as best and the count it
    shows."""

    def __init__(self, console: Console, searched: list[str]) -> None:
        super().__init__(console, searched)
        self.seen: list[tuple[int, int, int]] = []  # (trial, the best shown, trials measured shown)

    def trial_finished(self, record: TrialRecord, history: History) -> None:
        super().trial_finished(record, history)
        self.seen.append((record.number, self.best["number"], self.measured))


def _measure(
    bench: Any, knobs: dict[str, Any], run_dir: Path, *, number: int = 0, **_: Any
) -> TrialRecord:
    value = SPEED[(knobs["micro_batch_size"], knobs["precision"])]
    return TrialRecord(
        number, knobs, "ok", wall_s=0.0, metrics={Metric.TOKENS_PER_GPU: value, Metric.MFU: None}
    )


def test_views_best_is_each_result_as_it_arrives_with_autotune_s_count(
    write_yaml, tmp_path: Path
) -> None:
    cfg = load_config(write_yaml(tiny(study={"trials": 6, "sampler": "grid"})))
    out = io.StringIO()
    view = _Watched(Console(file=out, width=200), ["micro_batch_size", "precision"])
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(direction="maximize")
    search = Search(
        cfg,
        resolve_space(cfg, "cpu"),
        study,
        tmp_path / "s",
        "cpu",
        None,
        6,
        view,
        measure_fn=_measure,
    )
    search.optimize(600.0, "memory")
    values = {t.number: t.value for t in study.get_trials()}
    for i, (number, best, measured) in enumerate(
        view.seen
    ):  # the best so far, this result included
        assert best == max((n for n, _, _ in view.seen[: i + 1]), key=values.get), view.seen
        assert measured == i + 1
    assert len(view.seen) == 6
    assert "trial 1 of 6 (#0) ok" in out.getvalue() and "trial 6 of 6 (#" in out.getvalue()
    assert "6 of 6 trials measured" in "".join(str(r) for r in view._render().renderables)


def test_views_repeat_line_says_the_sample_and_what_ran_beside_it() -> None:
    from autotune.check.views import repeat_line

    shared = {"load_1min": 5.26, "cpus": 2, "gpu_processes": None}  # this 2-core machine, shared
    ok = repeat_line(
        {
            "repeat": 0,
            "repeats": 5,
            "conditions": shared,
            "tokens_per_s_per_gpu": 51234.5,
            "failure": None,
        }
    )
    assert str(ok) == "repeat 1 of 5: 51,234 tokens/s/GPU (load 5.26 on 2 CPUs)"
    gpu = {
        "load_1min": 1.2,
        "cpus": 16,
        "gpu_processes": [{"pid": 48211, "name": "python3", "used_mib": 20480}],
    }
    failed = repeat_line(
        {
            "repeat": 1,
            "repeats": 5,
            "conditions": gpu,
            "tokens_per_s_per_gpu": None,
            "failure": "crash: exit code -9",
        }
    )
    assert str(failed) == (
        "repeat 2 of 5: failed crash: exit code -9 (load 1.2 on 16 CPUs; GPU: 1 other process(es))"
    )


def test_views_mark_a_trial_past_the_list_and_an_arm_that_left_the_race() -> None:
    out = io.StringIO()
    view = LiveProgress(Console(file=out, width=200), ["micro_batch_size"])
    view.started(
        {
            "name": "t",
            "device": "cpu",
            "budget": 4,
            "done": 0,
            "space_size": 3,
            "sampler": "tpe",
            "storage": "memory",
        }
    )
    view.trial_started(5, 3, {"micro_batch_size": 16}, {"micro_batch_size": 16})
    running = "".join(str(r) for r in view._render().renderables)
    assert "(past your list: micro_batch_size 16)" in running
    record = TrialRecord(
        5,
        {"micro_batch_size": 16},
        "ok",
        wall_s=1.0,
        metrics={Metric.TOKENS_PER_GPU: 900.0, Metric.MFU: None},
        extra={"beyond_list": {"micro_batch_size": 16}},
    )
    view.trial_finished(record, History())
    view.confirm_dropped(3, "9.9% slower (ratio 95% interval 0.888 to 0.914) after 2 samples")
    text = out.getvalue()
    assert "micro_batch_size=16 (past your list: micro_batch_size 16)" in text
    assert "#3 leaves the race: 9.9% slower" in text
