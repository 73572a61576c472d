"""What a search says of your setting when it ends (study/bound.py): the gain found with its
interval, or a bound on what any configuration measured may gain over it."""

from __future__ import annotations

import math

import optuna
import pytest

from autotune.study import bound
from autotune.study.history import History


def _trial(number: int, value: float, half_width_pct: float | None) -> optuna.trial.FrozenTrial:
    window = {"half_width_pct": half_width_pct}
    attrs = {"knobs": {"micro_batch_size": number + 1}, "status": "ok", "reason": ""}
    attrs["metrics"] = {"tokens_per_s_per_gpu": value, "window": window}
    t = optuna.trial.create_trial(
        value=value, state=optuna.trial.TrialState.COMPLETE, user_attrs=attrs
    )
    t.number = number
    return t


def _history(*trials: optuna.trial.FrozenTrial) -> History:
    return History(completed=list(trials), baseline=trials[0])


def test_bound_a_clear_gain_is_stated_with_its_interval() -> None:
    h = _history(_trial(0, 100.0, 2.0), _trial(1, 130.0, 2.0), _trial(2, 90.0, 2.0))
    said = bound.statement(h, None)
    assert said is not None and said["kind"] == "gain" and said["trial"] == 1
    low, high = said["ci95"]
    assert low > 1.2 and high < 1.4 and said["ratio"] == pytest.approx(1.3)
    assert said["text"].startswith("trial 1 beats your setting 1.30x (95% interval")


def test_bound_no_gain_bounds_what_was_missed_all_at_once() -> None:
    h = _history(_trial(0, 100.0, 2.0), _trial(1, 101.0, 2.0), _trial(2, 99.0, 2.0))
    said = bound.statement(h, None)
    assert said is not None and said["kind"] == "bound" and said["n"] == 2
    # Bonferroni over 2: z = 2.24; sigma = ln(1.02) / 1.96 each side
    sigma = math.log(1.02) / 1.96
    expected = 100 * (1.01 * math.exp(2.2414 * math.sqrt(2) * sigma) - 1)
    assert said["upper_pct"] == pytest.approx(expected, abs=0.05)
    assert said["text"].startswith("no configuration of 2 measured beats your setting by more")


def test_bound_uses_the_spread_between_processes_where_the_confirmation_measured_it() -> None:
    h = _history(_trial(0, 100.0, 0.5), _trial(1, 100.2, 0.5))
    conf = {
        "chosen": 1,
        "stats": [{"trial": 1, "samples": [95.0, 105.0]}],
        "baseline": {"trial": 0, "samples": [104.0, 96.0]},
    }
    narrow = bound.statement(h, None)
    wide = bound.statement(h, conf)
    assert narrow is not None and wide is not None
    assert wide["kind"] == "bound" and wide["upper_pct"] > 3 * narrow["upper_pct"]


def test_bound_names_trials_whose_noise_is_unknown() -> None:
    h = _history(_trial(0, 100.0, 2.0), _trial(1, 99.0, None), _trial(2, 98.0, 2.0))
    said = bound.statement(h, None)
    assert said is not None and said["unknown"] == [1]
    assert said["text"].endswith("; trials 1 left out: their noise is unknown")
    alone = bound.statement(_history(_trial(0, 100.0, None), _trial(1, 99.0, None)), None)
    assert alone is not None and alone["kind"] == "unbounded"
    assert bound.statement(History(), None) is None


def test_bound_your_setting_that_did_not_fit_says_so_and_the_fastest_that_ran() -> None:
    """Issue 61's H100 runs: your setting ran out of memory; the last word was "No baseline was
    measured". It says that your setting does not fit, that there is no gain to state, and the
    fastest that ran, with its interval where the confirmation measured one."""
    oom = optuna.trial.create_trial(
        state=optuna.trial.TrialState.PRUNED,
        user_attrs={"knobs": {"micro_batch_size": 16}, "status": "oom", "reason": "CUDA oom"},
    )
    oom.number = 0
    ran = _trial(1, 62568.0, 19.0)
    h = History(completed=[ran], ooms=[oom], base_key=(("micro_batch_size", 16),))
    h.seen[h.base_key] = oom
    said = bound.statement(h, None)
    assert said is not None and said["kind"] == "unrun" and said["status"] == "oom"
    assert said["text"] == (
        "your setting (trial 0) ran out of memory: it does not fit, so there is no gain to state; "
        "the fastest that ran: trial 1, 62,568 tokens/s/GPU (one search measurement, not "
        "confirmed: no interval)"
    )
    conf = {"chosen": 1, "stats": [{"trial": 1, "samples": [68e3, 67e3, 69e3], "median": 68e3}]}
    conf["stats"][0]["ci95"] = [66500.0, 69500.0]
    said = bound.statement(h, conf)
    assert said is not None and said["text"].endswith(
        "trial 1, 68,000 tokens/s/GPU (the median of 3 fresh processes, 95% interval 66,500 to "
        "69,500)"
    )
