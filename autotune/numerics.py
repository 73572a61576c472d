"""The numerics check's verdict (study.loss_check), from the paired loss curves a trial measured.

Standard library only: the trial's process judges an attempt to decide whether to repeat it, and the
search judges the record it stores, with the same function.

An attempt: the candidate (the trial's arithmetic: fp8, fp16, a gradient compression hook, a bf16
reduction) and its reference (knobs.reference_of: bf16, the exact all-reduce, an fp32 reduction),
both built in the trial's process from the same initial weights, take the same optimizer steps on
the same fresh batches of a fixed random source whose loss levels off (workloads/numerics_check.py).
A short check exists to catch breakage, not to rank arithmetic (torchao's float8 tests ask for an
SQNR above 20 dB after one step; claims that fp8 trains like bf16 rest on thousands of steps of real
data), so a candidate fails only for:
- a loss that is not finite;
- learning far less than the reference: its fall (first loss to the mean of the second half) below
  `min_learned` of the reference's;
- gradients gone: a parameter whose median gradient norm is below STALLED of the reference's;
- a gap that keeps growing: over the second half the gap's slope is GROWTH_T standard errors above
  zero and adds GROWTH_SHARE of the reference's fall;
- and, only where the user sets one, a mean gap over the second half above `max_gap_nats`.

The gap in nats is recorded beside the speed-up either way, with the study's noise floor (the
reference against its fp32-class twin), so a user sees the quality cost."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

# a parameter's median gradient norm under 1% of the reference's: it stopped learning
STALLED = 0.01
GROWTH_T = 4.0  # the second half's gap slope, in standard errors, before it counts as growing
# ... and the growth over the second half, as a share of what the reference learned
GROWTH_SHARE = 0.2
MIN_REFERENCE_FALL = 0.05  # nats: a reference that learned less than this cannot judge anything
MIN_STEPS = 8  # the check's fewest steps: a second half of four to fit the gap's trend on


@dataclass(frozen=True)
class Limits:
    """The user's side of the verdict (study.loss_check)."""

    min_learned: float = 0.5
    max_gap_nats: float | None = None


@dataclass(frozen=True)
class Verdict:
    """passed None: the attempt could not judge the candidate (the reference itself did not learn or
    broke)."""

    passed: bool | None
    why: str
    gap_nats: float | None = None
    learned_share: float | None = None
    stalled: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "why": self.why,
            "gap_nats": _round(self.gap_nats),
            "learned_share": _round(self.learned_share),
            "stalled": self.stalled,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def second_half(values: list[float]) -> list[float]:
    return values[len(values) // 2 :]


def fall(losses: list[float]) -> float:
    """What a curve learned: its first loss less the mean of its second half, in nats."""
    return losses[0] - statistics.fmean(second_half(losses))


def gap_nats(losses: list[float], reference: list[float]) -> float:
    """The candidate's mean loss over the second half less the reference's (positive: it trains
    worse)."""
    return statistics.fmean(second_half(losses)) - statistics.fmean(second_half(reference))


def floor_nats(twin: list[float], reference: list[float]) -> float:
    """The noise floor: the mean per-step distance between the reference and its arithmetic twin
    over the second half (the same weights and data, fp32-class arithmetic or another reduction
    order)."""
    pairs = list(zip(second_half(twin), second_half(reference)))
    return statistics.fmean(abs(a - b) for a, b in pairs)


def growth(losses: list[float], reference: list[float]) -> tuple[float, float]:
    """(growth in nats over the second half, its slope in standard errors) of the gap candidate -
    reference, from a least-squares line; t is infinite for a gap that grows without scatter, 0 for
    one that does not grow."""
    gaps = [a - b for a, b in zip(second_half(losses), second_half(reference))]
    xs = list(range(len(gaps)))
    slope, intercept = statistics.linear_regression(xs, gaps)
    spread = sum((g - intercept - slope * x) ** 2 for x, g in zip(xs, gaps)) / max(1, len(gaps) - 2)
    se = math.sqrt(spread / sum((x - statistics.fmean(xs)) ** 2 for x in xs))
    t = slope / se if se > 0 else (math.inf if slope > 0 else 0.0)
    return slope * (len(gaps) - 1), t


def judge(
    attempt: dict[str, Any],
    limits: Limits,
    candidate: str = "the candidate",
    reference: str = "the reference",
) -> Verdict:
    """The verdict of one attempt (workloads/numerics_check.py writes it): breakage fails, a lag
    does not."""
    c, r = list(attempt.get("losses") or []), list(attempt.get("reference") or [])
    if attempt.get("reference_nonfinite"):
        return Verdict(None, f"{reference} itself broke: {attempt['reference_nonfinite']}")
    if attempt.get("nonfinite"):
        return Verdict(False, f"{candidate}'s {attempt['nonfinite']}")
    if len(r) < MIN_STEPS or len(c) != len(r):
        return Verdict(
            None, f"too few steps to judge ({len(c)} and {len(r)}; at least {MIN_STEPS})"
        )
    ref_fall = fall(r)
    if ref_fall < MIN_REFERENCE_FALL:
        return Verdict(
            None,
            f"{reference} learned only {ref_fall:.3f} nats in {len(r)} steps: nothing to compare",
        )
    gap, share = gap_nats(c, r), fall(c) / ref_fall
    found = _breakage(attempt, c, r, limits, candidate, reference)
    if found:
        return Verdict(False, found, gap, share, list(attempt.get("stalled") or []))
    return Verdict(
        True,
        f"{gap:+.3f} nats from {reference} over the last {len(second_half(r))} of {len(r)} steps",
        gap,
        share,
    )


def _breakage(
    attempt: dict[str, Any],
    c: list[float],
    r: list[float],
    limits: Limits,
    candidate: str,
    reference: str,
) -> str:
    """What broke, in one line, or ''."""
    ref_fall, share = fall(r), fall(c) / fall(r)
    stalled = list(attempt.get("stalled") or [])
    if stalled:
        more = f" and {len(stalled) - 3} more" if len(stalled) > 3 else ""
        named = ", ".join(stalled[:3])
        return (
            f"{candidate} stopped learning in {len(stalled)} parameter(s) ({named}{more}): "
            f"their gradients are under {STALLED:.0%} of {reference}'s"
        )
    if share < limits.min_learned:
        return (
            f"{candidate} learned {share:.0%} of what {reference} learned ({fall(c):.3f} against "
            f"{ref_fall:.3f} nats in {len(r)} steps; at least {limits.min_learned:.0%}, "
            "study.loss_check.min_learned)"
        )
    grown, t = growth(c, r)
    half = len(second_half(r))
    if grown > GROWTH_SHARE * ref_fall and t > GROWTH_T:
        return (
            f"{candidate}'s gap from {reference} keeps growing: +{grown:.3f} nats over the last "
            f"{half} steps ({GROWTH_SHARE:.0%} of the {ref_fall:.3f} nats {reference} learned)"
        )
    gap = gap_nats(c, r)
    if limits.max_gap_nats is not None and gap > limits.max_gap_nats:
        return (
            f"{candidate} trains {gap:.3f} nats worse than {reference} over the last {half} "
            f"steps (limit {limits.max_gap_nats:g}, study.loss_check.max_gap_nats)"
        )
    return ""


def summary(doc: dict[str, Any] | None) -> str:
    """One line of a record's numerics check for the views ('' where none ran): its gap beside the
    noise floor, or what covered it."""
    if not doc or not doc.get("passed"):
        return ""
    if doc.get("covered_by") is not None:
        return f"numerics: as trial {doc['covered_by']}"
    floor = doc.get("floor_nats", doc.get("study_floor_nats"))
    beside = f", floor {floor:.3f}" if isinstance(floor, (int, float)) else ""
    return f"numerics: {doc.get('gap_nats') or 0:+.3f} nats vs {doc.get('against')}{beside}"
