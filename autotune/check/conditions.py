"""What else ran while `autotune check` measured: the host's load and the other processes on the
GPU, sampled beside each repeat, how long each repeat's processes waited for a CPU (CpuWatch), and
the rule that calls a check disturbed (it then ends "unreliable", exit 3, whatever its numbers
read)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from autotune import hardware
from autotune.hardware import GpuProcess

# Past 2 runnable threads per CPU core (the 1-minute load average over os.cpu_count()) others took
# the machine: a CPU trial's own threads account for about 1 per core, a GPU trial's for far
# less.
HOST_LOAD_LIMIT = 2.0
# A repeat whose busiest process waited for a CPU (runnable, on a run queue: the kernel's schedstat)
# more than this share of the time it was ready to run got under 80% of the cycles it asked for: a
# CPU-bound job is slowed by about that share, past the tolerance a quiet machine's spread gives.
# A load average cannot see it: it is a 1-minute mean sampled between repeats, and a hog that
# halved a CPU job's speed on 2 cores read 1.1 per core. Read on this 2-core machine (2026-12-07):
# a busy loop beside the other users' tests waited 13-31%, beside 3 more busy loops 73%.
CPU_WAIT_LIMIT_PCT = 20.0
# ... judged only where that process was on a CPU or waiting for one this long: less is a reading
# or two (WATCH_S), too few to tell a share from. A job that sleeps through its steps is judged on
# what it ran: beside other work its wake-ups wait too (a job of 30 ms sleeps read 2.6% slower on
# this machine when its processes waited 63-67% of 0.3 s)
CPU_MIN_READY_S = 0.2
WATCH_S = 0.2  # how often CpuWatch reads the repeat's threads
PROC = Path("/proc")


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


def disturbances(
    conditions: list[dict[str, Any]],
    max_load: float = HOST_LOAD_LIMIT,
    cpu: Sequence[dict[str, Any] | None] = (),
    max_wait_pct: float = CPU_WAIT_LIMIT_PCT,
    ended: bool = True,
) -> list[str]:
    """What disturbed the measurement, one phrase each (empty: nothing did): other processes on the
    GPU beside any repeat, the host's load per core past max_load, a repeat whose processes waited
    for a CPU past max_wait_pct of their time (cpu: CpuWatch.account of each repeat, None where
    unread). max_load 0 or less: the host is not judged (neither its load nor the waits).
    conditions[i] was sampled before repeat i + 1, the last one after the last repeat (ended
    False: before the next repeat, not yet started)."""
    found = []
    others = {p["pid"]: p for c in conditions for p in c.get("gpu_processes") or []}
    if others:
        found.append(
            "other processes on the GPU: " + ", ".join(_process(p) for p in others.values())
        )
    if max_load <= 0:
        return found
    loads = [(c["load_1min"] / c["cpus"], i) for i, c in enumerate(conditions)]
    worst, at = max(loads, default=(0.0, 0))
    if worst > max_load:
        last = ended and at == len(conditions) - 1
        when = "after the last repeat" if last else f"before repeat {at + 1}"
        found.append(
            f"host load {worst:.2f} per core {when} ({conditions[at]['load_1min']:g} on "
            f"{conditions[at]['cpus']} CPUs; limit {max_load:g}, --max-load)"
        )
    return found + _starved(cpu, max_wait_pct)


def _starved(cpu: Sequence[dict[str, Any] | None], max_wait_pct: float) -> list[str]:
    """The repeats whose processes waited for a CPU past max_wait_pct, the worst one named."""
    waited = [a for a in cpu if a is not None and a["wait_pct"] > max_wait_pct]
    if not waited:
        return []
    a = max(waited, key=lambda a: a["wait_pct"])
    more = len(waited) - 1
    return [
        f"repeat {a['repeat'] + 1}'s processes waited for a CPU {a['wait_pct']:.0f}% of the time "
        f"they were ready to run ({a['cpu_s']:.1f} s on a CPU, {a['wait_s']:.1f} s waiting; limit "
        f"{max_wait_pct:g}%): other work took the cores"
        + (f" (and {more} other repeat{'s' if more > 1 else ''})" if more else "")
    ]


def _process(p: GpuProcess) -> str:
    used = f", {p['used_mib']:,} MiB" if p.get("used_mib") is not None else ""
    return f"pid {p['pid']} ({p.get('name') or '?'}{used})"


class CpuWatch:
    """How long one repeat's processes ran and waited for a CPU: while the repeat runs, a thread
    reads every WATCH_S the kernel's schedstat of each thread (/proc/PID/task/TID/schedstat: the
    nanoseconds on a CPU, then those runnable on a run queue) of the processes whose command line
    names `needle` (the repeat's spec file: its supervisor and trial) and every process below them.
    The last reading of a thread stands for it: one that ended between two readings loses at most
    WATCH_S. Where /proc or schedstat cannot be read (not Linux, a kernel without it) nothing is
    read and account() is None: not judged."""

    def __init__(self, needle: str, repeat: int, every_s: float = WATCH_S) -> None:
        self.needle, self.repeat, self.every_s = needle, repeat, every_s
        self.seen: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, tid): (run, wait) ns
        self._roots: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="cpu-watch", daemon=True)

    def __enter__(self) -> CpuWatch:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self._read()
            except OSError:  # /proc unreadable: nothing judged
                return

    def _read(self) -> None:
        parents = _parents()
        if not self._roots & parents.keys():
            self._roots = {pid for pid in parents if self.needle in _cmdline(pid)}
        for pid in _below(self._roots, parents):
            try:
                task = PROC / str(pid) / "task"
                for tid in os.listdir(task):
                    run, wait = (task / tid / "schedstat").read_text().split()[:2]
                    self.seen[(pid, int(tid))] = (int(run), int(wait))
            except (OSError, ValueError):  # ended between two reads
                continue

    def account(self) -> dict[str, Any] | None:
        """The busiest process's (the one longest on a CPU or waiting for one: the job where it
        does the work, not its supervisor or a compile worker): seconds on a CPU, seconds waiting,
        the share waiting (of both), the processes read; None when nothing was read or it was
        ready for under CPU_MIN_READY_S."""
        per: dict[int, list[int]] = {}
        for (pid, _), (run, wait) in self.seen.items():
            totals = per.setdefault(pid, [0, 0])
            totals[0], totals[1] = totals[0] + run, totals[1] + wait
        if not per:
            return None
        pid, (run, wait) = max(per.items(), key=lambda kv: sum(kv[1]))
        if (run + wait) / 1e9 < CPU_MIN_READY_S:
            return None
        return {
            "repeat": self.repeat,
            "pid": pid,
            "cpu_s": round(run / 1e9, 3),
            "wait_s": round(wait / 1e9, 3),
            "wait_pct": round(100 * wait / (run + wait), 1),
            "processes": len(per),
        }


def _parents() -> dict[int, int]:
    """Every process's parent, from /proc/PID/stat (OSError: no /proc)."""
    parents = {}
    for entry in filter(str.isdigit, os.listdir(PROC)):
        try:
            stat = (PROC / entry / "stat").read_text()
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])  # after the (command)
        except (OSError, ValueError, IndexError):
            continue
    return parents


def _cmdline(pid: int) -> str:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def _below(roots: set[int], parents: dict[int, int]) -> set[int]:
    """roots that still run, and every process below them."""
    found = roots & parents.keys()
    frontier = found
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found
