"""Which of a job's reported steps a command trial measures, and its figure: tokens over time.

A job's steps differ: in tokens (variable lengths, length-grouped batches), in time (a slow step in
ten, the first of each new shape). What the job delivers over a long run is all its tokens over all
its time, so the figure is the ratio estimator sum(tokens) / sum(seconds) of the measured steps,
never a median of per-step rates (which describes the fast steps only: issue 35 saw 1.44x).

The window is chosen as the steps arrive (standard library only):
- warm-up: at least `warmup` steps; beyond them, the cut that MSER (White 1997, the marginal
  standard error rule) picks: the start d that minimises the remaining steps' squared residuals
  over (n - d)^2, at most half of what came after the minimum, so a slow start (compile, allocator,
  a first long batch) stays out while a lasting speed stays in;
- measured: at least `measure` steps, and until the 95% interval of the figure (the ratio's delta-
  method standard error, Student's t) is within `half_width_pct` and the window's two halves agree
  within twice that (no trend left). A job that cannot get there within `max_steps` steps is
  measured on what it gave, and the record says how wide its interval was.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


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
    """Student's 97.5% quantile (Cornish-Fisher's first two terms around the normal's: 1% at 3 dof)."""
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
    """MSER's truncation point at or after `least`: argmin of sum(e^2) / (n - d)^2 over the steps
    after d, d at most halfway through what follows `least`."""
    n = len(steps)
    last = least + (n - least) // 2
    scores = {}
    for d in range(least, max(least, last) + 1):
        tail = steps[d:]
        if len(tail) < 2:
            break
        scores[d] = sum(e * e for e in _residuals(tail)) / len(tail) ** 2
    return min(scores, key=lambda d: (scores[d], d)) if scores else least


def window(steps: list[Step], rule: Rule) -> Window:
    """The window the steps reported so far give (settled or not)."""
    start = warmup_cut(steps, rule.warmup) if len(steps) > rule.warmup + rule.measure else rule.warmup
    start = min(start, max(rule.warmup, len(steps) - rule.measure))
    measured = steps[start:]
    width, drift = half_width_pct(measured), drift_pct(measured)
    settled = (
        len(measured) >= rule.measure
        and width is not None
        and width <= rule.half_width_pct
        and drift is not None
        and abs(drift) <= 2 * rule.half_width_pct
    )
    return Window(start, len(steps), rate(measured), width, drift, settled)


def decide(steps: list[Step], rule: Rule) -> Window | None:
    """The window once it is settled or `max_steps` came; None: let the job run more steps."""
    if len(steps) < rule.warmup + rule.measure:
        return None
    w = window(steps, rule)
    return w if w.settled or len(steps) >= rule.max_steps else None


def said(w: Window, rule: Rule) -> str:
    """One line of how the window was measured ("settled" or why not)."""
    width = f"+-{w.half_width_pct:.1f}%" if w.half_width_pct is not None else "no interval"
    head = f"{w.n} steps after {w.start} of warm-up, {w.tokens_per_s:,.0f} tokens/s ({width}"
    if w.drift_pct is not None:
        head += f", halves {w.drift_pct:+.1f}%"
    if w.settled:
        return head + ")"
    return head + f"): not settled to +-{rule.half_width_pct:g}% within {rule.max_steps} steps"
