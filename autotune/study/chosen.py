"""The chosen configuration of a study, as read from its trials: the trial, why it was chosen, its
confirmed median and interval, the gain over the baseline, how far the confirmation got. The
search writes it to best.yaml (search/best.py); the report shows it. The chosen may be the
baseline's own arm of the confirmation (your setting, kept: search/race.pick)."""

from __future__ import annotations

from typing import Any

import optuna

from autotune import intervals
from autotune.documents.confirmation import Arm, Confirmation
from autotune.documents.record import Metric, knobs_of
from autotune.study import bound
from autotune.study.bound import KEEP as KEEP  # what the race says where it kept your setting
from autotune.study.history import History, completed_value, current_confirmation, value_of


def is_yours(trial: int | None, h: History) -> bool:
    """Whether the trial is your setting: the baseline's."""
    return h.baseline is not None and trial == h.baseline.number


def chosen(study: optuna.Study, h: History) -> tuple[optuna.trial.FrozenTrial, Arm | None, str]:
    """The chosen trial, its confirmation statistics (None: not confirmed) and why it was chosen
    (the baseline's own arm where the confirmation kept your setting)."""
    conf = current_confirmation(study, h)
    if conf:
        best = next(t for t in h.completed if t.number == conf.chosen)
        rounds = f"{conf.rounds_done} of {conf.rounds}"
        cut = "" if conf.complete else f"; {CUT}"
        return (
            best,
            conf.chosen_arm,
            f"confirmation ({rounds} interleaved rounds of the top {len(conf.candidates)}"
            f"{cut}): {conf.why}",
        )
    top = h.best()
    assert top is not None
    why = f"highest median tokens/s per GPU of {len(h.completed)} completed trials (not confirmed)"
    return top, None, why


# what a confirmation cut before its last round says (the search resumes it where it stopped)
CUT = "cut short: run the same search command to finish it"


def progress(conf: Confirmation) -> dict[str, Any]:
    """How far the confirmation got (best.yaml's and the report's chosen `confirmation`): rounds
    done of rounds asked, complete, decided."""
    return {
        "rounds_done": conf.rounds_done,
        "rounds": conf.rounds,
        "complete": conf.complete,
        "decided": conf.decided,
    }


def chosen_value(best: optuna.trial.FrozenTrial, stats: Arm | None) -> float:
    """The chosen configuration's tokens/s per GPU. With a confirmation, the confirmed median
    (several fresh processes); the search's single measurement of the winner is kept beside it (the
    best of many, so optimistic)."""
    confirmed = stats.median if stats else None
    return confirmed or completed_value(best)


def interval(samples: list[float]) -> dict[str, Any]:
    """ci95 (None where the samples bound nothing: intervals.unbounded) and ci95_why."""
    ci, why = intervals.bounded_interval(samples)
    return {"ci95": ci, "ci95_why": why}


def chosen_summary(study: optuna.Study, h: History) -> dict[str, Any] | None:
    """What best.yaml says of the chosen configuration (the report's `chosen`): its trial, why,
    knobs, the confirmed median (else the search's value), its 95% interval, samples, x the
    baseline, the gain over the baseline's confirmed median with its interval, and how far the
    confirmation got. None before any trial completed. A script deploys this, not the search's
    single best measurement."""
    if not h.completed:
        return None
    best, stats, why = chosen(study, h)
    conf = current_confirmation(study, h)
    value = chosen_value(best, stats)
    # your setting kept: it is the baseline, 1x (never its confirmed median over its own cold
    # search measurement)
    base = value if is_yours(best.number, h) else value_of(h.baseline) if h.baseline else None
    return {
        "trial": best.number,
        "why": why,
        "knobs": knobs_of(best),
        "confirmed": bool(stats and stats.median),
        Metric.TOKENS_PER_GPU: value,
        "search_tokens_per_s_per_gpu": value_of(best),
        **(interval(stats.samples) if stats else {"ci95": None, "ci95_why": "not confirmed"}),
        "samples": len(stats.samples) if stats else 0,
        "speedup_vs_baseline": value / base if base else None,
        # the last word's figures of the chosen against your setting (study/bound.py: one rule)
        "gain": bound.gain_of(bound.statement(h, conf)),
        "confirmation": None if not conf else progress(conf),
        # the best other confirmed arm and what it costs (search/race.py)
        "runner_up": conf.runner_up.as_dict() if conf and conf.runner_up else None,
    }
