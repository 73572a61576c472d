"""Which of a job's reported steps a command trial measures, and its figure: tokens over time.

A job's steps differ: in tokens (variable lengths, length-grouped batches), in time (a slow step in
ten, the first of each new shape). What the job delivers over a long run is all its tokens over all
its time, so the figure is the ratio estimator sum(tokens) / sum(seconds) of the measured steps,
never a median of per-step rates (which describes the fast steps only: issue 35 saw 1.44x).

The window is chosen as the steps arrive (standard library and the protocol only):
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
  within twice that; a window whose figure is close to the study's best (which the search writes
  beside the trial: protocol.AGAINST_FILE) until its interval is within half their difference,
  down to DECIDE_FLOOR of half_width_pct, so the order of two close configurations is measured,
  not guessed. A job that cannot get there within `max_steps` steps is measured on what it gave,
  and the record says how wide its interval was and why it did not settle.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from autotune.protocol import AGAINST_FILE
from autotune.ratio import Step, half_width_pct, rate

__all__ = ["Step", "half_width_pct", "rate"]  # the estimator's, read here by the window's users

SLOW = 1.5  # a warm-up step this many times the later median time per token is still warming up
REPEAT = 0.08  # tokens per step that repeat at a lag within this share of their mean: a cycle
MATCH = 5  # steps of the second cycle that must agree before the cycle counts
TREND = 3.0  # Welch's t of the halves' tokens per step past which the data trend
# a window close to the study's best narrows its interval to half the difference, down to this share
# of half_width_pct (a 3% rule: 1.5%)
DECIDE_FLOOR = 0.5


@dataclass(frozen=True)
class Rule:
    """What a command trial asks of its window."""

    warmup: int  # steps never measured, at least
    measure: int  # measured steps, at least
    max_steps: int  # warm-up and measured together, at most (then it is measured as it stands)
    half_width_pct: float = 3.0  # the figure's 95% interval, in percent of it
    # the study's best figure so far (tokens/s per GPU; None: none yet): a window whose figure is
    # close to it measures until its interval is within half the difference (target_pct)
    against: float | None = None

    def target_pct(self, figure: float) -> float:
        """The half-width this window must reach: half_width_pct, or half the difference from the
        study's best where that is smaller (never below DECIDE_FLOOR of half_width_pct): a trial
        that may overtake the best is measured until the order is clear, or max_steps."""
        if not self.against or figure <= 0:
            return self.half_width_pct
        gap_pct = 100.0 * abs(figure - self.against) / self.against
        floor = DECIDE_FLOOR * self.half_width_pct
        return min(self.half_width_pct, max(floor, gap_pct / 2))


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
        and width <= rule.target_pct(rate(measured))
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
    # no interval: the steps of a cycle follow its order, not chance (a step-level interval of an
    # H100 run's whole cycles read +-25%), so one process says nothing of its own noise
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
    goal = rule.target_pct(w.tokens_per_s)
    why = f"not settled to +-{goal:.3g}% within {rule.max_steps} steps"
    if w.end < rule.max_steps:  # the job ended its reports (done, exited) before max_steps
        why = f"not settled to +-{goal:.3g}% in the {w.end} steps the job gave"
    if goal < rule.half_width_pct:
        why += f" (half its {_gap(w, rule):.1f}% difference from the study's best)"
    if w.cycle is None and w.trend_t is not None and abs(w.trend_t) > TREND:
        why += " (its tokens per step still trend: a data order longer than the window; raise "
        why += "command.max_steps)"
    return head + f"): {why}"


def _gap(w: Window, rule: Rule) -> float:
    """The window's figure against the study's best, in percent of the best."""
    return 100.0 * abs(w.tokens_per_s - (rule.against or 0.0)) / (rule.against or 1.0)


def against(rule: Rule, run_dir: Path | None) -> Rule:
    """The rule with the study's best figure, once the search has written it beside the trial
    (protocol.AGAINST_FILE); as it was until then."""
    path = run_dir / AGAINST_FILE if run_dir is not None else None
    try:
        best = json.loads(path.read_text())["tokens_per_s_per_gpu"] if path else None
    except (OSError, ValueError, KeyError, TypeError):
        return rule  # not written yet (or being replaced)
    if not isinstance(best, (int, float)) or best <= 0:
        return rule
    return dataclasses.replace(rule, against=float(best))
