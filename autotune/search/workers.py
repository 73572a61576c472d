"""Several workers on one study: who runs a trial, heartbeats, lost workers reaped, configurations
claimed.

Written here rather than using Optuna's heartbeat because JournalStorage has none; this works the
same on SQLite, PostgreSQL and journal files.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.documents import trial_marks
from autotune.documents.record import TrialRecord, knobs_of, status_of, trial_of
from autotune.protocol import Knobs
from autotune.study.history import NOT_LAUNCHED, History, key, launch_cap

# How often a trial waiting for room in the budget reads the study again (wait_for_room).
ROOM_POLL_S = 0.5


def worker_id() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid()}


def heartbeat_interval(grace_s: float) -> float:
    return min(10.0, grace_s / 3)


class Heartbeat:
    """Called while a trial runs: stores a heartbeat in the trial every heartbeat_interval(grace)
    seconds."""

    def __init__(self, trial: optuna.Trial, grace_s: float) -> None:
        self.trial, self.interval, self.last = trial, heartbeat_interval(grace_s), time.time()
        trial_marks.start_beats(trial, self.last, worker_id())

    def __call__(self) -> None:
        if time.time() - self.last > self.interval:
            self.last = time.time()
            try:
                trial_marks.beat(self.trial, self.last)
            except optuna.exceptions.UpdateFinishedTrialError:
                # reaped while this worker stalled: the measurement goes on, and is kept
                # (late_record)
                pass


def reap_lost_workers(study: optuna.Study, grace_s: float, own: int | None = None) -> list[int]:
    """Fail RUNNING trials whose worker stopped sending heartbeats (kill -9, node loss) as
    worker_lost.

    A lost trial's configuration is measured again."""
    now = time.time()
    lost = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.number == own:
            continue
        beat = trial_marks.heartbeat_of(t) or (
            t.datetime_start.timestamp() if t.datetime_start else now
        )
        if now - beat > grace_s or _dead_here(trial_marks.worker_of(t)):
            try:
                trial_marks.mark_lost(study, t)
                study.tell(t.number, state=TrialState.FAIL)
                lost.append(t.number)
            except Exception:  # another worker reaped or finished it first
                continue
    return lost


def _dead_here(worker: dict[str, Any] | None) -> bool:
    """A worker on this host whose process is gone (found at once, no need to wait for the
    grace)."""
    if not worker or worker.get("host") != socket.gethostname() or worker.get("pid") == os.getpid():
        return False
    try:
        os.kill(int(worker["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, TypeError):
        return False
    return False


def claim_configuration(study: optuna.Study, trial: optuna.Trial, knobs: Knobs) -> int | None:
    """Claim the configuration for this trial: other workers now leave it to this one. Returns the
    number of a running trial that claimed it first (a race: the lower number keeps it), or None."""
    trial_marks.claim(trial)
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if (
            t.number < trial.number
            and key(knobs_of(t)) == key(knobs)
            and status_of(t) not in NOT_LAUNCHED
        ):
            return t.number
    return None


def late_record(study: optuna.Study, trial: optuna.Trial, record: TrialRecord) -> bool:
    """A worker that stalled past its grace finds its trial reaped (worker_lost) and measured again
    elsewhere:
    its measurement is added to the study as a duplicate of that trial (kept, not counted) instead
    of being dropped. False while the trial is still this worker's."""
    frozen = next((t for t in study.get_trials(deepcopy=False) if t.number == trial.number), None)
    if frozen is None or frozen.state == TrialState.RUNNING:
        return False
    study.add_trial(
        trial_of(
            trial_marks.late_attrs(record, trial.number),
            state=TrialState.FAIL,
            params=trial.params,
            distributions=trial.distributions,
        )
    )
    return True


def live_worker(study: optuna.Study, grace_s: float) -> str | None:
    """A worker still measuring a trial of this study (a heartbeat within the grace, or its process
    alive on this host), said for a message; None when no trial is running."""
    now = time.time()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = trial_marks.worker_of(t)
        beat = trial_marks.heartbeat_of(t)
        if worker.get("pid") == os.getpid() and worker.get("host") == socket.gethostname():
            continue
        alive_here = (
            worker.get("host") == socket.gethostname()
            and not _dead_here(worker)
            and bool(worker.get("pid"))
        )
        if alive_here or (beat is not None and now - beat <= grace_s):
            ago = f"{now - beat:.0f} s ago" if beat is not None else "none yet"
            return (
                f"pid {worker.get('pid')} on {worker.get('host')} (trial {t.number}, heartbeat "
                f"{ago})"
            )
    return None


def wait_for_room(
    study: optuna.Study,
    own: int,
    budget: int,
    grace_s: float,
    beat: Callable[[], None],
    done: Callable[[], bool],
) -> tuple[History, str | None]:
    """The study as trial `own` may launch: (History, None); or (History, why it is not launched):
    the budget measured, the launch cap reached (history.launch_cap) or the search ending (done).

    The budget counts measured trials, so while trials running elsewhere could measure the rest of
    it (or reach the launch cap) this one waits (its heartbeat sent) rather than skipping: one of
    them may fail, be pruned or turn out a repeat, and then this one measures in its place. Waiting
    trials yield to lower numbers only (History.running), so one of them always goes on."""
    while True:
        reap_lost_workers(study, grace_s, own=own)
        h = History.of(study, own=own)
        if h.measured >= budget:
            return h, "not launched: the budget's trials are measured"
        cap = launch_cap(budget)
        if h.launched >= cap:
            return h, f"not launched: {cap} trials launched, the most a budget of {budget} launches"
        if done():
            return h, "not launched: the search is ending"
        if h.measured + len(h.running) < budget and h.launched + len(h.running) < cap:
            return h, None
        beat()
        time.sleep(ROOM_POLL_S)
