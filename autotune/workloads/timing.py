"""The one function that times a workload's steps in a trial: warm-up apart, then CUDA events per
step.

As nanoGPT's bench.py (burn-in, then measure, synchronise around the timed loop) and triton's
do_bench (an event pair per repetition, the raw samples kept): the samples are the device's time of
each step, between its events. No host synchronisation inside the timed loop on the GPU, except when
the search watches the progress (to prune): then the host waits for step i - AHEAD before it
launches step i, which keeps a step queued on the device (it never idles for the host) and lets the
steps be seen as they finish. On the CPU, time.perf_counter around each step.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

AHEAD = 2  # steps the host may launch in front of the device while the search watches the progress


@dataclass
class Timing:
    """Raw samples of one timed run: warm-up step wall times, measured step times, their outputs,
    memory."""

    warmup_s: list[float]
    warmup_end: float  # wall clock when the warm-up ended (before the ranks' barrier)
    step_s: list[float]
    outputs: list[Any]
    # wall clock (time.time) around the measured steps: NVML telemetry is cut to it
    window: tuple[float, float]
    peak_mem_bytes: int | None  # None: unknown (task command: no peak reported, no NVML)
    peak_mem_kind: str  # cuda_max_memory_allocated or cpu_max_rss
    reserved_bytes: int | None
    # `progress` asked to stop before all measured steps ran (the search pruned it)
    stopped_early: bool = False


def time_steps(
    torch: ModuleType,
    step: Callable[[], Any],
    *,
    warmup: int,
    measure: int,
    device: str,
    after_warmup_step: Callable[[Any], None] | None = None,
    before_window: Callable[[], None] | None = None,
    before_each: Callable[[], None] | None = None,
    progress: Callable[[list[float]], bool] | None = None,
) -> Timing:
    """Run `warmup` untimed steps (each synchronised, its wall time kept: the first carries
    torch.compile), then `measure` timed steps. after_warmup_step: called with each warm-up step's
    output (a check that may raise: a broken configuration fails before it is measured);
    before_window: untimed, once before the measured steps (a barrier of the ranks); before_each:
    untimed, before every measured step; progress:
    called after each step is launched with the times of the steps the device has finished (read
    from their events without waiting for them); True stops the measurement there."""
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    warmup_s = _warm_up(step, warmup, sync, after_warmup_step)
    warmup_end = time.time()
    if before_window:
        before_window()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start_wall = time.time()
    if cuda:
        outputs, step_s, stopped = _measure_cuda(torch, step, measure, before_each, progress)
        peak, kind, reserved = (
            torch.cuda.max_memory_allocated(),
            "cuda_max_memory_allocated",
            torch.cuda.max_memory_reserved(),
        )
    else:
        outputs, step_s, stopped = _measure_host(step, measure, before_each, progress)
        peak, kind, reserved = (
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "cpu_max_rss",
            None,
        )
    return Timing(
        warmup_s,
        warmup_end,
        step_s,
        outputs,
        (start_wall, time.time()),
        peak,
        kind,
        reserved,
        stopped,
    )


def _warm_up(
    step: Callable[[], Any],
    warmup: int,
    sync: Callable[[], Any],
    after_warmup_step: Callable[[Any], None] | None,
) -> list[float]:
    """The untimed steps, each synchronised; their wall times (the first carries torch.compile)."""
    warmup_s = []
    for _ in range(warmup):
        t0 = time.perf_counter()
        out = step()
        sync()
        warmup_s.append(time.perf_counter() - t0)
        if after_warmup_step:
            after_warmup_step(out)
    sync()
    return warmup_s


def _measure_cuda(
    torch: ModuleType,
    step: Callable[[], Any],
    measure: int,
    before_each: Callable[[], None] | None,
    progress: Callable[[list[float]], bool] | None,
) -> tuple[list[Any], list[float], bool]:
    """The timed steps on the GPU, a pair of CUDA events around each: (outputs, seconds a step,
    stopped)."""
    outputs: list[Any] = []
    step_s: list[float] = []
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(measure)
    ]
    launched = 0
    for start, end in events:
        if progress is not None and launched >= AHEAD:
            # the host may run AHEAD steps in front of the device, not the whole measurement (seen
            # on an H200: all 4 steps launched before the first ended, so a pruner could stop
            # nothing); the device still has AHEAD - 1 steps queued, so it never waits for the host
            # here
            events[launched - AHEAD][1].synchronize()
        if before_each:
            before_each()
        start.record()
        outputs.append(step())
        end.record()
        launched += 1
        if (
            progress is not None
            and launched < measure
            and _finished_says_stop(events, launched, step_s, progress)
        ):
            break
    # after the last step (watched by a pruner, the host also waited for step i - AHEAD)
    torch.cuda.synchronize()
    step_s = [start.elapsed_time(end) / 1000.0 for start, end in events[:launched]]
    return outputs, step_s, launched < measure


def _finished_says_stop(
    events: list[Any], launched: int, step_s: list[float], progress: Callable[[list[float]], bool]
) -> bool:
    """Read the steps the device has finished (no waiting) into step_s; whether progress asks to
    stop."""
    while len(step_s) < launched and events[len(step_s)][1].query():
        first, last = events[len(step_s)]
        step_s.append(first.elapsed_time(last) / 1000.0)
    return progress(step_s)


def _measure_host(
    step: Callable[[], Any],
    measure: int,
    before_each: Callable[[], None] | None,
    progress: Callable[[list[float]], bool] | None,
) -> tuple[list[Any], list[float], bool]:
    """The timed steps on the CPU, time.perf_counter around each: (outputs, seconds a step,
    stopped)."""
    outputs: list[Any] = []
    step_s: list[float] = []
    for _ in range(measure):
        if before_each:
            before_each()
        t0 = time.perf_counter()
        outputs.append(step())
        step_s.append(time.perf_counter() - t0)
        if progress is not None and len(step_s) < measure and progress(step_s):
            return outputs, step_s, True
    return outputs, step_s, False
