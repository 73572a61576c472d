"""The chosen configuration of a study, as read from its trials: the trial, why it was chosen, its
confirmed median and interval, the gain over the baseline, how far the confirmation got. The
search writes it to best.yaml (search/best.py); the report shows it. The chosen may be the
baseline's own arm of the confirmation (your setting, kept: search/race.pick)."""

from __future__ import annotations

from typing import Any

import optuna

from autotune import metrics
from autotune.documents.record import Metric, knobs_of
from autotune.study import bound
from autotune.study.bound import KEEP as KEEP  # what the race says where it kept your setting
from autotune.study.history import History, completed_value, current_confirmation, value_of


def arms(conf: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every arm a stored confirmation raced: the candidates, then the baseline's own where it
    raced beside them."""
    if not conf:
        return []
    base = conf.get("baseline")
    return [*conf.get("stats", []), *([base] if isinstance(base, dict) else [])]


def arm_of(conf: dict[str, Any] | None, trial: int | None) -> dict[str, Any] | None:
    """The arm of that trial in a stored confirmation (a candidate, or the baseline's own arm);
    None where it did not race."""
    return next((st for st in arms(conf) if st.get("trial") == trial), None)


def is_yours(trial: int | None, h: History) -> bool:
    """Whether the trial is your setting: the baseline's."""
    return h.baseline is not None and trial == h.baseline.number


def chosen(
    study: optuna.Study, h: History
) -> tuple[optuna.trial.FrozenTrial, dict[str, Any] | None, str]:
    """The chosen trial, its confirmation statistics (None: not confirmed) and why it was chosen
    (the baseline's own arm where the confirmation kept your setting)."""
    conf = current_confirmation(study, h)
    if conf:
        best = next(t for t in h.completed if t.number == conf["chosen"])
        stats = arm_of(conf, best.number)
        assert stats is not None  # the choice is one of the arms (confirm.choose)
        rounds = f"{conf['rounds_done']} of {rounds_asked(conf)}"
        cut = "" if confirmation_complete(conf) else f"; {CUT}"
        return (
            best,
            stats,
            f"confirmation ({rounds} interleaved rounds of the top {len(conf['candidates'])}"
            f"{cut}): {conf['why']}",
        )
    top = h.best()
    assert top is not None
    why = f"highest median tokens/s per GPU of {len(h.completed)} completed trials (not confirmed)"
    return top, None, why


# what a confirmation cut before its last round says (the search resumes it where it stopped)
CUT = "cut short: run the same search command to finish it"


def rounds_asked(conf: dict[str, Any]) -> int:
    """The rounds the confirmation was asked for (a study confirmed before they were stored: the
    rounds it did)."""
    asked = conf.get("rounds")
    return asked if isinstance(asked, int) else int(conf["rounds_done"])


def confirmation_complete(conf: dict[str, Any]) -> bool:
    """The race ended by its rule: decided (every other arm separated from the leader) or every
    round asked measured (a study confirmed before rounds were stored: it kept only complete ones
    as its choice)."""
    if isinstance(conf.get("complete"), bool):
        return bool(conf["complete"])
    return int(conf["rounds_done"]) >= rounds_asked(conf)


def baseline_samples(conf: dict[str, Any] | None, baseline: int | None) -> list[float]:
    """The baseline's confirmed per-process figures: its own arm, or its candidate's where it was
    among the top; [] where the confirmation did not re-measure it."""
    found = arm_of(conf, baseline) if baseline is not None else None
    return list(found["samples"]) if found else []


def chosen_value(best: optuna.trial.FrozenTrial, stats: dict[str, Any] | None) -> float:
    """The chosen configuration's tokens/s per GPU. With a confirmation, the confirmed median
    (several fresh processes); the search's single measurement of the winner is kept beside it (the
    best of many, so optimistic)."""
    confirmed = stats["median"] if stats else None
    return confirmed or completed_value(best)


def interval(samples: list[float]) -> dict[str, Any]:
    """ci95 (None where the samples bound nothing: metrics.unbounded) and ci95_why."""
    ci, why = metrics.bounded_interval(samples)
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
        "confirmed": bool(stats and stats["median"]),
        Metric.TOKENS_PER_GPU: value,
        "search_tokens_per_s_per_gpu": value_of(best),
        **(interval(stats["samples"]) if stats else {"ci95": None, "ci95_why": "not confirmed"}),
        "samples": len(stats["samples"]) if stats else 0,
        "speedup_vs_baseline": value / base if base else None,
        # the last word's figures of the chosen against your setting (study/bound.py: one rule)
        "gain": bound.gain_of(bound.statement(h, conf)),
        "confirmation": None
        if not conf
        else {
            "rounds_done": conf["rounds_done"],
            "rounds": rounds_asked(conf),
            "complete": confirmation_complete(conf),
            "decided": bool(conf.get("decided")),
        },
        # the best other confirmed arm and what it costs (search/race.py)
        "runner_up": conf.get("runner_up") if conf else None,
    }
