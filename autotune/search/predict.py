"""What a study already knows will not run, so it is recorded as predicted and never launched.

- A configuration failure teaches a rule: an `invalid_config` trial names the knob values that
  caused it (its `cause`, e.g. {attention: cudnn, precision: tf32}); any later configuration with
  those values fails the same way.
- A batch (the task's size knob, Task.size_knob: train's micro-batch, generate's batch) that ran
  out of memory bounds the larger ones with the same other knobs.
- A generate batch over a latency limit (study.limits: time to first token, time per output token)
  bounds the larger batches with the same other knobs: a larger batch does more work in every
  prefill and decode step.
- A memory model: with two or more completed trials that differ only in the size knob, the peak
  memory is fitted as a line in it (activations grow with it; parameters, gradients and optimizer
  state do not) and a batch whose fitted peak exceeds the GPU's memory is predicted to run out.
- The memory estimate (autotune/memory; built-in training models): parameters, gradients, optimizer
  state per shard and activations per micro-batch under each checkpointing choice, calibrated by the
  peaks the study has measured; a configuration whose calibrated estimate exceeds the GPU's memory
  is predicted to run out before any trial like it ran. Uncalibrated (no measured peak yet) it must
  exceed it by UNCALIBRATED_MARGIN.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna

from autotune import memory
from autotune.documents.record import Metric, TrialRecord
from autotune.knobs import int_of
from autotune.protocol import Knobs
from autotune.search.history import History
from autotune.tasks import Task

# The fitted peak may use this share of the GPU's memory: the allocator's own overhead (reserved
# above allocated, the CUDA context) needs the rest.
USABLE_SHARE = 0.98
# Before any peak was measured the estimate alone predicts an OOM only this far above the GPU's
# memory.
UNCALIBRATED_MARGIN = 1.15


@dataclass(frozen=True)
class Memory:
    """What the memory estimate needs besides the knobs: the model section, the ranks, the GPU's
    memory."""

    model: dict[str, Any]
    world_size: int
    capacity_gib: float | None  # the smallest visible GPU's (None: no GPU, nothing predicted)

    def estimate(self, knobs: Knobs) -> memory.Estimate | None:
        return memory.estimate(self.model, knobs, self.world_size)

    def measured(self, h: History) -> list[tuple[memory.Estimate, float]]:
        """(estimate, measured peak bytes) of the completed GPU trials (max_memory_allocated, the
        slowest rank's)."""
        pairs = []
        for t in h.completed:
            r = TrialRecord.of(t)
            cuda = (r.fingerprint or {}).get("device") == "cuda"
            if (
                cuda
                and r.metric(Metric.PEAK_MEM_KIND) == "cuda_max_memory_allocated"
                and r.metric(Metric.PEAK_MEM_GIB)
            ):
                est = self.estimate(r.knobs)
                if est is not None:
                    pairs.append((est, r.metric(Metric.PEAK_MEM_GIB) * memory.GIB))
        return pairs

    def calibration(self, h: History) -> memory.Calibration:
        """Fitted on the completed GPU trials' measured peaks."""
        return memory.calibrate(self.measured(h))


def memory_bound(h: History, knobs: Knobs, mem: Memory | None) -> tuple[float, float, int] | None:
    """(predicted peak GiB, the GPU's GiB, trials calibrated on) when the estimate says these knobs
    do not fit.

    Never for knobs estimated no larger than a trial of this study that ran. Calibrated, the
    prediction is the smaller of the calibrated and the raw estimate: a calibration fitted on trials
    that ran other than estimated can over-predict one that the raw estimate has right (seen: +16.9%
    on an H200).
    Replayed over 197 recorded H200 trials (tests/test_predict.py), no trial is predicted out of
    memory while the GPU holds 1.1 times its peak (the calibrated estimate alone: 7 of them)."""
    if mem is None or not mem.capacity_gib or (est := mem.estimate(knobs)) is None:
        return None
    return over_capacity(est, mem.measured(h), mem.capacity_gib)


def over_capacity(
    est: memory.Estimate, measured: list[tuple[memory.Estimate, float]], capacity_gib: float
) -> tuple[float, float, int] | None:
    """memory_bound's rule for one estimate, given the (estimate, peak bytes) of the trials that
    ran."""
    if any(est.total <= ran.total for ran, _ in measured):
        return None
    cal = memory.calibrate(measured)
    peak = est.total / memory.GIB
    if cal.n:
        peak = min(cal.peak(est) / memory.GIB, peak)
    limit = capacity_gib * (USABLE_SHARE if cal.n else UNCALIBRATED_MARGIN)
    return (peak, capacity_gib, cal.n) if peak > limit else None


def _same_but_batch(a: dict[str, Any], b: dict[str, Any], task: Task) -> bool:
    """Alike outside the knobs the task's batch rule ranges over."""
    return all(a.get(k) == v for k, v in b.items() if k not in task.batch_knobs)


def _bound(
    trials: list[optuna.trial.FrozenTrial], knobs: Knobs, task: Task
) -> optuna.trial.FrozenTrial | None:
    """A trial with the same other knobs and a batch no larger than this one's."""
    size = task.size_knob
    for t in trials:
        other = t.user_attrs["knobs"]
        if (
            _same_but_batch(other, knobs, task)
            and None not in (other.get(size), knobs.get(size))
            and knobs[size] >= other[size]
        ):
            return t
    return None


def rule_for(
    h: History, knobs: Knobs, pinned: Callable[[dict[str, Any]], bool] | None = None
) -> tuple[optuna.trial.FrozenTrial, dict[str, Any]] | None:
    """An invalid_config trial whose cause these knobs share, with that cause. pinned(cause): True
    where a rule the numerics check taught may not skip these knobs (search/loss_guard.py: the user
    pinned them)."""
    for t in h.invalid:
        cause = t.user_attrs.get("cause") or {}
        taught_by_check = (t.user_attrs.get("loss_check") or {}).get("passed") is False
        if taught_by_check and pinned is not None and pinned(cause):
            continue
        if cause and all(knobs.get(k) == v for k, v in cause.items()):
            return t, cause
    return None


def oom_bound(h: History, knobs: Knobs, task: Task) -> optuna.trial.FrozenTrial | None:
    """A trial that ran out of memory with the same knobs and a batch no larger than this one's."""
    return _bound(h.ooms, knobs, task)


def peak_estimate(h: History, knobs: Knobs, task: Task) -> tuple[float, float, list[int]] | None:
    """(fitted peak GiB at this batch, the GPU's memory GiB, the trials fitted) from completed GPU
    trials with the same other knobs at two or more batch sizes; None when there are not enough."""
    size = task.size_knob
    by_mbs: dict[int, tuple[float, float, int]] = {}
    for t in h.completed:
        other, fp = t.user_attrs["knobs"], t.user_attrs.get("fingerprint") or {}
        if (
            fp.get("device") == "cuda"
            and fp.get("gpu_memory_gib")
            and _same_but_batch(other, knobs, task)
        ):
            by_mbs[other[size]] = (
                t.user_attrs["metrics"]["peak_mem_gib"],
                fp["gpu_memory_gib"],
                t.number,
            )
    if len(by_mbs) < 2:
        return None
    sizes = sorted(by_mbs)
    slope, intercept = statistics.linear_regression(sizes, [by_mbs[m][0] for m in sizes])
    return (
        intercept + slope * int_of(knobs, size),
        min(v[1] for v in by_mbs.values()),
        [by_mbs[m][2] for m in sizes],
    )


def failure(
    h: History,
    knobs: Knobs,
    task: Task,
    mem: Memory | None = None,
    pinned: Callable[[dict[str, Any]], bool] | None = None,
) -> tuple[str, str] | None:
    """(status, reason) of a failure these knobs (of the study's task) are known to meet, or None.
    mem: the memory estimate's inputs (None: not used); pinned: see rule_for."""
    if (found := rule_for(h, knobs, pinned)) is not None:
        t, cause = found
        values = ", ".join(f"{k} {v}" for k, v in cause.items())
        check = t.user_attrs.get("loss_check") or {}
        taught = check.get("passed") is False
        what = f"failed trial {t.number}'s numerics check" if taught else "cannot run here"
        why = t.user_attrs["reason"][:200]
        return "invalid_config", f"predicted: {values} {what} (trial {t.number}: {why})"
    size = task.size_knob
    if (bound := oom_bound(h, knobs, task)) is not None:
        return "oom", (
            f"predicted: needs at least the memory of trial {bound.number} "
            f"({size} {bound.user_attrs['knobs'][size]} ran out of memory)"
        )
    if (bound := _bound(h.over_limit, knobs, task)) is not None:
        return "over_limit", (
            f"predicted: {size} {bound.user_attrs['knobs'][size]} was already over the limits "
            f"(trial {bound.number}: {bound.user_attrs['reason'][:200]})"
        )
    estimate = peak_estimate(h, knobs, task)
    if estimate is not None and estimate[0] > USABLE_SHARE * estimate[1]:
        peak, capacity, numbers = estimate
        return "oom", (
            f"predicted: peak memory {peak:.1f} GiB (a line in {size} through trials "
            f"{', '.join(map(str, numbers))}) is above the GPU's {capacity:.1f} GiB"
        )
    if (mem_bound := memory_bound(h, knobs, mem)) is not None:
        peak, capacity, n = mem_bound
        how = (
            f"calibrated on {n} measured peak(s)"
            if n
            else f"uncalibrated, over {UNCALIBRATED_MARGIN:.2f}x"
        )
        return (
            "oom",
            f"predicted: the memory estimate {peak:.1f} GiB ({how}) is above the GPU's "
            f"{capacity:.1f} GiB",
        )
    return None
