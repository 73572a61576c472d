"""What else ran on the host while the search measured: the host's load and the other processes on
a trial's GPUs, sampled before and after each trial's process (a confirmation's too) as `autotune
check` samples them around each repeat (check/conditions.py), and judged by check's rule. A trial
measured while disturbed is marked (its record's `host`), never failed: the search goes on, and its
live line, the report's trials and the card say so (study/disturbed.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autotune import hardware
from autotune.check import conditions
from autotune.documents.record import TrialRecord
from autotune.hardware import GpuProcess


@dataclass
class Watch:
    """Samples the host around each measurement. loadavg and processes: check's seams
    (conditions.sample), os.getloadavg and NVML's compute processes by default."""

    device: str
    loadavg: Callable[[], tuple[float, float, float]] = os.getloadavg
    processes: Callable[[int], list[GpuProcess] | None] = field(default=hardware.compute_processes)

    def sample(self, gpus: str | None) -> dict[str, Any]:
        """The conditions now, on the trial's GPUs (`gpus`: "0" or "2,3"; None: the visible one)."""
        return conditions.sample(
            self.device, loadavg=self.loadavg, processes=lambda index: self._on(gpus, index)
        )

    def _on(self, gpus: str | None, index: int) -> list[GpuProcess] | None:
        """The compute processes on each of the trial's GPUs but this one (None: NVML cannot
        say)."""
        indices = [int(g) for g in gpus.split(",") if g.strip().isdigit()] if gpus else [index]
        found: list[GpuProcess] = []
        for i in indices or [index]:
            seen = self.processes(i)
            if seen is None:
                return None
            found += [p for p in seen if p["pid"] != os.getpid()]
        return found

    def around(self, measure_fn: Callable[..., TrialRecord]) -> Callable[..., TrialRecord]:
        """measure_fn with the host sampled before and after each measurement, its record marked
        (`host`). A trial that waited for its device (another autotune measured on it:
        launch/locks.py) is judged after it alone: what ran before it was what it waited for."""

        def measured(*args: Any, **kwargs: Any) -> TrialRecord:
            before = self.sample(kwargs.get("gpus"))
            record = measure_fn(*args, **kwargs)
            after = self.sample(kwargs.get("gpus"))
            judged = [after] if record.device_wait_s else [before, after]
            record.host = {"before": before, "after": after, "disturbed": words(judged)}
            return record

        return measured


def words(samples: list[dict[str, Any]]) -> list[str]:
    """What disturbed a measurement by check's rule (conditions.disturbances), one phrase each,
    worded for a trial: the other processes on its GPUs, the host's load per core before or after
    it past conditions.HOST_LOAD_LIMIT. Empty: nothing did. samples: [before, after], or [after].
    """
    judged = conditions.disturbances(samples)
    if not judged:
        return []
    said = []
    others = {p["pid"]: p for c in samples for p in c.get("gpu_processes") or []}
    if others:
        shown = ", ".join(f"pid {pid} ({p.get('name') or '?'})" for pid, p in others.items())
        said.append(f"other processes on its GPU: {shown}")
    when = ["before it", "after it"][-len(samples) :]
    loads = [c["load_1min"] / c["cpus"] for c in samples]
    load = max(loads)
    at = loads.index(load)  # the first at its worst
    if load > conditions.HOST_LOAD_LIMIT:
        c = samples[at]
        said.append(
            f"host load {load:.2f} per core {when[at]} ({c['load_1min']:g} on {c['cpus']} CPUs; "
            f"limit {conditions.HOST_LOAD_LIMIT:g})"
        )
    return said or judged  # a disturbance check's rule names that these words do not
