"""Hopeless trials stop early through Optuna's pruner interface (search/prune.py); real trials on
the CPU."""

from __future__ import annotations

import optuna
import pytest
from conftest import load_trials, run_cli, tiny

from autotune.search.prune import BelowBest


def _study_with_best(value: float) -> optuna.Study:
    study = optuna.create_study(direction="maximize", pruner=BelowBest(0.8))
    done = study.ask()
    study.tell(done, value)
    return study


@pytest.mark.parametrize(
    "steps,pruned",
    [([70.0], False), ([70.0, 79.0], True), ([70.0, 81.0], False), ([200.0, 50.0], False)],
)
def test_prune_below_best_only_when_even_the_fastest_step_cannot_reach(
    steps: list[float], pruned: bool
) -> None:
    study = _study_with_best(100.0)
    trial = study.ask()
    for i, v in enumerate(steps):
        trial.report(v, i)
    assert trial.should_prune() is pruned


def test_prune_nothing_before_a_completed_trial() -> None:
    study = optuna.create_study(direction="maximize", pruner=BelowBest(0.8))
    trial = study.ask()
    for i in range(5):
        trial.report(1.0, i)
    assert not trial.should_prune()


@pytest.mark.parametrize("below,steps", [(0.0, 2), (1.0, 2), (0.5, 0)])
def test_prune_bad_settings_named(below: float, steps: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        BelowBest(below, steps)


@pytest.mark.slow
def test_prune_search_stops_a_hopeless_trial_and_keeps_what_it_measured(
    tmp_path, write_yaml
) -> None:
    cfg = tiny(
        space={"micro_batch_size": [4], "precision": ["fp32", "bf16"]},
        workload={"measure_steps": 400, "warmup_steps": 1},
        study={"trials": 2, "sampler": "grid", "confirm_top": 0},
        baseline={"precision": "fp32", "micro_batch_size": 4},
    )
    proc = run_cli(
        "search",
        str(write_yaml(cfg)),
        "--out",
        str(tmp_path / "out"),
        cwd=tmp_path,
        env={"AUTOTUNE_FAULT": "slow:900@precision=bf16"},
    )  # bf16 steps 10x slower
    assert proc.returncode == 0, proc.stderr
    trials = {t.user_attrs["knobs"]["precision"]: t for t in load_trials(tmp_path / "out")}
    ok, slow = trials["fp32"], trials["bf16"]
    assert ok.user_attrs["status"] == "ok" and ok.state == optuna.trial.TrialState.COMPLETE
    assert slow.user_attrs["status"] == "pruned" and slow.state == optuna.trial.TrialState.PRUNED
    measured = slow.user_attrs["raw"]["step_times_s"]
    assert 2 <= len(measured) < 400  # stopped early, with the steps it had measured
    assert slow.user_attrs["metrics"]["tokens_per_s_per_gpu"] < 0.8 * ok.value
    reason = slow.user_attrs["reason"]
    assert "pruned after" in reason and "it stopped after" in reason
    assert len(slow.intermediate_values) >= 2
    assert "pruned" in run_cli("report", str(tmp_path / "out" / "t"), cwd=tmp_path).stdout


@pytest.mark.parametrize("stop_at,steps,stopped", [(2, 2, True), (3, 3, False), (None, 3, False)])
def test_prune_timing_stops_only_before_the_last_step(stop_at, steps: int, stopped: bool) -> None:
    import torch

    from autotune.workloads.timing import time_steps

    def progress(done: list[float]) -> bool:
        return stop_at is not None and len(done) >= stop_at

    t = time_steps(
        torch, lambda: torch.ones(8).sum(), warmup=1, measure=3, device="cpu", progress=progress
    )
    assert (len(t.step_s), t.stopped_early) == (steps, stopped)
