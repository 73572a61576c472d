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
- learning far less than the reference: its fall (first loss to the median of the second half)
  below `min_learned` of the reference's;
- gradients gone: a parameter whose median gradient norm is below STALLED of the reference's;
- a gap that keeps growing: over the second half the gap's slope is GROWTH_T standard errors above
  zero and adds GROWTH_SHARE of the reference's fall;
- and, only where the user sets one, a gap above `max_gap_nats`.

The gap is the median of the paired per-step gaps over the second half: both curves see the same
batch at each step, and one step's spike of either curve (named in the record: `spikes`) is one gap
of many, never the sign of the whole. It is recorded beside the speed-up either way, with the
study's noise floor (the reference against its fp32-class twin), so a user sees the quality cost."""

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
# A spike: one step's loss above the curve on both sides by more than half a nat and a quarter of
# the level there (the study's noise floor is 0.01-0.03 nats; a levelled-off curve's step-to-step
# scatter about 0.05), so a steep fall or a slow rise is none
SPIKE_NATS, SPIKE_SHARE = 0.5, 0.25


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
    # the share of the second half's steps at which the candidate was behind (the gap's sign, step
    # by step)
    behind_share: float | None = None
    # the steps at which each curve spiked (spikes), by curve: "candidate", "reference"
    spikes: dict[str, list[int]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "why": self.why,
            "gap_nats": _round(self.gap_nats),
            "learned_share": _round(self.learned_share),
            "stalled": self.stalled,
            "behind_share": _round(self.behind_share),
            "spikes": self.spikes,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def second_half(values: list[float]) -> list[float]:
    return values[len(values) // 2 :]


def spikes(losses: list[float]) -> list[int]:
    """The steps (1-based) whose loss jumps above the curve on both sides of it: above the lower of
    the two steps before it and the lower of the two after it (the last step: before it only) by
    more than SPIKE_NATS and SPIKE_SHARE of that level. A curve that falls or levels off has none;
    a 30-step curve of a 1.3B GPT that jumped from 1.3 to 15.4 nats at one step and back has one."""
    found = []
    for i in range(1, len(losses)):
        before, after = min(losses[max(0, i - 2) : i]), losses[i + 1 : i + 3]
        level = max(before, min(after)) if after else before
        if losses[i] - level > max(SPIKE_NATS, SPIKE_SHARE * abs(level)):
            found.append(i + 1)
    return found


def _paired(losses: list[float], reference: list[float]) -> list[float]:
    """The per-step gaps candidate - reference over the second half (positive: it trains worse)."""
    return [a - b for a, b in zip(second_half(losses), second_half(reference))]


def fall(losses: list[float]) -> float:
    """What a curve learned: its first loss less the median of its second half, in nats (a spike
    in the second half moves a median by one rank, not by its height)."""
    return losses[0] - statistics.median(second_half(losses))


def gap_nats(losses: list[float], reference: list[float]) -> float:
    """The median of the paired per-step gaps candidate - reference over the second half (positive:
    it trains worse). Paired, step by step: both curves see the same batch at a step; the median:
    a spike of either curve is one gap of many, never the sign of the whole (a mean had a
    reference's one spike to 15.4 nats flip a lag of 0.37 nats into a lead of 0.45)."""
    return statistics.median(_paired(losses, reference))


def behind_share(losses: list[float], reference: list[float]) -> float:
    """The share of the second half's steps at which the candidate's loss is above the reference's
    (the sign the gap must carry: 1.0 when it is behind at every step)."""
    gaps = _paired(losses, reference)
    return sum(1 for g in gaps if g > 0) / len(gaps)


def floor_nats(twin: list[float], reference: list[float]) -> float:
    """The noise floor: the median per-step distance between the reference and its arithmetic twin
    over the second half (the same weights and data, fp32-class arithmetic or another reduction
    order)."""
    return statistics.median(abs(g) for g in _paired(twin, reference))


def growth(losses: list[float], reference: list[float]) -> tuple[float, float]:
    """(growth in nats over the second half, its slope in standard errors) of the gap candidate -
    reference, from a least-squares line through the steps where neither curve spiked; t is
    infinite for a gap that grows without scatter, 0 for one that does not grow."""
    start = len(reference) - len(second_half(reference))
    skip = {s - 1 - start for s in spikes(losses) + spikes(reference)}
    points = [(x, g) for x, g in enumerate(_paired(losses, reference)) if x not in skip]
    if len(points) < 3:
        return 0.0, 0.0
    xs, gaps = [float(x) for x, _ in points], [g for _, g in points]
    slope, intercept = statistics.linear_regression(xs, gaps)
    spread = sum((g - intercept - slope * x) ** 2 for x, g in points) / max(1, len(gaps) - 2)
    se = math.sqrt(spread / sum((x - statistics.fmean(xs)) ** 2 for x in xs))
    t = slope / se if se > 0 else (math.inf if slope > 0 else 0.0)
    return slope * (len(second_half(reference)) - 1), t


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
    spiked = {k: v for k, v in (("candidate", spikes(c)), ("reference", spikes(r))) if v}
    behind = behind_share(c, r)
    found = _breakage(attempt, c, r, limits, candidate, reference)
    if found:
        stalled = list(attempt.get("stalled") or [])
        return Verdict(False, found, gap, share, stalled, behind, spiked)
    half = len(second_half(r))
    why = (
        f"{gap:+.3f} nats from {reference} over the last {half} of {len(r)} steps (the median "
        f"per-step gap; behind at {behind:.0%} of them)"
    )
    return Verdict(
        True, why + spike_text(spiked, candidate, reference), gap, share, [], behind, spiked
    )


def spike_text(spiked: dict[str, list[int]], candidate: str, reference: str) -> str:
    """'; spikes: the reference at step 18' ('' without spikes)."""
    names = {"candidate": candidate, "reference": reference}
    parts = [
        f"{names[k]} at step{'s' if len(v) > 1 else ''} {', '.join(map(str, v))}"
        for k, v in spiked.items()
    ]
    return f"; spikes: {'; '.join(parts)}" if parts else ""


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
            f"steps (the median per-step gap; limit {limits.max_gap_nats:g}, "
            "study.loss_check.max_gap_nats)"
        )
    return ""


def summary(doc: dict[str, Any] | None) -> str:
    """One line of a record's numerics check for the views ('' where none ran or it failed: a
    failed trial says its reason): its gap beside the noise floor, or what covered it."""
    if not doc or not doc.get("passed"):
        return ""
    if doc.get("covered_by") is not None and doc.get("gap_nats") is None:
        return f"numerics: as trial {doc['covered_by']}"
    return f"numerics: {gap_text(doc)}"


def gap_text(doc: dict[str, Any]) -> str:
    """'0.370 nats behind precision bf16 after 30 steps (floor 0.020)': a passed check's gap in
    words, its sign as the per-step gaps have it, the floor and the spikes beside it."""
    gap = float(doc.get("gap_nats") or 0.0)
    side = "behind" if gap > 0 else "ahead of" if gap < 0 else "level with"
    steps = f" after {doc['steps']} steps" if doc.get("steps") else ""
    floor = doc.get("floor_nats", doc.get("study_floor_nats"))
    within = isinstance(floor, (int, float)) and abs(gap) <= floor
    beside = [f"floor {floor:.3f}" + (": within it" if within else "")] if _number(floor) else []
    spiked = doc.get("spikes") or {}
    beside += [f"{k} spiked at step {', '.join(map(str, v))}" for k, v in spiked.items()]
    if doc.get("covered_by") is not None:
        beside.append(f"checked in trial {doc['covered_by']}")
    shown = f" ({'; '.join(beside)})" if beside else ""
    return f"{abs(gap):.3f} nats {side} {doc.get('against')}{steps}{shown}"


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
