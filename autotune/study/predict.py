"""What a study already knows will not run, so it is recorded as predicted and never launched.

- A configuration failure teaches a rule: an `invalid_config` trial names the knob values that
  caused it (its `cause`, e.g. {attention: cudnn, precision: tf32}); any later configuration with
  those values fails the same way.
- A batch (the task's size knob, Task.size_knob: train's micro-batch, generate's batch) that ran
  out of memory bounds itself and the larger ones with the same other knobs, or with other knobs at
  values that need no less memory (the catalogue's Knob.memory_order: fp32 where bf16 ran out, no
  checkpointing where checkpointing did, eager attention where a fused kernel did); never a smaller
  size. An out-of-memory trial contradicted by one that ran needing at least its memory (a size no
  smaller, the other knobs alike or needing no less) bounds nothing: it was not the configuration's.
- A generate batch over a latency limit (study.limits: time to first token, time per output token)
  bounds the larger batches with the same other knobs: a larger batch does more work in every
  prefill and decode step.
- Memory learned from measurement (study/peaks.py): the measured peaks of each setting of the
  other knobs are a line in tokens per micro-batch (activations grow with them; parameters,
  gradients and optimizer state do not), and a batch whose fitted peak exceeds the GPU's memory is
  predicted to run out. A peak no GPU can have (above the card's memory, not above zero) is
  refused.
- A setting that needs at least the memory of a measured one (Knob.memory_order: fp32 where bf16
  ran) is predicted to run out where the measured one's fitted peak at the same batch is above
  the GPU's memory (forecast_below).
- The baseline (your setting) is never predicted: it is measured, whatever is known.
- The memory estimate (autotune/memory; built-in training models): parameters, gradients, optimizer
  state per shard and activations per micro-batch under each checkpointing choice, calibrated by the
  peaks the study has measured; a configuration whose calibrated estimate exceeds the GPU's memory
  is predicted to run out before any trial like it ran. Uncalibrated (no measured peak yet) it must
  exceed it by UNCALIBRATED_MARGIN.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna

from autotune import knobs as catalogue
from autotune import memory
from autotune.documents.record import (
    Metric,
    TrialRecord,
    cause_of,
    knobs_of,
    loss_check_of,
    reason_of,
)
from autotune.protocol import Knobs
from autotune.status import Status
from autotune.study import peaks
from autotune.study.history import History, key
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
        slowest rank's); a peak no GPU of the trial's can have is refused (peaks.possible)."""
        pairs = []
        for t in h.completed:
            r = TrialRecord.of(t)
            fingerprint = r.fingerprint or {}
            peak = r.metric(Metric.PEAK_MEM_GIB)
            if (
                fingerprint.get("device") == "cuda"
                and r.metric(Metric.PEAK_MEM_KIND) == "cuda_max_memory_allocated"
                and isinstance(peak, (int, float))
                and peaks.possible(peak, fingerprint.get("gpu_memory_gib") or self.capacity_gib)
            ):
                est = self.estimate(r.knobs)
                if est is not None:
                    pairs.append((est, peak * memory.GIB))
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


def _same_but_batch(a: Knobs, b: Knobs, task: Task) -> bool:
    """Alike outside the knobs the task's batch rule ranges over."""
    return all(a.get(k) == v for k, v in b.items() if k not in task.batch_knobs)


def _bound(
    trials: list[optuna.trial.FrozenTrial], knobs: Knobs, task: Task
) -> optuna.trial.FrozenTrial | None:
    """A trial with the same other knobs and a batch no larger than this one's."""
    size = task.size_knob
    for t in trials:
        other = knobs_of(t)
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
        cause = cause_of(t)
        taught_by_check = loss_check_of(t).get("passed") is False
        if taught_by_check and pinned is not None and pinned(cause):
            continue
        if cause and all(knobs.get(k) == v for k, v in cause.items()):
            return t, cause
    return None


def needs_at_least(
    knobs: Knobs, than: Knobs, task: Task, alike: frozenset[str] = frozenset()
) -> bool:
    """Whether `knobs` need at least the memory of `than`: a batch no smaller, and each other knob
    alike, at a value its catalogue entry says needs no less (Knob.memory_order), or one of `alike`
    (knobs measured to leave the peak as it was: peaks.neutral)."""
    size = task.size_knob
    mine, theirs = knobs.get(size), than.get(size)
    if not isinstance(mine, int) or not isinstance(theirs, int) or mine < theirs:
        return False
    return all(
        name in alike or _no_less(name, value, than.get(name))
        for name, value in knobs.items()
        if name not in task.batch_knobs
    )


def _no_less(name: str, value: Any, than: Any) -> bool:
    return catalogue.needs_at_least(name, value, than)


def ooms(h: History, task: Task) -> list[optuna.trial.FrozenTrial]:
    """The out-of-memory trials that bound: those no trial that ran contradicts (one that needs at
    least its memory ran its steps, so this one ran out for another reason: a process beside it, a
    flaky allocator)."""
    ran = [knobs_of(t) for t in h.ran]
    alike = peaks.neutral(h, task)
    return [t for t in h.ooms if not any(needs_at_least(r, knobs_of(t), task, alike) for r in ran)]


def oom_bound(h: History, knobs: Knobs, task: Task) -> optuna.trial.FrozenTrial | None:
    """The out-of-memory trial (not contradicted: ooms) of the smallest size that these knobs need
    at least the memory of."""
    alike = peaks.neutral(h, task)
    bounds = [t for t in ooms(h, task) if needs_at_least(knobs, knobs_of(t), task, alike)]
    return min(bounds, key=lambda t: knobs_of(t)[task.size_knob], default=None)


def forecast_below(h: History, knobs: Knobs, task: Task) -> tuple[Knobs, peaks.Forecast] | None:
    """A measured setting of the other knobs that these knobs need at least the memory of
    (needs_at_least, at their batch) whose forecast peak is above the GPU's memory: fp32 at a size
    where bf16's line already runs out. None where there is none."""
    alike = peaks.neutral(h, task)
    mine = peaks.group_of(knobs, task)
    batch = {k: v for k, v in knobs.items() if k in task.batch_knobs}
    settings = {peaks.group_of(knobs_of(t), task): knobs_of(t) for t in h.ran}
    for group, other in settings.items():
        than = {**{k: v for k, v in other.items() if k not in task.batch_knobs}, **batch}
        if group == mine or not needs_at_least(knobs, than, task, alike):
            continue
        seen = peaks.forecast(h, than, task)
        if seen is not None and seen.over:
            return than, seen
    return None


def _setting(than: Knobs, knobs: Knobs, task: Task) -> str:
    """The measured setting named by what it sets otherwise than these knobs."""
    differ = ", ".join(
        f"{name} {value}"
        for name, value in than.items()
        if name not in task.batch_knobs and knobs.get(name) != value
    )
    return f"{differ} at {task.size_knob} {knobs.get(task.size_knob)}"


def _oom_reason(
    bound: optuna.trial.FrozenTrial, knobs: Knobs, task: Task, alike: frozenset[str]
) -> str:
    had = knobs_of(bound)
    size = task.size_knob
    more = "".join(
        f"; {name} {value} " + _alike(had.get(name), name in alike)
        for name, value in knobs.items()
        if name not in task.batch_knobs and value != had.get(name)
    )
    return (
        f"predicted: needs at least the memory of trial {bound.number} "
        f"({size} {had[size]} ran out of memory{more})"
    )


def _alike(had: Any, measured: bool) -> str:
    """How a knob's value needs no less memory than the out-of-memory trial's."""
    if measured:
        return f"needs what its {had} does (the same peak was measured at either)"
    return f"needs no less than its {had}"


def failure(
    h: History,
    knobs: Knobs,
    task: Task,
    mem: Memory | None = None,
    pinned: Callable[[dict[str, Any]], bool] | None = None,
) -> tuple[str, str] | None:
    """(status, reason) of a failure these knobs (of the study's task) are known to meet, or None.
    mem: the memory estimate's inputs (None: not used); pinned: see rule_for. The baseline is
    always launched: a figure of your own setting is what every other is compared with."""
    if h.base_key is not None and key(knobs) == h.base_key:
        return None
    if (found := rule_for(h, knobs, pinned)) is not None:
        t, cause = found
        values = ", ".join(f"{k} {v}" for k, v in cause.items())
        check = loss_check_of(t)
        taught = check.get("passed") is False
        what = f"failed trial {t.number}'s numerics check" if taught else "cannot run here"
        why = reason_of(t)[:200]
        return Status.INVALID_CONFIG, f"predicted: {values} {what} (trial {t.number}: {why})"
    size = task.size_knob
    if (bound := oom_bound(h, knobs, task)) is not None:
        return Status.OOM, _oom_reason(bound, knobs, task, peaks.neutral(h, task))
    if (bound := _bound(h.over_limit, knobs, task)) is not None:
        return Status.OVER_LIMIT, (
            f"predicted: {size} {knobs_of(bound)[size]} was already over the limits "
            f"(trial {bound.number}: {reason_of(bound)[:200]})"
        )
    seen = peaks.forecast(h, knobs, task)
    if seen is not None and seen.over:
        return Status.OOM, (
            f"predicted: peak memory {seen.peak_gib:.1f} GiB ({seen.how}) is above the GPU's "
            f"{seen.capacity_gib:.1f} GiB"
        )
    if (below := forecast_below(h, knobs, task)) is not None:
        than, seen = below
        return Status.OOM, (
            f"predicted: needs at least the peak memory of {_setting(than, knobs, task)}, "
            f"{seen.peak_gib:.1f} GiB ({seen.how}), above the GPU's {seen.capacity_gib:.1f} GiB"
        )
    if (mem_bound := memory_bound(h, knobs, mem)) is not None:
        peak, capacity, n = mem_bound
        how = (
            f"calibrated on {n} measured peak(s)"
            if n
            else f"uncalibrated, over {UNCALIBRATED_MARGIN:.2f}x"
        )
        return (
            Status.OOM,
            f"predicted: the memory estimate {peak:.1f} GiB ({how}) is above the GPU's "
            f"{capacity:.1f} GiB",
        )
    return None
