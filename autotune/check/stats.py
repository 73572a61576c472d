"""The statistics of `autotune check`: the verdict on per-process samples (decide: a Decision with
its evidence, failing closed), the default tolerance from the baseline's noise, and the step in the
nightly series (series_drift: history.jsonl's typed nights). Numbers in, a decision out."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from autotune import metrics

if TYPE_CHECKING:
    from autotune.documents.nightly import Night

# The default tolerance follows the baseline's noise: the larger of a floor and a multiple of its
# process-to-process spread (the standard deviation of log tokens/s); with one baseline sample the
# spread is unknown and the old fixed 5% stands. On an H200 the spread was 0.1-0.3% (issue 16), so
# 2% decides; on a CPU swinging 20% it is wide by itself.
TOLERANCE_FLOOR_PCT = 2.0
NOISE_MULTIPLE = 3.0
FALLBACK_TOLERANCE_PCT = 5.0
# The nightly series (history.jsonl): a step down of at least SERIES_FLOOR_PCT, found by ruptures'
# binary segmentation on log tokens/s with a BIC-like penalty of SERIES_PENALTY x (a night's noise)
# x log(nights).
SERIES_FLOOR_PCT = 1.0
SERIES_PENALTY = 4.0
SERIES_NOISE_MULTIPLE = 4.0  # ... and a step must exceed this many night-to-night spreads


class Decision(NamedTuple):
    """decide's verdict with its evidence: what it is, the ratio and its interval, why in words,
    and what else would settle it when it is inconclusive."""

    status: str  # pass | faster | regression | inconclusive
    ratio: float  # median(check) / median(baseline)
    ci: tuple[float, float]  # the ratio's 95% interval; (0, inf) where none can be computed
    reason: str  # why, with the interval's numbers
    # inconclusive: besides more repeats, what would settle it, to follow "run check with more
    # repeats, or ..."; "" when decided
    settle: str


def decide(baseline: list[float], check: list[float], tolerance_pct: float) -> Decision:
    """The gate decides only on evidence, and fails closed: with floor = 1 - tolerance,

    - regression: the ratio's 95% interval lies below the floor (its upper end under it);
    - pass: the interval lies above the floor (no slowdown beyond the tolerance), and bounds
      something (metrics.unbounded: within 1/2 to 2x the ratio);
    - faster, a kind of pass: the interval's lower end above 1 and the ratio above 1 + tolerance;
    - inconclusive: anything else: an interval that reaches across the floor, that bounds nothing,
      or that cannot be computed (one sample a side: the noise is unknown).

    Samples are per-process medians of tokens/s (process-to-process noise is what a re-measurement
    meets). ratio = median(check) / median(baseline); its interval is ratio x exp(+-t * s *
    sqrt(1/n_c + 1/n_b)), s the pooled standard deviation of log(tokens/s) within the two sets, t
    Student's 97.5% quantile with n_c + n_b - 2 degrees of freedom.

    >>> decide([100.0, 101.0, 99.0], [100.0, 12.5, 3.3], 2.0).status  # 1x, 8x, 30x slower
    'inconclusive'
    """
    ratio = statistics.median(check) / statistics.median(baseline)
    floor, tol = 1 - tolerance_pct / 100, tolerance_pct / 100
    df = len(check) + len(baseline) - 2
    if df < 1:
        return Decision(
            "inconclusive",
            ratio,
            (0.0, math.inf),
            f"one sample a side ({len(baseline)} baseline, {len(check)} check): the noise is "
            "unknown, so no interval",
            "with a baseline of several processes (check --reset-baseline --repeats 5)",
        )
    lo, hi = _interval(baseline, check, ratio, df)
    ci, text = (lo, hi), f"the 95% interval {lo:.3g} to {hi:.3g}"
    if hi < floor:
        why = f"{text} lies below {floor:g}: slower than the tolerance allows, beyond the noise"
        return Decision("regression", ratio, ci, why, "")
    if lo <= floor:
        # across the floor: from a wide scatter (it reaches past no change), or from a slowdown
        # near the tolerance that a narrower interval would still straddle
        scatter = hi >= 1
        cause = "the repeats scatter" if scatter else "the slowdown lies near the tolerance"
        why = f"{text} reaches both below {floor:g} and above it: {cause}"
        settle = (
            "on a quieter machine" if scatter else "with a --tolerance past the slowdown you accept"
        )
        return Decision("inconclusive", ratio, ci, why, settle)
    unbounded = metrics.unbounded(ratio, ci, len(check) + len(baseline))
    if unbounded:
        why = f"{text} lies above {floor:g} but bounds nothing: {unbounded}"
        return Decision("inconclusive", ratio, ci, why, "on a quieter machine")
    if lo > 1 and ratio > 1 + tol:
        why = f"{text} lies above 1 and the ratio above {1 + tol:g}: faster beyond the noise"
        return Decision("faster", ratio, ci, why, "")
    return Decision(
        "pass", ratio, ci, f"{text} lies above {floor:g}: no slowdown past the tolerance", ""
    )


def _interval(
    baseline: list[float], check: list[float], ratio: float, df: int
) -> tuple[float, float]:
    """The ratio's 95% interval: Student's t on log tokens/s, the pooled spread of both sets."""
    from scipy.stats import t as student_t

    ss = sum(
        (math.log(x) - statistics.fmean(map(math.log, group))) ** 2
        for group in (check, baseline)
        for x in group
    )
    s = math.sqrt(ss / df)
    half = float(student_t.ppf(0.975, df)) * s * math.sqrt(1 / len(check) + 1 / len(baseline))
    return ratio * math.exp(-half), ratio * math.exp(half)


def default_tolerance(baseline: list[float]) -> tuple[float, str]:
    """The tolerance when --tolerance is not given, and how it was set (module constants)."""
    if len(baseline) < 2:
        return (
            FALLBACK_TOLERANCE_PCT,
            f"{FALLBACK_TOLERANCE_PCT:g}% (one baseline sample: its noise is unknown)",
        )
    spread = 100 * statistics.stdev(math.log(x) for x in baseline)
    pct = round(max(TOLERANCE_FLOOR_PCT, NOISE_MULTIPLE * spread), 2)
    return pct, (
        f"{pct:g}%: the larger of {TOLERANCE_FLOOR_PCT:g}% and {NOISE_MULTIPLE:g} x the baseline's "
        f"process-to-process spread ({spread:.2f}%)"
    )


def series_drift(nights: Sequence[Night], min_shift_pct: float = 0.0) -> dict[str, Any] | None:
    """A lasting step down in the nightly series (each night: check_median, check_samples,
    checked_at), which nightly --update can absorb one tolerated step at a time: ruptures' binary
    segmentation on log tokens/s, its penalty scaled by a night's noise (the larger of the
    within-night variance of the median and the robust night-to-night variance), and a step must
    exceed 4 night-to-night spreads and 3 process-to-process spreads too; the earliest change after
    which the level stays at least SERIES_FLOOR_PCT below the level before it.
    None with fewer than 3 nights or no such change. min_shift_pct: a step smaller than this is not
    flagged either (check passes --tolerance: a tolerance the user chose bounds what matters across
    nights as within one; on a CPU whose speed changed by 25% between checks an explicit 50%
    tolerance had still failed on the series)."""
    values = [math.log(n.check_median) for n in nights]
    if len(values) < 3:
        return None
    import numpy as np
    import ruptures

    repeated = [n.check_samples for n in nights if len(n.check_samples) >= 2]
    # one process's, each night
    spreads = [statistics.variance([math.log(x) for x in s]) for s in repeated]
    within = [v / len(s) for v, s in zip(spreads, repeated)]  # each night's median's
    # nights also differ by more than their own repeats say (a CPU's state, a GPU's clocks): the
    # night-to-night variance from second differences (robustly: median |x[i+1] - 2 x[i] + x[i-1]| /
    # 0.6745, squared, / 6), which a steady drift does not move at all and one step moves in two
    # terms only
    second = [abs(c - 2 * b + a) for a, b, c in zip(values, values[1:], values[2:])]
    between = (statistics.median(second) / 0.6745) ** 2 / 6
    # 0.1%: never a zero penalty
    sigma2 = max(statistics.median(within) if within else 0.0, between, 0.001**2)
    signal = np.array(values).reshape(-1, 1)
    breaks = (
        ruptures.Binseg(model="l2", min_size=1, jump=1)
        .fit(signal)
        .predict(pen=SERIES_PENALTY * sigma2 * math.log(len(values)))
    )
    edges = [0, *breaks]
    # a step must also stand out of the noise: of the night-to-night spread, and, as the check's own
    # tolerance, of 3 process-to-process spreads (with few nights the first is barely estimated): a
    # machine whose speed wanders (a shared CPU) is not flagged for wandering
    process = math.sqrt(statistics.median(spreads)) if spreads else 0.0
    floor = max(
        SERIES_FLOOR_PCT / 100,
        SERIES_NOISE_MULTIPLE * math.sqrt(between),
        NOISE_MULTIPLE * process,
        min_shift_pct / 100,
    )
    for start, b in zip(edges, edges[1:-1]):  # each change point, earliest first
        shift = math.exp(statistics.fmean(values[b:]) - statistics.fmean(values[start:b])) - 1
        if shift <= -floor:
            return {
                "night": b + 1,
                "checked_at": nights[b].checked_at,
                "shift_pct": round(100 * shift, 2),
                "nights": len(values),
                "method": "ruptures.Binseg(l2)",
            }
    return None
