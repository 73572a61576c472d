"""Optuna driven by ask-and-tell (Optuna's recommended form for evaluation outside the objective):
each worker thread asks a trial, evaluates it, tells how it ended, then runs the callbacks.

An outcome is a value (Told), never an exception: a trial recorded without a launch, a pruned one
and a failed one are each told their state. An interruption (KeyboardInterrupt, Terminated) ends
the trial FAIL and goes on up, as Optuna's own loop does. A trial another worker reaped while this
one stalled is left as it was stored (late: no tell, no callbacks).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

Callback = Callable[[optuna.Study, FrozenTrial], None]


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
    ) -> None:
        self.study, self.objective, self.callbacks = study, objective, callbacks
        self.n_jobs, self.stop = n_jobs, stop
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
        with ThreadPoolExecutor(self.n_jobs, thread_name_prefix="autotune-trial") as pool:
            futures = [pool.submit(self._work, deadline) for _ in range(self.n_jobs)]
            for future in futures:
                future.result()

    def _work(self, deadline: float) -> None:
        while not self.halted.is_set() and not self.stop.is_set() and time.monotonic() < deadline:
            self._one()

    def _one(self) -> None:
        trial = self.study.ask()
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
