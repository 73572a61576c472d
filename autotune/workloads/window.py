"""Which of a job's reported steps a command trial measures, and its figure: tokens over time.

A job's steps differ: in tokens (variable lengths, length-grouped batches), in time (a slow step in
ten, the first of each new shape). What the job delivers over a long run is all its tokens over all
its time, so the figure is the ratio estimator sum(tokens) / sum(seconds) of the measured steps,
never a median of per-step rates (which describes the fast steps only: issue 35 saw 1.44x).

The window is chosen as the steps arrive (standard library only):
- warm-up: at least `warmup` steps, then as long as the next step is a slow outlier (its time per
  token over SLOW x the median of the steps after it: compile, the allocator, a first long batch);
- the data's order: a job whose batches follow a cycle (the HF Trainer's length-grouped sampler
  sorts each megabatch of 50 batches longest first, so tokens per step fall 30x and the rate 6x
  within 50 steps) is measured over whole cycles: the cycle is the lag at which the tokens per step
  repeat (within REPEAT of their mean, over at least MATCH steps). The first cycle is the first pass
  over each shape (2% to 21% slower than the later cycles on an H200: docs/BENCHMARKS.md), so the
  window is the cycles after it, settled once there is one. Until a cycle is seen, a window whose
  halves differ in tokens per step (Welch's t over TREND) is not settled: its data still trend;
- measured: at least `measure` steps, and until the 95% interval of the figure (the ratio's delta-
  method standard error, Student's t) is within `half_width_pct` and the window's two halves agree
  within twice that. A job that cannot get there within `max_steps` steps is measured on what it
  gave, and the record says how wide its interval was and why it did not settle.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

SLOW = 1.5  # a warm-up step this many times the later median time per token is still warming up
REPEAT = 0.08  # tokens per step that repeat at a lag within this share of their mean: a cycle
MATCH = 5  # steps of the second cycle that must agree before the cycle counts
TREND = 3.0  # Welch's t of the halves' tokens per step past which the data trend


@dataclass(frozen=True)
class Rule:
    """What a command trial asks of its window."""

    warmup: int  # steps never measured, at least
    measure: int  # measured steps, at least
    max_steps: int  # warm-up and measured together, at most (then it is measured as it stands)
    half_width_pct: float = 3.0  # the figure's 95% interval, in percent of it


@dataclass(frozen=True)
class Window:
    """The measured steps steps[start:end] and what they say."""

    start: int
    end: int
    tokens_per_s: float
    half_width_pct: float | None  # None under 3 steps
    drift_pct: float | None  # second half's rate against the first's, in percent of the figure
    settled: bool
    cycle: int | None = None  # steps of the data order's cycle, when the window is whole cycles
    trend_t: float | None = None  # Welch's t of the halves' tokens per step (a trend past TREND)

    @property
    def n(self) -> int:
        return self.end - self.start

    def summary(self) -> dict[str, object]:
        return {
            "warmup_steps": self.start,
            "measured_steps": self.n,
            "tokens_per_s": self.tokens_per_s,
            "half_width_pct": self.half_width_pct,
            "drift_pct": self.drift_pct,
            "settled": self.settled,
            "cycle_steps": self.cycle,
            "trend_t": self.trend_t,
        }


Step = tuple[float, float]  # (seconds, tokens)


def rate(steps: list[Step]) -> float:
    """All the tokens over all the time."""
    seconds = sum(s for s, _ in steps)
    return sum(t for _, t in steps) / seconds if seconds > 0 else 0.0


def _residuals(steps: list[Step]) -> list[float]:
    r = rate(steps)
    return [t - r * s for s, t in steps]


def _t975(dof: int) -> float:
    """Student's 97.5% quantile (Cornish-Fisher's first two terms around the normal's: 1% at 3
    dof)."""
    z = statistics.NormalDist().inv_cdf(0.975)
    return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)


def half_width_pct(steps: list[Step]) -> float | None:
    """The figure's 95% interval half-width in percent: var(R) = sum(e^2) / (n (n-1) mean(s)^2)."""
    n = len(steps)
    r = rate(steps)
    if n < 3 or r <= 0:
        return None
    mean_s = statistics.fmean(s for s, _ in steps)
    se = math.sqrt(sum(e * e for e in _residuals(steps)) / (n * (n - 1))) / mean_s
    return 100.0 * _t975(n - 1) * se / r


def drift_pct(steps: list[Step]) -> float | None:
    """The second half's rate against the first half's, in percent of the whole's (None under 4)."""
    if len(steps) < 4:
        return None
    half = len(steps) // 2
    return 100.0 * (rate(steps[half:]) - rate(steps[:half])) / rate(steps)


def warmup_cut(steps: list[Step], least: int) -> int:
    """The first step at or after `least` that is no slow outlier (SLOW) against the steps after it,
    at most halfway through what follows `least`."""
    last = least + (len(steps) - least) // 2
    d = least
    while d < last:
        later = [s / t for s, t in steps[d + 1 :] if t > 0]
        s, t = steps[d]
        if not later or t <= 0 or s / t <= SLOW * statistics.median(later):
            break
        d += 1
    return d


def trend_t(steps: list[Step]) -> float | None:
    """Welch's t of the mean tokens per step of the second half against the first (None under 6)."""
    if len(steps) < 6:
        return None
    half = len(steps) // 2
    a, b = [t for _, t in steps[:half]], [t for _, t in steps[half:]]
    spread = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    diff = statistics.fmean(b) - statistics.fmean(a)
    if spread == 0:
        return 0.0 if diff == 0 else math.copysign(math.inf, diff)
    return diff / spread


def cycle(steps: list[Step], least: int) -> int | None:
    """The shortest lag of at least `least` steps at which the tokens per step repeat: each of the
    MATCH or more steps after it within REPEAT of the mean of their counterparts one lag before."""
    tokens = [t for _, t in steps]
    mean = statistics.fmean(tokens) if tokens else 0.0
    if mean <= 0 or max(tokens) - min(tokens) <= REPEAT * mean:
        return None  # the same tokens every step (packed): no cycle to cover
    for lag in range(max(2, least), len(tokens) - MATCH + 1):
        pairs = list(zip(tokens, tokens[lag:]))
        if statistics.fmean(abs(x - y) for x, y in pairs) <= REPEAT * mean:
            return lag
    return None


def window(steps: list[Step], rule: Rule) -> Window:
    """The window the steps reported so far give (settled or not)."""
    start = (
        warmup_cut(steps, rule.warmup) if len(steps) > rule.warmup + rule.measure else rule.warmup
    )
    start = min(start, max(rule.warmup, len(steps) - rule.measure))
    period = cycle(steps[start:], rule.measure)
    if period is not None:
        return _cycles(steps, start, period, rule)
    measured = steps[start:]
    width, drift, trend = half_width_pct(measured), drift_pct(measured), trend_t(measured)
    settled = (
        len(measured) >= rule.measure
        and width is not None
        and width <= rule.half_width_pct
        and drift is not None
        and abs(drift) <= 2 * rule.half_width_pct
        and (trend is None or abs(trend) <= TREND)
    )
    return Window(start, len(steps), rate(measured), width, drift, settled, None, trend)


def _cycles(steps: list[Step], start: int, period: int, rule: Rule) -> Window:
    """Whole cycles of the data order: the first pass over them is warm-up (every shape is new
    there: the allocator, the kernels' choices), so with two or more the first is left out; settled
    then.
    """
    whole = (len(steps) - start) // period
    first = start + period if whole >= 2 else start
    end = first + period * ((len(steps) - first) // period)
    measured = steps[first:end]
    settled = whole >= 2 and len(measured) >= rule.measure
    return Window(first, end, rate(measured), None, drift_pct(measured), settled, period, None)


def decide(steps: list[Step], rule: Rule) -> Window | None:
    """The window once it is settled or `max_steps` came; None: let the job run more steps."""
    if len(steps) < rule.warmup + rule.measure:
        return None
    w = window(steps, rule)
    return w if w.settled or len(steps) >= rule.max_steps else None


def said(w: Window, rule: Rule) -> str:
    """One line of how the window was measured ("settled" or why not)."""
    width = f"+-{w.half_width_pct:.1f}%" if w.half_width_pct is not None else "no interval"
    if w.cycle is not None:
        width = f"{w.n // w.cycle} cycle(s)"
    head = f"{w.n} steps after {w.start} of warm-up, {w.tokens_per_s:,.0f} tokens/s ({width}"
    if w.cycle is not None:
        head += f", whole cycles of {w.cycle} steps of the data order"
        if not w.settled:
            return head + (
                f"): only the first pass over the cycle (every shape new); command.max_steps "
                f"{w.start + 2 * w.cycle} or more measures a second"
            )
    elif w.drift_pct is not None:
        head += f", halves {w.drift_pct:+.1f}%"
    if w.settled:
        return head + ")"
    why = f"not settled to +-{rule.half_width_pct:g}% within {rule.max_steps} steps"
    if w.end < rule.max_steps:  # the job ended its reports (done, exited) before max_steps
        why = f"not settled to +-{rule.half_width_pct:g}% in the {w.end} steps the job gave"
    if w.cycle is None and w.trend_t is not None and abs(w.trend_t) > TREND:
        why += " (its tokens per step still trend: a data order longer than the window; raise "
        why += "command.max_steps)"
    return head + f"): {why}"
