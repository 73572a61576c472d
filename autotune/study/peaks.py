"""Memory learned from measurement: what a job that autotune does not build (task command, or any
trial with a measured peak) will need, read from the peaks its trials measured.

A training step's peak memory is a fixed part (weights, gradients, optimizer state, the CUDA
context), which the micro-batch does not change, plus activations, which grow with the tokens of a
micro-batch. So, for each setting of the other knobs (a group: every knob but the batch knobs,
each of which can change either part), the measured peaks are a line in tokens per micro-batch:

- a group measured at two or more sizes has its own least-squares line;
- a group measured at one size where the job said what it holds at a step's end (its resident
  memory: weights, optimizer state, gradients kept; the callbacks read it) has the line through
  that point whose growth is the point's allocated peak above its resident memory: the activations
  of its tokens (the reserved peak's excess over the allocated one carried along unscaled);
- a group measured at one size is that point plus the smallest slope fitted in any group: a lower
  bound of its peak at a larger size wherever activations grow at least as fast there (a setting
  whose other knobs save activations, such as checkpointing, fits the smallest slope);
- tokens per micro-batch are those the job computed on (padding included, the longest micro-batch
  of the trial: variable-length data peaks on its longest batch); a size not yet run has the tokens
  per sequence its group (else the study) measured, times the size. A trial without the count is
  placed at its size.

The peak compared with the GPU's memory is what the allocator reserved where the job reports it
(its fragmentation is what runs out, not what tensors held), else what was allocated, else what
NVML saw the job's processes use (command/gpu_peak.py). A peak no GPU can have (above the card's
memory, not above zero, not finite) is a broken reading: refused, never learned from. A trial
pruned after measuring steps ran: its peak counts. An out-of-memory trial bounds its size and the
larger ones (predict.oom_bound), never a size between it and the largest that ran: those launch
unless the line says they cannot fit.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import optuna

from autotune.documents.record import Metric, fingerprint_of, knobs_of, metrics_of
from autotune.protocol import Knobs
from autotune.study.history import History, Key, key
from autotune.tasks import Task

# The fitted peak may use this share of the GPU's memory (predict.USABLE_SHARE's reasoning).
USABLE_SHARE = 0.98
# a measured peak above this share of the GPU is close to running out (a change of arithmetic,
# attention or optimizer can need more than is left: search/neighbours.py)
RISKY = 0.7
# the fingerprint's GPU memory is rounded to 0.01 GiB (hardware._memory_gib): a peak this far above
# it may still be the card's own
ROUNDING_GIB = 0.01


@dataclass(frozen=True)
class Point:
    """One completed trial's measured peak, where it was measured."""

    number: int
    size: int
    tokens: float  # tokens per micro-batch (or the size, where the trial did not count them)
    peak_gib: float
    capacity_gib: float
    # the allocated peak and what the job held at a step's end (None: not reported)
    allocated_gib: float | None = None
    resident_gib: float | None = None

    @property
    def growth(self) -> float | None:
        """GiB per token above the resident memory, from this point alone (None: unknown)."""
        if self.allocated_gib is None or self.resident_gib is None:
            return None
        grown = self.allocated_gib - self.resident_gib
        return grown / self.tokens if grown > 0 and self.tokens > 0 else None


@dataclass(frozen=True)
class Forecast:
    """A predicted peak and how it was predicted."""

    peak_gib: float
    capacity_gib: float
    how: str  # "a line through trials 3, 5" / "trial 3 plus the smallest slope (trials 1, 4)"

    @property
    def over(self) -> bool:
        return self.peak_gib > USABLE_SHARE * self.capacity_gib


def group_of(knobs: Knobs, task: Task) -> Key:
    """The setting of the other knobs: every knob but the batch knobs."""
    return key({k: v for k, v in knobs.items() if k not in task.batch_knobs})


def peak_of(t: optuna.trial.FrozenTrial) -> float | None:
    """The trial's peak in GiB, as the allocator reserved it where known (module docstring)."""
    metrics = metrics_of(t)
    reserved = metrics.get(Metric.PEAK_RESERVED_GIB)
    peak = metrics.get(Metric.PEAK_MEM_GIB)
    values = [v for v in (reserved, peak) if isinstance(v, (int, float))]
    return max(values) if values else None


def possible(peak_gib: float, capacity_gib: float | None) -> bool:
    """Whether a GPU of this memory (None: unknown) can have had this peak: finite, above zero, no
    more than the card holds."""
    if not math.isfinite(peak_gib) or peak_gib <= 0:
        return False
    return capacity_gib is None or peak_gib <= capacity_gib + ROUNDING_GIB


def point_of(t: optuna.trial.FrozenTrial, task: Task) -> Point | None:
    """A completed GPU trial with a measured peak its GPU can have and a size, else None."""
    fp = fingerprint_of(t)
    size = knobs_of(t).get(task.size_knob)
    peak = peak_of(t)
    if fp.get("device") != "cuda" or not fp.get("gpu_memory_gib") or peak is None:
        return None
    if not possible(peak, float(fp["gpu_memory_gib"])):
        return None
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        return None
    metrics = metrics_of(t)
    counted = metrics.get(Metric.TOKENS_PER_MICRO_BATCH)
    tokens = float(counted) if counted else float(size)
    capacity = float(fp["gpu_memory_gib"])
    allocated, resident = (
        _gib(metrics.get(Metric.PEAK_MEM_GIB)),
        _gib(metrics.get(Metric.RESIDENT_GIB)),
    )
    return Point(t.number, size, tokens, float(peak), capacity, allocated, resident)


def _gib(value: object) -> float | None:
    """A reading in GiB, where it is a finite number above zero."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def groups(h: History, task: Task) -> dict[Key, list[Point]]:
    """The measured points of each setting of the other knobs."""
    out: dict[Key, list[Point]] = {}
    for t in h.ran:
        if (p := point_of(t, task)) is not None:
            out.setdefault(group_of(knobs_of(t), task), []).append(p)
    return out


def _line(points: list[Point]) -> tuple[float, float] | None:
    """(slope GiB per token, intercept) through points at two or more token counts; the slope is
    never negative (a peak that fell with the batch is noise around a flat line). At one token
    count: the line of its highest point's growth above its resident memory, where known."""
    xs = [p.tokens for p in points]
    if len(set(xs)) < 2:
        return _one_line(points)
    slope, intercept = statistics.linear_regression(xs, [p.peak_gib for p in points])
    if slope < 0:
        return 0.0, statistics.fmean(p.peak_gib for p in points)
    return slope, intercept


def _one_line(points: list[Point]) -> tuple[float, float] | None:
    """The line through the highest of points at one token count, its slope the point's growth
    above its resident memory (Point.growth); None where the job did not say it."""
    if not points:
        return None
    top = max(points, key=lambda p: p.peak_gib)
    if (slope := top.growth) is None:
        return None
    return slope, top.peak_gib - slope * top.tokens


def _how(points: list[Point]) -> str:
    """How a group's line was drawn."""
    numbers = ", ".join(str(p.number) for p in points)
    if len({p.tokens for p in points}) > 1:
        return f"a line in tokens through trials {numbers}"
    top = max(points, key=lambda p: p.peak_gib)
    return f"trial {top.number}'s peak above its resident {top.resident_gib:.1f} GiB, in tokens"


def line_of(h: History, knobs: Knobs, task: Task) -> tuple[float, float, float, float] | None:
    """(slope GiB per token, intercept GiB, tokens per sequence, the GPU's GiB) of the setting of
    these knobs, where it was measured at two or more sizes (None otherwise)."""
    by_group = groups(h, task)
    mine = by_group.get(group_of(knobs, task), [])
    line = _line(mine)
    if line is None:
        return None
    everyone = [p for points in by_group.values() for p in points]
    capacity = min(p.capacity_gib for p in everyone)
    return line[0], line[1], _tokens_at(1, mine, everyone), capacity


def _tokens_at(size: int, mine: list[Point], everyone: list[Point]) -> float:
    """Tokens per micro-batch of `size`: the tokens per sequence its group measured (else the
    study's largest), times the size."""
    source = mine or everyone
    per_sequence = max((p.tokens / p.size for p in source), default=1.0)
    return per_sequence * size


def forecast(h: History, knobs: Knobs, task: Task) -> Forecast | None:
    """The peak these knobs are predicted to reach (None: too little measured to say)."""
    size = knobs.get(task.size_knob)
    if not isinstance(size, int) or isinstance(size, bool):
        return None
    by_group = groups(h, task)
    mine = by_group.get(group_of(knobs, task), [])
    everyone = [p for points in by_group.values() for p in points]
    if not mine:
        return None
    x = _tokens_at(size, mine, everyone)
    capacity = min(p.capacity_gib for p in everyone)
    own = _line(mine)
    if own is not None:
        return Forecast(own[1] + own[0] * x, capacity, _how(mine))
    return _from_one(mine[0], x, by_group, capacity)


def _from_one(
    point: Point, x: float, by_group: dict[Key, list[Point]], capacity: float
) -> Forecast | None:
    """One measured point of the group, plus the smallest slope another group measured (a lower
    bound at a larger size); None without any line, or at no more tokens than the point."""
    lines = [(line, pts) for pts in by_group.values() if (line := _line(pts)) is not None]
    if not lines or x <= point.tokens:
        return None
    (slope, _), pts = min(lines, key=lambda pair: pair[0][0])
    peak = point.peak_gib + slope * (x - point.tokens)
    fitted = ", ".join(str(p.number) for p in pts)
    how = f"trial {point.number}'s peak plus the smallest slope measured (trials {fitted})"
    return Forecast(peak, capacity, how)


# the longest micro-batch this many times the median one: the job's shapes vary
VARIED = 1.1
EXPANDABLE = "expandable_segments:True"


def alloc_offer(h: History, task: Task) -> str | None:
    """cuda_alloc_conf offered to a job whose micro-batches vary in length and that ran out of
    memory or came close (RISKY of the GPU): PyTorch's caching allocator keeps blocks sized for
    past shapes, so such a job can run out below its peak; expandable segments grow and shrink in
    place. None where the study already tried them, or nothing calls for them."""
    if any(EXPANDABLE in str(knobs_of(t).get("cuda_alloc_conf")) for t in h.ran):
        return None
    spread = max((s for t in h.ran if (s := _length_spread(t)) is not None), default=None)
    if spread is None or spread < VARIED:
        return None
    points = [p for t in h.ran if (p := point_of(t, task)) is not None]
    if not h.ooms and not any(p.peak_gib > RISKY * p.capacity_gib for p in points):
        return None
    return (
        f"your job's micro-batches vary in length (the longest {spread:.1f}x the median): "
        "PyTorch's caching allocator keeps blocks sized for shapes gone by, so such a job can run "
        f"out of memory below its peak; search space.cuda_alloc_conf: [default, '{EXPANDABLE}'] "
        "(PYTORCH_CUDA_ALLOC_CONF)"
    )


def _length_spread(t: optuna.trial.FrozenTrial) -> float | None:
    """The trial's longest micro-batch against its median one (tokens computed on)."""
    metrics = metrics_of(t)
    longest = metrics.get(Metric.TOKENS_PER_MICRO_BATCH)
    median = metrics.get("tokens_per_step_median")
    accum = knobs_of(t).get("grad_accum_steps")
    per_step = accum if isinstance(accum, int) and accum > 0 else 1
    if not longest or not median:
        return None
    return float(longest) / (float(median) / per_step)


# two measured peaks this close are the same memory: the allocator's peak of one job on one data
# order repeats to the byte (issue 61's H100 run: 55.13 GiB with either AdamW), a length-varying
# order within a fraction of a percent
ALIKE_SHARE = 0.03


def neutral(h: History, task: Task) -> frozenset[str]:
    """The knobs measured to leave the peak as it was: two trials that ran at one size, their other
    knobs the same but for this knob (and knobs already found neutral), with peaks within
    ALIKE_SHARE. Found to a fixed point, so a pair that differs in a neutral knob and a new one
    teaches the new one. An out-of-memory trial then bounds those knobs' other values too
    (predict.needs_at_least): the sampler's fused AdamW where the foreach one ran out."""
    points = [(knobs_of(t), p) for t in h.ran if (p := point_of(t, task)) is not None]
    found: set[str] = set()
    while True:
        new = {k for a, b in _pairs(points) if (k := _differs_in(a, b, found, task)) is not None}
        if new <= found:
            return frozenset(found)
        found |= new


def _pairs(points: list[tuple[Knobs, Point]]) -> list[tuple[Knobs, Knobs]]:
    """The pairs of measured trials at one size whose peaks agree."""
    return [
        (a, b)
        for i, (a, pa) in enumerate(points)
        for b, pb in points[i + 1 :]
        if pa.size == pb.size
        and abs(pa.peak_gib - pb.peak_gib) <= ALIKE_SHARE * max(pa.peak_gib, pb.peak_gib)
    ]


def _differs_in(a: Knobs, b: Knobs, neutral: set[str], task: Task) -> str | None:
    """The one knob other than the batch knobs and `neutral` in which a and b differ, else None."""
    names = (set(a) | set(b)) - set(task.batch_knobs) - neutral
    differ = [n for n in names if a.get(n) != b.get(n)]
    return differ[0] if len(differ) == 1 else None
