"""The step clock both callbacks use: a CUDA event recorded at each step's end on the GPU
(time.perf_counter on the CPU), each step written as soon as the device has passed its end, without
waiting for it.

At a step's end the step's token counts (device tensors, from its batches) are copied to the host
without blocking, and an event is recorded after the copy. At the next step's end (or the one after)
the host asks each pending event whether the device has reached it (Event.query(), which never
waits): those that have are written with their counts, read from the host copies, which are complete
by then. So the trial sees every step within a step or two, its pruner can stop a slow job early,
and no synchronisation is added; the last steps are read with one synchronisation when the training
stops.

Also here: what both callbacks share about the job's settings (`Settings`: autotune's knob names,
each with where it was read).
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import TYPE_CHECKING, Any, Union

from autotune import reporting
from autotune.command.hook import unmeasured

if TYPE_CHECKING:
    import torch

    from autotune.knobs import Knobs, KnobValue

TokenCount = tuple[Any, int]  # (real tokens: an int or a device tensor, padded tokens)
# the settings the job ran with, in autotune's knob names, and where each was read (the framework's
# names): reporting.Reporter.job_settings
Settings = tuple["Knobs", dict[str, str]]
# a step boundary: a CUDA event recorded on the stream, or the host's clock (time.perf_counter)
Mark = Union["torch.cuda.Event", float]


def fp32_precision(torch: ModuleType, cuda: bool) -> str:
    """An fp32 training's precision in autotune's names: tf32 when the job turned TF32 matmuls on
    (PyTorch's fp32_precision, which the legacy allow_tf32 also sets; reading allow_tf32 after the
    new API set it raises), fp32 on the CPU (no TF32 there)."""
    matmul = torch.backends.cuda.matmul
    mode = getattr(matmul, "fp32_precision", None)
    if mode is None:  # PyTorch before 2.9
        mode = "tf32" if matmul.allow_tf32 else "ieee"
    return "tf32" if cuda and mode == "tf32" else "fp32"


def claimed(reporter: reporting.Reporter, owner: object, what: str) -> bool:
    """Whether this training is the one measured (reporting.Reporter.claim). One it refuses after
    autotune stopped the measured one is noted (hook/unmeasured.py): the job then trains on past
    its stop request, unmeasured, and the trial's reason names this training rather than a command
    that ignored the request."""
    if reporter.claim(owner, what):
        return True
    if reporter.path and reporter.owner is not None and reporter.stopped:
        again = owner is reporter.owner
        measured, steps = reporter.what, reporter.count
        unmeasured.note(reporter.path, second=what, measured=measured, steps=steps, again=again)
    return False


def setting(settings: Settings, knob: str, value: KnobValue, read_from: str) -> None:
    """Add one setting the job ran with (a value that is None was not readable: left out)."""
    if value is not None:
        settings[0][knob] = value
        settings[1][knob] = read_from


def mark(torch: ModuleType, cuda: bool) -> Mark:
    """A step boundary: an event recorded on the current stream, or the host's clock."""
    if not cuda:
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    recorded: Mark = event  # torch is handed in as a module: its Event read as such
    return recorded


def seconds(start: Mark, end: Mark, cuda: bool) -> float:
    """The time between two marks (events: after the device has passed both)."""
    if isinstance(start, float) and isinstance(end, float):
        return end - start
    assert cuda and not isinstance(start, float) and not isinstance(end, float)
    return float(start.elapsed_time(end) / 1000)


def _real_on_host(torch: ModuleType, counts: list[TokenCount], cuda: bool) -> Any:
    """The step's real tokens, summed on the device and copied to the host without waiting (else an
    int)."""
    tensors = [r for r, _ in counts if isinstance(r, torch.Tensor)]
    plain = sum(int(r) for r, _ in counts if not isinstance(r, torch.Tensor))
    if not tensors:
        return plain
    total = torch.stack([t.reshape(()).to(torch.int64) for t in tensors]).sum()
    if cuda and total.is_cuda:
        return (total.to("cpu", non_blocking=True), plain)
    return int(total) + plain


class Steps:
    """The steps of one training, written to the reporter as the device finishes them."""

    def __init__(self, torch: ModuleType, reporter: reporting.Reporter, cuda: bool) -> None:
        self.torch, self.reporter, self.cuda = torch, reporter, cuda
        self.last = mark(torch, cuda)  # the training's start
        # a step's stamp (at) is the start's wall clock plus the marks' time since: on the clock
        # that times the steps, so a step's time and the time between stamps agree (the trial
        # checks it); the host's clock at a step's end runs ahead of the device by what it queued
        self.origin, self.origin_wall = self.last, time.time()
        self.pending: list[tuple[Any, Any, Any, int, int | None]] = []
        self.ended = 0
        self.closed = False

    def end(self, counts: list[TokenCount]) -> None:
        """A step has ended (host side): its tokens copied, its mark recorded, finished steps
        written."""
        real = _real_on_host(self.torch, counts, self.cuda)
        padded = sum(p for _, p in counts)
        end = mark(self.torch, self.cuda)
        self.pending.append((self.last, end, real, padded, reporting.graphs()))
        self.last = end
        self.ended += 1
        self.drain(wait=False)

    def drain(self, wait: bool) -> None:
        """Write the pending steps the device has finished (all of them with wait: one
        synchronisation)."""
        if wait and self.cuda and self.pending:
            self.torch.cuda.synchronize()
        while self.pending and (wait or not self.cuda or self.pending[0][1].query()):
            start, end, real, padded, graphs = self.pending.pop(0)
            tokens = int(real[0]) + real[1] if isinstance(real, tuple) else int(real)
            at = self.origin_wall + seconds(self.origin, end, self.cuda)
            self.reporter.record(
                seconds(start, end, self.cuda), tokens, padded, at=at, graphs=graphs
            )

    def done(self) -> bool:
        """The trial has what it needs (its stop file, or the most steps it asks for)."""
        if self.reporter.done():
            return True
        most = self.reporter.most
        return most is not None and self.ended >= most

    def close(self) -> None:
        """The training stops: the last steps read, the job's closing line written."""
        if self.closed:
            return
        self.closed = True
        self.drain(wait=True)
        self.reporter.close()
