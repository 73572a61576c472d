"""What the search left out, and why: the trials that did not give a figure, grouped by the rule
or the end that left them out (a learned rule with the trial that taught it, predicted failures,
timeouts, the pruner, failures), each group with its count, one reason in full, the evidence the
record holds (the numerics check's two loss curves) and the remedy."""

from __future__ import annotations

from typing import Any

import optuna

from autotune.documents.record import cause_of, loss_check_of, reason_of
from autotune.report._data import Attempt, Evidence, Group, Row
from autotune.status import Status
from autotune.study import predict
from autotune.study.history import History

# A remedy per kind of group, named once: the reason itself says what happened
REMEDIES = {
    "numerics": (
        "to measure it anyway, fix its knob in the space (a value you pin is never skipped); "
        "study.loss_check.min_learned and max_gap_nats set the verdict, steps 0 turns it off"
    ),
    "rule": "remove these values from the space, or run where they are supported",
    "oom": "a smaller micro-batch, activation checkpointing or sharding lowers the peak",
    "over_limit": "the study's limits (study.limits) exclude it; relax them to measure it",
    "timeout": (
        "raise study.trial_timeout_min, or take what ate the time (compile) out of the space"
    ),
    "pruned": "none needed: it was slower than the best after its first measured steps "
    "(study.prune_below sets the threshold)",
}
UNMEASURED = ("running", "waiting", "ok")


def excluded(study: optuna.Study, rows: list[Row]) -> list[Group]:
    """The groups of left-out trials, the largest first."""
    h = History.of(study)
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    groups: dict[tuple[Any, ...], Group] = {}
    for r in rows:
        if r.state in UNMEASURED:
            continue
        key, title, kind, teacher = _classify(r, h, by_number)
        group = groups.setdefault(key, _group(title, kind, r, teacher, by_number))
        group["count"] += 1
        group["trials"].append(r.number)
        group["predicted"] += int(r.predicted)
    return sorted(groups.values(), key=lambda g: (-g["count"], g["trials"][0]))


def _classify(
    r: Row, h: History, by_number: dict[int, optuna.trial.FrozenTrial]
) -> tuple[tuple[Any, ...], str, str, int | None]:
    """(group key, title, remedy kind, the trial that taught the rule) of one left-out trial."""
    state = r.state
    teacher = _teacher(r, h, by_number)
    if teacher is not None:
        t = by_number[teacher]
        cause = ", ".join(f"{k}={v}" for k, v in cause_of(t).items())
        if _by_check(t):
            return ("rule", teacher), f"{cause}: failed the numerics check", "numerics", teacher
        return ("rule", teacher), f"{cause}: cannot run here", "rule", teacher
    if r.predicted:
        return ("predicted", state), f"predicted {state.replace('_', ' ')}", state, None
    return (state,), _TITLES.get(state, state.replace("_", " ")), state, None


_TITLES = {
    "timeout": "ran past the trial's time limit",
    "pruned": "stopped early by the pruner",
    "oom": "out of memory",
    "crash": "crashed",
    "invalid_config": "not a valid configuration here",
    "over_limit": "over the study's limits",
}


def _teacher(r: Row, h: History, by_number: dict[int, optuna.trial.FrozenTrial]) -> int | None:
    """The invalid_config trial whose learned rule covers this trial (itself where it taught it)."""
    if r.state != Status.INVALID_CONFIG:
        return None
    t = by_number.get(r.number)
    if t is not None and not r.predicted and cause_of(t):
        return t.number
    found = predict.rule_for(h, r.knobs) if r.predicted else None
    return found[0].number if found else None


def _by_check(t: optuna.trial.FrozenTrial) -> bool:
    return loss_check_of(t).get("passed") is False


def _group(
    title: str,
    kind: str,
    first: Row,
    teacher: int | None,
    by_number: dict[int, optuna.trial.FrozenTrial],
) -> Group:
    """A new group: its reason (the teacher's, where a rule was learned), evidence and remedy."""
    source = by_number[teacher] if teacher is not None else None
    reason = reason_of(source) if source is not None else first.reason
    return {
        "title": title,
        "kind": kind,
        "count": 0,
        "predicted": 0,
        "trials": [],
        "taught_by": teacher,
        "reason": reason,
        "evidence": _loss_curves(source) if source is not None and _by_check(source) else None,
        "remedy": REMEDIES.get(kind),
    }


def _loss_curves(t: optuna.trial.FrozenTrial) -> Evidence | None:
    """The numerics check's evidence: each attempt's candidate and reference losses, its gap in
    nats and verdict, and the study's noise floor."""
    check = loss_check_of(t)
    attempts: list[Attempt] = []
    for a in check.get("attempts") or []:
        if not isinstance(a, dict) or not a.get("losses") or not a.get("reference"):
            continue
        verdict = a.get("verdict") or {}
        attempts.append(
            {
                "seed": a.get("seed"),
                "candidate": list(a["losses"]),
                "reference": list(a["reference"]),
                "gap_nats": verdict.get("gap_nats"),
                "why": verdict.get("why"),
            }
        )
    if not attempts:
        return None
    return {
        "attempts": attempts,
        "against": check.get("against"),
        "floor_nats": check.get("study_floor_nats", check.get("floor_nats")),
    }


def loss_summary(evidence: Evidence) -> str:
    """The curves in words, for the terminal and markdown: each attempt's last losses and gap."""
    parts = []
    for a in evidence["attempts"]:
        gap = a["gap_nats"]
        parts.append(
            f"seed {a['seed']}: loss {a['candidate'][0]:.2f} -> {a['candidate'][-1]:.3f} against "
            f"{a['reference'][-1]:.3f} for {evidence.get('against') or 'the reference'}"
            + ("" if gap is None else f" (gap {gap:+.3f} nats)")
        )
    floor = evidence.get("floor_nats")
    return "; ".join(parts) + ("" if floor is None else f"; noise floor {floor:.3f} nats")
