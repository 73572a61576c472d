"""The step clock both callbacks use: a CUDA event recorded at a step's end on the GPU (read once, at the end),
time.perf_counter on the CPU (synchronous there)."""

from __future__ import annotations

import time
from typing import Any


def mark(torch: Any, cuda: bool) -> Any:
    """A step boundary: an event recorded on the current stream, or the host's clock."""
    if not cuda:
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def seconds(start: Any, end: Any, cuda: bool) -> float:
    """The time between two marks (events: after the device has passed both)."""
    return start.elapsed_time(end) / 1000 if cuda else end - start
