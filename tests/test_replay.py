"""The sampler replay: a recorded H200 landscape through the real search loop, no GPU
(search/replay.py)."""

from __future__ import annotations

import statistics
from pathlib import Path

import optuna
import pytest

from autotune.search.replay import Landscape, replay, trials_to

ROOT = Path(__file__).resolve().parents[1]
LANDSCAPE = ROOT / "benchmarks" / "landscapes" / "gpt2-small-h200.json"


def test_replay_landscape_is_the_recorded_grid() -> None:
    landscape = Landscape.load(LANDSCAPE)
    assert len(landscape.points) == 48 and landscape.tokens_per_step == 256 * 1024
    best = max(landscape.points.values(), key=lambda p: landscape.true_value(p["knobs"]) or 0)
    assert best["knobs"] == {
        "micro_batch_size": 64,
        "precision": "bf16",
        "compile": True,
        "pad_vocab_multiple": None,
    }
    assert round(landscape.optimum) == 545459  # the grid's optimum in docs/BENCHMARKS.md


@pytest.mark.slow
def test_replay_measures_every_point_once_and_default_beats_random() -> None:
    """Both searches staged (search/stages.py wraps either sampler: fp16 waits for the leaders'
    variants, which made random's median to 97% 15.5 trials over these 30 seeds, 26 unstaged over
    40); the default's 11."""
    landscape = Landscape.load(LANDSCAPE)
    target = 0.97 * landscape.optimum
    default = [replay(landscape, None, seed, 48, root=ROOT) for seed in range(30)]
    random_ = [
        replay(landscape, optuna.samplers.RandomSampler(seed=seed), seed, 48, root=ROOT)
        for seed in range(30)
    ]
    for run in default + random_:
        # the whole space, once each
        assert len(run) == 48 and trials_to(run, landscape.optimum) is not None
    median_default = statistics.median(trials_to(r, target) for r in default)
    median_random = statistics.median(trials_to(r, target) for r in random_)
    assert median_default <= 0.75 * median_random, (median_default, median_random)


def test_replay_failure_rules_are_learned_from_a_grid_recorded_landscape() -> None:
    """The 355M landscape was recorded with sampler grid and has 8 invalid points of one rule (flash
    with tf32):
    a replay follows the given sampler, not the recorded grid's queue, and launches that failure
    once."""
    landscape = Landscape.load(ROOT / "benchmarks" / "landscapes" / "gpt2-medium-h200.json")
    failing = [p for p in landscape.points.values() if p["status"] != "ok"]
    assert len(landscape.points) == 96 and len(failing) == 8
    assert all(p["cause"] == {"attention": "flash", "precision": "tf32"} for p in failing)
    runs = [
        replay(landscape, optuna.samplers.RandomSampler(seed=seed), seed, 96, root=ROOT)
        for seed in range(3)
    ]
    assert all(sum(v is None for v in run) == 1 for run in runs)  # one launched, seven predicted
    # the seeds' samplers, not one recorded order
    assert len({tuple(run[:10]) for run in runs}) == 3
