"""Memory rules that follow the evidence, both ways (issue 61), in searches of your own job (task
command, real processes): a baseline that runs out of memory sends its neighbours one size down,
values that need no less memory share its out-of-memory, and a flaky out-of-memory that a larger
size contradicts bounds nothing (study/predict.py, search/neighbours.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.job import load, load_config
from autotune.search import neighbours
from autotune.search.run import run_search
from autotune.search.stages import Plan
from autotune.study.history import History, key

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "tests" / "data" / "jobs"


def _job(
    tmp_path: Path, argv: list[str], sizes: list[int], base: dict[str, Any], **study: Any
) -> Path:
    doc = {
        "name": "memjob",
        "workload": {
            "task": "command",
            "warmup_steps": 1,
            "measure_steps": 3,
            "global_batch_size": 16,
        },
        "command": {
            "argv": ["{python}", *argv],
            "knobs": {
                "micro_batch_size": {"flag": "--bs"},
                "grad_accum_steps": {"flag": "--accum"},
                "precision": {"env": "MY_PRECISION"},
            },
        },
        "space": {"micro_batch_size": sizes, "precision": base.pop("precisions", ["bf16"])},
        "baseline": base,
        "study": {"seed": 0, "confirm_top": 0, "start": "neighbours", **study},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _oom_at_16(tmp_path: Path, trials: int) -> Path:
    """Your setting, micro-batch 16 in bf16, does not fit; nor does any precision at 16."""
    base = {"micro_batch_size": 16, "precision": "bf16", "precisions": ["bf16", "fp32", "tf32"]}
    argv = [str(JOBS / "fake_job.py"), "--oom_at", "16"]
    return _job(tmp_path, argv, [4, 8, 16], base, trials=trials)


def _launched(result: Any) -> list[optuna.trial.FrozenTrial]:
    trials = sorted(result.history.seen.values(), key=lambda t: t.number)
    return [t for t in trials if not t.user_attrs.get("predicted")]


def _oom(number: int, knobs: dict[str, Any]) -> optuna.trial.FrozenTrial:
    attrs = {"knobs": knobs, "status": "oom", "reason": "CUDA out of memory", "predicted": False}
    t = optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED, user_attrs=attrs)
    t.number = number
    return t


def test_own_job_neighbours_of_a_baseline_that_ran_out_of_memory_start_one_size_down(
    tmp_path: Path,
) -> None:
    _, space = load(_oom_at_16(tmp_path, 4))
    base = space.knobs(space.baseline)
    h = History(base_key=key(base))
    h.ooms.append(_oom(0, base))
    h.seen[key(base)] = h.ooms[0]
    points = neighbours.points(h, space, Plan.of(space))
    assert [(p["micro_batch_size"], p["precision"]) for p in points] == [
        (8, "bf16"),
        (8, "fp32"),
        (8, "tf32"),
    ]


def _ran(number: int, knobs: dict[str, Any], peak: float) -> optuna.trial.FrozenTrial:
    metrics = {"peak_mem_gib": peak, "tokens_per_micro_batch": None}
    fingerprint = {"device": "cuda", "gpu_memory_gib": 80.0}
    attrs = {"knobs": knobs, "status": "ok", "reason": "r", "predicted": False}
    attrs.update(metrics=metrics, fingerprint=fingerprint)
    state = optuna.trial.TrialState.COMPLETE
    t = optuna.trial.create_trial(value=1.0, state=state, user_attrs=attrs)
    t.number = number
    return t


@pytest.mark.parametrize(("peak", "at"), [(30.0, 8), (52.0, 4)])
def test_own_job_neighbours_below_a_failed_baseline_leave_room_to_double(
    tmp_path: Path, peak: float, at: int
) -> None:
    """Your setting (16, bf16) ran out of memory and 8 ran with 52 of 80 GiB: fp32 at 8 can need
    twice that, so the other values run at 4; with 30 GiB at 8 they run at 8."""
    _, space = load(_oom_at_16(tmp_path, 4))
    base = space.knobs(space.baseline)
    h = History(base_key=key(base))
    h.ooms.append(_oom(0, base))
    h.seen[key(base)] = h.ooms[0]
    below = space.knobs({**space.baseline, "micro_batch_size": 8})
    h.completed.append(_ran(1, below, peak))
    h.seen[key(below)] = h.completed[0]
    points = neighbours.points(h, space, Plan.of(space))
    assert [(p["micro_batch_size"], p["precision"]) for p in points] == [
        (at, "fp32"),
        (at, "tf32"),
    ]


@pytest.mark.slow
def test_own_job_baseline_out_of_memory_costs_one_trial_not_three(tmp_path: Path) -> None:
    """On an H100 an HF Trainer job whose own setting (16, bf16) did not fit ran 3 out of memory in
    its first 5 trials: the baseline, then fp32 and tf32 at the same 16. Here the baseline is the
    only one: its neighbours run at 8, and 16 in fp32 or tf32 is predicted, never launched."""
    result = run_search(load_config(_oom_at_16(tmp_path, 3)), out_root=tmp_path / "t", device="cpu")
    launched = _launched(result)
    assert [t.user_attrs["status"] for t in launched] == ["oom", "ok", "ok", "ok"]
    assert [t.user_attrs["knobs"]["micro_batch_size"] for t in launched] == [16, 8, 8, 8]
    assert {t.user_attrs["knobs"]["precision"] for t in launched[1:]} == {"bf16", "fp32", "tf32"}
    predicted = [t for t in result.history.seen.values() if t.user_attrs.get("predicted")]
    assert all(t.user_attrs["status"] == "oom" for t in predicted)
    assert all(t.user_attrs["knobs"]["micro_batch_size"] == 16 for t in predicted)


@pytest.mark.slow
def test_own_job_a_flaky_out_of_memory_bounds_no_size_that_fits(tmp_path: Path) -> None:
    """A flaky out-of-memory at 2 after 4 ran: 8 and 16 fit and are faster, and are measured."""
    argv = [str(JOBS / "flaky_oom_job.py"), "--flaky_at", "2", "--marker", str(tmp_path / "oomed")]
    path = _job(tmp_path, argv, [2, 4, 8, 16], {"micro_batch_size": 4}, trials=3, sampler="grid")
    result = run_search(load_config(path), out_root=tmp_path / "t", device="cpu")
    by_size = {t.user_attrs["knobs"]["micro_batch_size"]: t for t in result.history.seen.values()}
    assert by_size[2].user_attrs["status"] == "oom" and (tmp_path / "oomed").exists()
    for size in (4, 8, 16):
        assert by_size[size].user_attrs["status"] == "ok", by_size[size].user_attrs["reason"]
        assert not by_size[size].user_attrs["predicted"]
    assert result.best is not None and result.best.user_attrs["knobs"]["micro_batch_size"] == 16
