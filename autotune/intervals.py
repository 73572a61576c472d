"""A median's 95% interval from a set of samples (fresh processes, repeats, steps), and when it
bounds nothing: the one rule every figure's interval follows (metrics, the confirmation, check,
the report)."""

from __future__ import annotations

import math
import statistics
from typing import Any

# An interval is printed only where it bounds something: from at least MIN_INTERVAL_SAMPLES samples,
# both ends finite, positive and within MAX_INTERVAL_FACTOR of the centre. Wider says "anywhere from
# half to twice", no bound at all. Two samples never do: Student's t of 1 degree of freedom is 12.7,
# so two samples 10% apart span 573 to 1,924 around 1,050, and a confirmation of 2 printed "95%
# interval 0 to 1,108,731,079,831" (issue 29).
MIN_INTERVAL_SAMPLES = 3
MAX_INTERVAL_FACTOR = 2.0


def unbounded(center: float, ci: tuple[float, float] | list[float], n: int) -> str | None:
    """Why the interval `ci` around `center`, from n samples, bounds nothing ("too few samples
    ..."); None where it does (the rule: MIN_INTERVAL_SAMPLES, MAX_INTERVAL_FACTOR)."""
    if n < MIN_INTERVAL_SAMPLES:
        return f"too few samples ({n}; an interval needs {MIN_INTERVAL_SAMPLES})"
    lo, hi = ci
    factor = MAX_INTERVAL_FACTOR
    if lo > 0 and math.isfinite(hi) and center / lo <= factor and hi / center <= factor:
        return None
    return (
        f"too few samples to bound ({n}; the 95% interval reaches past 1/{factor:g} or "
        f"{factor:g}x the median)"
    )


def bounded_interval(samples: list[float]) -> tuple[list[float] | None, str | None]:
    """The median's 95% interval where it bounds something, else None and why (the rule:
    `unbounded`)."""
    if not samples:
        return None, "no sample"
    ci = median_interval(samples)
    why = unbounded(statistics.median(samples), ci, len(samples))
    return (None, why) if why else (list(ci), None)


def median_interval(samples: list[float], level: float = 0.95) -> tuple[float, float]:
    """Interval of a set's typical value: median x exp(+-t * s / sqrt(n)), s the standard deviation
    of the log samples, t Student's quantile with n - 1 degrees of freedom; unbounded for a
    single sample."""
    med = statistics.median(samples)
    if len(samples) < 2:
        return (0.0, math.inf)
    from scipy.stats import t as student_t

    s = statistics.stdev(math.log(x) for x in samples)
    half = float(student_t.ppf(0.5 + level / 2, len(samples) - 1)) * s / math.sqrt(len(samples))
    return (med * math.exp(-half), med * math.exp(half))


def ratio_interval(numerator: list[float], denominator: list[float]) -> tuple[float, float]:
    """The 95% interval of median(numerator) / median(denominator), two sets of per-process figures:
    the ratio x exp(+-t * s * sqrt(1/n_a + 1/n_b)), s the pooled standard deviation of the log
    figures within the two sets, t Student's 97.5% quantile with n_a + n_b - 2 degrees of freedom;
    (0, inf) where that is under one (one figure a side: the noise is unknown)."""
    ratio = statistics.median(numerator) / statistics.median(denominator)
    df = len(numerator) + len(denominator) - 2
    if df < 1:
        return (0.0, math.inf)
    from scipy.stats import t as student_t

    logs = [[math.log(x) for x in group] for group in (numerator, denominator)]
    ss = sum((x - statistics.fmean(group)) ** 2 for group in logs for x in group)
    spread = math.sqrt(ss / df) * math.sqrt(1 / len(numerator) + 1 / len(denominator))
    half = float(student_t.ppf(0.975, df)) * spread
    return (ratio * math.exp(-half), ratio * math.exp(half))


def gain(chosen: list[float], baseline: list[float]) -> dict[str, Any]:
    """The chosen configuration's gain over the baseline from both sets of confirmed per-process
    figures: the ratio of their medians, its 95% interval (ratio_interval; None, with why, where it
    bounds nothing: `unbounded`) and whether that interval holds 1 (within noise)."""
    ratio = statistics.median(chosen) / statistics.median(baseline)
    ci = ratio_interval(chosen, baseline)
    why = unbounded(ratio, ci, len(chosen) + len(baseline))
    return {
        "ratio": ratio,
        "ci95": None if why else list(ci),
        "ci95_why": why,
        "within_noise": bool(why) or ci[0] <= 1 <= ci[1],
        "samples": [len(chosen), len(baseline)],
    }
