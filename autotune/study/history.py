"""What a study's storage says was measured: read fresh before each decision, and by report, check
and views."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune import knobs as catalogue
from autotune.documents import confirmation, study_attrs, trial_marks
from autotune.documents.confirmation import Confirmation
from autotune.documents.record import (
    Metric,
    cause_of,
    has_knobs,
    has_record,
    is_predicted,
    knobs_of,
    metrics_of,
    status_of,
)
from autotune.documents.record import store as store  # re-exported
from autotune.knobs import KnobValue
from autotune.protocol import CONFIG_FAILURES, STATUSES, Knobs
from autotune.status import NOT_LAUNCHED as NOT_LAUNCHED  # re-exported
from autotune.status import Status

# The statuses the budget (study.trials) counts: trials measured to their end, their figure known
# (ok, or over_limit: measured past study.limits). A failed or pruned trial, or one lost with its
# worker, is not counted: the search measures another in its place, up to LAUNCHES_PER_TRIAL
# launches for each trial of the budget (launch_cap).
MEASURED = (Status.OK, Status.OVER_LIMIT)
LAUNCHES_PER_TRIAL = 2


def launch_cap(budget: int) -> int:
    """The most trials a budget launches, measured or not: a space where most configurations fail
    ends here rather than at its timeout."""
    return LAUNCHES_PER_TRIAL * budget


Key = tuple[tuple[str, Any], ...]


def key(knobs: Knobs) -> Key:
    """A configuration's identity: its knob values less those at their catalogue default or not
    acting (None), so that a record made before a knob existed (it lacks the knob, which then acts
    at its default) and one made after (the knob at its default) are the same configuration
    (documents/identity.py)."""
    return tuple(
        sorted((k, v) for k, v in knobs.items() if v is not None and not _is_default(k, v))
    )


def _is_default(name: str, value: KnobValue) -> bool:
    knob = catalogue.BY_NAME.get(name)
    return knob is not None and type(value) is type(knob.default) and value == knob.default


def optuna_state(status: str) -> TrialState:
    """How a launched trial's status is stored. Configuration failures (oom, invalid_config,
    nonfinite_loss) end PRUNED, which Optuna's TPE counts among the bad trials and steers away from;
    it ignores FAIL trials (seen on 2x H200: with NCCL refusing NCCL_ALGO=Tree, 6 of 16 DDP trials
    went to Tree while refusals were FAIL). A trial the pruner stopped (status pruned) and one past
    the study's latency limits (over_limit) are PRUNED too. Failures of the machine (crash, timeout)
    are FAIL."""
    if status == Status.OK:
        return TrialState.COMPLETE
    return (
        TrialState.PRUNED
        if status in CONFIG_FAILURES or status in (Status.PRUNED, Status.OVER_LIMIT)
        else TrialState.FAIL
    )


@dataclass
class History:
    """The measured, failed and running trials of a study, and its baseline trial."""

    seen: dict[Key, optuna.trial.FrozenTrial] = field(default_factory=dict)
    ooms: list[optuna.trial.FrozenTrial] = field(default_factory=list)
    # invalid_config trials with a cause
    invalid: list[optuna.trial.FrozenTrial] = field(default_factory=list)
    # measured past study.limits
    over_limit: list[optuna.trial.FrozenTrial] = field(default_factory=list)
    launched: int = 0
    # launched trials measured to their end (MEASURED): what the budget counts
    measured: int = 0
    completed: list[optuna.trial.FrozenTrial] = field(default_factory=list)
    # pruned after measuring steps: they ran (their peaks fit), though their figure is no value
    pruned: list[optuna.trial.FrozenTrial] = field(default_factory=list)
    running: dict[Key, optuna.trial.FrozenTrial] = field(default_factory=dict)
    baseline: optuna.trial.FrozenTrial | None = None  # the completed trial of the baseline's knobs
    base_key: Key | None = None  # the baseline's identity (measured or not)

    @classmethod
    def of(cls, study: optuna.Study, own: int | None = None) -> History:
        """own: this worker's trial. `running` holds other workers' trials that have claimed their
        configuration (passed this check) or were asked before this one: either way this one
        yields."""
        h = cls()
        trials = study.get_trials(deepcopy=False)
        if own is not None:
            for t in trials:
                if (
                    t.state == TrialState.RUNNING
                    and t.number != own
                    and has_record(t)
                    and status_of(t) not in NOT_LAUNCHED
                    and (t.number < own or trial_marks.is_claimed(t))
                ):
                    h.running.setdefault(key(knobs_of(t)), t)
        for t in trials:
            status = status_of(t)
            if (
                t.state not in (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
                or status not in STATUSES
            ):
                continue  # running, duplicates, interrupted, lost workers: nothing measured
            if not _readable(t):
                continue  # a record another program damaged: it teaches nothing
            h.seen.setdefault(key(knobs_of(t) or t.params), t)
            if is_predicted(t):
                continue
            # trials copied from another study count no budget
            copied = trial_marks.is_warm_start(t)
            h.launched += not copied
            h.measured += not copied and status in MEASURED
            if status == Status.OOM:
                h.ooms.append(t)
            if status == Status.OVER_LIMIT:
                h.over_limit.append(t)
            if status == Status.INVALID_CONFIG and cause_of(t):
                h.invalid.append(t)
            if t.state == TrialState.COMPLETE:
                h.completed.append(t)
            if status == Status.PRUNED:
                h.pruned.append(t)
        base = baseline_knobs(study, trials)
        h.base_key = key(base) if base is not None else None
        h.baseline = next(
            (t for t in h.completed if base is not None and key(knobs_of(t)) == key(base)),
            None,
        )
        return h

    @property
    def ran(self) -> list[optuna.trial.FrozenTrial]:
        """The trials that ran their steps: completed, or pruned after measuring some."""
        return [*self.completed, *self.pruned]

    def best(self) -> optuna.trial.FrozenTrial | None:
        return max(self.completed, key=completed_value, default=None)

    def ranked(self) -> list[optuna.trial.FrozenTrial]:
        """Completed trials, best first."""
        return sorted(self.completed, key=completed_value, reverse=True)


def value_of(t: optuna.trial.FrozenTrial) -> float | None:
    """A trial's tokens/s per GPU: its first value, whatever the objective (tasks.Objective declares
    it first; pareto's second is p99 time per output token). Optuna's FrozenTrial.value refuses
    multi-objective trials, so everything reads it through here."""
    return t.values[0] if t.values else None


def completed_value(t: optuna.trial.FrozenTrial) -> float:
    """value_of a trial of History.completed, which has a value (_readable)."""
    value = value_of(t)
    assert value is not None
    return value


def _readable(t: optuna.trial.FrozenTrial) -> bool:
    """A trial record as autotune writes it: knobs a mapping; a completed one with numeric
    metrics."""
    if not has_knobs(t):
        return False
    if t.state == TrialState.COMPLETE:
        m = metrics_of(t)
        return (
            isinstance(m, dict)
            and isinstance(m.get(Metric.TOKENS_PER_GPU), (int, float))
            and value_of(t) is not None
        )
    return True


def baseline_knobs(
    study: optuna.Study, trials: list[optuna.trial.FrozenTrial]
) -> dict[str, Any] | None:
    """The baseline's knobs as the study stored them; in studies older than that, the first recorded
    trial's (the baseline is enqueued first)."""
    stored = study_attrs.baseline_knobs(study)
    if stored is not None:
        return stored
    first = next(
        (t for t in trials if status_of(t) != Status.DUPLICATE and has_record(t)),
        None,
    )
    return knobs_of(first) if first else None


def current_confirmation(study: optuna.Study, h: History) -> Confirmation | None:
    """The study's stored confirmation, or None when trials measured since then changed the top it
    confirmed (or it has none, or a damaged one: documents/confirmation.py)."""
    conf = confirmation.of(study)
    if conf is None:
        return None
    ranked = [t.number for t in h.ranked()]
    if conf.candidates != ranked[: len(conf.candidates)]:
        return None
    return conf
