"""The search loop: each Optuna trial claims a configuration, launches it, records it; the study
stops when done."""

from __future__ import annotations

import contextlib
import datetime as dt
import queue
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune import tasks
from autotune.config import Config
from autotune.documents import trial_marks
from autotune.documents.record import (
    TrialRecord,
    set_knobs,
    set_reason,
    set_status,
    status_of,
    store,
)
from autotune.errors import UnmeasuredError
from autotune.hardware import detect
from autotune.launch.runner import Bench, measure
from autotune.protocol import STATUSES, Knobs
from autotune.search import loss_guard, neighbours, repeats, stages, tracking
from autotune.search.drive import Drive, Told, stop_if_baseline_unmeasured
from autotune.search.host import Watch
from autotune.search.observer import Observer
from autotune.search.prune import BelowBest, ProgressWatch
from autotune.search.recover import recover
from autotune.search.sampler import make_sampler
from autotune.search.schedule import Schedule
from autotune.search.workers import (
    Heartbeat,
    claim_configuration,
    late_record,
    reap_lost_workers,
    wait_for_room,
)
from autotune.space import ResolvedSpace
from autotune.status import Status
from autotune.study import predict
from autotune.study.history import History, baseline_knobs, key, optuna_state
from autotune.study.load import mask_url

# A trial recorded without launching (duplicate, budget taken): told FAIL, not counted.
NOT_LAUNCHED = Told(TrialState.FAIL)
# A configuration known not to run (study/predict.py): told PRUNED, so the sampler learns from it.
KNOWN_NOT_TO_RUN = Told(TrialState.PRUNED)
# The failures that may be the job's rather than its configuration's (a crash with an exit code, a
# bad flag, a configuration refused): repeated by the next trial, they end the search
# (stop_if_baseline_fails_again). Memory (oom), numerics, timeouts, the pruner's and the limits' are
# the configuration's: the search goes on to others.
JOB_FAILURES = (Status.CRASH, Status.INVALID_CONFIG)
# A crash that may depend on the sizes all the same: the host's memory (MemoryError; SIGKILL, most
# often the kernel's out-of-memory killer), a native library's signal (SIGSEGV at one shape)
SIZE_DEPENDENT = re.compile(r"killed by SIG|\bMemoryError\b|out of memory", re.I)
# A trial's own folder in its reason (its log named in the remedy): the same failure in each trial
OWN_FOLDER = re.compile(r"\bruns/\d+\b")


class Search:
    """One worker's part of a study: the objective is claim, launch, record (each trial told how it
    ended: drive.py); the callback decides to stop."""

    def __init__(
        self,
        cfg: Config,
        space: ResolvedSpace,
        study: optuna.Study,
        study_dir: Path,
        device: str,
        groups: list[str] | None,
        budget: int,
        observer: Observer,
        sampler: optuna.samplers.BaseSampler | None = None,
        measure_fn: Callable[..., TrialRecord] = measure,
        watch: Watch | None = None,
    ) -> None:
        """sampler and measure_fn: the study's sampler and the measurement, replaced by the replay
        of a recorded landscape (search/replay.py), which runs this same loop without a GPU, and
        (measure_fn) by run_search's caller. watch: samples the host around each measurement and
        marks the disturbed (search/host.py; None: nothing sampled)."""
        self.cfg, self.space, self.study, self.budget, self.observer = (
            cfg,
            space,
            study,
            budget,
            observer,
        )
        self.sampler = sampler
        self.measure = watch.around(measure_fn) if watch is not None else measure_fn
        self.runs = study_dir / "runs"
        self.bench = Bench.of(
            cfg.model,
            cfg.workload,
            device=device,
            timeout_s=60 * cfg.study.trial_timeout_min,
            home=study_dir,
            base_dir=cfg.base_dir,
            compile_cache=cfg.study.compile_cache,
            prestart=cfg.study.prestart,
            fork=cfg.study.fork_server,
            drift=cfg.study.drift.model_dump(),
            loss_check=cfg.study.loss_check.model_dump(),
            limits=cfg.study.limits.model_dump() if cfg.study.limits else None,
            command=cfg.command,
        )
        self.grace = cfg.study.worker_grace_s
        self.goal = tasks.objective(cfg.study.objective)  # what Optuna is told of each trial
        gpus = [g["memory_gib"] for g in detect()["gpus"]] if device == "cuda" else []
        self.memory = (
            predict.Memory(self.bench.model, cfg.workload.world_size, min(gpus) if gpus else None)
            if tasks.task(cfg.workload.task).estimates_memory and self.bench.model is not None
            else None
        )
        # one-rank trials report their steps and may be pruned; ranks would have to agree on where
        # to stop (Optuna's pruners do not take multi-objective trials: a pareto study prunes
        # nothing)
        self.prune_below = (
            cfg.study.prune_below if cfg.workload.world_size == 1 and self.goal.single else 0.0
        )
        self.slots: queue.Queue[str | None] = queue.Queue()
        slots: list[str | None] = [*groups] if groups else [None]
        for slot in slots:
            self.slots.put(slot)
        self.n_jobs = len(groups) if groups else 1
        staging = stages.staging(cfg.study, space, budget, cfg.workload.task)
        grid = cfg.study.sampler == "grid"
        self.schedule = Schedule(
            study, space, staging, budget, self.n_jobs, cfg.study.seed, grid, cfg.study.extend_edges
        )
        self.schedule.neighbours = neighbours.wanted(cfg.study.start, space.task, grid)
        self.plan = self.schedule.plan
        self.stop = threading.Event()
        # trial -> (start, end): which trials overlapped which
        self.spans: dict[int, tuple[float, float | None]] = {}
        self.spans_lock = threading.Lock()
        self.new_trials, self.stop_reason = 0, "budget reached"

    # --- the objective: claim, launch, record
    # ------------------------------------------------------------

    def objective(self, trial: optuna.Trial) -> Told:
        # whose trial this is, before anything else: a worker killed from here on is found dead
        beat = Heartbeat(trial, self.grace)
        params = self.space.suggest(trial)
        # a step past the edge of the list runs its own value (search/edges.py)
        knobs = self.space.knobs({**params, **trial_marks.beyond_of(trial)})
        set_knobs(trial, knobs)
        index = self.claim(trial, params, knobs, beat)
        if isinstance(index, Told):
            return index
        return self.record(trial, self.launch(trial, knobs, index, beat))

    def claim(
        self, trial: optuna.Trial, params: dict[str, Any], knobs: Knobs, beat: Heartbeat
    ) -> int | Told:
        """Take this configuration, or record why not (budget measured, already measured or
        running, known not to run: study/predict.py). Returns the trial's index in the budget, or
        how it ended unlaunched. While trials running elsewhere could measure the rest of the
        budget, it waits for their end (workers.wait_for_room)."""
        h, skip = wait_for_room(
            self.study, trial.number, self.budget, self.grace, beat, self._ending
        )
        if skip is not None:
            set_status(trial, Status.SKIPPED)
            set_reason(trial, skip)
            self.drive.halt()
            return NOT_LAUNCHED
        prev = h.seen.get(key(knobs)) or h.running.get(key(knobs))
        if prev is not None:
            return self._duplicate(trial, prev, params, h)
        if (
            known := predict.failure(
                h, knobs, self.space.task, self.memory, loss_guard.pinned(self.space, knobs)
            )
        ) is not None:
            status, reason = known
            record = TrialRecord(trial.number, knobs, status, reason, predicted=True)
            store(trial, record)  # not launched, not counted; the observer hears of it once told
            return KNOWN_NOT_TO_RUN
        if (first := claim_configuration(self.study, trial, knobs)) is not None:
            return self._duplicate(trial, first, None, h)
        return h.measured + 1

    def _ending(self) -> bool:
        return self.drive.halted.is_set() or self.stop.is_set()

    def _duplicate(
        self,
        trial: optuna.Trial,
        of: optuna.trial.FrozenTrial | int,
        params: dict[str, Any] | None,
        h: History,
    ) -> Told:
        """Record a repeat without launching it, told as the trial it repeats ended (repeats.py);
        the sampler's region gets its nearest unmeasured point next."""
        told = repeats.record(trial, of)
        if params is not None and not self.schedule.nearest(params, h, trial.number):
            self.drive.halt()  # every other point is measured or being measured elsewhere
        return told

    def launch(self, trial: optuna.Trial, knobs: Knobs, index: int, beat: Heartbeat) -> TrialRecord:
        """Measure the configuration on a free GPU slot; record which trials ran beside it."""
        slot = self.slots.get()  # a GPU list such as "0" or "2,3" (None: no --gpus)
        beyond = trial_marks.beyond_of(trial) or None
        self.observer.trial_started(trial.number, index, knobs, beyond)
        trial_marks.set_gpu(trial, slot)
        with self.spans_lock:
            self.spans[trial.number] = (time.time(), None)

        run_dir = self.runs / f"{trial.number:04d}"
        watch = ProgressWatch(trial, run_dir, self.prune_below) if self.prune_below else None

        def poll() -> None:
            self.observer.poll()
            beat()
            if watch:
                watch()

        h = History.of(self.study, own=trial.number)
        # the numerics check asked for where no verdict covers it
        bench = loss_guard.trial_bench(self.bench, h, knobs)
        try:
            record = self.measure(
                bench,
                knobs,
                run_dir,
                number=trial.number,
                gpus=slot,
                concurrent=self.n_jobs,
                on_poll=poll,
                stop=self.stop,
                on_wait=self.observer.device_busy,
                progress=bool(watch),
            )
            record = loss_guard.apply(self.bench, knobs, record, h)
            if record.status == Status.PRUNED and watch and watch.why:
                steps = len(record.step_times)
                record.reason = f"{watch.why}; it stopped after {steps} measured steps"
            return record
        except KeyboardInterrupt:
            self.stop.set()
            set_status(trial, Status.INTERRUPTED)
            raise
        finally:
            self.slots.put(slot)
            # reaped while it stalled
            with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                trial_marks.set_overlapped(trial, self._overlapped(trial.number))

    def record(self, trial: optuna.Trial, record: TrialRecord) -> Told:
        """Store the record; configuration failures end PRUNED, machine failures FAIL
        (history.optuna_state)."""
        self.new_trials += 1
        # this worker stalled, its trial was reaped and re-measured
        if late_record(self.study, trial, record):
            # its measurement is kept as a duplicate of the re-run
            return Told(TrialState.FAIL, late=True)
        store(trial, record)
        state = optuna_state(record.status)
        if state != TrialState.COMPLETE:
            return Told(state)
        return Told(state, self.goal.of(record))

    # --- the study around it
    # -------------------------------------------------------------------------------

    def optimize(self, timeout_s: float, url: str, tracker: tracking.Tracker | None = None) -> str:
        """Enqueue the baseline (and the grid), run the objective until done; returns why it
        stopped. tracker: logs each trial this worker tells (search/tracking)."""
        cfg, study = self.cfg, self.study
        callbacks: list[Callable[[optuna.Study, optuna.trial.FrozenTrial], None]] = [
            self.told,
            self.stop_when_done,
            *([tracker] if tracker else []),
        ]
        self.drive = Drive(
            study, self.objective, callbacks, self.n_jobs, self.stop, self.schedule.queue_lock
        )
        reap_lost_workers(study, self.grace)
        # one objective: a recovered trial's value is its tokens/s
        if self.goal.single:
            # measured but never stored: recorded from its files
            recover(study, self.runs, self.bench)
        study.sampler = self.sampler or make_sampler(cfg.study.sampler, cfg.study.seed, self.budget)
        if self.plan.active:
            study.sampler = stages.Screening(study.sampler, self.plan)
        study.pruner = (
            BelowBest(self.prune_below) if self.prune_below else optuna.pruners.NopPruner()
        )
        self.schedule.start()
        h = History.of(study)
        self.observer.started(
            {
                "name": cfg.name,
                "device": self.bench.device,
                "budget": self.budget,
                "done": h.measured,
                "space_size": self.space.size,
                "searched": list(self.space.searched),
                "sampler": cfg.study.sampler,
                "timeout_s": timeout_s,
                "storage": mask_url(url),
                "baseline": self.space.baseline,
                "imported": sum(
                    1 for t in study.get_trials(deepcopy=False) if trial_marks.is_warm_start(t)
                ),
            }
        )
        if h.measured >= self.budget:
            return "budget already reached"
        if not self.schedule.unseen(h) and not self.schedule.past(h):
            return "space exhausted"
        t0 = dt.datetime.now()
        self.drive.run(timeout_s)
        return (
            "timeout" if (dt.datetime.now() - t0).total_seconds() >= timeout_s else self.stop_reason
        )

    def told(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """The observer hears of a recorded trial once Optuna has told its state (an Optuna
        callback): the History it gets then counts this trial. Called from the objective, before the
        tell, the live view's "best" lagged one trial behind the results it printed."""
        if status_of(trial) in STATUSES:
            self.observer.trial_finished(TrialRecord.of(trial), History.of(study))

    def stop_when_done(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """After each told trial: what is measured next, and whether the study stops
        (schedule.py)."""
        stop_if_baseline_unmeasured(study, trial, self.stop)  # every trial would fail as it did
        stop_if_baseline_fails_again(study, trial, self.stop)
        why = self.schedule.after(study, trial)
        if why is not None:
            self.stop_reason = why
            self.drive.halt()

    def _overlapped(self, number: int) -> list[int]:
        """Trials measured at the same time as this one, on other GPUs."""
        with self.spans_lock:
            start, end = self.spans[number][0], time.time()
            self.spans[number] = (start, end)
            return sorted(
                n
                for n, (s0, e0) in self.spans.items()
                if n != number and s0 < end and (e0 is None or e0 > start)
            )


def failure_of(record: TrialRecord) -> tuple[str, str] | None:
    """A launched trial's failure as the next trial would repeat it when it is the job's, not its
    configuration's: its status (JOB_FAILURES) and its reason with the trial's own folder taken out.
    None for any other end: measured, a failure of memory, numerics or time, a crash by a signal or
    of host memory (SIZE_DEPENDENT), a refusal that names the knob values causing it (cause)."""
    if record.status not in JOB_FAILURES or record.cause or SIZE_DEPENDENT.search(record.reason):
        return None
    return record.status, OWN_FOLDER.sub("runs/*", record.reason)


def stop_if_baseline_fails_again(
    study: optuna.Study, trial: optuna.trial.FrozenTrial, stop: threading.Event
) -> None:
    """After a told trial: UnmeasuredError (exit 3), the search ended at once, when the baseline and
    the next trial launched after it (by number, among those ended) failed the same way
    (failure_of: the same status and the same reason, the trial's own folder aside): a wrong flag
    or a script that crashes fails every trial as it did. Decided only when one of the two is the
    trial told, so a study resumed after its script was fixed measures on. `stop` ends the trials
    running beside it."""
    told = TrialRecord.of(trial)
    if failure_of(told) is None:
        return
    trials = study.get_trials(deepcopy=False)
    base = baseline_knobs(study, trials)
    if base is None:
        return
    ended = [
        r
        for t in trials
        if t.state in (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
        and (r := TrialRecord.of(t)).status in STATUSES
        and not r.predicted
        and not trial_marks.is_warm_start(r)
    ]
    first = next((r for r in ended if key(r.knobs) == key(base)), None)
    after = next((r for r in ended if first is not None and r.number > first.number), None)
    if first is None or after is None or told.number not in (first.number, after.number):
        return
    failed = failure_of(first)
    if failed is None or failed != failure_of(after):
        return
    stop.set()
    reason = " ".join(first.reason.split())
    raise UnmeasuredError(
        f"the baseline (trial {first.number}) and the next trial ({after.number}) failed the same "
        f"way ({first.status}), as every trial would: {reason}"
    )
