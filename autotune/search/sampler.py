"""The Optuna sampler a study uses (study.sampler in the YAML); every knob is categorical."""

from __future__ import annotations

import warnings

import optuna


def make_sampler(name: str, seed: int, budget: int) -> optuna.samplers.BaseSampler:
    """tpe (multivariate), gp, random; grid is random order over enqueued points (loop.py).

    grid: every point is enqueued and drawn in a seeded random order; Optuna's GridSampler is not used
    because it does not account for enqueued trials (the baseline).
    """
    startup = max(3, min(10, budget // 3))  # random exploration first, then the model of the sampler
    if name == "tpe":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=startup)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup)
    return optuna.samplers.RandomSampler(seed=seed)
