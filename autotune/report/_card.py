"""The summary card: the chosen configuration (best.yaml's), its confirmed number, x the baseline,
its efficiency, what applying it costs and what the search cost; its data first (`chosen`), then
its HTML (`card_html`)."""

from __future__ import annotations

from typing import Any, TypedDict

from autotune import knobs as catalogue
from autotune.documents.confirmation import Arm
from autotune.protocol import Knobs
from autotune.report import _text
from autotune.report._data import Chosen, Report, Row
from autotune.report._escape import escape
from autotune.report._table import fmt

MIN_SAMPLES = 3  # fewer fresh processes than this bound nothing: the interval is not shown


class Apply(TypedDict):
    """What applying the chosen configuration changes and costs (_apply)."""

    changed: dict[str, tuple[Any, Any]]  # knob -> (the baseline's value, its value)
    env: dict[str, str]  # the environment it sets
    notes: list[str]  # best.yaml's apply notes of its knobs
    compile_s: float | None
    compile_warm_s: list[float]
    peak_mem_gib: tuple[float | None, float | None]  # the baseline's, its own


class Card(Chosen):
    """The headline with what applying it costs (chosen)."""

    apply: Apply


def chosen(data: Report) -> Card | None:
    """What best.yaml holds (the report's headline, report/_summary.headline) with what applying it
    costs."""
    c = data.chosen
    if not c:
        return None
    row = next((r for r in data.trials if r.number == c["trial"]), None)
    return {**c, "apply": _apply(data, row, c)}


def _apply(data: Report, row: Row | None, c: Chosen) -> Apply:
    """What changes from the baseline, the environment it sets, the notes, and its one-time
    costs."""
    device = "cuda" if data.device == "cuda" else "cpu"
    base = data.baseline
    knobs = (row.knobs if row else {}) or c["knobs"]
    return {
        "changed": c["changed"],
        "env": catalogue.env_of(knobs),
        "notes": _notes(knobs, device, data.task),
        "compile_s": c["compile_s"],
        "compile_warm_s": c.get("compile_warm_s") or [],
        "peak_mem_gib": (base.peak_mem_gib if base else None, c["peak_mem_gib"]),
    }


def _notes(knobs: Knobs, device: str, task: str) -> list[str]:
    """best.yaml's apply notes of these knobs; none for a value the catalogue does not know (a
    record another program wrote), which the page must still show."""
    try:
        return catalogue.apply_notes(knobs, device, task)
    except (KeyError, TypeError, ValueError, AttributeError):
        return ["(no notes: a knob value this release does not know)"]


def interval(stats: Arm | None) -> str:
    """The confirmation's 95% interval in words, or why there is none."""
    if not stats or stats.median is None:
        return "not confirmed: one measurement, no interval"
    n = len(stats.samples)
    ci, _ = stats.interval()
    if n < MIN_SAMPLES or not ci:
        return f"too few samples to bound ({n} fresh processes)"
    lo, hi = ci
    return f"95% interval {fmt(lo, 'tok')} to {fmt(hi, 'tok')} over {n} fresh processes"


def card_html(data: Report, c: Card | None) -> str:
    """The card's HTML, in the order of every format (report/_text): the chosen configuration and
    all its knobs, its figure and gain, the runner-up, what applying it costs, what the search
    cost; every string from the study escaped."""
    if c is None:
        return (
            '<section class="card"><h2>No configuration chosen yet</h2><p>No trial has '
            "completed.</p></section>"
        )
    knobs = ", ".join(f"{k}={v}" for k, v in c["knobs"].items()) or "the baseline's knobs"
    first = _text.chosen_lines(data)[0]
    title = "Chosen configuration" if c.get("written") else first.partition(":")[0]
    quality = _text.numerics_line(c)
    unwritten = _text.unwritten(c)
    lines = [
        f'<h2>{escape(title)}: {escape(_text.trial_of(c))} <span class="star">&#9733;</span></h2>',
        f'<p class="headline"><b>{fmt(c["tokens_per_s_per_gpu"], "tok")} tokens/s per GPU</b> '
        f"({escape(_text.interval_text(c))}){escape(_text.padding_said(data))}</p>",
        # the last word on the gain, as every form says it (study/bound.py)
        f'<p class="last-word">{escape(_text.bound_line(data))}</p>',
        f'<p class="disturbed">{escape(busy)}</p>' if (busy := _text.disturbed_line(data)) else "",
        f"<p>{_efficiency_text(c).strip()}</p>" if _efficiency_text(c) else "",
        f'<p class="numerics">{escape(quality)}</p>' if quality else "",
        f'<p class="unwritten">{escape(unwritten)}</p>' if unwritten else "",
        f'<p class="knobs">All its knobs: {escape(knobs)}</p>',
        f"<p>{escape(_text.runner_up(up))}</p>" if (up := c["runner_up"]) else "",
        f"<p>Why chosen: {escape(str(c['why']))}</p>",
        _apply_html(c["apply"]),
        *(f"<p>{escape(line)}</p>" for line in _text.projection_lines(data)),
        f"<p>{escape(_text.cost_line(data))}</p>",
    ]
    return '<section class="card" id="chosen">' + "\n".join(x for x in lines if x) + "</section>"


def _efficiency_text(c: Chosen) -> str:
    """The efficiency figure (MFU against the peak it divides by, or the roofline share), then the
    power or clock limit its measured steps ran at (escaped: the reasons are the study's)."""
    from autotune.report._table import mfu_text

    cap = (c.get("power_cap") or {}).get("said")
    capped = f" {escape(cap[:1].upper() + cap[1:])}." if cap else ""
    if c.get("mfu") is not None:
        bold = mfu_text(c["mfu"], c.get("mfu_peaks") or [], mark=lambda s: f"<b>{s}</b>")
        return f" MFU: {bold}.{capped}"
    if c.get("roofline") is None:
        return capped
    return f" roofline: <b>{fmt(c['roofline'], 'mfu')}</b>.{capped}"


def _apply_html(a: Apply) -> str:
    """What applying it costs: the knobs changed, the environment, the notes, compile time and
    memory."""
    changed = "; ".join(
        f"{escape(k)}: {escape(str(old))} &rarr; {escape(str(new))}"
        for k, (old, new) in a["changed"].items()
    )
    items = [f"<li>Change from the baseline: {changed or 'nothing'}</li>"]
    if a["env"]:
        env = " ".join(f"{k}={v}" for k, v in a["env"].items())
        items.append(f"<li>Environment: <code>{escape(env)}</code></li>")
    items += [f"<li>{escape(str(n))}</li>" for n in a["notes"]]
    if a["compile_s"]:
        shown = _text.compile_text(a["compile_s"], a["compile_warm_s"])
        items.append(f"<li>At each start: {escape(shown)}</li>")
    base_mem, mem = a["peak_mem_gib"]
    if mem is not None:
        items.append(
            f"<li>Peak memory: {fmt(mem, 'gib')} GiB (baseline {fmt(base_mem, 'gib')})</li>"
        )
    else:
        items.append("<li>Peak memory: not reported</li>")
    return "<p>What it costs to apply:</p><ul>" + "".join(items) + "</ul>"
