"""Launch one trial as a subprocess with a hard timeout, and classify how it ended."""

from __future__ import annotations

import json
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

from autotune import metrics
from autotune.hardware import Telemetry, fingerprint, peak_flops, visible_gpu_index
from autotune.workloads.worker import NCCL_REFUSAL_MARKS

if TYPE_CHECKING:
    from autotune.config import ModelConfig

# How a trial can end. Failures never stop the study.
STATUSES = ("ok", "oom", "timeout", "nonfinite_loss", "invalid_config", "crash")

LOG_TAIL_LINES = 15


@dataclass
class Outcome:
    """A finished trial process: its status, the reason when it failed, the worker's raw result."""

    status: str
    reason: str = ""
    raw: dict[str, Any] = field(default_factory=dict)
    telemetry: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0


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


def launch_command(spec: dict[str, Any], spec_path: Path, result_path: Path) -> list[str]:
    """The trial's command: the worker itself, or torchrun starting world_size workers (one a rank)."""
    worker = ["-m", spec.get("module", "autotune.workloads.worker"), str(spec_path), str(result_path)]
    wl = spec["workload"]
    if wl.get("world_size", 1) == 1:
        return [sys.executable, *worker]
    nnodes = wl.get("nnodes") or 1
    run = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(wl["world_size"] // nnodes)]
    if nnodes == 1 and not wl.get("rdzv_endpoint"):
        run += ["--standalone"]
    else:
        run += ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", wl["rdzv_endpoint"],
                "--rdzv-id", f"autotune-{spec_path.parent.parent.parent.name}-{spec_path.parent.name}"]
    return [*(wl.get("launcher") or []), *run, *worker]


def rank_failure(run_dir: Path) -> dict[str, Any] | None:
    """The first rank's own failure (earliest written), or None: later ranks usually fail because it did."""
    found = []
    for path in run_dir.glob("result.rank*.json"):
        try:
            doc = json.loads(path.read_text())
            found.append((doc.get("at_ns") or path.stat().st_mtime_ns, doc))
        except (OSError, ValueError):
            pass
    return min(found, key=lambda f: f[0])[1] if found else None


_ALGOS = {"0": "TREE", "1": "RING", "2": "COLLNET_DIRECT", "3": "COLLNET_CHAIN", "4": "NVLS", "5": "NVLS_TREE", "6": "PAT"}
_PROTOS = {"0": "LL", "1": "LL128", "2": "SIMPLE"}


def _is_refusal(warning: str) -> bool:
    """An NCCL warning that says it cannot honour NCCL_ALGO / NCCL_PROTO (a setting, not a fault)."""
    return any(mark in warning for mark in NCCL_REFUSAL_MARKS)


def omp_env(processes: int) -> dict[str, str]:
    """OMP_NUM_THREADS for `processes` trial processes or ranks side by side, unless the user set it: they
    share the host's cores, and oversubscribed intra-op threads spin and slow everything down (by 100x seen
    on 2 cores), so each gets its share, as torchrun does."""
    if processes <= 1 or "OMP_NUM_THREADS" in os.environ:
        return {}
    return {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // processes))}


def nccl_report(run_dir: Path) -> dict[str, Any] | None:
    """What NCCL says it did (its NCCL_DEBUG=INFO files of the ranks): the algorithm/protocol chosen per
    collective, counted, and its warnings. None when no NCCL log was written (gloo, one rank)."""
    files = sorted(run_dir.glob("nccl.*.log"))
    if not files:
        return None
    used: dict[str, int] = {}
    warnings: list[str] = []
    version = None
    for path in files:
        for line in path.read_text(errors="replace").splitlines():
            m = re.search(r"(?:(\w+): )?\d+ Bytes -> Algo (\S+) proto (\S+)", line) or \
                re.search(r"()algorithm, (\w+), protocol, (\w+)", line)
            if m:  # counted per collective: AllReduce of the gradients apart from start-up Broadcasts
                key = f"{m[1] or 'collective'} {_ALGOS.get(m[2], m[2]).upper()}/{_PROTOS.get(m[3], m[3]).upper()}"
                used[key] = used.get(key, 0) + 1
            elif " NCCL WARN " in line and len(warnings) < 5:
                text = line.split(" NCCL WARN ", 1)[1].strip()
                if text not in warnings:
                    warnings.append(text)
            elif version is None and (v := re.search(r"NCCL version (\S+)", line)):
                version = v[1]
    return {"algo_proto_used": used or "not reported by NCCL (no tuning lines in its INFO log)",
            "warnings": warnings, "version": version, "logs": len(files)}


def nccl_used(report: dict[str, Any] | None) -> str | None:
    """What NCCL reported for the all-reduces, most frequent first, e.g. 'RING/SIMPLE' (None: nothing reported)."""
    used = (report or {}).get("algo_proto_used")
    if not isinstance(used, dict) or not used:
        return None
    reduces = {k: v for k, v in used.items() if k.startswith("AllReduce ")} or used
    return ", ".join(k.split(" ", 1)[-1] for k, _ in sorted(reduces.items(), key=lambda kv: -kv[1]))


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-LOG_TAIL_LINES:])


def run_trial(
    spec: dict[str, Any],
    run_dir: Path,
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    on_poll: Callable[[], None] | None = None,
    gpu_index: int | None = None,
    stop: threading.Event | None = None,
) -> Outcome:
    """Run the worker on `spec` in a fresh process (own process group) and wait for it.

    KeyboardInterrupt, or `stop` being set (Ctrl-C seen by another thread), ends the process group and
    raises KeyboardInterrupt. gpu_index: the NVML index of the trial's GPU, for telemetry.
    """
    run_dir = run_dir.resolve()  # absolute: the straggler sweep matches this trial's spec path only
    run_dir.mkdir(parents=True, exist_ok=True)
    spec_path, result_path, log_path = run_dir / "spec.json", run_dir / "result.json", run_dir / "worker.log"
    result_path.unlink(missing_ok=True)
    spec = {**spec, "launched_at": time.time()}
    spec_path.write_text(json.dumps(spec, indent=1))
    for old in run_dir.glob("result.rank*.json"):
        old.unlink()
    for old in run_dir.glob("nccl.*.log"):
        old.unlink()
    child_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    distributed = spec["workload"].get("world_size", 1) > 1
    if distributed and spec.get("device") == "cuda" and "NCCL_DEBUG" not in os.environ:
        # NCCL's own account of the algorithm and protocol it used (it may ignore NCCL_ALGO silently).
        child_env.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,ENV,TUNING",
                         NCCL_DEBUG_FILE=str(run_dir / "nccl.%h.%p.log"))
    cmd = launch_command(spec, spec_path, result_path)
    t0 = time.monotonic()
    index = visible_gpu_index() if gpu_index is None else gpu_index
    telemetry = Telemetry(index) if spec.get("device") == "cuda" else None
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env, start_new_session=True)
        try:
            if telemetry:
                telemetry.__enter__()
            timed_out = False
            while proc.poll() is None:
                if time.monotonic() - t0 > timeout_s:
                    timed_out = True
                    _kill_group(proc)
                    break
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
            if proc.poll() is None:  # the worker has left; reap stragglers of its group (compile workers)
                _kill_group(proc)
            else:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if distributed:
                _kill_stragglers(str(spec_path))
    wall = time.monotonic() - t0
    samples = telemetry.samples if telemetry else []
    report = nccl_report(run_dir) if distributed else None
    failed = rank_failure(run_dir) if distributed else None  # a rank's own reason, when one failed
    if timed_out:
        reason = f"no result after {timeout_s:.0f} s (trial timeout); process group killed"
        if failed is not None:  # a rank had failed, and the others then waited for it until the timeout
            reason += f"; before that {failed.get('reason', '')}"
        if report and report["warnings"]:
            reason += "; NCCL warned: " + "; ".join(report["warnings"][:2])
        return Outcome("timeout", reason, wall_s=wall, telemetry=samples)
    if result_path.is_file():
        raw = json.loads(result_path.read_text())
        if report is not None:
            raw["nccl"] = report
        return Outcome(raw["status"], raw.get("reason", ""), raw, samples, wall)
    if failed is not None:  # one rank's own reason; torchrun ended the others
        reason = failed.get("reason", "")
        failed["nccl"] = report
        if report and failed["status"] == "invalid_config":  # NCCL's warnings the rank's message does not repeat
            flat = " ".join(reason.split())
            extra = [w for w in report["warnings"] if " ".join(w.split())[:120] not in flat]
            if extra:
                reason += " | NCCL: " + "; ".join(extra[:2])
        return Outcome(failed["status"], reason, failed, samples, wall)
    refused = [w for w in (report or {}).get("warnings", []) if _is_refusal(w)]
    if refused:  # NCCL aborted the ranks (its watchdog) before Python saw an error: its log says why
        return Outcome("invalid_config", "NCCL refused this setting: " + refused[0], {"nccl": report}, samples, wall)
    code = proc.returncode
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    return Outcome("crash", f"trial process ended without a result ({how}): {_tail(log_path)}", wall_s=wall, telemetry=samples)


def model_spec(model: ModelConfig) -> dict[str, Any]:
    """The model section as the trial worker reads it (derived sizes filled in)."""
    m = model.model_dump()
    m.update(kv_heads=model.kv_heads, ffn_hidden=model.ffn)
    return m


def trial_spec(model: dict[str, Any], workload: dict[str, Any], knobs: dict[str, Any], device: str,
               base_dir: str | None = None) -> dict[str, Any]:
    """The plain-JSON input of the trial worker (base_dir: where an entrypoint module is found)."""
    keys = ("warmup_steps", "measure_steps", "seed", "world_size", "nnodes", "rdzv_endpoint", "launcher")
    return {"knobs": knobs, "model": model, "device": device, "workload": {k: workload.get(k) for k in keys},
            "base_dir": base_dir}


def record_of(number: int, knobs: dict[str, Any], outcome: Outcome, model: dict[str, Any], world_size: int) -> dict[str, Any]:
    """The trial's stored record (Optuna user attributes): status, metrics, raw samples, phases, telemetry."""
    record: dict[str, Any] = {"number": number, "knobs": knobs, "status": outcome.status, "reason": outcome.reason,
                              "predicted": False, "wall_s": outcome.wall_s}
    raw = outcome.raw
    if outcome.status == "ok":
        env = raw["env"]
        record["metrics"] = metrics.summarize(raw, model, world_size, peak_flops(env.get("device_name")))
        record["raw"] = {k: raw[k] for k in ("step_times_s", "warmup_step_times_s", "losses")}
        record["phases_s"] = raw["phases_s"]
        record["applied"] = raw.get("applied")
        record["fingerprint"] = fingerprint(env, world_size)
        tele = metrics.summarize_telemetry(outcome.telemetry, tuple(raw["measure_window"]))
        record["telemetry"] = tele
        if raw.get("ranks"):
            record["ranks"] = raw["ranks"]
    if outcome.raw.get("nccl") is not None:
        record["nccl"] = outcome.raw["nccl"]
    if outcome.status != "ok" and outcome.raw.get("rank") is not None:
        record["failed_rank"] = outcome.raw["rank"]
    return record


