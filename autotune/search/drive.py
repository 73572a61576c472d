"""Optuna driven by ask-and-tell (Optuna's recommended form for evaluation outside the objective):
each worker thread asks a trial, evaluates it, tells how it ended, then runs the callbacks.

An outcome is a value (Told), never an exception: a trial recorded without a launch, a pruned one
and a failed one are each told their state. An interruption (KeyboardInterrupt, Terminated) ends
the trial FAIL and goes on up, as Optuna's own loop does. A trial another worker reaped while this
one stalled is left as it was stored (late: no tell, no callbacks).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from signal import SIGINT, SIGTERM
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import AutotuneError, Terminated

Callback = Callable[[optuna.Study, FrozenTrial], None]


def stop_if_baseline_unmeasured(
    study: optuna.Study, trial: FrozenTrial, stop: threading.Event
) -> None:
    """After a told trial: UnmeasuredError (exit 3), the search ended at once, when it is the
    baseline and it failed for a reason of measurement rather than of its knobs
    (command/task.unmeasured: an average refused, no step reported): every other trial would fail
    the same way. `stop` ends the trials running beside it."""
    from autotune.command.task import unmeasured
    from autotune.documents import study_attrs
    from autotune.documents.record import knobs_of, reason_of, status_of
    from autotune.errors import UnmeasuredError
    from autotune.study.history import key

    baseline = study_attrs.baseline_knobs(study)
    if baseline is None or key(knobs_of(trial)) != key(baseline):
        return
    reason = reason_of(trial)
    if unmeasured(str(status_of(trial)), reason):
        stop.set()
        raise UnmeasuredError(
            f"the baseline (trial {trial.number}) could not be measured, so no trial can: {reason}"
        )


@dataclass(frozen=True)
class Told:
    """How a trial ended: its state, its value(s) when COMPLETE; late: reaped while its worker
    stalled (its measurement was kept elsewhere), so nothing is told."""

    state: TrialState
    values: float | Sequence[float] | None = None
    late: bool = False


class Drive:
    """n_jobs workers, each asking and telling trials until halt(), `stop` (an interruption
    seen by any thread) or the deadline; a trial that started runs to its end."""

    def __init__(
        self,
        study: optuna.Study,
        objective: Callable[[optuna.Trial], Told],
        callbacks: list[Callback],
        n_jobs: int,
        stop: threading.Event,
        asking: threading.Lock | None = None,
    ) -> None:
        """asking: held around each ask, shared with whatever enqueues trials in this process
        (Schedule.queue_lock): an ask pops a waiting trial or creates one, atomically for them."""
        self.study, self.objective, self.callbacks = study, objective, callbacks
        self.n_jobs, self.stop = n_jobs, stop
        self.asking = asking or threading.Lock()
        self.halted = threading.Event()

    def halt(self) -> None:
        """No worker asks another trial (Optuna's study.stop, which works only inside optimize)."""
        self.halted.set()

    def run(self, timeout_s: float) -> None:
        """Until halted, stopped or timeout_s have passed; an error of any worker is raised here."""
        deadline = time.monotonic() + timeout_s
        if self.n_jobs == 1:
            self._work(deadline)
            return
        previous = {}
        if threading.current_thread() is threading.main_thread():
            previous = {s: signal.signal(s, self._on_signal) for s in (SIGINT, SIGTERM)}
        try:
            self._pool(deadline)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: Any) -> None:
        """Ctrl-C or SIGTERM while several workers run: every thread ends its trial's process
        group, then the study stops."""
        self.stop.set()
        raise Terminated() if signum == SIGTERM else KeyboardInterrupt()

    def _pool(self, deadline: float) -> None:
        with ThreadPoolExecutor(self.n_jobs, thread_name_prefix="autotune-trial") as pool:
            futures = [pool.submit(self._work, deadline) for _ in range(self.n_jobs)]
            errors = [e for future in futures if (e := future.exception()) is not None]
        # the error that stopped the others first: theirs (interrupted by `stop`) follow from it
        first = next((e for e in errors if isinstance(e, AutotuneError)), None)
        if first is not None or errors:
            raise first or errors[0]

    def _work(self, deadline: float) -> None:
        while not self.halted.is_set() and not self.stop.is_set() and time.monotonic() < deadline:
            self._one()

    def ask(self) -> optuna.Trial:
        """The next trial: a waiting one popped, or a new one (one ask at a time with this
        process's enqueues: `asking`)."""
        with self.asking:
            return self.study.ask()

    def _one(self) -> None:
        trial = self.ask()
        try:
            told = self.objective(trial)
        except BaseException:  # interrupted (or a bug): the trial is not left RUNNING
            self.halt()
            self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
            raise
        if told.late:
            return
        values = told.values if told.state == TrialState.COMPLETE else None
        frozen = self.study.tell(trial, values, state=told.state, skip_if_finished=True)
        for callback in self.callbacks:
            callback(self.study, frozen)
