"""The statistics of `autotune check`: the verdict on per-process samples (decide: a Decision with
its evidence, failing closed), the default tolerance from the baseline's noise, and the step in the
nightly series (series_drift: history.jsonl's typed nights). Numbers in, a decision out."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from autotune import intervals

if TYPE_CHECKING:
    from autotune.documents.nightly import Night

# The default tolerance follows the baseline's noise: the larger of a floor and a multiple of its
# process-to-process spread (the standard deviation of log tokens/s); with one baseline sample the
# spread is unknown and the old fixed 5% stands. On an H200 the spread was 0.1-0.3% (issue 16), so
# 2% decides; on a CPU swinging 20% it is wide by itself.
TOLERANCE_FLOOR_PCT = 2.0
NOISE_MULTIPLE = 3.0
FALLBACK_TOLERANCE_PCT = 5.0
# ... and at most this: the floor 1 - tolerance lies NOISE_MULTIPLE spreads below 1 in log tokens/s
# (1 - exp(-3 x spread), 3 x the spread where it is small), which never reaches 100% but nears it (a
# baseline whose 3 processes ran 1x / 1.45x / 0.7x set 107% with the linear rule: every later
# check passed, 3x slower ones too). 30%: at the spread that reaches it (11.9%), 5 + 5 processes
# at the first look still catch every 2x slowdown, and pass unchanged code in 2 of 3 (the rest
# inconclusive; 2,000 lognormal draws of decide with this tolerance). A baseline spread past that
# is refused when recorded (check/record.py: check --reset-baseline, --update).
MAX_TOLERANCE_PCT = 30.0
# The nightly series (history.jsonl): a step down of at least SERIES_FLOOR_PCT, found by ruptures'
# binary segmentation on log tokens/s with a BIC-like penalty of SERIES_PENALTY x (a night's noise)
# x log(nights).
SERIES_FLOOR_PCT = 1.0
SERIES_PENALTY = 4.0
SERIES_NOISE_MULTIPLE = 4.0  # ... and a step must exceed this many night-to-night spreads


# The gate's error over all of a check's looks (issue 62): each wrong call, a regression of
# unchanged code or a "faster" one (which --update records), at most ALPHA / 2 = 1%, however many
# times check decides again (regress._settle: the first --repeats, then one more at a time while
# inconclusive). Look 1 spends FIRST_LOOK_SHARE of ALPHA, the planned extra looks share the rest
# equally (a weighted Bonferroni split over the plan): by the union bound the total holds whatever
# the looks share and whatever stopped them, and the first look, where a steady machine decides,
# keeps most of its power. The one-look interval every view labels "95% CI" (Decision.ci) is kept
# beside the one that decides.
ALPHA = 0.02
FIRST_LOOK_SHARE = 0.5
SHOWN_LEVEL = 0.95
# what would settle an interval too wide, besides more repeats: where the baseline's processes are
# most of its variance, more check repeats barely narrow it
QUIETER = "on a quieter machine"
MORE_BASELINE = "with a baseline of more processes (check --reset-baseline --repeats 10)"


class Decision(NamedTuple):
    """decide's verdict with its evidence: what it is, the ratio and its interval, why in words,
    what else would settle it when it is inconclusive, and the interval that decided (its level
    spent for this look of the check's)."""

    status: str  # pass | faster | regression | inconclusive
    ratio: float  # median(check) / median(baseline)
    ci: tuple[float, float]  # the ratio's 95% interval, one look; (0, inf) where none is computed
    reason: str  # why, with the deciding interval's numbers
    # inconclusive: besides more repeats, what would settle it, to follow "run check with more
    # repeats, or ..."; "" when decided
    settle: str
    decided_ci: tuple[float, float] = (0.0, math.inf)  # the interval that decided, at `level`
    level: float = 1 - ALPHA  # its confidence (look_level)


def look_level(look: tuple[int, int]) -> float:
    """The confidence of the interval that decides look k of at most n (check's first decision is
    look 1; each extra repeat, one more): 1 - ALPHA alone; else 1 - ALPHA x FIRST_LOOK_SHARE at the
    first look and 1 - ALPHA x (1 - FIRST_LOOK_SHARE) / (n - 1) at each later one.

    >>> [round(look_level(x), 4) for x in ((1, 1), (1, 11), (2, 11))]
    [0.98, 0.99, 0.999]
    """
    k, most = look
    if not 1 <= k <= most:
        raise ValueError(f"look {k} of at most {most}: a look is 1 to the most planned")
    if most == 1:
        return 1 - ALPHA
    if k == 1:
        return 1 - ALPHA * FIRST_LOOK_SHARE
    return 1 - ALPHA * (1 - FIRST_LOOK_SHARE) / (most - 1)


def welch_interval(
    baseline: Sequence[float], check: Sequence[float], level: float
) -> tuple[float, float]:
    """The `level` interval of the ratio of geometric means, check / baseline, for unequal noise:
    Welch's t on log tokens/s, exp(d +- t * se), d the difference of the mean logs, se^2 = s_c^2 /
    n_c + s_b^2 / n_b, t Student's quantile at the Welch-Satterthwaite degrees of freedom (as
    scipy.stats.ttest_ind(equal_var=False).confidence_interval). A baseline of one process has no
    spread of its own: the check's is taken for it (a pooled t of n_c - 1 degrees of freedom, as
    scipy's equal_var=True); the check needs two processes at least (ValueError), since a
    baseline's spread says nothing of the night's."""
    return _at(_welch(baseline, check), level)


class _Welch(NamedTuple):
    """welch_interval's numbers: the difference of the mean logs, its standard error, the degrees
    of freedom, and the baseline's share of the variance (past 1/2, more check repeats narrow the
    interval less than more baseline processes would)."""

    centre: float
    se: float
    df: float
    baseline_share: float


def _welch(baseline: Sequence[float], check: Sequence[float]) -> _Welch:
    """welch_interval's numbers (_Welch)."""
    import numpy as np

    if len(check) < 2:
        raise ValueError(f"{len(check)} check process: its spread is unknown")
    logs_b, logs_c = np.log(baseline), np.log(check)
    nb, nc = len(logs_b), len(logs_c)
    vc = float(logs_c.var(ddof=1))
    vb = float(logs_b.var(ddof=1)) if nb > 1 else vc
    wb, wc = vb / nb, vc / nc
    centre = float(logs_c.mean() - logs_b.mean())
    if wb + wc == 0:  # identical samples on both sides: nothing to widen
        return _Welch(centre, 0.0, math.inf, 0.0)
    df = nc - 1 if nb == 1 else (wb + wc) ** 2 / (wb**2 / (nb - 1) + wc**2 / (nc - 1))
    return _Welch(centre, math.sqrt(wb + wc), df, wb / (wb + wc))


def _at(welch: _Welch, level: float) -> tuple[float, float]:
    """The ratio's `level` interval from _welch's numbers."""
    from scipy.special import stdtrit  # Student's t quantile (scipy.stats.t.ppf, without its cost)

    half = float(stdtrit(welch.df, 0.5 + level / 2)) * welch.se if welch.se else 0.0
    return math.exp(welch.centre - half), math.exp(welch.centre + half)


def decide(
    baseline: list[float],
    check: list[float],
    tolerance_pct: float,
    *,
    look: tuple[int, int] = (1, 1),
) -> Decision:
    """The gate decides only on evidence, and fails closed: with floor = 1 - tolerance and the
    interval of this look (welch_interval at look_level(look): look k of at most n, as check decides
    again after each extra repeat), whose centre is the ratio of geometric means,

    - regression: the interval lies below 1 (slower, beyond the noise) and its centre below the
      floor (slower by more than the tolerance);
    - pass: the interval lies above the floor (no slowdown past the tolerance), and the 95%
      interval bounds something (intervals.unbounded: within 1/2 to 2x the ratio);
    - faster, a kind of pass and a regression's mirror: the interval above 1 and its centre above
      1 + tolerance;
    - inconclusive: anything else: an interval that reaches across the floor and above 1, or
      across the floor with its centre within the tolerance, that bounds nothing, or that cannot
      be computed (one check process: the night's noise is unknown).

    Samples are per-process medians of tokens/s (process-to-process noise is what a re-measurement
    meets); Decision.ratio is median(check) / median(baseline), as the views print it beside the
    one-look 95% interval (Decision.ci). The interval is Welch's, for unequal noise: a baseline
    recorded on a quiet night does not narrow a scattering check's (issue 62); each wrong call,
    regression or faster, is at most ALPHA / 2 over all of a check's looks.

    >>> decide([100.0, 101.0, 99.0], [100.0, 12.5, 3.3], 2.0).status  # 1x, 8x, 30x slower
    'inconclusive'
    """
    ratio = statistics.median(check) / statistics.median(baseline)
    if len(check) < 2:
        return _noise_unknown(len(baseline), ratio)
    level, welch = look_level(look), _welch(baseline, check)
    lo, hi = _at(welch, level)
    ci, n = _at(welch, SHOWN_LEVEL), len(baseline) + len(check)
    quieter = QUIETER if welch.baseline_share <= 0.5 else MORE_BASELINE
    status, why, settle = _judge(ratio, (lo, hi), ci, tolerance_pct, n, quieter)
    notes = [f"look {look[0]} of at most {look[1]}"] if look[1] > 1 else []
    if len(baseline) == 1:
        notes.append("one baseline process: the check's spread taken for it")
    said = f" ({'; '.join(notes)})" if notes else ""
    text = f"the {100 * level:.4g}% interval {lo:.3g} to {hi:.3g}{said}"
    return Decision(status, ratio, ci, f"{text} {why}", settle, (lo, hi), level)


def _noise_unknown(n_baseline: int, ratio: float) -> Decision:
    """One check process: no interval (against one baseline process too: neither side's noise)."""
    if n_baseline < 2:
        return Decision(
            "inconclusive",
            ratio,
            (0.0, math.inf),
            f"one sample a side ({n_baseline} baseline, 1 check): the noise is unknown, so no "
            "interval",
            "with a baseline of several processes (check --reset-baseline --repeats 5)",
        )
    return Decision(
        "inconclusive",
        ratio,
        (0.0, math.inf),
        f"one check process (against {n_baseline} baseline): its noise is unknown, and the "
        "baseline's says nothing of it, so no interval",
        "with --repeats 3 or more",
    )


def _judge(
    ratio: float,
    interval: tuple[float, float],
    shown: tuple[float, float],
    tolerance_pct: float,
    n: int,
    quieter: str = QUIETER,
) -> tuple[str, str, str]:
    """decide's branches on the deciding interval and its centre (the ratio of geometric means, the
    estimate that interval is of: under lognormal noise steadier than the ratio of medians, whose
    5-process variance is about 1.4 times larger): the status, what the interval does (the reason
    after "the X% interval LO to HI") and what would settle an inconclusive one. A pass also needs
    the 95% interval the views print (`shown`, around `ratio`) to bound something
    (intervals.unbounded). quieter: what would settle a wide one (QUIETER, or MORE_BASELINE where
    the baseline's few processes are most of the noise)."""
    lo, hi = interval
    centre, floor, tol = math.sqrt(lo * hi), 1 - tolerance_pct / 100, tolerance_pct / 100
    slower = "slower than the tolerance allows, beyond the noise"
    if hi < floor:
        return "regression", f"lies below {floor:g}: {slower}", ""
    if hi < 1 and centre < floor:
        why = f"lies below 1 and its centre {centre:.4g} lies below {floor:g}: {slower}"
        return "regression", why, ""
    if lo <= floor:
        # across the floor: from a wide scatter (it reaches past no change), or from a slowdown
        # near the tolerance that a narrower interval would still straddle
        scatter = hi >= 1
        cause = "the repeats scatter" if scatter else "the slowdown lies near the tolerance"
        settle = quieter if scatter else "with a --tolerance past the slowdown you accept"
        return "inconclusive", f"reaches both below {floor:g} and above it: {cause}", settle
    unbounded = intervals.unbounded(ratio, shown, n)
    if unbounded:
        why = f"lies above {floor:g} but bounds nothing: {unbounded}"
        return "inconclusive", why, quieter
    if lo > 1 and centre > 1 + tol:
        why = f"lies above 1 and its centre {centre:.4g} lies above {1 + tol:g}: faster beyond "
        why += "the noise"
        return "faster", why, ""
    return "pass", f"lies above {floor:g}: no slowdown past the tolerance", ""


def default_tolerance(baseline: list[float]) -> tuple[float, str]:
    """The tolerance when --tolerance is not given, and how it was set (module constants): the
    larger of TOLERANCE_FLOOR_PCT and 1 - exp(-NOISE_MULTIPLE x the spread of log tokens/s), at
    most MAX_TOLERANCE_PCT.

    >>> default_tolerance([100.0, 145.0, 70.0])[0]  # the 1x / 1.45x / 0.7x baseline: bounded
    30.0
    """
    if len(baseline) < 2:
        return (
            FALLBACK_TOLERANCE_PCT,
            f"{FALLBACK_TOLERANCE_PCT:g}% (one baseline sample: its noise is unknown)",
        )
    spread = 100 * statistics.stdev(math.log(x) for x in baseline)
    derived = 100 * -math.expm1(-NOISE_MULTIPLE * spread / 100)
    pct = round(min(MAX_TOLERANCE_PCT, max(TOLERANCE_FLOOR_PCT, derived)), 2)
    how = (
        f"{pct:g}%: the larger of {TOLERANCE_FLOOR_PCT:g}% and {NOISE_MULTIPLE:g} x the baseline's "
        f"process-to-process spread ({spread:.2f}%)"
    )
    if derived > MAX_TOLERANCE_PCT:
        how = (
            f"{pct:g}%: bounded; {NOISE_MULTIPLE:g} x the baseline's process-to-process spread "
            f"({spread:.2f}%) would make it {derived:.0f}%, a gate too wide to use: record the "
            "baseline again on a quiet machine (check --reset-baseline)"
        )
    return pct, how


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
