"""What a tracker logs of one finished trial: its knobs, its measured metrics, its state and reason.

The integration callbacks log a FrozenTrial's params and values; the view made here gives them the
trial's knobs as params and, for a completed trial only, its measured metrics as values (a pruned or
failed trial carries no value: its state and reason say what happened)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from autotune.documents.record import TrialRecord
from autotune.protocol import Knobs
from autotune.study.history import NOT_LAUNCHED


@dataclass(frozen=True)
class LoggedTrial:
    """One trial as the trackers see it: `view` for the callbacks, the names of its values, tags."""

    view: FrozenTrial
    metric_names: list[str]
    tags: dict[str, str]

    @property
    def number(self) -> int:
        return self.view.number

    @property
    def state(self) -> TrialState:
        return self.view.state


def logged_trial(trial: FrozenTrial) -> LoggedTrial | None:
    """The view of a finished trial; None for one recorded without a launch (duplicate, skipped)."""
    record = TrialRecord.of(trial)
    if not record.knobs or record.status in NOT_LAUNCHED:
        return None
    metrics = flat_metrics(record.metrics) if trial.state == TrialState.COMPLETE else {}
    tags = _tags(trial.state, record)
    view = FrozenTrial(
        number=trial.number,
        state=trial.state,
        value=None,
        values=list(metrics.values()) if trial.state == TrialState.COMPLETE else None,
        datetime_start=trial.datetime_start,
        datetime_complete=trial.datetime_complete,
        params=_acting(record.knobs),
        distributions={},
        user_attrs=dict(tags),
        system_attrs={},
        intermediate_values={},
        trial_id=trial._trial_id,
    )
    return LoggedTrial(view, list(metrics), tags)


def _acting(knobs: Knobs) -> dict[str, Any]:
    """The knobs acting in this trial (None: not acting here, as bucket_cap_mb in an fsdp trial)."""
    return {k: v for k, v in knobs.items() if v is not None}


def _tags(state: TrialState, record: TrialRecord) -> dict[str, str]:
    """autotune's words for how the trial ended, beside Optuna's state."""
    tags = {"state": state.name, "status": record.status or state.name.lower()}
    if record.reason:
        tags["reason"] = record.reason
    if record.predicted:
        tags["predicted"] = "true"  # known not to run here: never launched (study/predict.py)
    return tags


def flat_metrics(metrics: dict[str, Any] | None) -> dict[str, float]:
    """The record's finite numbers, one level of nesting flattened (step_time.median_s); flags and
    texts (peak_mem_kind) left out."""
    flat: dict[str, float] = {}
    for name, value in (metrics or {}).items():
        if isinstance(value, dict):
            flat.update({f"{name}.{k}": v for k, v in value.items() if _number(v)})
        elif _number(value):
            flat[name] = value
    return {k: float(v) for k, v in flat.items()}


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
