"""The GPU side: peak-FLOPs table (with datasheet sources), pynvml detection, telemetry,
fingerprint."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, NewType, TypedDict


@dataclass(frozen=True)
class GpuPeak:
    """Dense (no sparsity) peak tensor rates of one GPU model, in TFLOP/s, per precision."""

    model: str
    pattern: str  # regex matched against the NVML / torch device name
    tflops: dict[str, float]
    source: str


# Datasheets quote tensor rates "with sparsity"; the dense rates below are those halved.
# MFU is always taken against the dense BF16 rate, for every precision, so trials compare on one
# scale.
PEAKS: tuple[GpuPeak, ...] = (
    GpuPeak(
        "H200 NVL",
        r"H200 NVL",
        {"fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5},
        "https://www.nvidia.com/en-us/data-center/h200/ (H200 NVL column)",
    ),
    GpuPeak(
        "H200 SXM",
        r"H200",
        {"fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979},
        "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM column)",
    ),
    GpuPeak(
        "H100 NVL",
        r"H100 NVL",
        {"fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5},
        "https://www.nvidia.com/en-us/data-center/h100/ (H100 NVL column)",
    ),
    GpuPeak(
        "H100 PCIe",
        r"H100 PCIe",
        {"fp32": 51, "tf32": 378, "bf16": 756.5, "fp16": 756.5, "fp8": 1513},
        "https://www.nvidia.com/en-us/data-center/h100/ (H100 PCIe column)",
    ),
    GpuPeak(
        "H100 SXM",
        r"H100",
        {"fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979},
        "https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM column)",
    ),
    GpuPeak(
        "A100",
        r"A100",
        {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312},
        "https://www.nvidia.com/en-us/data-center/a100/ (SXM and PCIe share these dense rates)",
    ),
    GpuPeak(
        "L40S",
        r"L40S",
        {"fp32": 91.6, "tf32": 183, "bf16": 362.05, "fp16": 362.05, "fp8": 733},
        "https://www.nvidia.com/en-us/data-center/l40s/",
    ),
    GpuPeak(
        "B200",
        r"B200",
        {"tf32": 1125, "bf16": 2250, "fp16": 2250, "fp8": 4500},
        "https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200, per GPU = 8-GPU figure / 8)",
    ),
)

# The precision every stored MFU figure is against (record.Metric.MFU). A figure read against one
# peak must say which: a trial whose linears run in fp8 is shown against the fp8 peak too
# (MATMUL_PEAK), never against the bf16 peak alone (issue 49).
MFU_PRECISION = "bf16"
# precision knob value -> the peak its matmuls run at, where that is not MFU_PRECISION's: fp8
# trains the linears in float8 (the head stays in bf16, so the fp8 figure is a lower bound)
MATMUL_PEAK = {"fp8": "fp8"}

# Peak HBM (or GDDR) bandwidth in GB/s, for the decode roofline of generate trials: (pattern, GB/s,
# source). More specific patterns first (the A100 40GB parts before the 80GB row).
HBM: tuple[tuple[str, float, str], ...] = (
    (r"H200", 4800, "https://www.nvidia.com/en-us/data-center/h200/ (4.8 TB/s, SXM and NVL)"),
    (r"H100 NVL", 3900, "https://www.nvidia.com/en-us/data-center/h100/ (H100 NVL: 3.9 TB/s)"),
    (r"H100 PCIe", 2000, "https://www.nvidia.com/en-us/data-center/h100/ (H100 PCIe: 2 TB/s)"),
    (r"H100", 3350, "https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM: 3.35 TB/s)"),
    (r"A100.*40GB", 1555, "https://www.nvidia.com/en-us/data-center/a100/ (A100 40GB: 1,555 GB/s)"),
    (
        r"A100.*PCIE.*80GB",
        1935,
        "https://www.nvidia.com/en-us/data-center/a100/ (A100 80GB PCIe: 1,935 GB/s)",
    ),
    (r"A100", 2039, "https://www.nvidia.com/en-us/data-center/a100/ (A100 80GB SXM: 2,039 GB/s)"),
    (r"L40S", 864, "https://www.nvidia.com/en-us/data-center/l40s/ (864 GB/s GDDR6)"),
    (r"B200", 8000, "https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200: 8 TB/s per GPU)"),
)


def hbm_bandwidth(device_name: str | None) -> float | None:
    """Peak memory bandwidth in bytes/s of a GPU (datasheet, table above), or None (CPU, unlisted
    GPU)."""
    if not device_name:
        return None
    row = next((r for r in HBM if re.search(r[0], device_name, re.I)), None)
    return row[1] * 1e9 if row else None


def find_peak(device_name: str | None) -> GpuPeak | None:
    """The table row for a device name, or None (CPU, unlisted GPU: MFU is then n/a)."""
    if not device_name:
        return None
    return next((p for p in PEAKS if re.search(p.pattern, device_name)), None)


def peak_flops(device_name: str | None, precision: str = MFU_PRECISION) -> float | None:
    """A GPU's dense peak in FLOP/s at `precision` (default MFU_PRECISION's, the one every stored
    MFU divides by), or None: a CPU, an unlisted GPU, a precision its row does not list."""
    row = find_peak(device_name)
    tflops = row.tflops.get(precision) if row else None
    return tflops * 1e12 if tflops else None


# pynvml's device handle (a ctypes pointer, c_nvmlDevice_t): opaque, only handed back to NVML
NvmlHandle = NewType("NvmlHandle", object)


def _nvml() -> ModuleType | None:
    """Initialised pynvml module, or None where there is no NVIDIA driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        module: ModuleType = pynvml  # untyped (no stubs): read as a module
        return module
    except Exception:
        return None


def _str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def detect() -> dict[str, Any]:
    """Visible GPUs and driver versions from pynvml (no torch import); empty lists where there are
    none."""
    nv = _nvml()
    info: dict[str, Any] = {"gpus": [], "driver": None, "cuda_driver": None}
    if nv is None:
        return info
    with contextlib.suppress(Exception):
        info["driver"] = _str(nv.nvmlSystemGetDriverVersion())
        v = nv.nvmlSystemGetCudaDriverVersion_v2()
        info["cuda_driver"] = f"{v // 1000}.{v % 1000 // 10}"
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            info["gpus"].append(
                {
                    "index": i,
                    "name": _str(nv.nvmlDeviceGetName(h)),
                    "memory_gib": nv.nvmlDeviceGetMemoryInfo(h).total / 2**30,
                }
            )
    return info


def default_device() -> str:
    """cuda when pynvml sees a GPU, else cpu."""
    return "cuda" if detect()["gpus"] else "cpu"


def fingerprint(child_env: dict[str, Any], world_size: int) -> dict[str, Any]:
    """Where a number was measured: the trial's torch/CUDA/NCCL plus driver, GPU and host from
    pynvml."""
    hw = detect()
    device = child_env.get("device", "cpu")
    gpu = child_env.get("device_name") if device == "cuda" else None
    return {
        "device": device,
        "gpu_model": gpu
        or (platform.processor() or platform.machine() if device == "cpu" else None),
        "gpu_count": world_size if device == "cuda" else 0,
        "gpu_memory_gib": _memory_gib(child_env, hw) if device == "cuda" else None,
        "driver": hw["driver"],
        "cuda": child_env.get("cuda"),
        "cudnn": child_env.get("cudnn"),
        "torch": child_env.get("torch"),
        "nccl": child_env.get("nccl"),
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
    }


def _memory_gib(child_env: dict[str, Any], hw: dict[str, Any]) -> float | None:
    """The GPU's memory as the trial's torch saw it, else (a command trial never imports torch) the
    smallest visible GPU's total from NVML: what the measured-memory line compares with."""
    if child_env.get("device_memory_bytes"):
        return round(float(child_env["device_memory_bytes"]) / 2**30, 2)
    sizes = [g["memory_gib"] for g in hw.get("gpus") or []]
    return round(min(sizes), 2) if sizes else None


_THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


class Telemetry:
    """Samples power, SM clock, temperature and throttle reasons of one GPU in a thread (pynvml)."""

    def __init__(self, index: int = 0, interval_s: float = 0.2) -> None:
        self.samples: list[dict[str, Any]] = []
        self._nv = _nvml()
        self._index, self._interval = index, interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Telemetry:
        if self._nv is not None:
            try:
                self._handle = self._nv.nvmlDeviceGetHandleByIndex(self._index)
            except Exception:
                self._nv = None
            else:
                self._thread = threading.Thread(target=self._loop, daemon=True)
                self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def _loop(self) -> None:
        nv, h = self._nv, self._handle
        assert nv is not None  # __enter__ starts the thread only with NVML
        reasons_fn = (
            getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                bits = reasons_fn(h)
                self.samples.append(
                    {
                        "t": time.time(),
                        "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
                        "sm_clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                        "temperature_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
                        "throttle": [name for bit, name in _THROTTLE_BITS.items() if bits & bit],
                        "energy_mj": _energy_mj(nv, h),
                        "power_limit_w": _power_limit_w(nv, h),
                    }
                )
            self._stop.wait(self._interval)


def _energy_mj(nv: ModuleType, handle: NvmlHandle) -> int | None:
    """NVML's total energy counter of the GPU in millijoules since the driver loaded (Volta and
    newer), or None."""
    try:
        return int(nv.nvmlDeviceGetTotalEnergyConsumption(handle))
    except Exception:
        return None


def _power_limit_w(nv: ModuleType, handle: NvmlHandle) -> float | None:
    """The power limit NVML enforces on the GPU now, in watts (the lowest of the board's, the
    administrator's and the driver's limits: nvmlDeviceGetEnforcedPowerLimit), or None."""
    try:
        return float(nv.nvmlDeviceGetEnforcedPowerLimit(handle)) / 1000.0
    except Exception:
        return None


def device_units(device: str, gpus: str | None, ranks: int) -> list[str]:
    """The device units a trial occupies, named for locks.DeviceLock: its GPUs by NVML UUID (the
    index when NVML cannot tell), or on the CPU its slot (the --gpus entry; 0 without --gpus)."""
    if device != "cuda":
        return [f"cpu-{gpus or 0}"]
    if gpus is not None:
        indices: list[int | str] = [int(g) for g in gpus.split(",")]
    # the GPUs this process sees: CUDA_VISIBLE_DEVICES may name them by index, UUID (GPU-...) or
    # MIG-...
    else:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        listed = [v.strip() for v in visible.split(",") if v.strip()] if visible else []
        indices = [int(v) if v.isascii() and v.isdigit() else v for v in listed][:ranks] or list(
            range(ranks)
        )
    nv = _nvml()
    units = []
    for i in indices:
        if isinstance(i, str):  # already a unique name
            units.append(i if i.upper().startswith(("GPU-", "MIG-")) else f"gpu-{i}")
            continue
        if nv is None:
            units.append(f"gpu-{i}")
            continue
        try:
            # GPU-..., as CUDA names it
            units.append(_str(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i))))
        except Exception:
            units.append(f"gpu-{i}")
    return units


def visible_gpu_index() -> int:
    """NVML index of the GPU a trial's cuda:0 is (first entry of CUDA_VISIBLE_DEVICES when it is a
    number)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def software_versions(autotune_version: str) -> str:
    """autotune (its version as the package says it: autotune.__version__), Python, torch, CUDA,
    NCCL and host, in one line (imports torch: only `autotune hw` asks)."""
    import torch

    nccl = "n/a"
    if torch.cuda.is_available():
        nccl = ".".join(map(str, torch.cuda.nccl.version()))  # type: ignore[no-untyped-call]
    return (
        f"autotune {autotune_version}, python {platform.python_version()}, torch "
        f"{torch.__version__}, "
        f"CUDA {torch.version.cuda}, NCCL {nccl}, host {platform.node()}"
    )


class GpuProcess(TypedDict):
    """A process NVML sees computing on a GPU (compute_processes)."""

    pid: int
    name: str  # its command name ('?' where /proc does not say)
    used_mib: int | None  # GPU memory it holds (None: NVML cannot say)


def compute_processes(index: int) -> list[GpuProcess] | None:
    """The processes NVML sees computing on GPU `index` (pid, name, MiB used); None where NVML
    cannot say (no NVIDIA driver, no such GPU, a driver that does not list processes)."""
    nv = _nvml()
    if nv is None:
        return None
    try:
        running = nv.nvmlDeviceGetComputeRunningProcesses(nv.nvmlDeviceGetHandleByIndex(index))
    except Exception:
        return None
    return [
        {"pid": p.pid, "name": _process_name(p.pid), "used_mib": _mib(p.usedGpuMemory)}
        for p in running
    ]


def _process_name(pid: int) -> str:
    """A process's command name from /proc ('?' where it is another namespace's or gone)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _mib(used: object) -> int | None:
    """NVML's bytes as MiB (None: not available, as under some virtualisation)."""
    return used // 2**20 if isinstance(used, int) else None
