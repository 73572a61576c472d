"""Calibration of the estimate on a study's measured peaks, and the lines `autotune validate`
prints."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from autotune.memory._model import GIB, Estimate

SCALE_RANGE = (0.5, 2.0)  # calibrate's bounds on the activation term's scale


@dataclass(frozen=True)
class Calibration:
    """measured peak ~ static + a * (activations + logits) + b, fitted from completed trials.

    static (Estimate.static) is taken as estimated; a scales the part that grows with the
    micro-batch (the activation model's error is mostly proportional: a missed or extra saved
    tensor) and b absorbs a constant (what the allocator holds that the model misses: cuBLAS
    workspaces, NCCL's buffers, the data).
    The identity (a = 1, b = 0) is the uncalibrated estimate."""

    a: float = 1.0
    b: float = 0.0
    n: int = 0  # trials it was fitted on

    def peak(self, est: Estimate) -> float:
        """The calibrated prediction of max_memory_allocated for this estimate, in bytes."""
        return est.static + self.a * (est.activations + est.logits) + self.b


def calibrate(pairs: list[tuple[Estimate, float]]) -> Calibration:
    """Fit a Calibration from (estimate, measured peak allocated bytes) of completed trials,
    robustly: with at least three distinct activation sizes, Theil-Sen (a: the median of the
    pairwise slopes of measured - static on activations + logits, within SCALE_RANGE; b: the median
    residual); with fewer, the constant only (a = 1, b: the median of measured - estimated), since
    one or two points cannot tell a scale from a constant (a 4 GiB constant missed on a trial with 4
    GiB of activations would read as a scale of 2 and over-predict a 40 GiB trial by 36 GiB,
    skipping it as out of memory). Least squares, before, put an 8B trial on 2x H200 56% low after
    one trial whose checkpointing ran other than estimated (benchmarks/memory_vs_peaks.py)."""
    if not pairs:
        return Calibration()
    xs = [float(e.activations + e.logits) for e, _ in pairs]
    ys = [float(m) - e.static for e, m in pairs]
    if len(set(xs)) < 3:
        return Calibration(1.0, statistics.median(y - x for x, y in zip(xs, ys)), len(pairs))
    from scipy.stats import theilslopes  # the search loop only (validate never calibrates)

    low, high = SCALE_RANGE
    a = min(max(float(theilslopes(ys, xs).slope), low), high)
    return Calibration(a, statistics.median(y - a * x for x, y in zip(xs, ys)), len(pairs))


def describe(est: Estimate, capacity_bytes: float | None = None) -> list[str]:
    """Short lines for `autotune validate`: GiB per part, the estimated peak, and whether it fits
    capacity_bytes."""

    def gib(x: float) -> str:
        return f"{x / GIB:.2f} GiB"

    where = "backward" if est.phase == "backward" else "the optimizer step"
    lines = [
        f"parameters {gib(est.params)}, gradients {gib(est.grads)}, optimizer "
        f"{gib(est.optimizer)}, "
        f"weight copies {gib(est.gathered)}",
        f"activations {gib(est.activations)}, loss {gib(est.logits)} (one micro-batch)",
        f"estimated peak {gib(est.total)} (in {where})",
    ]
    if capacity_bytes:
        verdict = "fits" if est.total <= capacity_bytes else "does not fit"
        lines.append(
            f"{verdict} in {gib(capacity_bytes)} ({100 * est.total / capacity_bytes:.0f}% of it)"
        )
    return lines
