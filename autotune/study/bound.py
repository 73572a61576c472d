"""What a search can say of your setting when it ends: the gain it found, with its interval, or a
bound on what it may have missed: "no configuration of N measured beats your setting by more than
X% (95%)".

Each configuration's figure is compared with the baseline's as a ratio, on a log scale. Its noise
is the spread between fresh processes where the confirmation measured one configuration two or
more times (the pooled standard deviation of the log figures of every configuration re-measured:
what one process's figure can be off by), else what the trial's own window says (its 95%
half-width, task command). With N configurations compared at once, each interval is at the
Bonferroni level 1 - 0.05/N, so the bound holds for all of them together at 95%. A configuration
whose noise is unknown (no interval of its own, none measured between processes) is left out of the
bound and named. Where the confirmation kept your setting (search/race.pick), the bound is said,
never another configuration's gain.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import optuna

from autotune.documents.record import Metric
from autotune.study.history import History, value_of


def samples_of(h: History, conf: dict[str, Any] | None) -> dict[int, list[float]]:
    """Each completed trial's per-process figures: its search trial's, then the confirmation's."""
    out = {t.number: [v] for t in h.completed if (v := value_of(t)) is not None}
    arms = [*((conf or {}).get("stats") or []), (conf or {}).get("baseline")]
    for arm in arms:
        if isinstance(arm, dict) and arm.get("trial") in out:
            out[arm["trial"]] += [float(x) for x in arm.get("samples") or [] if x]
    return out


def process_sigma(samples: dict[int, list[float]]) -> float | None:
    """The pooled standard deviation of log figures between processes (None: no configuration was
    measured twice)."""
    logs = [[math.log(x) for x in xs] for xs in samples.values() if len(xs) >= 2]
    dof = sum(len(xs) - 1 for xs in logs)
    if dof < 1:
        return None
    ss = sum((x - statistics.fmean(xs)) ** 2 for xs in logs for x in xs)
    return math.sqrt(ss / dof)


def window_sigma(t: optuna.trial.FrozenTrial) -> float | None:
    """A trial's own noise on the log scale, from its window's 95% half-width (None: none)."""
    window = (t.user_attrs.get("metrics") or {}).get(Metric.WINDOW) or {}
    width = window.get("half_width_pct")
    if not isinstance(width, (int, float)) or width <= 0:
        return None
    return math.log1p(width / 100) / 1.96


def statement(h: History, conf: dict[str, Any] | None) -> dict[str, Any] | None:
    """{kind: gain | bound | unbounded | unrun, text, ...} of the study (None: your setting was
    not measured yet). unrun: your setting ran and failed (out of memory: it does not fit), so
    there is no gain to state; the fastest that ran is said with its interval."""
    base = h.baseline
    if base is None:
        return _unrun(h, conf)
    samples = samples_of(h, conf)
    others = [t for t in h.completed if t.number != base.number and t.number in samples]
    if not others:
        return {"kind": "unbounded", "n": 0, "text": "nothing but your setting was measured"}
    z = statistics.NormalDist().inv_cdf(1 - 0.025 / len(others))
    between = process_sigma(samples)
    limits = {t.number: _limits(t, base, samples, between, z) for t in others}
    known = {n: lim for n, lim in limits.items() if lim is not None}
    unknown = sorted(n for n, lim in limits.items() if lim is None)
    # the chosen configuration's gain where it is one, else the surest gain of any; none where the
    # confirmation kept your setting (search/race.pick): what it can say is the bound
    chosen = (conf or {}).get("chosen")
    surest = max(known.items(), key=lambda item: item[1][1], default=None)
    found = (chosen, known[chosen]) if chosen in known and known[chosen][1] > 1 else surest
    if chosen != base.number and found is not None and found[1][1] > 1:
        number, (ratio, low, high) = found
        return _gain(number, ratio, low, high, len(others), unknown)
    if not known:
        text = f"no interval: the noise of trials {', '.join(map(str, unknown))} is unknown"
        return {"kind": "unbounded", "n": len(others), "text": text}
    return _bound(max(lim[2] for lim in known.values()), len(others), unknown)


def _limits(
    t: optuna.trial.FrozenTrial,
    base: optuna.trial.FrozenTrial,
    samples: dict[int, list[float]],
    between: float | None,
    z: float,
) -> tuple[float, float, float] | None:
    """(ratio to the baseline, its lower and upper limit) of one configuration."""
    mine, theirs = samples[t.number], samples[base.number]
    ratio = statistics.median(mine) / statistics.median(theirs)
    sigma_t = between if between is not None else window_sigma(t)
    sigma_b = between if between is not None else window_sigma(base)
    if sigma_t is None or sigma_b is None:
        return None
    half = z * math.sqrt(sigma_t**2 / len(mine) + sigma_b**2 / len(theirs))
    return ratio, ratio * math.exp(-half), ratio * math.exp(half)


def _gain(
    number: int, ratio: float, low: float, high: float, n: int, unknown: list[int]
) -> dict[str, Any]:
    text = (
        f"trial {number} beats your setting {ratio:.2f}x (95% interval {low:.2f}x to "
        f"{high:.2f}x, all {n} configurations compared at once)"
    )
    return {
        "kind": "gain",
        "n": n,
        "trial": number,
        "ratio": ratio,
        "ci95": [low, high],
        "unknown": unknown,
        "text": text + _left_out(unknown),
    }


def _bound(upper: float, n: int, unknown: list[int]) -> dict[str, Any]:
    pct = max(0.0, 100 * (upper - 1))
    text = (
        f"no configuration of {n} measured beats your setting by more than {pct:.1f}% (95%, all "
        f"{n} at once)"
    )
    if upper < 1:  # every one is slower, surely
        text = (
            f"no configuration of {n} measured reaches your setting: the best is at most "
            f"{upper:.2f}x it (95%, all {n} at once)"
        )
    return {
        "kind": "bound",
        "n": n,
        "upper_pct": pct,
        "unknown": unknown,
        "text": text + _left_out(unknown),
    }


def _left_out(unknown: list[int]) -> str:
    if not unknown:
        return ""
    return f"; trials {', '.join(map(str, unknown))} left out: their noise is unknown"


def _unrun(h: History, conf: dict[str, Any] | None) -> dict[str, Any] | None:
    """Your setting's trial failed (its status and the first words of why): no gain to state, and
    the fastest configuration that ran, confirmed (its median and 95% interval over fresh
    processes) or not (one measurement)."""
    failed = h.seen.get(h.base_key) if h.base_key is not None else None
    if failed is None or failed.user_attrs.get("predicted"):
        return None
    status = failed.user_attrs.get("status")
    what = "ran out of memory: it does not fit" if status == "oom" else f"ended {status}"
    text = f"your setting (trial {failed.number}) {what}, so there is no gain to state"
    best = _fastest(h, conf)
    return {"kind": "unrun", "n": len(h.completed), "status": status, "text": text + best}


def _fastest(h: History, conf: dict[str, Any] | None) -> str:
    """'; the fastest that ran: trial N, ...' (confirmed where it was), '' where none ran."""
    chosen = (conf or {}).get("chosen")
    arm = next((st for st in (conf or {}).get("stats") or [] if st["trial"] == chosen), None)
    if arm is not None and arm.get("median"):
        interval = arm.get("ci95")
        spread = (
            f"95% interval {interval[0]:,.0f} to {interval[1]:,.0f}"
            if interval
            else f"no interval: {arm.get('ci95_why')}"
        )
        return (
            f"; the fastest that ran: trial {chosen}, {arm['median']:,.0f} tokens/s/GPU (the "
            f"median of {len(arm['samples'])} fresh processes, {spread})"
        )
    best = h.best()
    if best is None:
        return ""
    value = value_of(best) or 0.0
    return (
        f"; the fastest that ran: trial {best.number}, {value:,.0f} tokens/s/GPU (one search "
        "measurement, not confirmed: no interval)"
    )
