"""Which knobs mattered, in a form that cannot mislead: for every searched knob, each value's
best and median figure and its trials, the paired effect where two trials differ in that knob
alone, and the measurement noise they are read against; a ranking only of knobs whose effect is
larger than that noise.

Optuna's PED-ANOVA importance is not shown: over a staged search's twenty trials it ranked
vocabulary padding first (0.34, an effect of 0.5%, noise) and compile last (0.03, +28%), and it
leaves out a knob whose baseline value ran once (issue 36).

A knob that acts only under another (the catalogue's only_with: compile_scope under compile on) is
judged only on the trials where it acts: elsewhere its recorded value is None (space.knobs), which
is its parent's effect, not a level of it (issue 49)."""

from __future__ import annotations

import statistics
from itertools import combinations
from typing import Any

from autotune.documents.confirmation import Confirmation
from autotune.knobs import BY_NAME, Knobs, Not
from autotune.report._data import Effects, KnobEffect, Noise, Row, ValueEffect

DERIVED = ("grad_accum_steps",)  # follows the batch: never the one knob two trials differ in
NOISE_REPEATS = (
    "the median over the confirmed configurations of (max - min) / median of their fresh-process "
    "samples"
)
NOISE_WITHIN = (
    "the median trial's 95% half-width of its figure within one process (run-to-run noise, "
    "unmeasured without a confirmation, is larger)"
)


def noise(confirmation: Confirmation | None, ok: list[Row]) -> Noise:
    """The study's measurement noise in percent, and how it was obtained (named once)."""
    spreads = [
        100 * (max(s) - min(s)) / statistics.median(s)
        for st in (confirmation.stats if confirmation else [])
        if len(s := st.samples) >= 2
    ]
    if spreads:
        return {"pct": statistics.median(spreads), "how": NOISE_REPEATS}
    widths = [r.half_width_pct for r in ok if r.half_width_pct is not None]
    if widths:
        return {"pct": statistics.median(widths), "how": NOISE_WITHIN}
    return {"pct": None, "how": "unmeasured: no repeated or multi-step measurement"}


def effects(ok: list[Row], searched: list[str], noise_pct: float | None) -> Effects:
    """Per knob: each value's trials, best and median tokens/s, the paired effect against the knob's
    most-run value, the knob's effect size (how far its worst value's best falls short of its best
    value's, in percent) and whether it is above the noise; `ranked`: the knobs above noise, largest
    effect first."""
    per_knob = {k: _knob(ok, k, searched) for k in searched}
    for entry in per_knob.values():
        size = entry["effect_pct"]
        entry["above_noise"] = size is not None and noise_pct is not None and size > noise_pct
    ranked = sorted(
        (k for k, e in per_knob.items() if e["above_noise"]),
        key=lambda k: -(per_knob[k]["effect_pct"] or 0.0),  # above the noise: it has one
    )
    return {"knobs": per_knob, "ranked": ranked}


def acting(ok: list[Row], knob: str) -> tuple[list[Row], dict[str, Any] | None]:
    """The trials a knob acts in, and on what it was judged: all of them for a knob that always
    acts (None); for a conditional one (the catalogue's only_with), those where its parent has the
    value it needs and it has a value, with {"knob": its parent, "when": the condition in words,
    "trials": how many}."""
    k = BY_NAME.get(knob)
    if k is None or k.only_with is None:
        return ok, None
    parent, want = k.only_with
    among = [r for r in ok if k.acts_with(r.knobs.get(parent)) and r.knobs.get(knob) is not None]
    return among, {"knob": parent, "when": _when(parent, want), "trials": len(among)}


def _when(parent: str, want: object) -> str:
    """only_with's condition in words: "compile on", "precision fp8", "parallel not ddp"."""
    if isinstance(want, Not):
        return f"{parent} on" if want.value is False else f"{parent} not {want.value}"
    if isinstance(want, bool):
        return f"{parent} {'on' if want else 'off'}"
    return f"{parent} {want}"


def _knob(ok: list[Row], knob: str, searched: list[str]) -> KnobEffect:
    """One knob's values and their figures, over the trials it acts in (`acting`: `among` says
    which, None where that is every trial)."""
    ok, among = acting(ok, knob)
    by_value: dict[str, list[float]] = {}
    for r in ok:
        by_value.setdefault(str(r.knobs.get(knob)), []).append(r.figure)
    values: dict[str, ValueEffect] = {
        v: {"trials": len(xs), "best": max(xs), "median": statistics.median(xs)}
        for v, xs in by_value.items()
    }
    reference = max(by_value, key=lambda v: len(by_value[v])) if by_value else None
    for v, ratios in _paired(ok, knob, searched, reference).items():
        values[v]["paired_pct"] = 100 * (statistics.median(ratios) - 1)
        values[v]["pairs"] = len(ratios)
    size, basis = _size(values)
    return {
        "values": values,
        "reference": reference,
        "effect_pct": size,
        "basis": basis,
        "among": among,
    }


def _size(values: dict[str, ValueEffect]) -> tuple[float | None, str | None]:
    """A knob's effect in percent and its basis: the largest paired effect where two trials differ
    in this knob alone (the other knobs held), else the worst value's best short of the best
    value's (the gaps each value shows), which other knobs can confound."""
    paired = [abs(e["paired_pct"]) for e in values.values() if e.get("pairs")]
    if paired:
        return max(paired), "paired"
    bests = [e["best"] for e in values.values()]
    if len(bests) < 2:
        return None, None
    return 100 * (1 - min(bests) / max(bests)), "best at each value"


def _paired(
    ok: list[Row], knob: str, searched: list[str], reference: str | None
) -> dict[str, list[float]]:
    """value -> the ratios of trials at that value to trials at the reference value that differ
    from them in this knob alone (a conditional knob that acts in one of the two and not the other
    differs because this one does: compile on against off, compile_scope block against None)."""
    others = [k for k in searched if k != knob and k not in DERIVED]
    out: dict[str, list[float]] = {}
    for a, b in combinations(ok, 2):
        va, vb = str(a.knobs.get(knob)), str(b.knobs.get(knob))
        if va == vb or reference not in (va, vb):
            continue
        if any(_differ(a.knobs, b.knobs, k) for k in others):
            continue
        at, ref = (a, b) if vb == reference else (b, a)
        value = va if vb == reference else vb
        out.setdefault(value, []).append(at.figure / ref.figure)
    return out


def _differ(a: Knobs, b: Knobs, knob: str) -> bool:
    """Whether two trials differ in `knob` where it acts in both (a conditional knob that is None
    in one, space.knobs's mark of a knob that cannot act, differs through its parent)."""
    va, vb = a.get(knob), b.get(knob)
    if va == vb:
        return False
    k = BY_NAME.get(knob)
    return not (k is not None and k.only_with is not None and (va is None or vb is None))


def value_text(value: str, e: ValueEffect, top: float) -> str:
    """One value in words: its best against the knob's best value, trials, paired effect."""
    gap = 100 * (e["best"] / top - 1)
    paired = f", paired {e['paired_pct']:+.1f}% over {e['pairs']}" if e.get("pairs") else ""
    return f"{value}: {gap:+.1f}% ({e['trials']} trial{'s' if e['trials'] != 1 else ''}{paired})"
