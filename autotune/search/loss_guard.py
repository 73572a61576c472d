"""Training's numerics guard (study.loss_check), the search's side: which trials run the check, and
what a trial's check says.

The check runs inside the trial, after its measured steps (workloads/numerics_check.py: the trial's
model and its bf16 reference from the same weights on the same fresh batches, seconds, eager, the
record's `check` phase); the verdict is autotune/numerics.py's, so it fails breakage (a loss that is
not finite, learning far less, gradients gone, a gap that keeps growing, the user's max_gap_nats),
never a lag. A verdict covers the arithmetic it tested (knobs.numerics: precision and recipe, a
compression hook, the reduction dtype) on the study's layout, not the micro-batch, compile or
checkpointing: once a check passed, later trials of that arithmetic skip it ("covered by trial N");
one that failed twice in its trial (the trial repeats a failed attempt from other weights and data)
ends invalid_config with that arithmetic as its cause, a rule the search learns (study/predict.py),
which never skips a configuration the user pinned. The first checked trial of a study also measures
its noise floor (the reference against its fp32-class twin), reported beside every gap."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import optuna

from autotune import tasks
from autotune.documents.record import TrialRecord, knobs_of
from autotune.documents.record import loss_check_of as stored_check
from autotune.knobs import numerics, reference_of
from autotune.launch.runner import Bench
from autotune.numerics import Limits, floor_nats, judge
from autotune.protocol import Knobs, loss_check_of, with_loss_check
from autotune.space import ResolvedSpace
from autotune.status import Status
from autotune.study.history import History, key


def describe(changed: Knobs) -> str:
    """'precision fp8, fp8_recipe tensorwise'."""
    return ", ".join(f"{k} {v}" for k, v in changed.items())


def against(knobs: Knobs) -> str:
    """The reference's values of the knobs that changed the arithmetic ('precision bf16')."""
    changed, ref = numerics(knobs), reference_of(knobs)
    return describe({k: ref.get(k) for k in changed if k != "fp8_recipe"})


def _arithmetic(knobs: Knobs) -> tuple[Any, ...]:
    """What a verdict covers: the values that change the arithmetic, on the study's layout."""
    return tuple(sorted(numerics(knobs).items())) + (("parallel", knobs.get("parallel")),)


def _trials(h: History) -> list[optuna.trial.FrozenTrial]:
    return sorted([*h.completed, *h.invalid], key=lambda t: t.number)


def covered_by(h: History, knobs: Knobs) -> optuna.trial.FrozenTrial | None:
    """The trial whose passed check covers this configuration's arithmetic."""
    mine = _arithmetic(knobs)
    for t in h.completed:
        check = stored_check(t)
        if check.get("passed") and check.get("checked") and _arithmetic(knobs_of(t)) == mine:
            return t
    return None


def study_floor(h: History) -> float | None:
    """The study's noise floor in nats (measured by its first checked trial), None before it."""
    for t in _trials(h):
        floor = stored_check(t).get("floor_nats")
        if isinstance(floor, (int, float)):
            return float(floor)
    return None


def pinned(space: ResolvedSpace, knobs: Knobs) -> Callable[[dict[str, Any]], bool]:
    """Whether a numerics rule with this cause may not skip these knobs (study/predict.py): the
    baseline, or a cause whose every knob the user fixed in the space (a one-value space: there is
    no alternative to skip to)."""
    baseline = key(knobs) == key(space.knobs(space.baseline))
    return lambda cause: baseline or not any(k in space.searched for k in cause)


def trial_bench(bench: Bench, h: History, knobs: Knobs) -> Bench:
    """The bench one trial runs under: the check asked for only where it must run (the arithmetic
    changes and no passed check covers it), with the noise floor while the study has none."""
    check = loss_check_of(bench.params)
    if not check:
        return bench
    if not numerics(knobs) or covered_by(h, knobs) is not None:
        return dataclasses.replace(bench, params=with_loss_check(bench.params, None))
    asked = {**check, "floor": study_floor(h) is None}
    return dataclasses.replace(bench, params=with_loss_check(bench.params, asked))


def apply(bench: Bench, knobs: Knobs, record: TrialRecord, h: History) -> TrialRecord:
    """The record, judged: unchanged unless it is an ok training trial whose knobs change the
    arithmetic. bench: the study's (its loss_check section); h: the study before this trial was
    recorded."""
    check = loss_check_of(bench.params) or {}
    if (
        not tasks.task(bench.task).loss_check
        or not check.get("steps")
        or record.status != Status.OK
        or not numerics(knobs)
    ):
        return record
    found = record.loss_check or {}
    if not found.get("attempts"):
        covering = covered_by(h, knobs)
        # not asked (a passed check covers it), or a model without init_weights (an entrypoint's)
        why = found.get("why") or "the trial ran no numerics check"
        record.loss_check = (
            _covered(covering) if covering is not None else {"checked": False, "why": why}
        )
        return record
    record.loss_check = _judged(found, knobs, check, h)
    if record.loss_check["passed"] is False:
        record.status = Status.INVALID_CONFIG
        record.reason = _failure_reason(record.loss_check, knobs)
        record.cause = numerics(knobs)
    return record


# what a covered trial's record repeats of the check that covers it (the report's quality line)
COVERED_KEYS = (
    "gap_nats",
    "floor_nats",
    "study_floor_nats",
    "behind_share",
    "spikes",
    "steps",
    "against",
    "changed",
)


def _covered(t: optuna.trial.FrozenTrial) -> dict[str, Any]:
    done, knobs = stored_check(t), knobs_of(t)
    return {
        "checked": False,
        "passed": True,
        "covered_by": t.number,
        **{k: done.get(k) for k in COVERED_KEYS},
        "why": f"covered by trial {t.number}'s numerics check of {describe(numerics(knobs))}",
    }


def _judged(
    found: dict[str, Any], knobs: Knobs, check: dict[str, Any], h: History
) -> dict[str, Any]:
    """The check's record: its attempts re-judged here (the same function the trial used) and the
    noise floor."""
    limits = Limits(
        min_learned=check.get("min_learned", 0.5), max_gap_nats=check.get("max_gap_nats")
    )
    mine, theirs = describe(numerics(knobs)), against(knobs)
    verdicts = [judge(a, limits, mine, theirs) for a in found["attempts"]]
    last = verdicts[-1]
    doc = {k: v for k, v in found.items() if k != "floor"}
    doc.update(checked=last.passed is not None, passed=last.passed, against=theirs, why=last.why)
    judged = last.as_dict()
    doc.update({k: judged[k] for k in ("gap_nats", "learned_share", "behind_share", "spikes")})
    if len(verdicts) > 1:
        doc["first_attempt"] = verdicts[0].why
    if found.get("floor"):
        doc["floor"] = found["floor"]
        doc["floor_nats"] = round(
            floor_nats(found["floor"]["losses"], found["attempts"][0]["reference"]), 5
        )
    floor = doc.get("floor_nats", study_floor(h))
    doc["study_floor_nats"] = floor
    return doc


def _failure_reason(doc: dict[str, Any], knobs: Knobs) -> str:
    tries = len(doc.get("attempts") or [])
    failed = "failed twice" if tries > 1 else "failed"
    return (
        f"numerics check {failed}: {doc['why']}; from the same weights on {doc.get('steps')} fresh "
        f"batches of {doc.get('rows')} sequences, eager. The search skips "
        f"{describe(numerics(knobs))} from now on (study.loss_check: min_learned, max_gap_nats; "
        "steps 0 turns it off)"
    )
