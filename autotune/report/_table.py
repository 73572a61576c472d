"""The trials table, defined once: its columns and formatted cells, drawn by Rich, Markdown, HTML and the search."""

from __future__ import annotations

from typing import Any

from autotune import nccl_log
from autotune.protocol import reason_line


def fmt(value: Any, kind: str) -> str:
    """One cell: tok (tokens/s), mfu, x (ratio), gib, pct; None is '-' (MFU: 'n/a', never invented)."""
    if value is None:
        return "n/a" if kind == "mfu" else "-"
    if not _number(value):
        return str(value)[:20]
    return {"tok": f"{value:,.0f}", "mfu": f"{100 * value:.1f}%", "x": f"{value:.2f}x", "gib": f"{value:.2f}",
            "pct": f"{value:.1f}%", "ms": f"{value:,.2f}", "tpj": f"{value:,.1f}"}.get(kind, str(value))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def row_of(t: Any, base_value: float | None) -> dict[str, Any]:
    """A trial (an Optuna FrozenTrial) as a report row: its knobs, metrics, state and reason. A record another
    program damaged (a field of the wrong type) shows as 'unreadable', never as a failure of the report."""
    from optuna.trial import TrialState

    a = t.user_attrs
    m = _dict(a.get("metrics"))
    state = {TrialState.RUNNING: "running", TrialState.WAITING: "waiting"}.get(t.state, a.get("status", "failed"))
    if t.state == TrialState.FAIL and "status" not in a:
        state = "worker_lost"  # failed outside autotune's objective (e.g. Optuna's own stale-trial handling)
    tokens = m.get("tokens_per_s_per_gpu") if _number(m.get("tokens_per_s_per_gpu")) else None
    if not isinstance(state, str) or (state == "ok" and (tokens is None or not isinstance(a.get("knobs"), dict))):
        state, tokens = "unreadable", None
    # a pruned trial's Optuna value is its last step's (Optuna's tell): the median of its steps is the number
    first = t.values[0] if t.values else None  # tokens/s; a pareto study's second value is p99 TPOT
    value = (first if _number(first) else None) if t.state == TrialState.COMPLETE else tokens
    return {
        "number": t.number, "state": state, "knobs": a.get("knobs") if isinstance(a.get("knobs"), dict) else t.params,
        "tokens_per_s_per_gpu": tokens, "mfu": m.get("mfu") if _number(m.get("mfu")) else None,
        "peak_mem_gib": m.get("peak_mem_gib") if _number(m.get("peak_mem_gib")) else None,
        "memory_estimate_gib": m.get("memory_estimate_gib") if _number(m.get("memory_estimate_gib")) else None,
        "speedup": (value / base_value) if (value is not None and base_value) else None,
        "step_spread_pct": _dict(m.get("step_time")).get("spread_pct"),
        "reason": str(a.get("reason", "")), "predicted": bool(a.get("predicted")),
        "phases_s": {k: v for k, v in _dict(a.get("phases_s")).items() if _number(v)} or None,
        "wall_s": a.get("wall_s") if _number(a.get("wall_s")) else None,
        "prestarted": a.get("prestarted") is True,  # its process was started ahead (prestart.py)
        "fingerprint": a.get("fingerprint"), "failed_rank": a.get("failed_rank"),
        "nccl_used": nccl_log.used(_dict(a.get("nccl"))),
        # generate trials: latency and the decode roofline (metrics.generation)
        **{k: m.get(k) if _number(m.get(k)) else None
           for k in ("ttft_ms", "tpot_ms_median", "tpot_ms_p99", "roofline_share", "tokens_per_joule")},
    }


def columns(knobs: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """The table's header: the searched knobs, the metrics, NCCL's choice (only where NCCL said), and the
    outcome (only where a trial did not simply succeed)."""
    nccl = ["NCCL used"] if any(r.get("nccl_used") for r in rows) else []
    outcome = ["state", "reason"] if any(r["state"] != "ok" or r["reason"] for r in rows) else []
    generate = any(r.get("tpot_ms_median") is not None for r in rows)
    efficiency = ["TTFT ms", "TPOT ms", "TPOT p99 ms", "roofline"] if generate else ["MFU"]
    energy = ["tokens/J"] if any(r.get("tokens_per_joule") is not None for r in rows) else []
    estimate = ["est. GiB"] if any(r.get("memory_estimate_gib") is not None for r in rows) else []
    return ["#", *knobs, "tokens/s/GPU", "x baseline", *efficiency, *energy, "peak GiB", *estimate, "step spread", *nccl,
            *outcome]


def cells(row: dict[str, Any], knobs: list[str], header: list[str], reason_chars: int = 60) -> list[str]:
    """One row's formatted cells, in the order of `header`."""
    values = {
        "#": str(row["number"]), "tokens/s/GPU": fmt(row["tokens_per_s_per_gpu"], "tok"), "x baseline": fmt(row["speedup"], "x"),
        "MFU": fmt(row["mfu"], "mfu"), "peak GiB": fmt(row["peak_mem_gib"], "gib"),
        "est. GiB": fmt(row.get("memory_estimate_gib"), "gib"),
        "TTFT ms": fmt(row.get("ttft_ms"), "ms"), "TPOT ms": fmt(row.get("tpot_ms_median"), "ms"),
        "TPOT p99 ms": fmt(row.get("tpot_ms_p99"), "ms"), "roofline": fmt(row.get("roofline_share"), "mfu"),
        "tokens/J": fmt(row.get("tokens_per_joule"), "tpj"),
        "step spread": fmt(row["step_spread_pct"], "pct"), "NCCL used": row.get("nccl_used") or "-",
        "state": row["state"] + (" (predicted)" if row["predicted"] else ""),
        "reason": reason_line(row["reason"], reason_chars),
        **{k: str(row["knobs"].get(k)) for k in knobs},
    }
    return [values[c] for c in header]


def rich_table(rows: list[dict[str, Any]], knobs: list[str], title: str) -> Any:
    """The trials table as a Rich Table."""
    from rich.table import Table

    header = columns(knobs, rows)
    table = Table(title=title)
    for col in header:
        table.add_column(col, overflow="fold", justify="left" if col in (*knobs, "state", "reason") else "right")
    for r in rows:
        table.add_row(*cells(r, knobs, header))
    return table
