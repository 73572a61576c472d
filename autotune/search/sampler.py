"""The Optuna sampler a study uses (study.sampler in the YAML); every knob is categorical."""

from __future__ import annotations

import warnings

import optuna


def make_sampler(name: str, seed: int, budget: int) -> optuna.samplers.BaseSampler:
    """tpe (multivariate, few start-up trials), gp, random; grid is random order over enqueued
    points (loop.py).

    grid: every point is enqueued and drawn in a seeded random order; Optuna's GridSampler is not
    used because it does not account for enqueued trials (the baseline).
    """
    # Random exploration first (the baseline counts), then the sampler's model. Few random trials
    # pay: replaying the recorded H200 landscapes (benchmarks/replay_samplers.py,
    # docs/BENCHMARKS.md), multivariate TPE reached 97% of the optimum in a median 10 trials (GPT-2
    # small, 48 points) and 8 (GPT-2 medium, 96 points) with 3 start-up trials; 10-11 and 9 with 4
    # or 5; 16 and 11.5 with 10.
    startup = min(3, max(2, budget // 4))
    if name == "tpe":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(
                seed=seed, multivariate=True, n_startup_trials=startup
            )
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup)
    return optuna.samplers.RandomSampler(seed=seed)
