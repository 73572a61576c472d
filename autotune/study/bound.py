"""The search's last word on your setting: one sentence, decided by one rule (`statement`), that
every form says as it is (the end of a search, the report in a terminal, Markdown, HTML and JSON)
and whose figures best.yaml's gain and the report's `chosen.gain` carry (`gain_of`).

It speaks of the chosen configuration (the confirmation's choice, else the search's best: what
best.yaml holds). A configuration's figure is its confirmed median where the confirmation measured
it, else its one search measurement, as the card shows it.

- Another configuration than yours, both measured by the confirmation: the ratio of their confirmed
  medians, with its 95% interval from those samples, the race's own (intervals.ratio_interval; it
  bounds something only from 3 samples and within 1/2 to 2x: intervals.unbounded), so the race and
  the last word never disagree. It *beats your setting* only where that interval lies above 1; it is
  *within noise* where the interval holds 1x; where the interval bounds nothing the noise is *too
  large to bound* the gain.
- Your setting chosen (kept by the race, or the fastest measured): what any configuration measured
  may gain over it, "no configuration of N measured beats your setting by more than X% (95%)". Each
  configuration's ratio to yours has the interval ratio x exp(+-q s sqrt(1/n_a + 1/n_b)), s the
  pooled standard deviation of log figures between processes (each configuration measured in two or
  more: its search trial and its confirmation processes), q Student's quantile at the Bonferroni
  level 1 - 0.05/N with the pooled degrees of freedom: the bound holds for all N together. Where any
  interval reaches past 1/2 or 2x, the noise is too large to bound. (The same interval judges a
  chosen configuration that the confirmation could not pair with your setting.)
- No spread between processes measured (no configuration measured in two processes: the
  confirmation off, or none of its processes measured): the noise between processes is unknown, and
  no gain and no bound is stated. A trial's in-process window (task command's half-width) says
  nothing of how two processes of one configuration differ (issue 62: equal configurations "beat
  your setting 1.31x (95% interval 1.27x to 1.36x)" from it).
- Your setting ran and failed (out of memory): there is no gain to state (unrun).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from autotune import intervals
from autotune.documents.confirmation import Confirmation
from autotune.documents.record import is_predicted, status_of
from autotune.status import Status
from autotune.study.history import History, value_of

# what the confirmation says where nothing beat your setting (search/race.pick kept it)
KEEP = "nothing measured beats your setting beyond the noise; keep it"
# the basis of a ratio, said beside it
CONFIRMED = "confirmed medians of the same rounds"
HALF = "its confirmed median over your setting's search measurement"
SEARCH = "one search measurement each"
# the gain a configuration is said to have only where the noise allowed it
STATED = ("gain", "slower")
CONFIRM_MORE = "more confirmation rounds (study.confirm_rounds) or a quieter machine would bound it"
UNKNOWN = (
    "the noise between processes is unknown (no configuration was measured in two processes: the "
    "confirmation, study.confirm_top and study.confirm_rounds, re-measures the best)"
)


def samples_of(h: History, conf: Confirmation | None) -> dict[int, list[float]]:
    """Each completed trial's per-process figures: its search trial's, then the confirmation's."""
    out = {t.number: [v] for t in h.completed if (v := value_of(t)) is not None}
    for n, xs in _confirmed(conf).items():
        if n in out:
            out[n] += xs
    return out


def figures_of(h: History, conf: Confirmation | None) -> dict[int, list[float]]:
    """Each completed trial's figure's samples: its confirmed ones where the confirmation measured
    it, else its search measurement."""
    out = {t.number: [v] for t in h.completed if (v := value_of(t)) is not None}
    out.update({n: xs for n, xs in _confirmed(conf).items() if n in out and xs})
    return out


def _confirmed(conf: Confirmation | None) -> dict[int, list[float]]:
    arms = conf.arms if conf else []
    return {arm.trial: [float(x) for x in arm.samples if x] for arm in arms}


def process_noise(samples: dict[int, list[float]]) -> tuple[float, int] | None:
    """The pooled standard deviation of log figures between processes and its degrees of freedom
    (None: no configuration was measured twice)."""
    logs = [[math.log(x) for x in xs] for xs in samples.values() if len(xs) >= 2]
    dof = sum(len(xs) - 1 for xs in logs)
    if dof < 1:
        return None
    ss = sum((x - statistics.fmean(xs)) ** 2 for xs in logs for x in xs)
    return math.sqrt(ss / dof), dof


def statement(h: History, conf: Confirmation | None) -> dict[str, Any] | None:
    """{kind, text, n, ...}: the last word (module docstring); text is the sentence every form
    prints. kind: gain | within_noise | slower | too_noisy | noise_unknown (of the chosen, with its
    trial and ratio) | bound (your setting chosen, with upper_pct) | alone | unrun. None: your
    setting was not measured yet."""
    base = h.baseline
    if base is None:
        return _unrun(h, conf)
    figures = figures_of(h, conf)
    others = [t.number for t in h.completed if t.number != base.number and t.number in figures]
    if not others:
        return _said({"kind": "alone", "n": 0}, "nothing but your setting was measured")
    noise = process_noise(samples_of(h, conf))
    chosen = conf.chosen if conf else None
    if chosen not in figures:
        best = h.best()
        chosen = best.number if best is not None else base.number
    if chosen == base.number:
        kept = conf is not None and conf.chosen == base.number  # by the race
        return _yours(figures, base.number, others, noise, kept)
    pair = _confirmed(conf)
    both = bool(pair.get(chosen)) and bool(pair.get(base.number))
    basis = CONFIRMED if both else HALF if pair.get(chosen) else SEARCH
    return _chosen(figures[chosen], figures[base.number], chosen, basis, noise, len(others))


def _chosen(
    mine: list[float],
    yours: list[float],
    number: int,
    basis: str,
    noise: tuple[float, int] | None,
    n: int,
) -> dict[str, Any]:
    """The chosen configuration against your setting (module docstring): the race's interval where
    the confirmation paired them, else the one between processes, all n compared at once."""
    ratio = statistics.median(mine) / statistics.median(yours)
    said: dict[str, Any] = {"n": n, "trial": number, "ratio": ratio, "basis": basis}
    said["samples"] = [len(mine), len(yours)]
    measured = f"trial {number} is not shown to beat your setting: it measured {ratio:.2f}x it"
    figures = (
        f"{statistics.median(mine):,.0f} against {statistics.median(yours):,.0f} tokens/s/GPU, "
        f"{basis}"
    )
    if basis == CONFIRMED:
        ci = intervals.ratio_interval(mine, yours)
        why, level = _paired_why(ratio, ci, len(mine) + len(yours)), ""
    elif noise is None:
        said.update(kind="noise_unknown", ci95=None)
        return _said(said, f"{measured} ({figures}), but {UNKNOWN}")
    else:
        ci = _interval(ratio, len(mine), len(yours), noise, n)
        why, level = _too_wide(ratio, ci, noise), f", all {n} configurations compared at once"
    if why:
        said.update(kind="too_noisy", ci95=None, ci95_why=why)
        text = f"{measured} ({figures}), but the noise is too large to bound the gain ({why}); "
        return _said(said, text + CONFIRM_MORE)
    lo, hi = ci
    said["ci95"] = [lo, hi]
    interval = f"95% interval {lo:.2f}x to {hi:.2f}x{level}"
    if lo > 1:
        said["kind"] = "gain"
        return _said(
            said, f"trial {number} beats your setting {ratio:.2f}x ({interval}; {figures})"
        )
    if hi < 1:
        said["kind"] = "slower"
        return _said(
            said, f"trial {number} is slower than your setting: {ratio:.2f}x it ({interval})"
        )
    said["kind"] = "within_noise"
    return _said(said, f"{measured}, within noise: its {interval} holds 1x ({figures})")


def _yours(
    figures: dict[int, list[float]],
    base: int,
    others: list[int],
    noise: tuple[float, int] | None,
    kept: bool,
) -> dict[str, Any]:
    """Your setting chosen: the bound on what the others measured may gain over it."""
    n = len(others)
    head = KEEP if kept else "your setting measured fastest"
    rest = "the other" if n == 1 else f"the {n} others"
    if noise is None:
        said = {"kind": "noise_unknown", "n": n, "trial": base}
        return _said(said, f"{head}, but {UNKNOWN}, so nothing bounds what {rest} may gain")
    theirs = figures[base]
    limits = {}
    for k in others:
        ratio = statistics.median(figures[k]) / statistics.median(theirs)
        limits[k] = (ratio, _interval(ratio, len(figures[k]), len(theirs), noise, n))
    wide = [why for ratio, ci in limits.values() if (why := _too_wide(ratio, ci, noise))]
    if wide:
        said = {"kind": "too_noisy", "n": n, "trial": base, "ci95_why": wide[0]}
        text = f"{head}, though the noise is too large to bound what {rest} may gain ({wide[0]})"
        return _said(said, f"{text}; {CONFIRM_MORE}")
    upper = max(ci[1] for _, ci in limits.values())
    pct = max(0.0, 100 * (upper - 1))
    said = {"kind": "bound", "n": n, "trial": base, "upper_pct": pct}
    bound = (
        f"no configuration of {n} measured beats it by more than {pct:.1f}% (95%, all {n} at once)"
    )
    if upper < 1:  # every one is slower, surely
        bound = (
            f"no configuration of {n} measured reaches it: the best is at most {upper:.2f}x it "
            f"(95%, all {n} at once)"
        )
    return _said(said, f"{head}: {bound}")


def _interval(
    ratio: float, n_a: int, n_b: int, noise: tuple[float, int], n: int
) -> tuple[float, float]:
    """ratio x exp(+-q s sqrt(1/n_a + 1/n_b)), q Student's at 1 - 0.05/n (two-sided)."""
    from scipy.stats import t as student_t

    sigma, dof = noise
    q = float(student_t.ppf(1 - 0.025 / n, dof))
    half = q * sigma * math.sqrt(1 / n_a + 1 / n_b)
    return ratio * math.exp(-half), ratio * math.exp(half)


def _paired_why(ratio: float, ci: tuple[float, float], n: int) -> str | None:
    """Why the race's interval of the ratio bounds nothing (intervals.unbounded's rule), worded for
    a ratio; None where it bounds."""
    if intervals.unbounded(ratio, ci, n) is None:
        return None
    if n < intervals.MIN_INTERVAL_SAMPLES:
        return f"{n} processes in all; an interval needs {intervals.MIN_INTERVAL_SAMPLES}"
    factor = intervals.MAX_INTERVAL_FACTOR
    return f"its 95% interval from {n} processes reaches past 1/{factor:g} or {factor:g}x the ratio"


def _too_wide(ratio: float, ci: tuple[float, float], noise: tuple[float, int]) -> str | None:
    """Why an interval bounds nothing (past 1/2 or 2x the ratio: intervals.MAX_INTERVAL_FACTOR),
    with the noise a process; None where it bounds."""
    factor = intervals.MAX_INTERVAL_FACTOR
    if ci[0] > 0 and ratio / ci[0] <= factor and ci[1] / ratio <= factor:
        return None
    return (
        f"the 95% interval reaches past 1/{factor:g} or {factor:g}x the ratio: processes of one "
        f"configuration differ by {100 * math.expm1(noise[0]):.0f}%, one standard deviation"
    )


def _said(said: dict[str, Any], text: str) -> dict[str, Any]:
    """The statement with its sentence as every form prints it (capitalised, a full stop)."""
    return {**said, "text": f"{text[:1].upper()}{text[1:]}."}


def gain_of(said: dict[str, Any] | None) -> dict[str, Any] | None:
    """The chosen configuration's gain as the statement decided it: its ratio, 95% interval (None,
    with why, where the noise allowed none), whether it is within noise (no gain stated), its basis
    and kind; None where the statement has no ratio of the chosen (your setting chosen, unrun)."""
    if not said or "ratio" not in said:
        return None
    return {
        "ratio": said["ratio"],
        "ci95": said.get("ci95"),
        "ci95_why": said.get("ci95_why") or (UNKNOWN if said["kind"] == "noise_unknown" else None),
        "within_noise": said["kind"] not in STATED,
        "samples": said["samples"],
        "basis": said["basis"],
        "kind": said["kind"],
    }


def _unrun(h: History, conf: Confirmation | None) -> dict[str, Any] | None:
    """Your setting's trial failed (its status and the first words of why): no gain to state, and
    the fastest configuration that ran, confirmed (its median and 95% interval over fresh
    processes) or not (one measurement)."""
    failed = h.seen.get(h.base_key) if h.base_key is not None else None
    if failed is None or is_predicted(failed):
        return None
    status = status_of(failed)
    what = "ran out of memory: it does not fit" if status == Status.OOM else f"ended {status}"
    text = f"your setting (trial {failed.number}) {what}, so there is no gain to state"
    said = {"kind": "unrun", "n": len(h.completed), "status": status}
    return _said(said, text + _fastest(h, conf))


def _fastest(h: History, conf: Confirmation | None) -> str:
    """'; the fastest that ran: trial N, ...' (confirmed where it was), '' where none ran."""
    chosen = conf.chosen if conf else None
    arm = next((st for st in conf.stats if st.trial == chosen), None) if conf else None
    if arm is not None and arm.median:
        interval = arm.ci95
        spread = (
            f"95% interval {interval[0]:,.0f} to {interval[1]:,.0f}"
            if interval
            else f"no interval: {arm.ci95_why}"
        )
        return (
            f"; the fastest that ran: trial {chosen}, {arm.median:,.0f} tokens/s/GPU (the "
            f"median of {len(arm.samples)} fresh processes, {spread})"
        )
    best = h.best()
    if best is None:
        return ""
    value = value_of(best) or 0.0
    return (
        f"; the fastest that ran: trial {best.number}, {value:,.0f} tokens/s/GPU (one search "
        "measurement, not confirmed: no interval)"
    )
