"""Noise smaller than the effects ranked: a command trial's window close to the study's best
narrows its interval to half the difference (command/window.py), and the pruner judges a trial
whose steps scatter on the upper limit of its figure (search/prune.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import optuna
import pytest

from autotune.command import window as windows
from autotune.protocol import AGAINST_FILE
from autotune.search.prune import BelowBest, upper_bound


def _noisy(n: int, rate: float, spread: float, seed: int = 0) -> list[windows.Step]:
    """Steps of 1,000 tokens at `rate` tokens/s, each time off by up to +-spread."""
    rng = random.Random(seed)
    return [(1000 / rate * (1 + rng.uniform(-spread, spread)), 1000.0) for _ in range(n)]


def test_window_target_narrows_only_near_the_best() -> None:
    rule = windows.Rule(2, 8, 60, 3.0)
    assert rule.target_pct(100.0) == 3.0  # nothing to decide against
    near = windows.Rule(2, 8, 60, 3.0, against=100.0)
    assert near.target_pct(102.0) == pytest.approx(1.5)  # half of 2%, floored at half of 3%
    assert near.target_pct(104.0) == pytest.approx(2.0)
    assert near.target_pct(120.0) == 3.0  # far from the best: the usual interval decides


def test_window_close_to_the_best_measures_until_the_order_is_clear() -> None:
    steps = _noisy(60, 1000.0, 0.08)
    alone = windows.decide(steps[:20], windows.Rule(2, 8, 60, 3.0))
    close = windows.Rule(2, 8, 60, 3.0, against=1010.0)
    assert alone is not None and alone.settled  # +-3% within 20 steps
    assert windows.decide(steps[:20], close) is None  # not yet within 1.5%
    decided = next(w for n in range(20, 61) if (w := windows.decide(steps[:n], close)))
    assert decided.half_width_pct is not None and decided.half_width_pct <= 1.5
    assert decided.settled or decided.end == 60


def test_window_reads_the_study_best_from_beside_the_trial(tmp_path: Path) -> None:
    rule = windows.Rule(2, 8, 60, 3.0)
    assert windows.against(rule, tmp_path).against is None  # not written yet
    (tmp_path / AGAINST_FILE).write_text(json.dumps({"tokens_per_s_per_gpu": 1234.5}))
    assert windows.against(rule, tmp_path).against == 1234.5
    (tmp_path / AGAINST_FILE).write_text(json.dumps({"tokens_per_s_per_gpu": None}))
    assert windows.against(rule, tmp_path).against is None  # the first trial: no best yet


def test_prune_a_scattered_trial_on_the_upper_limit_of_its_figure() -> None:
    rng = random.Random(3)
    # a job at 600 tokens/s whose steps scatter +-40%: its luckiest step passes the bar of 800
    rates = [600 * (1 + rng.uniform(-0.4, 0.4)) for _ in range(12)]
    rates.sort(key=lambda r: -r)  # the lucky step first: the fastest-step rule never prunes it
    assert max(rates) >= 800
    upper = upper_bound(rates)
    assert upper is not None and upper < 800
    study = optuna.create_study(direction="maximize", pruner=BelowBest(0.8))
    study.add_trial(optuna.trial.create_trial(value=1000.0))
    trial = study.ask()
    for i, r in enumerate(rates[:4]):
        trial.report(r, i)
    assert not study.pruner.prune(study, study._storage.get_trial(trial._trial_id))
    for i, r in enumerate(rates[4:], start=4):
        trial.report(r, i)
    assert study.pruner.prune(study, study._storage.get_trial(trial._trial_id))
    assert upper_bound(rates[:4]) is None  # too few steps to bound
