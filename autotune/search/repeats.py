"""A proposal that repeats a measured configuration: recorded, never launched, and told as the
trial it repeats ended.

Optuna's FAQ answers repeated parameters by returning the earlier trial's value: the sampler then
learns what its proposal is worth. Told FAIL instead (as before issue 50), TPE ignored the point,
proposed the same region again, and the study held FAIL trials with empty reasons: six of 26 in a
staged search, each a sampled point that screening (stages.Screening) measured with the cheap
values of a point already measured."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from autotune.documents import trial_marks
from autotune.documents.record import set_reason, set_status
from autotune.search.drive import Told
from autotune.status import Status


def record(trial: optuna.Trial, of: optuna.trial.FrozenTrial | int) -> Told:
    """Store trial as a repeat of `of` (a measured trial, or the number of one being measured
    elsewhere) with the reason a reader sees, and return how it is told: the measured trial's state
    and values; FAIL while the other is still running (nothing to tell yet)."""
    number = of if isinstance(of, int) else of.number
    set_status(trial, Status.DUPLICATE)
    trial_marks.mark_duplicate(trial, number)
    set_reason(trial, reason(of, trial_marks.screened_from(trial)))
    if isinstance(of, int) or of.state not in (TrialState.COMPLETE, TrialState.PRUNED):
        return Told(TrialState.FAIL)
    return Told(of.state, of.values if of.state == TrialState.COMPLETE else None)


def reason(of: optuna.trial.FrozenTrial | int, screened_from: dict[str, object]) -> str:
    """Why the proposal was not launched; screened_from: the sampler's values that screening
    replaced (stages.Screening)."""
    if isinstance(of, int):
        return f"not launched: the same configuration as trial {of}, being measured"
    proposed = ", ".join(f"{k} {v}" for k, v in screened_from.items())
    how = f"proposed with {proposed}, screened as" if proposed else "the same configuration as"
    state = {TrialState.COMPLETE: "its value", TrialState.PRUNED: "its failure"}.get(of.state)
    told = f"; told {state}" if state else ""
    return f"not launched: {how} trial {of.number}, measured{told}"
