"""Launching one trial: a fresh, supervised process (or rank group through torchrun) on a spec,
waited for with a time limit and telemetry, its end classified (ok, oom, invalid_config, crash,
timeout, ...) into an Outcome. runner.measure is the one function that measures; it calls
run_trial."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from autotune import atomic, nccl_log
from autotune.hardware import Telemetry, visible_gpu_index
from autotune.launch import environ, forkserver, logcap, orphans, prestart
from autotune.protocol import PROGRESS_FILE, PRUNE_FILE, TRIAL_MODULE, TrialResult, TrialSpec
from autotune.status import Status

LOG_TAIL_LINES = 15
# every trial runs under it: nothing outlives the trial or autotune
SUPERVISOR = "autotune.workloads.supervise"


@dataclass
class Outcome:
    """A finished trial process: its status, the reason when it failed, the trial's result (if it
    wrote one)."""

    status: str
    reason: str = ""
    result: TrialResult | None = None
    telemetry: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    nccl: dict[str, Any] | None = None  # NCCL's own account (rank groups on GPUs)
    nccl_refused: bool = False  # NCCL's log, not the trial, says it refused a setting
    # its process was started ahead (launch/prestart.py): the start phase is the hand-over
    prestarted: bool = False
    # its process was forked by a fork server (launch/forkserver.py): torch was imported already
    forked: bool = False


def launch_command(
    spec: TrialSpec, spec_path: Path, result_path: Path, module: str = TRIAL_MODULE
) -> list[str]:
    """The trial's command: the trial module itself, or torchrun starting world_size of them (one a
    rank)."""
    trial = ["-m", module, str(spec_path), str(result_path)]
    run = spec.run
    if run.world_size == 1:
        return [sys.executable, *trial]
    nnodes = run.nnodes or 1
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(run.world_size // nnodes),
    ]
    if nnodes == 1 and not run.rdzv_endpoint:
        cmd += ["--standalone"]
    else:
        cmd += [
            "--nnodes",
            str(nnodes),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            str(run.rdzv_endpoint),
            "--rdzv-id",
            f"autotune-{spec_path.parent.parent.parent.name}-{spec_path.parent.name}",
        ]
    return [*(run.launcher or []), *cmd, *trial]


def run_trial(
    spec: TrialSpec,
    run_dir: Path,
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    on_poll: Callable[[], None] | None = None,
    gpu_index: int | None = None,
    stop: threading.Event | None = None,
    module: str = TRIAL_MODULE,
    ahead: bool = False,
    fork: bool = False,
) -> Outcome:
    """Run the trial on `spec` in a fresh process (own process group) and wait for it.

    KeyboardInterrupt, or `stop` being set (Ctrl-C seen by another thread), ends the process group
    and raises KeyboardInterrupt. gpu_index: the NVML index of the trial's GPU, for telemetry.
    module:
    the trial's Python module (tests replace it with a fake rank). fork: a one-rank trial's
    process is forked by the fork server of its environment (launch/forkserver.py), which imported
    torch once; where it cannot be, ahead: it takes the process started ahead with its environment
    (launch/prestart.py), if there is one, and starts the next one; else it starts cold.
    """
    run_dir = run_dir.resolve()  # absolute: the straggler sweep matches this trial's spec path only
    spec_path, result_path, log_path = _prepare(spec, run_dir)
    child_env = _child_env(spec, run_dir, env)
    distributed = spec.run.world_size > 1
    telemetry = (
        Telemetry(visible_gpu_index() if gpu_index is None else gpu_index)
        if spec.device == "cuda"
        else None
    )
    t0 = time.monotonic()
    supervised = [sys.executable, "-m", SUPERVISOR]
    scratch = Path(child_env.get("TMPDIR", run_dir))
    forked = (
        _forked(module, spec_path, result_path, log_path, child_env, scratch)
        if fork and not distributed
        else None
    )
    ahead = ahead and not distributed and forked is None
    standby = prestart.take(child_env) if ahead else None
    handed: Process | None = forked or (
        standby.activate(spec_path, result_path, log_path) if standby else None
    )

    def cold() -> subprocess.Popen[bytes]:
        cmd = [*supervised, *launch_command(spec, spec_path, result_path, module)]
        return _start(cmd, log_path, child_env)

    proc: Process = handed or cold()
    try:
        if ahead:  # the next trials' processes import while this one runs
            prestart.fill([*supervised, sys.executable, "-m", module], child_env, scratch)
        needle = str(spec_path) if distributed else None
        timed_out = _wait(proc, timeout_s, telemetry, on_poll, stop, needle, log_path)
        if proc is handed and timed_out is not None and not log_path.exists():
            # it ended after it was handed the trial but before it read it (a standby killed while
            # it waited, a fork server that died: the trial's log is the first thing either
            # opens): the trial starts cold
            proc = cold()
            timed_out = _wait(proc, timeout_s, telemetry, on_poll, stop, needle, log_path)
    except BaseException:
        _kill_group(proc, grace_s=2.0)  # nothing of the trial outlives an interruption here
        raise
    finally:
        # what it printed while it waited (imports)
        if standby is not None and (early := standby.output()):
            atomic.write_text(run_dir / "standby.log", early)
    outcome = _classify(
        run_dir,
        log_path,
        timed_out,
        timeout_s,
        distributed,
        wall=time.monotonic() - t0,
        telemetry=telemetry.samples if telemetry else [],
    )
    outcome.prestarted = standby is not None and proc is standby.proc
    outcome.forked = forked is not None and proc is forked
    return outcome


class Process(Protocol):
    """A trial's process as run_trial supervises it: one it started (subprocess.Popen) or one a
    fork server forked (forkserver.Forked); its pid is its process group."""

    pid: int

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def _forked(
    module: str,
    spec_path: Path,
    result_path: Path,
    log_path: Path,
    env: dict[str, str],
    scratch: Path,
) -> forkserver.Forked | None:
    """The trial's process forked by the fork server of its environment; None where it could not
    be (the server refused the fork, or died: the trial starts another way)."""
    got = forkserver.fork(module, [str(spec_path), str(result_path)], env, log_path, scratch)
    return got if isinstance(got, forkserver.Forked) else None


def _start(cmd: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start the trial's process in its own session, its output into the trial's log."""
    orphans.become_subreaper()
    with os.fdopen(atomic.create(log_path), "wb") as log:
        return orphans.start(
            lambda: subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        )


def _wait(
    proc: Process,
    timeout_s: float,
    telemetry: Telemetry | None,
    on_poll: Callable[[], None] | None,
    stop: threading.Event | None,
    straggler_needle: str | None,
    log_path: Path | None = None,
) -> int | None:
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
            if log_path is not None:
                logcap.cap(log_path)  # a trial that prints without end cannot fill the disk
            time.sleep(0.1)
    except BaseException:
        _kill_group(proc, grace_s=2.0)
        raise
    finally:
        if telemetry:
            telemetry.__exit__()
        # the trial has left; reap stragglers of its group (compile workers)
        if proc.poll() is None:
            _kill_group(proc)
        else:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if straggler_needle:
            _kill_stragglers(straggler_needle)
        if proc.poll() is not None:
            orphans.done(proc.pid)
        # what escaped the trial's supervisor (a daemon that killed it) is ours now: ended
        orphans.sweep()
    return proc.returncode


def _classify(
    run_dir: Path,
    log_path: Path,
    code: int | None,
    timeout_s: float,
    distributed: bool,
    *,
    wall: float,
    telemetry: list[dict[str, Any]],
) -> Outcome:
    """How the trial ended, from its result file, a failing rank's file, NCCL's log, or its exit."""
    report = nccl_log.report(run_dir) if distributed else None
    failed = rank_failure(run_dir) if distributed else None  # a rank's own reason, when one failed
    if code is None:
        reason = f"no result after {timeout_s:.0f} s (trial timeout); process group killed"
        # a rank had failed, and the others then waited for it until the timeout
        if failed is not None:
            reason += f"; before that {failed.reason}"
        if report and report["warnings"]:
            reason += "; NCCL warned: " + "; ".join(report["warnings"][:2])
        return Outcome(Status.TIMEOUT, reason, wall_s=wall, telemetry=telemetry, nccl=report)
    result_path = run_dir / "result.json"
    if result_path.is_file():
        res = TrialResult.read(result_path)
        return Outcome(res.status, res.reason, res, telemetry, wall, report)
    if failed is not None:  # one rank's own reason; torchrun ended the others
        reason = failed.reason
        # NCCL's warnings the rank's message does not repeat
        if report and failed.status == Status.INVALID_CONFIG:
            flat = " ".join(reason.split())
            extra = [w for w in report["warnings"] if " ".join(w.split())[:120] not in flat]
            if extra:
                reason += " | NCCL: " + "; ".join(extra[:2])
        return Outcome(failed.status, reason, failed, telemetry, wall, report)
    refused = [w for w in (report or {}).get("warnings", []) if nccl_log.is_refusal(w)]
    # NCCL aborted the ranks (its watchdog) before Python saw an error: its log says why
    if refused:
        return Outcome(
            Status.INVALID_CONFIG,
            "NCCL refused this setting: " + refused[0],
            None,
            telemetry,
            wall,
            report,
            nccl_refused=True,
        )
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    said = _tail(log_path)  # none: the reason ends at its cause, never at an empty quote
    return Outcome(
        Status.CRASH,
        f"trial process ended without a result ({how})" + (f": {said}" if said else ""),
        wall_s=wall,
        telemetry=telemetry,
        nccl=report,
    )


def rank_failure(run_dir: Path) -> TrialResult | None:
    """The first rank's own failure (earliest written), or None: later ranks usually fail because it
    did."""
    found = []
    for path in run_dir.glob("result.rank*.json"):
        try:
            res = TrialResult.read(path)
            found.append((res.at_ns or path.stat().st_mtime_ns, res))
        except (OSError, ValueError):
            pass
    return min(found, key=lambda f: f[0])[1] if found else None


def _kill_group(proc: Process, grace_s: float = 5.0) -> None:
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
    """SIGKILL every process whose command line names this trial's spec file: ranks that torchrun
    started in sessions of their own are outside the trial's process group, and none may outlive the
    trial."""
    me = os.getpid()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if (
                int(entry) != me
                and needle
                in Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            ):
                os.kill(int(entry), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def _tail(path: Path) -> str:
    """The log's last LOG_TAIL_LINES lines, read from its end (a log may be large: logcap.py)."""
    lines = logcap.tail(path).strip().splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _prepare(spec: TrialSpec, run_dir: Path) -> tuple[Path, Path, Path]:
    """The run folder emptied of an earlier attempt's outputs, the spec written: (spec, result, log)
    paths."""
    run_dir.mkdir(parents=True, exist_ok=True)
    spec_path, result_path, log_path = (
        run_dir / "spec.json",
        run_dir / "result.json",
        run_dir / "worker.log",
    )
    for old in (
        result_path,
        log_path,  # an earlier attempt's: a standby that never opens it never took the trial
        run_dir / PROGRESS_FILE,
        run_dir / PRUNE_FILE,
        run_dir / "standby.log",
        *run_dir.glob("result.rank*.json"),
        *run_dir.glob("nccl.*.log"),
    ):
        old.unlink(missing_ok=True)
    spec.launched_at = time.time()
    spec.write(spec_path)
    return spec_path, result_path, log_path


def _child_env(spec: TrialSpec, run_dir: Path, env: dict[str, str] | None) -> dict[str, str]:
    """The trial's environment: ours, the caller's, unbuffered output, its parent; NCCL's INFO log
    for a rank group on GPUs (unless NCCL_DEBUG is set)."""
    child_env = {
        **inherited_env(),
        **(env or {}),
        "PYTHONUNBUFFERED": "1",
        "AUTOTUNE_PARENT_PID": str(os.getpid()),
    }
    if spec.run.world_size > 1 and spec.device == "cuda" and "NCCL_DEBUG" not in os.environ:
        child_env.update(nccl_log.DEBUG_ENV, NCCL_DEBUG_FILE=str(run_dir / nccl_log.DEBUG_FILE))
    return child_env


# what the tracking libraries write into os.environ as they log
LIBRARY_PREFIXES = ("MLFLOW_", "WANDB_")


def inherited_env() -> dict[str, str]:
    """autotune's environment less what a library added to it since autotune started
    (launch/environ.py): a tracking library's variables, and any variable holding a credential
    autotune knows (a storage's or a tracking server's password). What the user exported, or set
    before calling the API, the trial gets."""
    from autotune.redact import holds_known

    def acquired(name: str, value: str) -> bool:
        if name in environ.INHERITED:
            return False
        return name.startswith(LIBRARY_PREFIXES) or holds_known(value)

    return {k: v for k, v in os.environ.items() if not acquired(k, v)}
