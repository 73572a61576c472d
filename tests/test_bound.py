"""What a search says of your setting when it ends (study/bound.py): one sentence from one rule, the
chosen configuration's gain with the race's interval, within noise, too noisy to bound or its noise
unknown, or, where your setting is the choice, a bound on what any configuration measured may gain
over it."""

from __future__ import annotations

import math
import statistics

import optuna
import pytest
from conftest import conf_doc
from scipy.stats import t as student_t

from autotune import intervals
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


def test_bound_a_clear_gain_is_stated_with_the_race_s_interval() -> None:
    h = _history(_trial(0, 100.0, 2.0), _trial(1, 130.0, 2.0), _trial(2, 90.0, 2.0))
    mine, yours = [131.0, 130.0, 129.0], [100.0, 101.0, 99.0]
    conf = {
        "chosen": 1,
        "stats": [{"trial": 1, "samples": mine}],
        "baseline": {"trial": 0, "samples": yours},
    }
    said = bound.statement(h, conf_doc(conf))
    assert said is not None and said["kind"] == "gain" and said["trial"] == 1
    low, high = said["ci95"]
    assert [low, high] == pytest.approx(list(intervals.ratio_interval(mine, yours)))
    assert low > 1.2 and high < 1.4 and said["ratio"] == pytest.approx(1.3)
    assert said["text"].startswith("Trial 1 beats your setting 1.30x (95% interval")
    assert said["text"].endswith(
        "130 against 100 tokens/s/GPU, confirmed medians of the same rounds)."
    )
    gain = bound.gain_of(said)
    assert gain is not None and gain["within_noise"] is False and gain["basis"] == bound.CONFIRMED


def test_bound_of_your_setting_kept_bounds_what_was_missed_all_at_once() -> None:
    h = _history(_trial(0, 100.0, 2.0), _trial(1, 101.0, 2.0), _trial(2, 99.0, 2.0))
    conf = {
        "chosen": 0,
        "stats": [{"trial": 1, "samples": [100.0, 102.0]}],
        "baseline": {"trial": 0, "samples": [101.0, 99.0]},
    }
    said = bound.statement(h, conf_doc(conf))
    assert said is not None and said["kind"] == "bound" and said["n"] == 2
    # the pooled spread between processes of trials 0 and 1 (search + confirmation), Student's t at
    # the Bonferroni level of 2 comparisons; trial 2's one search measurement against the
    # baseline's confirmed median gives the highest upper limit
    logs = [[math.log(x) for x in xs] for xs in ([100.0, 101.0, 99.0], [101.0, 100.0, 102.0])]
    sigma = math.sqrt(sum((x - statistics.fmean(xs)) ** 2 for xs in logs for x in xs) / 4)
    q = student_t.ppf(1 - 0.025 / 2, 4)
    uppers = [
        101 / 100 * math.exp(q * sigma * math.sqrt(1 / 2 + 1 / 2)),
        99 / 100 * math.exp(q * sigma * math.sqrt(1 + 1 / 2)),
    ]
    assert said["upper_pct"] == pytest.approx(100 * (max(uppers) - 1), abs=0.05)
    assert said["text"].startswith(
        "Nothing measured beats your setting beyond the noise; keep it: no configuration of 2 "
        "measured beats it by more than"
    )
    assert bound.gain_of(said) is None


def test_bound_a_spread_too_large_says_so_instead_of_a_bound() -> None:
    """Issue 62: "beats your setting by more than 3465.4%" meant nothing; a bound whose interval
    reaches past 1/2 or 2x says that the noise is too large to bound."""
    h = _history(_trial(0, 580.0, 2.0), _trial(1, 20000.0, 2.0))
    conf = {
        "chosen": 0,
        "stats": [{"trial": 1, "samples": [21000.0, 22000.0]}],
        "baseline": {"trial": 0, "samples": [16000.0, 23400.0]},
    }
    said = bound.statement(h, conf_doc(conf))
    assert said is not None and said["kind"] == "too_noisy"
    assert "%" not in said["text"].split("(")[0] and "by more than" not in said["text"]
    assert "the noise is too large to bound what the other may gain" in said["text"]


def test_bound_without_a_spread_between_processes_says_the_noise_is_unknown() -> None:
    """A trial's in-process window is no noise between processes: with the confirmation off the
    statement says that noise is unknown, never an interval from the window's half-width."""
    h = _history(_trial(0, 100.0, 2.0), _trial(1, 99.0, 2.0), _trial(2, 98.0, 2.0))
    said = bound.statement(h, None)
    assert said is not None and said["kind"] == "noise_unknown" and said["trial"] == 0
    assert said["text"] == (
        "Your setting measured fastest, but the noise between processes is unknown (no "
        "configuration was measured in two processes: the confirmation, study.confirm_top and "
        "study.confirm_rounds, re-measures the best), so nothing bounds what the 2 others may gain."
    )
    alone = bound.statement(
        History(completed=[_trial(0, 1.0, None)], baseline=_trial(0, 1, None)), None
    )
    assert alone is not None and alone["kind"] == "alone"
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
        "Your setting (trial 0) ran out of memory: it does not fit, so there is no gain to state; "
        "the fastest that ran: trial 1, 62,568 tokens/s/GPU (one search measurement, not "
        "confirmed: no interval)."
    )
    conf = {"chosen": 1, "stats": [{"trial": 1, "samples": [68e3, 67e3, 69e3], "median": 68e3}]}
    conf["stats"][0]["ci95"] = [66500.0, 69500.0]
    said = bound.statement(h, conf_doc(conf))
    assert said is not None and said["text"].endswith(
        "trial 1, 68,000 tokens/s/GPU (the median of 3 fresh processes, 95% interval 66,500 to "
        "69,500)."
    )
