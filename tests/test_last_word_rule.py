"""Issue 62, item 7: the last word (study/bound.py) speaks of the chosen configuration by one rule,
the race's interval where the confirmation paired it with your setting; a runner-up's compile is
said only where something compiled."""

from __future__ import annotations

import optuna
from conftest import conf_doc

from autotune.report._text import runner_up
from autotune.study import bound
from autotune.study.history import History


def _trial(number: int, value: float) -> optuna.trial.FrozenTrial:
    attrs = {"knobs": {"micro_batch_size": number + 1}, "status": "ok", "reason": ""}
    attrs["metrics"] = {"tokens_per_s_per_gpu": value, "window": {"half_width_pct": 1.0}}
    t = optuna.trial.create_trial(value=value, user_attrs=attrs)
    t.number = number
    return t


def _history(*values: float) -> History:
    trials = [_trial(n, v) for n, v in enumerate(values)]
    return History(completed=trials, baseline=trials[0])


def test_last_word_speaks_of_the_chosen_never_another_trial() -> None:
    """`make demo` ended on "chosen: trial 0: within the measured noise of trial 3 ... changes fewer
    knobs" then "trial 3 beats your setting 1.22x": the race chose one configuration and the last
    word praised another. It speaks of the chosen one: here within noise of your setting."""
    h = _history(100.0, 130.0, 101.0)
    conf = {
        "chosen": 2,  # within noise of trial 1, and changes fewer knobs
        "stats": [
            {"trial": 1, "samples": [129.0, 131.0, 130.0]},
            {"trial": 2, "samples": [100.0, 101.5, 100.5]},
        ],
        "baseline": {"trial": 0, "samples": [100.0, 99.0, 101.0]},
    }
    said = bound.statement(h, conf_doc(conf))
    assert said is not None and said["trial"] == 2 and said["kind"] == "within_noise"
    assert "Trial 1" not in said["text"] and "trial 1 " not in said["text"]
    assert said["text"].startswith(
        "Trial 2 is not shown to beat your setting: it measured 1.00x it, within noise: its 95% "
        "interval"
    )
    assert "holds 1x" in said["text"] and "beats your setting 1" not in said["text"]
    gain = bound.gain_of(said)
    assert gain is not None and gain["within_noise"] is True and gain["ci95"] is not None


def test_last_word_an_interval_that_bounds_nothing_is_too_noisy_never_within_noise() -> None:
    """ "no interval" then "Within noise: the interval holds 1x" on one card: two samples a side
    that scatter bound nothing, and the sentence says the noise is too large to bound the gain."""
    h = _history(580.0, 18520.0)
    conf = {
        "chosen": 1,
        "stats": [{"trial": 1, "samples": [21111.0, 26153.0]}],
        "baseline": {"trial": 0, "samples": [16003.0, 23419.0]},
    }
    said = bound.statement(h, conf_doc(conf))
    assert said is not None and said["kind"] == "too_noisy" and said["ci95"] is None
    assert "the noise is too large to bound the gain" in said["text"]
    assert "interval holds 1x" not in said["text"] and "beats your setting 1" not in said["text"]
    gain = bound.gain_of(said)
    assert gain is not None and gain["ci95"] is None and gain["ci95_why"]


def test_last_word_with_the_confirmation_off_says_the_noise_is_unknown() -> None:
    """Equal configurations were said to beat your setting "1.31x (95% interval 1.27x to 1.36x)"
    from each trial's in-process window: without a spread between processes the noise is
    unknown."""
    h = _history(100.0, 131.0)
    said = bound.statement(h, None)
    assert said is not None and said["kind"] == "noise_unknown" and said["ci95"] is None
    assert said["text"] == (
        "Trial 1 is not shown to beat your setting: it measured 1.31x it (131 against 100 "
        "tokens/s/GPU, one search measurement each), but the noise between processes is unknown "
        "(no configuration was measured in two processes: the confirmation, study.confirm_top and "
        "study.confirm_rounds, re-measures the best)."
    )


def test_last_word_runner_up_says_no_compile_where_nothing_compiled() -> None:
    """ "compiles in 0 s instead of 0 s" in a space without compile."""
    plain = {"trial": 8, "gap_pct": -5.9, "within_noise": True, "compile_s": 0.0}
    said = runner_up({**plain, "chosen_compile_s": 0.0, "peak_mem_gib": 0.52})
    assert said == "Runner-up: trial 8 is 5.9% slower (within noise); peak 0.52 GiB."
    assert "compiles" not in runner_up({**plain, "compile_s": None, "chosen_compile_s": None})
    one = runner_up({**plain, "compile_s": 6.0, "chosen_compile_s": 131.0})
    assert one.endswith("and compiles in 6 s instead of 131 s.")
    assert "compiles nothing instead of 131 s" in runner_up({**plain, "chosen_compile_s": 131.0})
