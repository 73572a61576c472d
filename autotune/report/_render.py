"""The report as text: Rich tables for the terminal, JSON for scripts, Markdown for a PR comment."""

from __future__ import annotations

import json
from typing import Any

from autotune.protocol import reason_line
from autotune.report._table import cells, columns, fmt, rich_table, speedup


def to_json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, default=str)


def confirmed(st: dict[str, Any]) -> str:
    """One confirmation candidate's result in words."""
    if st["median"] is None:
        return "no sample succeeded (" + "; ".join(st["failures"][:2]) + ")"
    return (
        f"median {fmt(st['median'], 'tok')} tokens/s/GPU over {len(st['samples'])} fresh processes "
        f"({interval(st)}; search {fmt(st['search_value'], 'tok')})"
    )


def interval(st: dict[str, Any]) -> str:
    """'95% interval LO to HI', or why there is none ('95% interval: too few samples ...', metrics.unbounded)."""
    if st["ci95"] is None:
        return f"95% interval: {st.get('ci95_why') or 'none'}"
    lo, hi = st["ci95"]
    return f"95% interval {fmt(lo, 'tok')} to {fmt(hi, 'tok')}"


def chosen_line(data: dict[str, Any]) -> str | None:
    """What best.yaml deploys, in one line: trial, tokens/s (confirmed or not), interval, x the baseline."""
    c = data.get("chosen")
    if not c:
        return None
    how = f"confirmed over {c['samples']} fresh processes ({interval(c)})" if c["confirmed"] else "not confirmed"
    return (
        f"Chosen (best.yaml): trial {c['trial']}, {fmt(c['tokens_per_s_per_gpu'], 'tok')} tokens/s/GPU {how}, "
        f"{speedup(c['speedup_vs_baseline'], c.get('speedup_flag'))} the baseline"
    )


def noise(data: dict[str, Any]) -> str:
    spread = data["step_spread_pct_median"]
    return (
        ""
        if spread is None
        else (
            f" (relative shares; the measured step-to-step spread is {spread:.1f}% "
            "median, so smaller differences between trials are noise)"
        )
    )


def to_markdown(data: dict[str, Any], top: int = 10) -> str:
    """A PR-comment-sized summary."""
    lines = [f"### autotune: {data['study']} ({data['device']})", ""]
    best, base = data["best"], data["baseline"]
    if best:
        lines.append(
            f"Best in the search: **{fmt(best['tokens_per_s_per_gpu'], 'tok')} tokens/s/GPU**, "
            f"MFU {fmt(best['mfu'], 'mfu')}{_flops(data)}, "
            f"{speedup(best['speedup'], best.get('speedup_flag'))} the baseline "
            f"({fmt(base and base['tokens_per_s_per_gpu'], 'tok')}); "
            f"trial {best['number']}: " + ", ".join(f"{k}={best['knobs'][k]}" for k in data["searched"])
        )
        lines.append("")
    conf = data["confirmation"]
    if conf:
        chosen = next(st for st in conf["stats"] if st["trial"] == conf["chosen"])
        lines += [f"Chosen (best.yaml): **trial {conf['chosen']}**, confirmed {confirmed(chosen)}; {conf['why']}", ""]
    elif chosen_line(data):
        lines += [str(chosen_line(data)), ""]
    knobs, rows = data["searched"], data["trials"][:top]
    header = columns(knobs, rows, data["task"])
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|---" * len(header) + "|")
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cells(r, knobs, header)) + " |" for r in rows]
    if data["failures"]:
        lines += ["", "Failed: " + "; ".join(f"{k}: {v['count']}" for k, v in data["failures"].items())]
    if data.get("front"):
        lines += [
            "",
            "Front, tokens/s against p99 time per output token (no other trial beats these on both): "
            + "; ".join(_front_point(r) for r in data["front"]),
        ]
    lines += importance_lines(data)
    return "\n".join(lines) + "\n"


def _flops(data: dict[str, Any]) -> str:
    """' (FLOPs counted: torch.utils.flop_counter, ...)': how MFU's FLOPs per token were obtained."""
    return f" (FLOPs: {data['mfu_flops']})" if data.get("mfu_flops") else ""


def importance_lines(data: dict[str, Any]) -> list[str]:
    """Markdown's importance: the numbers where they mean something, and why the others have none yet."""
    imp = data["importance"]
    lines = []
    if imp["values"]:
        lines += ["", "Importance: " + ", ".join(f"{k} {v:.2f}" for k, v in imp["values"].items()) + noise(data)]
    elif data["searched"]:
        lines += ["", f"Importance: {imp['why']}"]
    if imp.get("not_meaningful"):
        lines += ["", "Importance not yet meaningful: " + "; ".join(imp["not_meaningful"].values())]
    return lines


def _front_point(r: dict[str, Any]) -> str:
    over = " (over limit)" if r["state"] == "over_limit" else ""
    return (
        f"trial {r['number']}: {fmt(r['tpot_ms_p99'], 'ms')} ms, {fmt(r['tokens_per_s_per_gpu'], 'tok')} tokens/s{over}"
    )


def render_rich(data: dict[str, Any], console: Any) -> None:
    """Tables for the terminal: trials best first, failures by reason, importance and knob effects, time."""

    knobs = data["searched"]
    console.print(
        rich_table(
            data["trials"],
            knobs,
            f"{data['study']} on {data['device']}: {len(data['trials'])} trials, best first",
            data["task"],
        )
    )
    if data.get("mfu_flops"):
        console.print(f"MFU's FLOPs per token: {data['mfu_flops']}", highlight=False)
    if data.get("chosen"):
        console.print(chosen_line(data), highlight=False)
    if data["confirmation"]:
        _confirmation(data["confirmation"], console)
    if data.get("front"):
        console.print(
            "Front, tokens/s against p99 time per output token (no other trial beats these on both): "
            + "; ".join(_front_point(r) for r in data["front"]),
            highlight=False,
        )
    _failures_and_importance(data, knobs, console)
    tm = data["time"]
    phases = ", ".join(f"{p} {s:,.0f} s" for p, s in tm["phases_s"].items())
    console.print("Trials by state: " + ", ".join(f"{k} {v}" for k, v in data["counts"].items()))
    ahead = f"; {tm['started_ahead']} of {tm['processes']} started ahead" if tm.get("started_ahead") else ""
    console.print(f"Time in trial processes: {tm['trial_wall_s']:,.0f} s ({phases or 'no phase data'}){ahead}")
    if data["check_history"]:
        last = data["check_history"][-1]
        console.print(
            f"Checks: {len(data['check_history'])}, last {last['checked_at']}: {last['status']}, ratio {last['ratio']:.3f}"
        )
    if data.get("check_history_skipped"):
        console.print(f"history.jsonl: skipped {'; '.join(data['check_history_skipped'][:5])}", highlight=False)


def _confirmation(conf: dict[str, Any], console: Any) -> None:
    """The confirmation's table: each candidate's search value, confirmed median and failures; why the choice."""
    from rich.table import Table

    c = Table(
        title=f"Confirmation: top {len(conf['stats'])} re-measured in fresh processes, interleaved "
        f"({conf['rounds_done']} rounds); chosen: trial {conf['chosen']}"
    )
    for col in ("#", "search tokens/s/GPU", "confirmed", "failures"):
        c.add_column(col, overflow="fold")
    for st in conf["stats"]:
        c.add_row(
            str(st["trial"]) + (" (chosen)" if st["trial"] == conf["chosen"] else ""),
            fmt(st["search_value"], "tok"),
            confirmed(st),
            "; ".join(st["failures"]) or "-",
        )
    console.print(c)
    console.print(f"Why: {conf['why']}", highlight=False)


def _failures_and_importance(data: dict[str, Any], knobs: list[str], console: Any) -> None:
    """Failures by reason, then which knobs mattered (importance and the best tokens/s at each value)."""
    from rich.table import Table

    if data["failures"]:
        f = Table(title="Failed and predicted-infeasible trials, by reason")
        for col in ("reason", "count", "trials", "example"):
            f.add_column(col, overflow="fold")
        for k, v in data["failures"].items():
            f.add_row(k, str(v["count"]), ", ".join(map(str, v["trials"])), reason_line(v["example"], 100))
        console.print(f)
    imp = data["importance"]
    rare = imp.get("not_meaningful") or {}
    k = Table(title=f"Which knobs mattered ({imp['why']}{noise(data) if imp['values'] else ''})")
    for col in ("knob", "importance", "best tokens/s/GPU at each value"):
        k.add_column(col, overflow="fold")
    for knob in knobs:
        value = (imp["values"] or {}).get(knob)
        k.add_row(
            knob,
            f"not yet meaningful: {rare[knob]}" if knob in rare else "-" if value is None else f"{value:.2f}",
            ", ".join(f"{v}: {fmt(x, 'tok')}" for v, x in data["knob_effects"].get(knob, {}).items()),
        )
    console.print(k)
