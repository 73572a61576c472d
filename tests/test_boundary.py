"""The batch boundary of a generate study: a size over a latency limit bounds the larger ones
(predict.py), and the loop steps the best trial's batch up and an over-limit trial's batch down
(search/boundary.py)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune import tasks
from autotune.documents.record import Metric, TrialRecord
from autotune.job import load_config
from autotune.search.loop import Search
from autotune.search.observer import Observer
from autotune.space import resolve_space
from autotune.study import predict
from autotune.study.history import History

ROOT = Path(__file__).resolve().parents[1]


def test_over_limit_bounds_the_larger_batches_only() -> None:
    knobs = {"batch_size": 16, "compile": "reduce-overhead", "weight_quant": "none"}
    attrs = {
        "knobs": knobs,
        "status": "over_limit",
        "reason": "time to first token 920 ms > limit 500 ms",
        "predicted": False,
    }
    t = optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED, user_attrs=attrs)
    t.number = 4
    h = History(over_limit=[t])
    generate = tasks.task("generate")
    status, reason = predict.failure(h, {**knobs, "batch_size": 32}, generate)
    assert status == "over_limit" and reason.startswith(
        "predicted: batch_size 16 was already over the limits (trial 4"
    )
    # smaller: may meet the limits
    assert predict.failure(h, {**knobs, "batch_size": 8}, generate) is None
    # another configuration
    assert predict.failure(h, {**knobs, "batch_size": 32, "compile": False}, generate) is None


def _landscape(knobs: dict[str, Any]) -> tuple[float, float]:
    """A decode landscape shaped like the H200's (docs/BENCHMARKS.md): (tokens/s, time to first
    token ms).
    Compiled decoding is 3x faster per step; the prefill grows with the batch."""
    step_ms = (5.0 if knobs["compile"] else 15.0) * (1 + knobs["batch_size"] / 64)
    return 1000 * knobs["batch_size"] / step_ms, 15.0 * knobs["batch_size"]


def _search(tmp_path: Path, seed: int, budget: int) -> optuna.Study:
    doc = yaml.safe_load((ROOT / "search_spaces/tiny-generate.yaml").read_text())
    doc["space"] = {
        "batch_size": [1, 2, 4, 8, 16, 32, 64, 128],
        "compile": [False, True],
        "kv_cache": ["static", "dynamic"],
        "weight_quant": ["none", "int8_weight_only"],
    }
    doc["study"].update(trials=budget, seed=seed, confirm_top=0, limits={"ttft_ms": 500})
    doc["baseline"] = {
        "batch_size": 1,
        "compile": False,
        "kv_cache": "static",
        "weight_quant": "none",
    }
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(doc))
    cfg = load_config(tmp_path / "g.yaml")

    def measure(
        bench: Any, knobs: dict[str, Any], run_dir: Path, *, number: int = 0, **_: Any
    ) -> TrialRecord:
        tps, ttft = _landscape(knobs)
        record = TrialRecord(
            number,
            knobs,
            "ok",
            wall_s=0.0,
            metrics={Metric.TOKENS_PER_GPU: tps, Metric.TTFT_MS: ttft},
        )
        if ttft > 500:
            record.status, record.reason = (
                "over_limit",
                f"time to first token {ttft:.0f} ms > limit 500 ms",
            )
        return record

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(direction="maximize")
    Search(
        cfg,
        resolve_space(cfg, "cpu"),
        study,
        tmp_path / "s",
        "cpu",
        None,
        budget,
        Observer(),
        measure_fn=measure,
    ).optimize(math.inf, "memory")
    return study


@pytest.mark.slow
def test_loop_climbs_to_the_largest_batch_within_the_limits(tmp_path: Path) -> None:
    """The fastest point within 500 ms is compiled at batch 32 (tokens/s grows with the batch; batch
    64's prefill takes 960 ms). 64 points, 8 trials: every seed measures it, and no batch past a
    measured over-limit one is launched. (With a 16-trial budget and seeds 0-19, TPE alone first
    measured it at a median trial 7.5, within 8 trials for 11 seeds, never for 2; with the boundary
    steps at 5, 19 seeds.)"""
    for seed in range(10):
        study = _search(tmp_path / str(seed), seed, 8)
        launched = [
            t
            for t in study.get_trials()
            if t.user_attrs.get("status") in ("ok", "over_limit")
            and not t.user_attrs.get("predicted")
        ]
        assert len(launched) == 8
        best = max((t for t in launched if t.user_attrs["status"] == "ok"), key=lambda t: t.value)
        assert (
            best.user_attrs["knobs"]["batch_size"] == 32
            and best.user_attrs["knobs"]["compile"] is True
        ), seed
        over = [t.user_attrs["knobs"] for t in launched if t.user_attrs["status"] == "over_limit"]
        # a measured over-limit batch is never followed by a larger one alike
        for i, a in enumerate(over):
            assert not any(
                b["batch_size"] > a["batch_size"]
                and {**b, "batch_size": 0} == {**a, "batch_size": 0}
                for b in over[i + 1 :]
            ), seed


def test_bisect_steps_between_known_sizes() -> None:
    """Up from the best toward the smallest size over the limits; down from an over-limit size
    toward the largest within them; nothing once they are neighbours."""
    from autotune.search import boundary

    sizes = [1, 2, 4, 8, 16, 32, 64, 128]

    def t(number: int, bs: int, status: str) -> optuna.trial.FrozenTrial:
        knobs = {"batch_size": bs, "compile": True}
        ft = optuna.trial.create_trial(
            value=float(bs) if status == "ok" else None,
            params={"batch_size": bs},
            distributions={"batch_size": optuna.distributions.CategoricalDistribution(sizes)},
            state=optuna.trial.TrialState.COMPLETE
            if status == "ok"
            else optuna.trial.TrialState.PRUNED,
            user_attrs={"knobs": knobs, "status": status, "reason": "r"},
        )
        ft.number = number
        return ft

    ok1, over64 = t(0, 1, "ok"), t(1, 64, "over_limit")
    h = History(completed=[ok1])
    # halfway to past 128
    assert boundary._bisect(ok1, "batch_size", sizes, h, up=True, ooms=h.ooms)["batch_size"] == 16
    h = History(completed=[ok1], over_limit=[over64])
    # halfway to 64
    assert boundary._bisect(ok1, "batch_size", sizes, h, up=True, ooms=h.ooms)["batch_size"] == 8
    # halfway down to 1
    assert (
        boundary._bisect(over64, "batch_size", sizes, h, up=False, ooms=h.ooms)["batch_size"] == 8
    )
    ok32 = t(2, 32, "ok")
    h = History(completed=[ok1, ok32], over_limit=[over64])
    # 32 and 64 are neighbours
    assert boundary._bisect(ok32, "batch_size", sizes, h, up=True, ooms=h.ooms) is None
    assert boundary._bisect(over64, "batch_size", sizes, h, up=False, ooms=h.ooms) is None
