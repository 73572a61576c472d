"""The study's own marks on a trial, beside its record: who runs it, its heartbeat, its GPUs, what
it repeats, where it was copied or recovered from, what screening and the edges changed.

Stored as Optuna user attributes next to the record's (documents/record.py), under the names and
layouts of earlier releases; a record read back keeps them in `TrialRecord.extra`. Every reader and
writer goes through the accessors here: the key names stay private to this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.documents.record import Stored, TrialRecord
from autotune.protocol import Knobs
from autotune.status import Status

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

_CLAIMED = "claimed"  # the worker took the configuration: others leave it (search/workers.py)
_WORKER = "worker"  # {host, pid} of the worker running it
_HEARTBEAT = "heartbeat"  # time.time() of its worker's last heartbeat
_GPU = "gpu"  # the GPU list it ran on ("0", "2,3"; None: no --gpus)
_OVERLAPPED = "overlapped_with"  # the trials that ran beside it
_DUPLICATE_OF = "duplicate_of"  # the trial it repeats (search/repeats.py)
_LATE = "late"  # a reaped worker's measurement kept as a duplicate: the status it measured
_WARM_START = "warm_start"  # "<study>#<number>" it was copied from (search/warm.py)
_FAILED_RANK = "failed_rank"  # the rank whose failure ended a rank group
_SCREENED_FROM = "screened_from"  # {knob: the sampler's value screening replaced}
_RECOVERED_FROM = "recovered_from"  # the lost trial whose measurement it is (search/recover.py)
_BEYOND = "beyond_list"  # {knob: the value it ran, outside the list} (search/edges.py)
# Optuna's own system attribute of an enqueued trial: its fixed parameters. Optuna reads it back
# only once the trial is asked (Trial._fixed_params); a WAITING trial's are read here.
_FIXED_PARAMS = "fixed_params"


def claim(trial: optuna.Trial) -> None:
    trial.set_user_attr(_CLAIMED, True)


def is_claimed(t: Stored) -> bool:
    return bool(t.user_attrs.get(_CLAIMED))


def start_beats(trial: optuna.Trial, at: float, worker: dict[str, Any]) -> None:
    """The worker that runs the trial, and its first heartbeat."""
    trial.set_user_attr(_HEARTBEAT, at)
    trial.set_user_attr(_WORKER, worker)


def beat(trial: optuna.Trial, at: float) -> None:
    trial.set_user_attr(_HEARTBEAT, at)


def heartbeat_of(t: Stored) -> float | None:
    """The last heartbeat (None: none yet)."""
    at: float | None = t.user_attrs.get(_HEARTBEAT)
    return at


def worker_of(t: Stored) -> dict[str, Any]:
    """{host, pid} of the worker that runs the trial ({}: none stored)."""
    worker: dict[str, Any] = t.user_attrs.get(_WORKER) or {}
    return worker


def mark_lost(study: optuna.Study, t: FrozenTrial) -> None:
    """Another worker's running trial, found lost, stored as worker_lost (it is then told FAIL).

    Optuna has no public way to write an attribute of a trial this process did not ask: Trial's
    constructor takes the private trial id as well, and asks the sampler again (before_trial,
    relative sampling) for a trial being reaped. The storage's own write is what Optuna's samplers
    use for the same need (study._storage.set_trial_system_attr(trial._trial_id, ...))."""
    study._storage.set_trial_user_attr(t._trial_id, "status", str(Status.WORKER_LOST))


def set_gpu(trial: optuna.Trial, slot: str | None) -> None:
    trial.set_user_attr(_GPU, slot)


def set_overlapped(trial: optuna.Trial, numbers: list[int]) -> None:
    trial.set_user_attr(_OVERLAPPED, numbers)


def mark_duplicate(trial: optuna.Trial, of: int) -> None:
    """The trial repeats trial `of` (its status and reason: record.set_status)."""
    trial.set_user_attr(_DUPLICATE_OF, of)


def late_attrs(record: TrialRecord, of: int) -> dict[str, Any]:
    """A reaped worker's record kept as a duplicate of the trial measured again in its place."""
    return {
        **record.to_attrs(),
        "status": str(Status.DUPLICATE),  # stored as the plain strings they are
        _DUPLICATE_OF: of,
        _LATE: str(record.status),
    }


def recovered_attrs(record: TrialRecord, lost: int) -> dict[str, Any]:
    """A lost trial's measurement, recovered from its files, as a trial of its own."""
    return {**record.to_attrs(), _RECOVERED_FROM: lost}


def recovered_from(t: Stored) -> int | None:
    number: int | None = t.user_attrs.get(_RECOVERED_FROM)
    return number


def set_warm_start(record: TrialRecord, origin: str) -> None:
    """The record copied from another study's trial ("<study>#<number>")."""
    record.extra[_WARM_START] = origin


def is_warm_start(t: Stored | TrialRecord) -> bool:
    """Copied from another study (counts no budget)."""
    return _WARM_START in (t.extra if isinstance(t, TrialRecord) else t.user_attrs)


def set_failed_rank(record: TrialRecord, rank: int | None) -> None:
    record.extra[_FAILED_RANK] = rank


def failed_rank(record: TrialRecord) -> int | None:
    rank: int | None = record.extra.get(_FAILED_RANK)
    return rank


def screened_from(t: Stored) -> dict[str, Any]:
    """The sampler's values that screening replaced ({}: none)."""
    proposed: dict[str, Any] = t.user_attrs.get(_SCREENED_FROM) or {}
    return proposed


def note_screened(study: optuna.Study, trial: FrozenTrial, name: str, value: Any) -> None:
    """Screening replaced the sampler's `value` of knob `name` in the trial being sampled.

    A sampler is handed the trial as a FrozenTrial (the Trial's cached one), so it writes through
    the storage as Optuna's own samplers do (study._storage.set_trial_system_attr(trial._trial_id,
    ...)): Optuna has no public write for a sampler. The FrozenTrial is updated as well, so the
    running Trial reads it back."""
    proposed = {**trial.user_attrs.get(_SCREENED_FROM, {}), name: value}
    study._storage.set_trial_user_attr(trial._trial_id, _SCREENED_FROM, proposed)
    trial.user_attrs[_SCREENED_FROM] = proposed


def beyond_of(t: Stored) -> Knobs:
    """The values the trial ran beyond its knobs' lists ({}: none)."""
    beyond: Knobs = t.user_attrs.get(_BEYOND) or {}
    return beyond


def enqueue(study: optuna.Study, params: Knobs, beyond: Knobs) -> None:
    """A trial enqueued with these params, and the values beyond the lists it runs instead."""
    study.enqueue_trial(params, user_attrs={_BEYOND: beyond} if beyond else None)


def enqueued_params(t: FrozenTrial) -> Knobs:
    """A waiting trial's fixed params, as enqueue_trial stored them."""
    params: Knobs = t.system_attrs.get(_FIXED_PARAMS, {})
    return params
