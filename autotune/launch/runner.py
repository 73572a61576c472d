"""Measure one configuration: launch its trial process (or torchrun rank group), classify how it
ended, keep the record.

`measure` is the one function that measures a configuration: the search, the confirmation and
`check` all call it. The process side (`run_trial`) needs nothing of the study: a TrialSpec in, an
Outcome out.
"""

from __future__ import annotations

import copy
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune import knobs as catalogue
from autotune import memory, metrics, nccl_log, paths, remedy, tasks
from autotune.documents import trial_marks
from autotune.documents.record import Metric, TrialRecord
from autotune.errors import ConfigError
from autotune.hardware import detect, device_units, fingerprint, peak_flops
from autotune.launch import logcap
from autotune.launch.locks import DeviceLock
from autotune.launch.process import Outcome, launch_command, run_trial  # noqa: F401  (launch_command: re-exported)
from autotune.protocol import (
    CommandParams,
    Knobs,
    RunSettings,
    TaskParams,
    TrialResult,
    TrialSpec,
    parse_fault,
)
from autotune.status import Status

if TYPE_CHECKING:
    from autotune.config import ModelConfig, WorkloadConfig
    from autotune.config.command import CommandConfig


def preflight() -> None:
    """What must hold before anything is written: the test-only AUTOTUNE_FAULT, if set, is well
    formed."""
    try:
        parse_fault(os.environ.get("AUTOTUNE_FAULT"))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    # torch.profiler's traces go there after the measured steps
    if os.environ.get("AUTOTUNE_PROFILE"):
        from autotune import paths

        paths.writable_dir(Path(os.environ["AUTOTUNE_PROFILE"]), "AUTOTUNE_PROFILE")


@dataclass(frozen=True)
class Bench:
    """Everything a measurement needs besides the knobs: shared by a study's trials, its
    confirmation and `check`."""

    # the model section as the trial reads it (derived sizes); None: task command
    model: dict[str, Any] | None
    run: RunSettings
    device: str
    timeout_s: float  # hard limit of one trial's process
    home: Path  # the study's folder: compile caches and temporary files of the trials go under it
    base_dir: str | None = None  # where an entrypoint module is found
    task: str = "train"
    # torch.compile's caches shared across studies (a folder the user chose)
    compile_cache: Path | None = None
    prestart: bool = False  # one-rank trials take a process started ahead (launch/prestart.py)
    # one-rank trials' processes forked by a fork server (launch/forkserver.py)
    fork: bool = False
    # the trial's spec.params (protocol.PARAMS: generate's drift limits, command's command, ...)
    params: TaskParams | dict[str, Any] = field(default_factory=dict)
    # generate: latency limits (study.limits), set ones only
    limits: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        model: ModelConfig | None,
        workload: WorkloadConfig,
        *,
        device: str,
        timeout_s: float,
        home: Path,
        base_dir: str | None,
        compile_cache: str | None = None,
        prestart: bool | None = None,
        fork: bool | None = None,
        drift: dict[str, float] | None = None,
        limits: dict[str, float | None] | None = None,
        loss_check: dict[str, Any] | None = None,
        command: CommandConfig | None = None,
    ) -> Bench:
        """prestart None: on for CUDA trials whose process imports torch, off on the CPU (the import
        would share the measured cores). fork True (study.fork_server): trials whose process imports
        torch fork from the fork server (it imports torch once, on the CPU too: that saves CPU
        rather than sharing it); a forked trial takes no process started ahead. command: the
        command section
        (config.CommandConfig) of task command."""
        run = RunSettings(**{k: getattr(workload, k) for k in RunSettings.__dataclass_fields__})
        shared = Path(compile_cache).resolve() / compile_key(device) if compile_cache else None
        task = tasks.task(workload.task)
        # prestart asked for (true) and the fork server left to its default: the processes are
        # started ahead, as asked
        forks = task.imports_torch and fork is True  # opt-in until a clean-clone CI has run it
        ahead = device == "cuda" and task.imports_torch if prestart is None else prestart
        # task command builds its part from the command section (tasks.Command.trial_params)
        params = task.trial_params(drift, loss_check, command=command, timeout_s=timeout_s)
        return cls(
            model_spec(model),
            run,
            device,
            timeout_s,
            home.resolve(),
            base_dir,
            workload.task,
            shared,
            ahead,
            forks,
            params,
            {k: v for k, v in (limits or {}).items() if v is not None},
        )

    def env(self) -> dict[str, str]:
        """Where a trial's compilers and libraries write: under the study (they default to /tmp and
        ~/.cache), or the compile cache the user chose. The cache is shared by the trials (a shape
        compiled once is loaded after) and, with study.compile_cache, by studies."""
        cache = self.compile_cache or self.home / "inductor-cache"
        return {
            "TORCHINDUCTOR_CACHE_DIR": str(cache),
            "TRITON_CACHE_DIR": str(cache / "triton"),
            "CUDA_CACHE_PATH": str(cache / "cuda"),
            "XDG_CACHE_HOME": str(cache / "xdg"),
            "TMPDIR": str(self.home / "tmp"),
            "PYTHONDONTWRITEBYTECODE": "1",
        }  # no bytecode beside your module

    def spec(self, knobs: Knobs, progress: bool = False) -> TrialSpec:
        return TrialSpec(
            task=self.task,
            device=self.device,
            knobs=dict(knobs),
            model=self.model,
            run=self.run,
            base_dir=self.base_dir,
            params=copy.deepcopy(self.params),
            report_progress=progress,
        )


def compile_key(device: str) -> str:
    """The compile cache's subfolder: what a compiled program depends on (GPU model, torch with its
    CUDA)."""
    from importlib import metadata

    gpu = next((g["name"] for g in detect()["gpus"]), "gpu") if device == "cuda" else "cpu"
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", f"{gpu}-torch{metadata.version('torch')}")


def model_spec(model: ModelConfig | None) -> dict[str, Any] | None:
    """The model section as the trial reads it (derived sizes filled in); None: the task builds no
    model."""
    if model is None:
        return None
    m = model.model_dump()
    m.update(kv_heads=model.kv_heads, ffn_hidden=model.ffn)
    return m


def measure(
    bench: Bench,
    knobs: Knobs,
    run_dir: Path,
    *,
    number: int = 0,
    gpus: str | None = None,
    concurrent: int = 1,
    on_poll: Callable[[], None] | None = None,
    stop: threading.Event | None = None,
    on_wait: Callable[[str], None] | None = None,
    env: dict[str, str] | None = None,
    progress: bool = False,
) -> TrialRecord:
    """Measure one configuration in a fresh process (or rank group) and return its record.

    gpus: the GPUs of this trial ("0" or "2,3"; None: as visible; on the CPU a slot number);
    concurrent:
    trials side by side (they share the host's cores); env: more environment variables (check passes
    best.yaml's apply.env, which a user may have added to); progress: a one-rank trial writes its
    measured steps to run_dir/progress.json and stops early when run_dir/prune appears (the search's
    pruner, in on_poll). The trial's devices are held for it (launch/locks.py): a measurement by
    another autotune process on them is waited for, and the wait recorded. KeyboardInterrupt, or
    `stop` set, ends the trial's processes and propagates.
    """
    local_ranks = bench.run.world_size // bench.run.nnodes
    env = {
        **bench.env(),
        **catalogue.env_of(knobs),
        **(env or {}),
        **omp_env(concurrent * local_ranks),
    }
    cuda_gpus = gpus if bench.device == "cuda" else None
    if cuda_gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_gpus
    # the trial's folders, each a real folder of the study (never a link planted in it)
    for folder in (env["TMPDIR"], bench.env()["TORCHINDUCTOR_CACHE_DIR"], run_dir):
        paths.study_folder(bench.home, Path(folder))
    lock = DeviceLock(device_units(bench.device, gpus, local_ranks))
    waited = lock.acquire(stop, on_wait)
    try:
        # hidden: the trial's alone, never a file
        spec, hidden = tasks.task(bench.task).prepare(
            bench.spec(knobs, progress), run_dir.resolve()
        )
        outcome = run_trial(
            spec,
            run_dir,
            timeout_s=bench.timeout_s,
            env={**env, **hidden},
            on_poll=on_poll,
            stop=stop,
            gpu_index=int(cuda_gpus.split(",")[0]) if cuda_gpus is not None else None,
            ahead=bench.prestart,
            fork=bench.fork,
        )
    finally:
        lock.release()
    record = record_of(number, knobs, outcome, bench)
    record.run_dir = str(run_dir)
    record.device_wait_s = round(waited, 1)
    context = _remedy_context(bench, run_dir, progress, record)
    record.reason = remedy.explain(record, outcome.result, context)
    return record


def _remedy_context(
    bench: Bench, run_dir: Path, progress: bool, record: TrialRecord
) -> remedy.Context:
    """What a failure's remedy reads beside the record (remedy.py): the limit, the trial's folder,
    the knobs a command maps, the memory model's peak of an OOM."""
    estimate = None
    if record.status == Status.OOM and bench.model and tasks.task(bench.task).estimates_memory:
        est = memory.estimate(bench.model, record.knobs, bench.run.world_size, bench.device)
        estimate = est.total / memory.GIB if est is not None else None
    command = bench.params.command if isinstance(bench.params, CommandParams) else None
    return remedy.Context(
        bench.timeout_s,
        run_dir.resolve(),
        bench.task,
        bench.run.world_size,
        bench.run.measure_steps,
        progress and bench.run.world_size == 1,  # a one-rank trial writes its steps as they run
        dict(command.get("knobs") or {}) if command is not None else None,
        estimate,
        _said(run_dir) if record.status in (Status.TIMEOUT, Status.CRASH) else "",
    )


def _said(run_dir: Path) -> str:
    """The telling line of the end of a trial's log, as a remedy quotes it."""
    return logcap.last_words(run_dir / "worker.log", remedy.QUOTE_CHARS)


def record_of(number: int, knobs: Knobs, outcome: Outcome, bench: Bench) -> TrialRecord:
    """The trial's record: status, metrics, raw samples, phases, telemetry (documents/record.py)."""
    record = TrialRecord(
        number,
        knobs,
        outcome.status,
        outcome.reason,
        wall_s=outcome.wall_s,
        prestarted=outcome.prestarted,
        forked=outcome.forked,
    )
    res, world = outcome.result, bench.run.world_size
    # a pruned trial keeps what it measured
    if outcome.status in (Status.OK, Status.PRUNED) and res is not None:
        if not (why := metrics.impossible(res.step_times_s, res.tokens_per_step)):
            _measured(record, res, outcome, bench)
            why = metrics.impossible_figure(record.metrics or {})
        if why:  # a figure that cannot be is never recorded as measured (issue 38)
            record.status, record.reason, record.metrics = Status.CRASH, why, None
    # the knob values that cannot run here: a rule the search learns
    if outcome.status == Status.INVALID_CONFIG:
        record.cause = (
            res.cause
            if res is not None
            else nccl_log.cause(knobs)
            if outcome.nccl_refused
            else None
        )
    record.nccl = outcome.nccl
    if outcome.status != Status.OK and res is not None and world > 1:
        trial_marks.set_failed_rank(record, res.rank)
    return record


def first_step_s(res: TrialResult) -> float | None:
    """Seconds from the process's launch to the end of its first step (its start and build phases,
    then its first warm-up step); None where the trial did not report those."""
    phases, warmup = res.phases_s, res.warmup_step_times_s
    if "start" not in phases or "build" not in phases or not warmup:
        return None
    return float(phases["start"] + phases["build"] + warmup[0])


def _measured(record: TrialRecord, res: TrialResult, outcome: Outcome, bench: Bench) -> None:
    """What a trial that measured steps records: metrics (the task's too), raw samples, phases, the
    memory estimate beside the peak, the loss check's curve, what it applied, where it ran,
    telemetry and energy."""
    world, task = bench.run.world_size, tasks.task(bench.task)
    record.metrics = metrics.summarize(
        res, bench.model, world, peak_flops(res.env.get("device_name"))
    )
    task.metrics(record, res, bench.limits)
    if (first := first_step_s(res)) is not None:
        record.metrics[Metric.FIRST_STEP_S] = round(first, 3)
    record.raw = {
        "step_times_s": res.step_times_s,
        "warmup_step_times_s": res.warmup_step_times_s,
        "losses": res.losses,
    }
    record.phases_s = res.phases_s
    if (
        task.estimates_memory
        and bench.model is not None
        and (est := memory.estimate(bench.model, record.knobs, world, bench.device)) is not None
    ):
        # before calibration
        record.metrics[Metric.MEMORY_ESTIMATE_GIB] = round(est.total / memory.GIB, 3)
    if res.output.get("loss_check"):  # train: the numerics check's curves (search/loss_guard.py)
        record.loss_check = dict(res.output["loss_check"])
    record.applied = res.applied
    record.fingerprint = fingerprint(res.env, world)
    window = res.measure_window or [0.0, 0.0]
    record.telemetry = metrics.summarize_telemetry(outcome.telemetry, (window[0], window[1]))
    # tokens per joule of one GPU (the trial's first, whose NVML counter the telemetry reads): n/a
    # without it
    joules = (record.telemetry or {}).get("energy_j")
    record.metrics[Metric.TOKENS_PER_JOULE] = (
        res.tokens_per_step * len(res.step_times_s) / world / joules
        if joules and res.tokens_per_step
        else None
    )
    record.ranks = res.ranks or None


def omp_env(processes: int) -> dict[str, str]:
    """OMP_NUM_THREADS for `processes` trial processes or ranks side by side, unless the user set
    it: they share the host's cores, and oversubscribed intra-op threads spin and slow everything
    down (by 100x seen on 2 cores), so each gets its share, as torchrun does."""
    if processes <= 1 or "OMP_NUM_THREADS" in os.environ:
        return {}
    return {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // processes))}
