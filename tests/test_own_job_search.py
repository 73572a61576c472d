"""A search of your own job (task command) that starts from your setting and learns its memory from
what it measures: the baseline, then its one-knob neighbours, then the sampler; an out-of-memory
trial bounds its size and the larger ones with those knobs, never a smaller one
(search/neighbours.py, study/predict.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.job import load, load_config
from autotune.search import neighbours
from autotune.search.run import run_search
from autotune.search.stages import Plan
from autotune.study.history import History, key
from autotune.study.peaks import group_of
from autotune.tasks import task

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "data" / "jobs" / "fake_job.py"
COMMAND = task("command")


def _oom_job(tmp_path: Path, trials: int, start: str = "auto") -> Path:
    """A job that runs out of memory at micro-batch 16 or more, whatever its other knobs."""
    doc = {
        "name": "oomjob",
        "workload": {
            "task": "command",
            "warmup_steps": 2,
            "measure_steps": 4,
            "global_batch_size": 32,
        },
        "command": {
            "argv": ["{python}", str(JOB), "--oom_at", "16"],
            "knobs": {
                "micro_batch_size": {"flag": "--bs"},
                "grad_accum_steps": {"flag": "--accum"},
                "optim": {"flag": "--optim", "values": ["adamw", "sgd"]},
                "lr_env": {"env": "MY_LR", "values": ["a", "b"]},
            },
        },
        "space": {"micro_batch_size": [4, 8, 16, 32]},
        "baseline": {"micro_batch_size": 8},
        "study": {"trials": trials, "seed": 0, "confirm_top": 0, "start": start},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.slow
def test_own_job_search_starts_from_the_baseline_and_never_launches_a_bounded_size(
    tmp_path: Path,
) -> None:
    result = run_search(load_config(_oom_job(tmp_path, 12)), out_root=tmp_path / "t", device="cpu")
    trials = sorted(result.history.seen.values(), key=lambda t: t.number)
    launched = [t for t in trials if not t.user_attrs.get("predicted")]
    knobs = [t.user_attrs["knobs"] for t in launched]
    # the baseline, then the micro-batch one size down and one up, then each other knob's value
    assert knobs[0]["micro_batch_size"] == 8 and knobs[0]["optim"] == "adamw"
    assert [k["micro_batch_size"] for k in knobs[1:3]] == [4, 16]
    changed = [{k: v for k, v in one.items() if knobs[0][k] != v} for one in knobs[3:5]]
    assert sorted(map(str, changed)) == ["{'lr_env': 'b'}", "{'optim': 'sgd'}"]
    # each out-of-memory trial launched is smaller than any of its setting's before it: none
    # launched at a size an earlier one bounds (a size between the largest that ran and one that
    # ran out is measured: issue 61)
    ooms = sorted(result.history.ooms, key=lambda t: t.number)
    assert ooms
    for i, t in enumerate(ooms):
        earlier = [
            u
            for u in ooms[:i]
            if group_of(u.user_attrs["knobs"], COMMAND) == group_of(t.user_attrs["knobs"], COMMAND)
        ]
        size = t.user_attrs["knobs"]["micro_batch_size"]
        assert all(size < u.user_attrs["knobs"]["micro_batch_size"] for u in earlier), ooms
    assert max(Counter(group_of(t.user_attrs["knobs"], COMMAND) for t in ooms).values()) <= 2
    predicted = [t for t in trials if t.user_attrs.get("predicted")]
    assert all(t.user_attrs["status"] == "oom" for t in predicted)
    assert all(t.user_attrs["knobs"]["micro_batch_size"] >= 16 for t in predicted)


def _done(number: int, knobs: dict, peak: float) -> optuna.trial.FrozenTrial:
    attrs = {"knobs": knobs, "status": "ok", "reason": "", "predicted": False}
    attrs["metrics"] = {"peak_mem_gib": peak}
    attrs["fingerprint"] = {"device": "cuda", "gpu_memory_gib": 80.0}
    t = optuna.trial.create_trial(
        value=1.0, state=optuna.trial.TrialState.COMPLETE, user_attrs=attrs
    )
    t.number = number
    return t


def test_own_job_neighbours_of_a_baseline_near_the_memory_run_one_size_smaller(
    tmp_path: Path,
) -> None:
    _, space = load(_oom_job(tmp_path, 12))
    plan = Plan.of(space)
    base = space.knobs(space.baseline)
    h = History(base_key=key(base))
    assert neighbours.points(h, space, plan) == []  # the baseline first
    h.completed.append(_done(0, base, 70.0))  # 87% of the GPU
    h.seen[key(base)] = h.completed[0]
    first = neighbours.points(h, space, plan)
    assert [p["micro_batch_size"] for p in first[:2]] == [4, 16]  # down, then up
    assert all(p["micro_batch_size"] == 8 for p in first[2:])  # none smaller ran yet
    smaller = space.knobs(first[0])
    h.completed.append(_done(1, smaller, 40.0))
    h.seen[key(smaller)] = h.completed[1]
    later = neighbours.points(h, space, plan)
    assert later[0]["micro_batch_size"] == 16
    assert {p["micro_batch_size"] for p in later[1:]} == {4}  # one size smaller than 8
    assert len(later) == 3
