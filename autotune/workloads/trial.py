"""One trial, in its own process: `python -m autotune.workloads.trial SPEC.json RESULT.json`.

Needs torch only (plus the standard library). Reads the TrialSpec, runs its workload (build, then
the measured steps), and writes the TrialResult; every way the trial can fail becomes a status and a
reason. Under torchrun each rank runs this; rank 0 writes the result, a failing rank its own
(ranks.fail_rank). The parent classifies and summarises.
"""

from __future__ import annotations

import time
from types import ModuleType

_T_ENTER = time.time()  # before importing torch: the start phase ends when torch is ready

import ast  # noqa: E402
import contextlib  # noqa: E402
import importlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, TypedDict  # noqa: E402

from autotune import atomic, nccl_log  # noqa: E402
from autotune.protocol import PROGRESS_FILE, PRUNE_FILE, Knobs, TrialResult, TrialSpec  # noqa: E402
from autotune.status import Status  # noqa: E402
from autotune.workloads.base import Failed, InvalidConfig, Measured, NonFiniteLoss, Workload  # noqa: E402
from autotune.workloads.faults import Fault  # noqa: E402
from autotune.workloads.ranks import Ranks, env_rank, fail_rank  # noqa: E402

# task -> the workload class ("module:Class"), imported only when that task runs.
WORKLOADS = {
    "train": "autotune.workloads.train:Train",
    "generate": "autotune.workloads.generate:Generate",
    "allreduce": "autotune.workloads.allreduce:AllReduce",
    "command": "autotune.command.trial:Command",
}


def workload_class(task: str) -> type[Workload]:
    if task not in WORKLOADS:
        raise InvalidConfig(f"unknown task {task!r}; this trial runs {', '.join(WORKLOADS)}")
    module, _, name = WORKLOADS[task].partition(":")
    return getattr(importlib.import_module(module), name)


class Progress:
    """The search's view of a running one-rank trial (spec.report_progress): the measured steps so
    far go to progress.json beside the result (at most every EVERY_S, outside the timed steps), and
    a `prune` file there asks the trial to stop measuring (Optuna's pruner decided in the parent).
    """

    EVERY_S = 0.5

    def __init__(self, run_dir: Path, tokens_per_step: int | None) -> None:
        self.path, self.prune, self.tokens = (
            run_dir / PROGRESS_FILE,
            run_dir / PRUNE_FILE,
            tokens_per_step,
        )
        self.written, self.last = 0, float("-inf")

    def __call__(self, steps: list[float], tokens_per_step: int | None = None) -> bool:
        """steps: the measured step times so far; tokens_per_step: what each of them stands for,
        where the workload knows it only now (task command: its job's first measured step)."""
        self.tokens = tokens_per_step or self.tokens
        if len(steps) > self.written and time.monotonic() - self.last >= self.EVERY_S:
            atomic.write_text(
                self.path, json.dumps({"step_times_s": steps, "tokens_per_step": self.tokens})
            )
            self.written, self.last = len(steps), time.monotonic()
        return os.path.exists(self.prune)


def run(spec: TrialSpec, run_dir: Path | None = None) -> TrialResult:
    """Build the workload, run its measured steps, and say what was measured. run_dir: where the
    search reads its progress (spec.report_progress)."""
    cls = workload_class(spec.task)
    torch = _import_torch(spec.device) if cls.imports_torch else None
    t_torch = time.time()
    ranks = Ranks.start(torch, spec.device) if torch is not None else None  # None with one rank
    t_ranks = time.time()
    fault = Fault(spec.knobs, ranks.rank if ranks else 0)
    fault.at_start()
    workload = cls(torch, spec, ranks, fault)
    workload.run_dir = run_dir
    workload.build()
    if torch is not None and spec.device == "cuda" and workload.touches_device:
        torch.cuda.synchronize()
    t_built = time.time()
    if spec.report_progress and run_dir is not None and ranks is None:
        workload.progress = Progress(run_dir, workload.work().tokens_per_step)
    measured = workload.run()
    pruned = _pruned(measured, spec)
    result = TrialResult(
        Status.PRUNED if pruned else Status.OK,
        measured.stopped or pruned,
        applied=workload.applied,
        env=_env(torch, spec.device if workload.touches_device else "cpu"),
        losses=measured.losses,
        output=measured.output,
        rank=ranks.rank if ranks else 0,
    )
    # task command: the device the job itself reported
    result.env.update(measured.output.pop("job_env", {}))
    result.phases_s = {
        "start": t_torch - (spec.launched_at or _T_ENTER),
        "build": t_built - t_torch,
    }
    if isinstance(result.applied.get("build_s"), dict):  # the build's parts, the ranks' start first
        result.applied["build_s"] = {
            "ranks": round(t_ranks - t_torch, 3),
            **result.applied["build_s"],
        }
    if measured.timing is not None:
        _record_steps(result, spec, workload, measured, ranks, t_built)
    else:
        result.phases_s["measure"] = time.time() - t_built
    if measured.check_s:
        result.phases_s["check"] = measured.check_s
    if ranks:
        ranks.stop()
    return result


def _pruned(measured: Measured, spec: TrialSpec) -> str:
    """Why the measured steps stopped early (the search's pruner asked), or ""."""
    timing = measured.timing
    if timing is None or not timing.stopped_early:
        return ""
    return (
        f"stopped after {len(timing.step_s)} of {spec.run.measure_steps} measured steps: the "
        "search's pruner found it far below the best measured"
    )


class _RankSteps(TypedDict):
    """What each rank of a trial sends rank 0 (Ranks.gather)."""

    step_times_s: list[float]
    peak_mem_bytes: int | None
    reserved: int | None


def _record_steps(
    result: TrialResult,
    spec: TrialSpec,
    workload: Workload,
    measured: Measured,
    ranks: Ranks | None,
    t_built: float,
) -> None:
    """Step times, memory and phases into the result; with several ranks each step takes its slowest
    rank's time."""
    t = measured.timing
    assert t is not None
    steps, peak, reserved = t.step_s, t.peak_mem_bytes, t.reserved_bytes
    if ranks:  # one trial, one result
        mine: _RankSteps = {"step_times_s": steps, "peak_mem_bytes": peak, "reserved": reserved}
        gathered = ranks.gather(mine)
        steps = [max(per_rank) for per_rank in zip(*(r["step_times_s"] for r in gathered))]
        peak = max(r["peak_mem_bytes"] or 0 for r in gathered) or None
        reserved = max(r["reserved"] or 0 for r in gathered) or None
        result.ranks = [
            {"rank": i, "step_times_s": r["step_times_s"], "peak_mem_bytes": r["peak_mem_bytes"]}
            for i, r in enumerate(gathered)
        ]
    work = workload.work()
    result.step_times_s, result.warmup_step_times_s = steps, t.warmup_s
    result.tokens_per_step, result.n_params, result.flop_params, result.mfu_dims = (
        work.tokens_per_step,
        work.n_params,
        work.flop_params,
        work.mfu_dims,
    )
    result.flops_per_token = work.flops_per_token
    result.peak_mem_bytes, result.peak_mem_kind, result.peak_mem_reserved_bytes = (
        peak,
        t.peak_mem_kind,
        reserved,
    )
    result.measure_window = list(t.window)
    result.phases_s.update(
        {
            "warmup": t.warmup_end - t_built,
            # The first step's excess over a measured step: torch.compile's time when compile is on.
            "compile": max(0.0, t.warmup_s[0] - statistics.median(steps))
            if spec.knobs.get("compile") and t.warmup_s
            else 0.0,
            "measure": t.window[1] - t.window[0],
        }
    )


def _import_torch(device: str) -> ModuleType:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise InvalidConfig("device cuda asked for, but torch sees no CUDA GPU")
    return torch


def _installed_torch() -> dict[str, Any]:
    """torch's and its CUDA's versions as the installed files say, without importing torch (about
    1.7 s of a trial that runs none): torch/version.py is assignments only. {} without torch."""
    spec = importlib.util.find_spec("torch")  # a top-level package's spec imports nothing
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    said: dict[str, Any] = {}
    with contextlib.suppress(OSError, SyntaxError, ValueError):
        for node in ast.parse(path.read_text()).body:
            target, value = _assignment(node)
            if isinstance(target, ast.Name) and value is not None:
                said[target.id] = ast.literal_eval(value)
    return {"torch": said.get("__version__"), "cuda": said.get("cuda")}


def _assignment(node: ast.stmt) -> tuple[ast.expr | None, ast.expr | None]:
    """(target, value) of a one-target assignment, annotated or not; (None, None) otherwise."""
    if isinstance(node, ast.AnnAssign):
        return node.target, node.value
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        return node.targets[0], node.value
    return None, None


def _env(torch: ModuleType | None, device: str) -> dict[str, Any]:
    if torch is None:
        return {**_installed_torch(), "device": device}
    env: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": device}
    if device == "cuda":
        env["device_name"] = torch.cuda.get_device_name(torch.cuda.current_device())
        env["device_memory_bytes"] = torch.cuda.get_device_properties(
            torch.cuda.current_device()
        ).total_memory
        env["cudnn"] = torch.backends.cudnn.version()
        with contextlib.suppress(Exception):
            env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return env


def _is_oom(err: BaseException) -> bool:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(err, torch.OutOfMemoryError):
        return True
    text = str(err).lower()
    return "out of memory" in text or "can't allocate memory" in text


def crash_reason(err: BaseException) -> str:
    """`Type: first line of the message`, for a rank's failure file."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0][:300] if text else ''}"


def classify(err: Exception, ranks: int, knobs: Knobs) -> TrialResult | None:
    """The result an exception means; None: a crash of one process, left to the parent (traceback in
    the log). An invalid configuration names the knob values that cause it (the rule the search
    learns)."""
    if isinstance(err, Failed):
        return TrialResult(err.status, str(err))
    if isinstance(err, InvalidConfig):
        return TrialResult(
            Status.INVALID_CONFIG, str(err), cause={k: knobs.get(k) for k in err.knobs} or None
        )
    if isinstance(err, NonFiniteLoss):
        return TrialResult(Status.NONFINITE_LOSS, str(err))
    if _is_oom(err):
        return TrialResult(Status.OOM, str(err).strip().splitlines()[0][:500])
    if (refusal := nccl_log.refusal_of(err)) is not None:
        return TrialResult(Status.INVALID_CONFIG, refusal, cause=nccl_log.cause(knobs))
    if ranks > 1:  # this rank's own traceback stays in the log; its reason goes to the parent
        import traceback

        traceback.print_exc()
        return TrialResult(Status.CRASH, crash_reason(err))
    return None


def _die_with_parent() -> None:
    """Linux: if the autotune process is killed (even with -9), this trial dies too and frees the
    GPU.

    PR_SET_PDEATHSIG acts only from the call on: a parent killed between this process's start and
    the call has already left it to init, so a process launched by autotune directly
    (AUTOTUNE_PARENT_PID, not a torchrun rank) that finds another parent leaves at once."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    parent = os.environ.get("AUTOTUNE_PARENT_PID")
    if parent and "RANK" not in os.environ and os.getppid() != int(parent):
        os._exit(1)


def standby() -> int:
    """Started ahead of its trial (autotune/launch/prestart.py): import what every trial imports,
    then wait for the trial's files on stdin (one JSON line) and run it; EOF means no trial came.
    The GPU is not touched."""
    import torch  # noqa: F401

    with contextlib.suppress(Exception):  # torch.compile imports these on its first call (seconds)
        importlib.import_module("torch._dynamo")
        importlib.import_module("torch._inductor.compile_fx")
    line = sys.stdin.readline()
    if not line:
        return 0
    job = json.loads(line)
    log = atomic.create(job["log"])
    os.dup2(log, 1)  # from here on this process writes the trial's own log
    os.dup2(log, 2)
    os.close(log)
    return main([job["spec"], job["result"]])


def main(argv: list[str]) -> int:
    _die_with_parent()
    if argv[:1] == ["--standby"]:  # its log path follows, naming it for ps and tests
        return standby()
    spec_path, result_path = argv
    spec = TrialSpec.read(spec_path)
    rank, world = env_rank()
    try:
        result = run(spec, Path(result_path).parent)
    except Exception as err:
        failed = classify(err, world, spec.knobs)
        if failed is None:
            raise  # traceback goes to the log; the parent classifies the exit as a crash
        result = failed
    result.rank = rank
    if world > 1:
        if result.status != Status.OK:
            fail_rank(result_path, result)
        if rank != 0:
            return 0
    result.write(result_path)
    return 0


def exit_now(code: int) -> None:
    """Leave at once once the result is written: Python's teardown (Inductor's compile-worker pool,
    CUDA's context) took seconds a trial on an H200 (benchmarks/results/2026-11-30-h200-cheap), and
    the supervisor ends whatever the trial started anyway."""
    sys.stdout.flush()
    sys.stderr.flush()
    with contextlib.suppress(Exception):  # C libraries' buffered output (NCCL, Triton) too
        import ctypes

        ctypes.CDLL(None).fflush(None)
    os._exit(code)


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
