"""The summary card: the chosen configuration (best.yaml's), its confirmed number, x the baseline,
its efficiency, what applying it costs and what the search cost; its data first (`chosen`), then
its HTML (`card_html`)."""

from __future__ import annotations

from html import escape
from typing import Any

from autotune import knobs as catalogue
from autotune import tasks
from autotune.record import Metric
from autotune.report._table import fmt

MIN_SAMPLES = 3  # fewer fresh processes than this bound nothing: the interval is not shown
# The efficiency column a task reports (tasks.Task.columns) and the row's key holding it
EFFICIENCY = {"MFU": Metric.MFU, "roofline": Metric.ROOFLINE}


def chosen(data: dict[str, Any], phases: list[dict[str, Any]], gpus: int) -> dict[str, Any] | None:
    """What best.yaml holds: the confirmation's choice, else the search's best (as search/best.py
    chooses)."""
    conf, best = data["confirmation"], data["best"]
    if best is None:
        return None
    number = conf["chosen"] if conf else best["number"]
    row = next((r for r in data["trials"] if r["number"] == number), best)
    stats = next((st for st in conf["stats"] if st["trial"] == number), None) if conf else None
    value = stats["median"] if stats and stats["median"] else row[Metric.TOKENS_PER_GPU]
    base = data["baseline"]
    return {
        "trial": number,
        "knobs": row["knobs"],
        "value": value,
        "stats": stats,
        "why": conf["why"] if conf else "the search's best single measurement (not confirmed)",
        "speedup": value / base[Metric.TOKENS_PER_GPU] if base else None,
        "baseline": base,
        "efficiency": _efficiency(data["task"], row, value),
        "apply": _apply(data, row, base),
        "cost": _cost(phases, gpus),
    }


def _efficiency(task: str, row: dict[str, Any], value: float) -> tuple[str, float | None] | None:
    """The task's efficiency figure, scaled to the chosen number as best.yaml scales MFU."""
    name = next((c for c in tasks.task(task).columns if c in EFFICIENCY), None)
    if name is None:
        return None
    measured = row.get(EFFICIENCY[name])
    search = row[Metric.TOKENS_PER_GPU]
    return name, None if measured is None or not search else measured * value / search


def _apply(
    data: dict[str, Any], row: dict[str, Any], base: dict[str, Any] | None
) -> dict[str, Any]:
    """What changes from the baseline, the environment it sets, the notes, and its one-time costs."""
    knobs, before = row["knobs"], (base or {}).get("knobs") or {}
    device = "cuda" if data["device"] == "cuda" else "cpu"
    return {
        "changed": {k: (before.get(k), v) for k, v in knobs.items() if base and before.get(k) != v},
        "env": catalogue.env_of(knobs),
        "notes": _notes(knobs, device, data["task"]),
        "compile_s": (row.get("phases_s") or {}).get("compile"),
        "peak_mem_gib": (base and base.get(Metric.PEAK_MEM_GIB), row.get(Metric.PEAK_MEM_GIB)),
    }


def _notes(knobs: dict[str, Any], device: str, task: str) -> list[str]:
    """best.yaml's apply notes of these knobs; none for a value the catalogue does not know (a
    record another program wrote), which the page must still show."""
    try:
        return catalogue.apply_notes(knobs, device, task)
    except (KeyError, TypeError, ValueError, AttributeError):
        return ["(no notes: a knob value this release does not know)"]


def _cost(phases: list[dict[str, Any]], gpus: int) -> dict[str, Any]:
    """The search's GPU-minutes in trial processes and the share spent measuring (issue 28's ratio)."""
    wall = sum(p["wall_s"] for p in phases)
    measuring = sum(p["seconds"]["measure"] for p in phases)
    return {
        "gpu_min": wall * gpus / 60,
        "processes": len(phases),
        "measure_share": measuring / wall if wall else None,
    }


def interval(stats: dict[str, Any] | None) -> str:
    """The confirmation's 95% interval in words, or why there is none."""
    if not stats or stats["median"] is None:
        return "not confirmed: one measurement, no interval"
    n = len(stats["samples"])
    if n < MIN_SAMPLES or not stats.get("ci95"):
        return f"too few samples to bound ({n} fresh processes)"
    lo, hi = stats["ci95"]
    return f"95% interval {fmt(lo, 'tok')} to {fmt(hi, 'tok')} over {n} fresh processes"


def card_html(c: dict[str, Any] | None, searched: list[str]) -> str:
    """The card's HTML; every string from the study escaped."""
    if c is None:
        return '<section class="card"><h2>No configuration chosen yet</h2><p>No trial has completed.</p></section>'
    knobs = ", ".join(f"{k}={c['knobs'].get(k)}" for k in searched) or "the baseline's knobs"
    lines = [
        f'<h2>Chosen configuration: trial {c["trial"]} <span class="star">&#9733;</span></h2>',
        f'<p class="knobs">{escape(knobs)}</p>',
        f'<p class="headline"><b>{fmt(c["value"], "tok")} tokens/s per GPU</b> ({escape(interval(c["stats"]))})</p>',
        f"<p>{_against_baseline(c)}{_efficiency_text(c)}</p>",
        f"<p>Why chosen: {escape(str(c['why']))}</p>",
        _apply_html(c["apply"]),
        f"<p>{_cost_text(c['cost'])}</p>",
    ]
    return '<section class="card" id="chosen">' + "\n".join(lines) + "</section>"


def _against_baseline(c: dict[str, Any]) -> str:
    base = c["baseline"]
    if base is None:
        return "No baseline was measured."
    spread = fmt(base["step_spread_pct"], "pct")
    return (
        f"<b>{fmt(c['speedup'], 'x')}</b> the baseline (trial {base['number']}: "
        f"{fmt(base[Metric.TOKENS_PER_GPU], 'tok')} tokens/s per GPU, step spread {escape(spread)})."
    )


def _efficiency_text(c: dict[str, Any]) -> str:
    if c["efficiency"] is None:
        return ""
    name, value = c["efficiency"]
    return f" {escape(name)}: <b>{fmt(value, 'mfu')}</b>."


def _apply_html(a: dict[str, Any]) -> str:
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
        items.append(f"<li>One-time compile at each start: {a['compile_s']:,.0f} s</li>")
    base_mem, mem = a["peak_mem_gib"]
    if mem is not None:
        items.append(
            f"<li>Peak memory: {fmt(mem, 'gib')} GiB (baseline {fmt(base_mem, 'gib')})</li>"
        )
    return "<p>What it costs to apply:</p><ul>" + "".join(items) + "</ul>"


def _cost_text(cost: dict[str, Any]) -> str:
    if not cost["processes"]:
        return "No trial process has run yet."
    share = cost["measure_share"]
    measuring = "" if share is None else f", {100 * share:.0f}% of it measuring steps"
    return f"The search cost {cost['gpu_min']:,.1f} GPU-minutes in {cost['processes']} trial processes{measuring}."
