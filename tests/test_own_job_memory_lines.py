"""Memory learned from one measured point of your own job (issue 61): the job's resident memory
(what it holds allocated at a step's end) makes one point a line, a setting that needs no less
memory than a measured one is predicted where that one's line runs out, and the baseline's
neighbours run where the evidence says they fit: a value that needs no more memory at the size your
setting ran at, a value that needs more where the activations could double, until one such change
ran out of memory there, then at the smallest size the global batch allows (study/peaks.py,
study/predict.py, search/neighbours.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune import tasks
from autotune.command.report import BadReport, done_line
from autotune.job import load
from autotune.search import neighbours
from autotune.search.stages import Plan
from autotune.study import peaks, predict
from autotune.study.history import History, key

COMMAND = tasks.task("command")
SEQ = 4096  # tokens of each sequence (the longest micro-batch: size x SEQ)


def _ran(
    number: int, knobs: dict[str, Any], peak: float, resident: float | None = None
) -> optuna.trial.FrozenTrial:
    size = knobs["micro_batch_size"]
    metrics = {"peak_mem_gib": peak, "tokens_per_micro_batch": size * SEQ}
    metrics["resident_mem_gib"] = resident
    attrs: dict[str, Any] = {"knobs": knobs, "status": "ok", "reason": "r", "predicted": False}
    attrs.update(metrics=metrics, fingerprint={"device": "cuda", "gpu_memory_gib": 80.0})
    state = optuna.trial.TrialState.COMPLETE
    t = optuna.trial.create_trial(value=1.0, state=state, user_attrs=attrs)
    t.number = number
    return t


def _oom(number: int, knobs: dict[str, Any]) -> optuna.trial.FrozenTrial:
    attrs = {"knobs": knobs, "status": "oom", "reason": "CUDA out of memory", "predicted": False}
    t = optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED, user_attrs=attrs)
    t.number = number
    return t


def _history(*trials: optuna.trial.FrozenTrial, base: dict[str, Any] | None = None) -> History:
    h = History(base_key=key(base) if base is not None else None)
    for t in trials:
        (h.completed if t.user_attrs["status"] == "ok" else h.ooms).append(t)
        h.seen[key(t.user_attrs["knobs"])] = t
    return h


BF16 = {"precision": "bf16", "optim": "fused"}
FP32 = {"precision": "fp32", "optim": "fused"}


def test_own_job_one_point_with_its_resident_memory_is_a_line() -> None:
    """8 sequences ran with 55 GiB, 5 of them resident: 50 GiB of activations, 6.25 a sequence.
    16 then needs 105 GiB, predicted; 12 needs 80 (above 98% of 80); 4 needs 30."""
    h = _history(_ran(1, {**BF16, "micro_batch_size": 8}, 55.0, resident=5.0))
    seen = peaks.forecast(h, {**BF16, "micro_batch_size": 16}, COMMAND)
    assert seen is not None and seen.peak_gib == pytest.approx(105.0) and seen.over
    assert seen.how == "trial 1's peak above its resident 5.0 GiB, in tokens"
    small = peaks.forecast(h, {**BF16, "micro_batch_size": 4}, COMMAND)
    assert small is not None and small.peak_gib == pytest.approx(30.0) and not small.over
    status, reason = predict.failure(h, {**BF16, "micro_batch_size": 16}, COMMAND)
    assert status == "oom" and "peak memory 105.0 GiB (trial 1's peak above" in reason


def test_own_job_one_point_without_its_resident_memory_draws_no_line() -> None:
    h = _history(_ran(1, {**BF16, "micro_batch_size": 8}, 55.0))
    assert peaks.forecast(h, {**BF16, "micro_batch_size": 16}, COMMAND) is None
    assert predict.failure(h, {**BF16, "micro_batch_size": 16}, COMMAND) is None


def test_own_job_a_resident_memory_at_or_above_the_peak_draws_no_line() -> None:
    """A step's end that held what the peak did says nothing of the activations' growth."""
    h = _history(_ran(1, {**BF16, "micro_batch_size": 8}, 55.0, resident=55.0))
    assert peaks.forecast(h, {**BF16, "micro_batch_size": 16}, COMMAND) is None


def test_own_job_fp32_is_predicted_where_the_bf16_line_runs_out() -> None:
    """fp32 needs no less memory than bf16 at a size: at 16, where bf16's line needs 105 GiB, it is
    predicted, never launched; at 4, where bf16 needs 30, fp32 may fit and is launched."""
    h = _history(_ran(1, {**BF16, "micro_batch_size": 8}, 55.0, resident=5.0))
    status, reason = predict.failure(h, {**FP32, "micro_batch_size": 16}, COMMAND)
    assert status == "oom"
    assert "needs at least the peak memory of precision bf16 at micro_batch_size 16" in reason
    assert predict.failure(h, {**FP32, "micro_batch_size": 4}, COMMAND) is None
    # bf16 needs less than fp32: fp32's line bounds nothing of bf16's
    h = _history(_ran(1, {**FP32, "micro_batch_size": 8}, 75.0, resident=5.0))
    assert predict.failure(h, {**BF16, "micro_batch_size": 16}, COMMAND) is None


def _space(tmp_path: Path, base: dict[str, Any]) -> Any:
    doc = {
        "name": "memjob",
        "workload": {"task": "command", "global_batch_size": 16},
        "command": {
            "argv": ["{python}", "job.py"],
            "knobs": {
                "micro_batch_size": {"flag": "--bs"},
                "grad_accum_steps": {"flag": "--accum"},
                "precision": {"env": "MY_PRECISION"},
                "attn_implementation": {"flag": "--attn", "values": ["sdpa", "eager"]},
            },
        },
        "space": {"micro_batch_size": [4, 8, 16], "precision": ["bf16", "fp32", "tf32"]},
        "baseline": base,
        "study": {"seed": 0, "confirm_top": 0, "start": "neighbours"},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    _, space = load(path)
    return space


def _sizes(points: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(p["micro_batch_size"], p["precision"], p["attn_implementation"]) for p in points]


def test_own_job_a_neighbour_that_needs_less_memory_runs_where_your_setting_ran(
    tmp_path: Path,
) -> None:
    """Your setting (16, fp32) ran out; at 8 it ran with 60 of 80 GiB: bf16 and tf32 need no more
    than fp32, so they run at 8, where it ran; eager attention can need more: where activations
    could double (4: 5 + 2 x 27.5 GiB)."""
    space = _space(tmp_path, {"micro_batch_size": 16, "precision": "fp32"})
    base = space.knobs(space.baseline)
    below = space.knobs({**space.baseline, "micro_batch_size": 8})
    h = _history(_oom(0, base), _ran(1, below, 60.0, resident=5.0), base=base)
    assert _sizes(neighbours.points(h, space, Plan.of(space))) == [
        (8, "bf16", "sdpa"),
        (8, "tf32", "sdpa"),
        (4, "fp32", "eager"),
    ]


def test_own_job_after_a_change_ran_out_where_it_could_double_the_next_runs_smallest(
    tmp_path: Path,
) -> None:
    """Your setting (16, bf16) ran out; 8 ran with 55 GiB (5 resident); fp32 at 4, where its
    activations could double, ran out too: the job's activations grow past the premise, so eager
    attention (and tf32) run at the smallest size the global batch of 16 allows, 1 (below the
    list)."""
    space = _space(tmp_path, {"micro_batch_size": 16, "precision": "bf16"})
    base = space.knobs(space.baseline)
    below = space.knobs({**space.baseline, "micro_batch_size": 8})
    fp32 = space.knobs({**space.baseline, "micro_batch_size": 4, "precision": "fp32"})
    h = _history(_oom(0, base), _ran(1, below, 55.0, resident=5.0), base=base)
    assert _sizes(neighbours.points(h, space, Plan.of(space))) == [
        (4, "fp32", "sdpa"),
        (4, "tf32", "sdpa"),
        (4, "bf16", "eager"),
    ]
    h.ooms.append(_oom(2, fp32))
    h.seen[key(fp32)] = h.ooms[-1]
    # tf32 stores what fp32 does: at 4 it is predicted; it too runs at 1
    assert _sizes(neighbours.points(h, space, Plan.of(space))) == [
        (1, "tf32", "sdpa"),
        (1, "bf16", "eager"),
    ]


def test_own_job_done_line_carries_the_resident_memory() -> None:
    done = done_line({"done": True, "peak_mem_bytes": 10, "resident_mem_bytes": 4}, "line 9")
    assert done["resident_mem_bytes"] == 4
    with pytest.raises(BadReport, match="resident_mem_bytes"):
        done_line({"done": True, "resident_mem_bytes": -1}, "line 9")
