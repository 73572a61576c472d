"""What else ran while `autotune check` measured: the host's load and the other processes on the
GPU, sampled beside each repeat, and the rule that calls a check disturbed (it then ends
"unreliable", exit 3, whatever its numbers read)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from autotune import hardware
from autotune.hardware import GpuProcess

# Past 2 runnable threads per CPU core (the 1-minute load average over os.cpu_count()) others took
# the machine: a CPU trial's own torch threads account for about 1 per core, a GPU trial's for far
# less.
HOST_LOAD_LIMIT = 2.0


def sample(
    device: str,
    *,
    loadavg: Callable[[], tuple[float, float, float]] = os.getloadavg,
    processes: Callable[[int], list[GpuProcess] | None] = hardware.compute_processes,
) -> dict[str, Any]:
    """The conditions now: the 1-minute load average, the CPU count and (cuda) the compute processes
    on the GPU a trial uses (None: no GPU or NVML cannot say). Taken between repeats, when none
    of ours runs."""
    return {
        "load_1min": round(loadavg()[0], 2),
        "cpus": os.cpu_count() or 1,
        "gpu_processes": processes(hardware.visible_gpu_index()) if device == "cuda" else None,
    }


def disturbances(conditions: list[dict[str, Any]], max_load: float = HOST_LOAD_LIMIT) -> list[str]:
    """What disturbed the measurement, one phrase each (empty: nothing did): other processes on the
    GPU beside any repeat, the host's load per core past max_load (0 or less: load not judged).
    conditions[i] was sampled before repeat i + 1, the last one after the last repeat."""
    found = []
    others = {p["pid"]: p for c in conditions for p in c.get("gpu_processes") or []}
    if others:
        found.append(
            "other processes on the GPU: " + ", ".join(_process(p) for p in others.values())
        )
    loads = [(c["load_1min"] / c["cpus"], i) for i, c in enumerate(conditions)]
    worst, at = max(loads, default=(0.0, 0))
    if max_load > 0 and worst > max_load:
        when = f"before repeat {at + 1}" if at < len(conditions) - 1 else "after the last repeat"
        found.append(
            f"host load {worst:.2f} per core {when} ({conditions[at]['load_1min']:g} on "
            f"{conditions[at]['cpus']} CPUs; limit {max_load:g}, --max-load)"
        )
    return found


def _process(p: GpuProcess) -> str:
    used = f", {p['used_mib']:,} MiB" if p.get("used_mib") is not None else ""
    return f"pid {p['pid']} ({p.get('name') or '?'}{used})"
