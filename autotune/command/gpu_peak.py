"""A command job's peak GPU memory as NVML sees it, sampled while the job runs: the memory of a job
that reports none (command.measure log), and a peak for every command trial that the memory line
(study/peaks.py) can learn from.

NVML lists the processes using each GPU with the memory each holds (the CUDA context and what the
allocator reserved: what runs out). The job's own are those of its process group (the trial starts
it in a group of its own). In a container NVML may list host process ids that no process here has;
then the GPU's used memory less what it held when the job started is the job's.
"""

from __future__ import annotations

import os
import threading
from types import ModuleType
from typing import Any

from autotune.command.report import DoneLine
from autotune.protocol import Knobs

EVERY_S = 0.25  # a step of a 1B model lasts about a second: four looks a step see its peak


class PeakWatch:
    """Samples the job's GPU memory in a thread until stopped; `peak_bytes` is the largest seen."""

    def __init__(self, group: int) -> None:
        self.group = group
        self.peak_bytes: int | None = None
        self.nvml: Any = None
        self.handles: list[Any] = []
        self.before: list[int] = []
        self.done = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> PeakWatch:
        """Begin sampling (nothing, where NVML or a GPU is missing)."""
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in _visible(pynvml)]
            self.before = [int(pynvml.nvmlDeviceGetMemoryInfo(h).used) for h in self.handles]
        except Exception:  # no NVML, no GPU, CUDA_VISIBLE_DEVICES by UUID: no NVML peak
            self.handles = []
        if self.handles:
            self.thread = threading.Thread(target=self._loop, name="gpu-peak", daemon=True)
            self.thread.start()
        return self

    def stop(self) -> int | None:
        """Stop sampling; the peak in bytes (None: never seen)."""
        self.done.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        return self.peak_bytes

    def _loop(self) -> None:
        while not self.done.wait(EVERY_S):
            try:
                used = self.sample()
            except Exception:  # a GPU that went away mid-trial: the peak so far stands
                return
            if used and (self.peak_bytes is None or used > self.peak_bytes):
                self.peak_bytes = used

    def sample(self) -> int:
        """The job's memory on its GPUs now: its processes' where NVML names them, else the GPUs'
        used memory above what they held at the start."""
        procs = [p for h in self.handles for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(h)]
        mine = sum(int(p.usedGpuMemory or 0) for p in procs if _in_group(p.pid, self.group))
        # NVML's ids are this namespace's when one of them is a process here
        local = any(os.path.exists(f"/proc/{p.pid}") for p in procs)
        if mine or procs and local:
            return mine
        now = [int(self.nvml.nvmlDeviceGetMemoryInfo(h).used) for h in self.handles]
        return sum(max(0, a - b) for a, b in zip(now, self.before))


def job_peak(done: DoneLine, nvml_peak: int | None) -> tuple[int | None, str]:
    """The job's peak memory and its kind: what its allocator counted (the callbacks, reporting),
    else what NVML saw its processes hold (command/gpu_peak.py)."""
    if "peak_mem_bytes" in done:
        return done["peak_mem_bytes"], "cuda_max_memory_allocated"
    if nvml_peak:
        return nvml_peak, "nvml_used"
    return None, "not reported by the job"


def tokens_per_micro_batch(steps: list[dict[str, Any]], knobs: Knobs) -> float | None:
    """Tokens of the trial's longest micro-batch, padding included: the largest step's computed
    tokens over the step's micro-batches (grad_accum_steps; the memory line's abscissa)."""
    counts = [s.get("padded", s.get("tokens")) for s in steps]
    largest = max((float(c) for c in counts if c), default=None)
    accum = knobs.get("grad_accum_steps")
    per_step = int(accum) if isinstance(accum, int) and accum > 0 else 1
    return largest / per_step if largest is not None else None


def _in_group(pid: int, group: int) -> bool:
    try:
        return os.getpgid(pid) == group
    except (ProcessLookupError, PermissionError):
        return False


def _visible(pynvml: ModuleType) -> list[int]:
    """The NVML indices of the GPUs the job sees (CUDA_VISIBLE_DEVICES, else all)."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is None:
        return list(range(pynvml.nvmlDeviceGetCount()))
    return [int(x) for x in given.split(",") if x.strip()]


def visible_gpu_name() -> str:
    """The first visible GPU's name from NVML (a job measured from its log reports no device)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        index = int((os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0])
        return str(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index)))
    except Exception:  # no NVML, or CUDA_VISIBLE_DEVICES by UUID: the GPU is still a GPU
        return "NVIDIA GPU (not reported by the job)"
