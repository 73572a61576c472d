"""Measure one configuration: launch its trial process (or torchrun rank group), classify how it ended, keep the record.

`measure` is the one function that measures a configuration: the search, the confirmation and `check`
all call it. The process side (`run_trial`) needs nothing of the study: a TrialSpec in, an Outcome out.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune import knobs as catalogue
from autotune import memory, metrics, nccl_log, prestart, tasks
from autotune.errors import ConfigError
from autotune.hardware import (Telemetry, detect, device_units, fingerprint, peak_flops,
                               visible_gpu_index)
from autotune.locks import DeviceLock
from autotune.record import Metric, TrialRecord
from autotune.protocol import (PROGRESS_FILE, PRUNE_FILE, TRIAL_MODULE, RunSettings, TrialResult, TrialSpec,
                               parse_fault)

if TYPE_CHECKING:
    from autotune.config import ModelConfig, WorkloadConfig

LOG_TAIL_LINES = 15
SUPERVISOR = "autotune.workloads.supervise"  # every trial runs under it: nothing outlives the trial or autotune


def preflight() -> None:
    """What must hold before anything is written: the test-only AUTOTUNE_FAULT, if set, is well formed."""
    try:
        parse_fault(os.environ.get("AUTOTUNE_FAULT"))
    except ValueError as err:
        raise ConfigError(str(err)) from None


@dataclass
class Outcome:
    """A finished trial process: its status, the reason when it failed, the trial's result (if it wrote one)."""

    status: str
    reason: str = ""
    result: TrialResult | None = None
    telemetry: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    nccl: dict[str, Any] | None = None  # NCCL's own account (rank groups on GPUs)
    nccl_refused: bool = False  # NCCL's log, not the trial, says it refused a setting
    prestarted: bool = False  # its process was started ahead (prestart.py): the start phase is the hand-over


@dataclass(frozen=True)
class Bench:
    """Everything a measurement needs besides the knobs: shared by a study's trials, its confirmation and `check`."""

    model: dict[str, Any]  # the model section as the trial reads it (derived sizes filled in)
    run: RunSettings
    device: str
    timeout_s: float  # hard limit of one trial's process
    home: Path  # the study's folder: compile caches and temporary files of the trials go under it
    base_dir: str | None = None  # where an entrypoint module is found
    task: str = "train"
    compile_cache: Path | None = None  # torch.compile's caches shared across studies (a folder the user chose)
    prestart: bool = False  # one-rank trials take a process started ahead (prestart.py)
    params: dict[str, Any] = field(default_factory=dict)  # the trial's spec.params (generate: drift limits)
    limits: dict[str, float] = field(default_factory=dict)  # generate: latency limits (study.limits), set ones only

    @classmethod
    def of(cls, model: ModelConfig, workload: WorkloadConfig, *, device: str, timeout_s: float, home: Path,
           base_dir: str | None, compile_cache: str | None = None, prestart: bool | None = None,
           drift: dict[str, float] | None = None, limits: dict[str, float | None] | None = None,
           loss_check: dict[str, Any] | None = None) -> Bench:
        """prestart None: on for CUDA trials, off on the CPU (the import would share the measured cores)."""
        run = RunSettings(**{k: getattr(workload, k) for k in RunSettings.__dataclass_fields__})
        shared = Path(compile_cache).resolve() / compile_key(device) if compile_cache else None
        ahead = device == "cuda" if prestart is None else prestart
        params = tasks.task(workload.task).trial_params(drift, loss_check)
        return cls(model_spec(model), run, device, timeout_s, home.resolve(), base_dir, workload.task, shared, ahead,
                   params, {k: v for k, v in (limits or {}).items() if v is not None})

    def env(self) -> dict[str, str]:
        """Where a trial's compilers and libraries write: under the study (they default to /tmp and ~/.cache),
        or the compile cache the user chose. The cache is shared by the trials (a shape compiled once is
        loaded after) and, with study.compile_cache, by studies."""
        cache = self.compile_cache or self.home / "inductor-cache"
        return {"TORCHINDUCTOR_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton"),
                "CUDA_CACHE_PATH": str(cache / "cuda"), "XDG_CACHE_HOME": str(cache / "xdg"),
                "TMPDIR": str(self.home / "tmp"), "PYTHONDONTWRITEBYTECODE": "1"}  # no bytecode beside your module

    def spec(self, knobs: dict[str, Any], progress: bool = False) -> TrialSpec:
        return TrialSpec(task=self.task, device=self.device, knobs=dict(knobs), model=self.model, run=self.run,
                         base_dir=self.base_dir, params=dict(self.params), report_progress=progress)


def compile_key(device: str) -> str:
    """The compile cache's subfolder: what a compiled program depends on (GPU model, torch with its CUDA)."""
    from importlib import metadata

    gpu = next((g["name"] for g in detect()["gpus"]), "gpu") if device == "cuda" else "cpu"
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", f"{gpu}-torch{metadata.version('torch')}")


def model_spec(model: ModelConfig) -> dict[str, Any]:
    """The model section as the trial reads it (derived sizes filled in)."""
    m = model.model_dump()
    m.update(kv_heads=model.kv_heads, ffn_hidden=model.ffn)
    return m


def measure(bench: Bench, knobs: dict[str, Any], run_dir: Path, *, number: int = 0, gpus: str | None = None,
            concurrent: int = 1, on_poll: Callable[[], None] | None = None, stop: threading.Event | None = None,
            on_wait: Callable[[str], None] | None = None, env: dict[str, str] | None = None,
            progress: bool = False) -> TrialRecord:
    """Measure one configuration in a fresh process (or rank group) and return its record.

    gpus: the GPUs of this trial ("0" or "2,3"; None: as visible; on the CPU a slot number); concurrent:
    trials side by side (they share the host's cores); env: more environment variables (check passes
    best.yaml's apply.env, which a user may have added to); progress: a one-rank trial writes its measured
    steps to run_dir/progress.json and stops early when run_dir/prune appears (the search's pruner, in
    on_poll). The trial's devices are held for it (locks.py): a measurement by another autotune process on
    them is waited for, and the wait recorded. KeyboardInterrupt, or `stop` set, ends the trial's processes
    and propagates.
    """
    local_ranks = bench.run.world_size // bench.run.nnodes
    env = {**bench.env(), **catalogue.env_of(knobs), **(env or {}), **omp_env(concurrent * local_ranks)}
    cuda_slot = gpus is not None and bench.device == "cuda"
    if cuda_slot:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    Path(env["TMPDIR"]).mkdir(parents=True, exist_ok=True)
    lock = DeviceLock(device_units(bench.device, gpus, local_ranks))
    waited = lock.acquire(stop, on_wait)
    try:
        outcome = run_trial(bench.spec(knobs, progress), run_dir, timeout_s=bench.timeout_s, env=env, on_poll=on_poll,
                            stop=stop, gpu_index=int(gpus.split(",")[0]) if cuda_slot else None, ahead=bench.prestart)
    finally:
        lock.release()
    record = record_of(number, knobs, outcome, bench)
    record.run_dir = str(run_dir)
    record.device_wait_s = round(waited, 1)
    return record


def record_of(number: int, knobs: dict[str, Any], outcome: Outcome, bench: Bench) -> TrialRecord:
    """The trial's record: status, metrics, raw samples, phases, telemetry (record.py)."""
    record = TrialRecord(number, knobs, outcome.status, outcome.reason, wall_s=outcome.wall_s,
                         prestarted=outcome.prestarted)
    res, world = outcome.result, bench.run.world_size
    if outcome.status in ("ok", "pruned") and res is not None:  # a pruned trial keeps what it measured
        _measured(record, res, outcome, bench)
    if outcome.status == "invalid_config":  # the knob values that cannot run here: a rule the search learns
        record.cause = res.cause if res is not None else nccl_log.cause(knobs) if outcome.nccl_refused else None
    record.nccl = outcome.nccl
    if outcome.status != "ok" and res is not None and world > 1:
        record.extra["failed_rank"] = res.rank
    return record


def _measured(record: TrialRecord, res: TrialResult, outcome: Outcome, bench: Bench) -> None:
    """What a trial that measured steps records: metrics (the task's too), raw samples, phases, the memory
    estimate beside the peak, the loss check's curve, what it applied, where it ran, telemetry and energy."""
    world, task = bench.run.world_size, tasks.task(bench.task)
    record.metrics = metrics.summarize(res, bench.model, world, peak_flops(res.env.get("device_name")))
    task.metrics(record, res, bench.limits)
    record.raw = {"step_times_s": res.step_times_s, "warmup_step_times_s": res.warmup_step_times_s,
                  "losses": res.losses}
    record.phases_s = res.phases_s
    if task.estimates_memory and (est := memory.estimate(bench.model, record.knobs, world, bench.device)) is not None:
        record.metrics[Metric.MEMORY_ESTIMATE_GIB] = round(est.total / memory.GIB, 3)  # before calibration
    if res.output.get("loss_check"):  # train: the precision guardrail's curve (search/loss_guard.py)
        record.loss_check = {"losses": res.output["loss_check"]}
    record.applied = res.applied
    record.fingerprint = fingerprint(res.env, world)
    record.telemetry = metrics.summarize_telemetry(outcome.telemetry, tuple(res.measure_window or (0, 0)))
    # tokens per joule of one GPU (the trial's first, whose NVML counter the telemetry reads): n/a without it
    joules = (record.telemetry or {}).get("energy_j")
    record.metrics[Metric.TOKENS_PER_JOULE] = (
        res.tokens_per_step * len(res.step_times_s) / world / joules if joules and res.tokens_per_step else None)
    record.ranks = res.ranks or None


def omp_env(processes: int) -> dict[str, str]:
    """OMP_NUM_THREADS for `processes` trial processes or ranks side by side, unless the user set it: they
    share the host's cores, and oversubscribed intra-op threads spin and slow everything down (by 100x seen
    on 2 cores), so each gets its share, as torchrun does."""
    if processes <= 1 or "OMP_NUM_THREADS" in os.environ:
        return {}
    return {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // processes))}


def launch_command(spec: TrialSpec, spec_path: Path, result_path: Path, module: str = TRIAL_MODULE) -> list[str]:
    """The trial's command: the trial module itself, or torchrun starting world_size of them (one a rank)."""
    trial = ["-m", module, str(spec_path), str(result_path)]
    run = spec.run
    if run.world_size == 1:
        return [sys.executable, *trial]
    nnodes = run.nnodes or 1
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(run.world_size // nnodes)]
    if nnodes == 1 and not run.rdzv_endpoint:
        cmd += ["--standalone"]
    else:
        cmd += ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", str(run.rdzv_endpoint),
                "--rdzv-id", f"autotune-{spec_path.parent.parent.parent.name}-{spec_path.parent.name}"]
    return [*(run.launcher or []), *cmd, *trial]


def run_trial(spec: TrialSpec, run_dir: Path, *, timeout_s: float, env: dict[str, str] | None = None,
              on_poll: Callable[[], None] | None = None, gpu_index: int | None = None,
              stop: threading.Event | None = None, module: str = TRIAL_MODULE, ahead: bool = False) -> Outcome:
    """Run the trial on `spec` in a fresh process (own process group) and wait for it.

    KeyboardInterrupt, or `stop` being set (Ctrl-C seen by another thread), ends the process group and
    raises KeyboardInterrupt. gpu_index: the NVML index of the trial's GPU, for telemetry. module: the
    trial's Python module (tests replace it with a fake rank). ahead: a one-rank trial takes the process
    started ahead with its environment (prestart.py), if there is one, and starts the next one.
    """
    run_dir = run_dir.resolve()  # absolute: the straggler sweep matches this trial's spec path only
    run_dir.mkdir(parents=True, exist_ok=True)
    spec_path, result_path, log_path = run_dir / "spec.json", run_dir / "result.json", run_dir / "worker.log"
    for old in (result_path, run_dir / PROGRESS_FILE, run_dir / PRUNE_FILE, run_dir / "standby.log",
                *run_dir.glob("result.rank*.json"), *run_dir.glob("nccl.*.log")):
        old.unlink(missing_ok=True)
    spec.launched_at = time.time()
    spec.write(spec_path)
    child_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1", "AUTOTUNE_PARENT_PID": str(os.getpid())}
    distributed = spec.run.world_size > 1
    if distributed and spec.device == "cuda" and "NCCL_DEBUG" not in os.environ:
        child_env.update(nccl_log.DEBUG_ENV, NCCL_DEBUG_FILE=str(run_dir / nccl_log.DEBUG_FILE))
    telemetry = Telemetry(visible_gpu_index() if gpu_index is None else gpu_index) if spec.device == "cuda" else None
    t0 = time.monotonic()
    supervised = [sys.executable, "-m", SUPERVISOR]
    ahead = ahead and not distributed
    standby = prestart.take(child_env) if ahead else None
    proc = standby.activate(spec_path, result_path, log_path) if standby else None
    if proc is None:
        proc = _start([*supervised, *launch_command(spec, spec_path, result_path, module)], log_path, child_env)
    try:
        if ahead:  # the next trials' processes import while this one runs
            prestart.fill([*supervised, sys.executable, "-m", module], child_env, Path(child_env.get("TMPDIR", run_dir)))
        timed_out = _wait(proc, timeout_s, telemetry, on_poll, stop, str(spec_path) if distributed else None)
    except BaseException:
        _kill_group(proc, grace_s=2.0)  # nothing of the trial outlives an interruption here
        raise
    finally:
        if standby is not None and (early := standby.output()):  # what it printed while it waited (imports)
            (run_dir / "standby.log").write_text(early)
    outcome = _classify(run_dir, log_path, timed_out, timeout_s, distributed,
                        wall=time.monotonic() - t0, telemetry=telemetry.samples if telemetry else [])
    outcome.prestarted = standby is not None and proc is standby.proc
    return outcome


def _start(cmd: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start the trial's process in its own session, its output into the trial's log."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _wait(proc: subprocess.Popen[bytes], timeout_s: float, telemetry: Telemetry | None,
          on_poll: Callable[[], None] | None, stop: threading.Event | None, straggler_needle: str | None) -> int | None:
    """Wait for the started process (or the timeout), and leave nothing of it running.
    Returns None on a timeout, else the exit code."""
    t0 = time.monotonic()
    try:
        if telemetry:
            telemetry.__enter__()
        while proc.poll() is None:
            if time.monotonic() - t0 > timeout_s:
                _kill_group(proc)
                return None
            if stop is not None and stop.is_set():
                raise KeyboardInterrupt
            if on_poll:
                on_poll()
            time.sleep(0.1)
    except BaseException:
        _kill_group(proc, grace_s=2.0)
        raise
    finally:
        if telemetry:
            telemetry.__exit__()
        if proc.poll() is None:  # the trial has left; reap stragglers of its group (compile workers)
            _kill_group(proc)
        else:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if straggler_needle:
            _kill_stragglers(straggler_needle)
    return proc.returncode


def _classify(run_dir: Path, log_path: Path, code: int | None, timeout_s: float, distributed: bool, *, wall: float,
              telemetry: list[dict[str, Any]]) -> Outcome:
    """How the trial ended, from its result file, a failing rank's file, NCCL's log, or its exit."""
    report = nccl_log.report(run_dir) if distributed else None
    failed = rank_failure(run_dir) if distributed else None  # a rank's own reason, when one failed
    if code is None:
        reason = f"no result after {timeout_s:.0f} s (trial timeout); process group killed"
        if failed is not None:  # a rank had failed, and the others then waited for it until the timeout
            reason += f"; before that {failed.reason}"
        if report and report["warnings"]:
            reason += "; NCCL warned: " + "; ".join(report["warnings"][:2])
        return Outcome("timeout", reason, wall_s=wall, telemetry=telemetry, nccl=report)
    result_path = run_dir / "result.json"
    if result_path.is_file():
        res = TrialResult.read(result_path)
        return Outcome(res.status, res.reason, res, telemetry, wall, report)
    if failed is not None:  # one rank's own reason; torchrun ended the others
        reason = failed.reason
        if report and failed.status == "invalid_config":  # NCCL's warnings the rank's message does not repeat
            flat = " ".join(reason.split())
            extra = [w for w in report["warnings"] if " ".join(w.split())[:120] not in flat]
            if extra:
                reason += " | NCCL: " + "; ".join(extra[:2])
        return Outcome(failed.status, reason, failed, telemetry, wall, report)
    refused = [w for w in (report or {}).get("warnings", []) if nccl_log.is_refusal(w)]
    if refused:  # NCCL aborted the ranks (its watchdog) before Python saw an error: its log says why
        return Outcome("invalid_config", "NCCL refused this setting: " + refused[0], None, telemetry, wall, report,
                       nccl_refused=True)
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    return Outcome("crash", f"trial process ended without a result ({how}): {_tail(log_path)}", wall_s=wall,
                   telemetry=telemetry, nccl=report)


def rank_failure(run_dir: Path) -> TrialResult | None:
    """The first rank's own failure (earliest written), or None: later ranks usually fail because it did."""
    found = []
    for path in run_dir.glob("result.rank*.json"):
        try:
            res = TrialResult.read(path)
            found.append((res.at_ns or path.stat().st_mtime_ns, res))
        except (OSError, ValueError):
            pass
    return min(found, key=lambda f: f[0])[1] if found else None


def _kill_group(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """End the trial's whole process group (its compile workers too): SIGTERM, then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _kill_stragglers(needle: str) -> None:
    """SIGKILL every process whose command line names this trial's spec file: ranks that torchrun started in
    sessions of their own are outside the trial's process group, and none may outlive the trial."""
    me = os.getpid()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(entry) != me and needle in Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode():
                os.kill(int(entry), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-LOG_TAIL_LINES:])
