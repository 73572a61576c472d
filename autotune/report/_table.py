"""The trials table, defined once: its columns and formatted cells, drawn by Rich, Markdown, HTML
and the search."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

from autotune import metrics, nccl_log, tasks
from autotune.documents import trial_marks
from autotune.documents.record import Metric, RecordError, TrialRecord, has_knobs, has_status
from autotune.hardware import MFU_PRECISION
from autotune.protocol import Knobs, reason_line
from autotune.report._data import Row, Stored
from autotune.status import Status

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial
    from rich.table import Table


Item = TypeVar("Item")


def pareto(
    items: list[Item],
    up: Callable[[Item], float | None],
    down: Callable[[Item], float | None],
) -> list[Item]:
    """The items no other beats on both: up(item) higher and down(item) lower (ties on both are
    kept), in ascending order of down. The one Pareto-front rule of the report (memory, and
    generate's latency). An item without a number on an axis (a job that reports no peak memory)
    cannot be placed on it: it is left out, never compared."""
    placed: list[tuple[Item, float, float]] = []
    for a in items:
        x, y = up(a), down(a)
        if _number(x) and _number(y):
            placed.append((a, x, y))
    kept = [
        (a, x, y)
        for a, x, y in placed
        if not any(xb >= x and yb <= y and (xb, yb) != (x, y) for _, xb, yb in placed)
    ]
    return [a for a, _, _ in sorted(kept, key=lambda p: p[2])]


def fmt(value: object, kind: str) -> str:
    """One cell: tok (tokens/s), mfu, x (ratio), gib, pct; None is '-' (MFU: 'n/a', never
    invented)."""
    if value is None:
        return "n/a" if kind == "mfu" else "-"
    if not _number(value):
        return str(value)[:20]
    return {
        "tok": f"{value:,.0f}",
        "mfu": f"{100 * value:.1f}%",
        "x": f"{value:.2f}x",
        "gib": f"{value:.2f}",
        "pct": f"{value:.1f}%",
        "ms": f"{value:,.2f}",
        "tpj": f"{value:,.1f}",
    }.get(kind, str(value))


def padding_text(pct: object) -> str:
    """'26.3% padding' beside the figure of a job whose batches were padded (its callback or
    reporter counted the tokens computed on beside the real ones; the figure counts the real ones
    only), '' where none were or the job did not say."""
    return f"{fmt(pct, 'pct')} padding" if _number(pct) and pct > 0 else ""


# The MFU column's header: every MFU figure names the peak it divides by (issue 49)
MFU_HEADER = f"MFU ({MFU_PRECISION} peak)"


def tflops_text(value: float) -> str:
    """A peak in TFLOP/s as the datasheet writes it: 989.5, 1,979."""
    return f"{value:,.1f}".removesuffix(".0")


def mfu_text(value: float | None, peaks: list[Stored], mark: Callable[[str], str] = str) -> str:
    """An MFU figure with the peak it divides by (peaks: metrics.mfu_peaks; [] reads `value` as the
    stored figure, against MFU_PRECISION's peak of a GPU unnamed): "69.0% of the bf16 dense peak,
    989.5 TFLOP/s"; with a second peak (fp8): "69.0% of bf16's 989.5 TFLOP/s, 34.5% of fp8's
    1,979". A peak the table lacks is named without its number, its figure n/a. mark wraps each
    figure (the HTML card's <b>)."""
    if value is None:
        return mark(fmt(None, "mfu"))
    first, *others = peaks or [{"precision": MFU_PRECISION, "tflops": None, "mfu": value}]
    if not others:
        at = f", {tflops_text(first['tflops'])} TFLOP/s" if first["tflops"] else ""
        return f"{mark(fmt(first['mfu'], 'mfu'))} of the {first['precision']} dense peak{at}"
    parts = []
    for i, p in enumerate(peaks):
        unit = " TFLOP/s" if i == 0 else ""
        at = f"'s {tflops_text(p['tflops'])}{unit}" if p["tflops"] else "'s peak (not in the table)"
        parts.append(f"{mark(fmt(p['mfu'], 'mfu'))} of {p['precision']}{at}")
    return ", ".join(parts)


def record_mfu_text(record: TrialRecord) -> str:
    """A trial's MFU with the peak it divides by (mfu_text: fp8 against both peaks), for the live
    view's lines."""
    fp = record.fingerprint or {}
    gpu = fp.get("gpu_model") if fp.get("device") == "cuda" else None
    value, stored = record.metric(Metric.MFU), record.metric(metrics.MFU_PEAK_TFLOPS)
    precision = str(record.knobs.get("precision"))
    return mfu_text(value, metrics.mfu_peaks(value, stored, gpu, precision))


def _mfu_cell(row: Row) -> str:
    """The MFU column's cell: the figure against MFU_PRECISION's peak (the header names it), and a
    second peak's beside it (an fp8 trial's: "69.0% (fp8 34.5%)")."""
    shown = fmt(row.mfu, "mfu")
    others = row.mfu_peaks[1:]
    return shown + "".join(f" ({p['precision']} {fmt(p['mfu'], 'mfu')})" for p in others)


def speedup(value: float | None, flag: str | None) -> str:
    """An "x baseline" ratio, with the flag of an unsteady baseline beside it ("293.00x (baseline
    unsteady:
    spread 120%)"): a ratio to a baseline that was not steady is no speed-up to trust."""
    shown = fmt(value, "x")
    return f"{shown} ({flag})" if flag and value is not None else shown


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _dict(value: object) -> Stored:
    return value if isinstance(value, dict) else {}


def _steps(r: TrialRecord) -> list[float]:
    """A record's measured step times, positive numbers only (a damaged record gives none)."""
    try:
        steps = r.step_times
    except (RecordError, TypeError, AttributeError):
        return []
    return [x for x in steps if _number(x) and x > 0]


def _half_width(r: TrialRecord) -> float | None:
    """The 95% half-width of a trial's figure within its process, in percent: a command window's
    own (command/window.py), else 1.96 standard errors of its mean step time."""
    window = _dict(_dict(r.metrics).get(Metric.WINDOW))
    if _number(window.get("half_width_pct")):
        return float(window["half_width_pct"])
    steps = _steps(r)
    if len(steps) < 2:
        return None
    return 100 * 1.96 * statistics.stdev(steps) / math.sqrt(len(steps)) / statistics.fmean(steps)


def _state(
    t: FrozenTrial, r: TrialRecord, m: dict[str, Any], knobs_ok: bool
) -> tuple[str, float | None]:
    """A row's state and its tokens/s per GPU: 'unreadable' where an ok record lacks either."""
    from optuna.trial import TrialState

    state = {TrialState.RUNNING: "running", TrialState.WAITING: "waiting"}.get(
        t.state, r.status or "failed"
    )
    if t.state == TrialState.FAIL and not has_status(t):
        # failed outside autotune's objective (e.g. Optuna's own stale-trial handling)
        state = Status.WORKER_LOST
    tokens = m.get(Metric.TOKENS_PER_GPU) if _number(m.get(Metric.TOKENS_PER_GPU)) else None
    if not isinstance(state, str) or (state == Status.OK and (tokens is None or not knobs_ok)):
        state, tokens = "unreadable", None
    return state, tokens


def row_of(t: FrozenTrial, base_value: float | None) -> Row:
    """A trial (an Optuna FrozenTrial) as a report row: its record's knobs, metrics, state and
    reason. A record another program damaged (a field of the wrong type) shows as 'unreadable',
    never as a failure of the report."""
    from optuna.trial import TrialState

    try:
        r = TrialRecord.of(t)
    except RecordError:
        r = TrialRecord(t.number, {}, "unreadable")
    m = _dict(r.metrics)
    knobs_ok = has_knobs(t)
    state, tokens = _state(t, r, m, knobs_ok)
    # a pruned trial's Optuna value is its last step's (Optuna's tell): the median of its steps is
    # the number
    first = t.values[0] if t.values else None  # tokens/s; a pareto study's second value is p99 TPOT
    value = (first if _number(first) else None) if t.state == TrialState.COMPLETE else tokens
    knobs = r.knobs if knobs_ok else t.params
    applied = _dict(r.applied).get("flops")

    def figure(key: str) -> float | None:
        return m.get(key) if _number(m.get(key)) else None

    return Row(
        number=t.number,
        state=state,
        knobs=knobs,
        tokens_per_s_per_gpu=tokens,
        speedup=(value / base_value) if (value is not None and base_value) else None,
        step_spread_pct=metrics.middle_spread_pct(_steps(r)),
        half_width_pct=_half_width(r),
        reason=str(r.reason or ""),
        predicted=bool(r.predicted),
        phases_s={k: v for k, v in _dict(r.phases_s).items() if _number(v)} or None,
        wall_s=r.wall_s if _number(r.wall_s) else None,
        prestarted=r.prestarted is True,
        forked=r.forked is True,
        fingerprint=r.fingerprint,
        mfu_peaks=_peaks(r, m, knobs),
        power_cap=metrics.power_cap(r.telemetry),
        beyond_list=r.extra.get("beyond_list") or None,
        failed_rank=trial_marks.failed_rank(r),
        loss_check=_dict(r.loss_check) or None,  # None where no numerics check ran
        nccl_used=nccl_log.used(_dict(r.nccl)),
        flops=applied if isinstance(applied, str) else None,
        # the numbers each column shows (generate's latency and roofline: metrics.generation)
        mfu=figure(Metric.MFU),
        peak_mem_gib=figure(Metric.PEAK_MEM_GIB),
        memory_estimate_gib=figure(Metric.MEMORY_ESTIMATE_GIB),
        ttft_ms=figure(Metric.TTFT_MS),
        tpot_ms_median=figure(Metric.TPOT_MEDIAN_MS),
        tpot_ms_p99=figure(Metric.TPOT_P99_MS),
        roofline_share=figure(Metric.ROOFLINE),
        tokens_per_joule=figure(Metric.TOKENS_PER_JOULE),
        padding_pct=figure(Metric.PADDING_PCT),
        host=_host(r),
    )


def _host(r: TrialRecord) -> str | None:
    """'busy' where another job disturbed its measurement (search/host.py), 'quiet' where the
    host was sampled and nothing did, None where it was not sampled."""
    if r.host is None:
        return None
    return "busy" if r.disturbed else "quiet"


def _peaks(r: TrialRecord, m: dict[str, Any], knobs: Knobs) -> list[Stored]:
    """The peaks a row's MFU is read against (metrics.mfu_peaks)."""
    mfu, peak = m.get(Metric.MFU), m.get(metrics.MFU_PEAK_TFLOPS)
    return metrics.mfu_peaks(
        mfu if _number(mfu) else None,
        peak if _number(peak) else None,
        _gpu(r.fingerprint),
        str(knobs.get("precision")),
    )


def _gpu(fingerprint: Stored | None) -> str | None:
    """The GPU a record's fingerprint names (its device's name, which the peak table is read by),
    None on a CPU or without one."""
    f = _dict(fingerprint)
    name = f.get("gpu_model")
    return name if f.get("device") == "cuda" and isinstance(name, str) else None


def columns(knobs: list[str], rows: list[Row], task: str = "train") -> list[str]:
    """The table's header: the searched knobs, the metrics (the task's efficiency columns:
    tasks.Task.columns), NCCL's choice (only where NCCL said), and the outcome (only where a trial
    did not simply succeed)."""
    nccl = ["NCCL used"] if any(r.nccl_used for r in rows) else []
    outcome = ["state", "reason"] if any(r.state != Status.OK or r.reason for r in rows) else []
    efficiency = [MFU_HEADER if c == "MFU" else c for c in tasks.task(task).columns]
    energy = ["tokens/J"] if any(r.tokens_per_joule is not None for r in rows) else []
    estimate = ["est. GiB"] if any(r.memory_estimate_gib is not None for r in rows) else []
    # measured while the host was busy: shown only where one was (search/host.py)
    host = ["host"] if any(r.host == "busy" for r in rows) else []
    return [
        "#",
        *knobs,
        "tokens/s/GPU",
        "x baseline",
        *efficiency,
        *energy,
        "peak GiB",
        *estimate,
        "step spread",
        *host,
        *nccl,
        *outcome,
    ]


def cells(row: Row, knobs: list[str], header: list[str], reason_chars: int = 60) -> list[str]:
    """One row's formatted cells, in the order of `header`."""
    values = {
        "#": str(row.number),
        "tokens/s/GPU": fmt(row.tokens_per_s_per_gpu, "tok"),
        "x baseline": speedup(row.speedup, row.speedup_flag),
        MFU_HEADER: _mfu_cell(row),
        "peak GiB": fmt(row.peak_mem_gib, "gib"),
        "est. GiB": fmt(row.memory_estimate_gib, "gib"),
        "TTFT ms": fmt(row.ttft_ms, "ms"),
        "TPOT ms": fmt(row.tpot_ms_median, "ms"),
        "TPOT p99 ms": fmt(row.tpot_ms_p99, "ms"),
        "roofline": fmt(row.roofline_share, "mfu"),
        "padding": fmt(row.padding_pct, "pct"),
        "tokens/J": fmt(row.tokens_per_joule, "tpj"),
        "step spread": fmt(row.step_spread_pct, "pct"),
        "NCCL used": row.nccl_used or "-",
        "host": row.host or "-",
        "state": row.state + (" (predicted)" if row.predicted else ""),
        "reason": reason_line(row.reason, reason_chars),
        **{k: _knob_cell(row, k) for k in knobs},
    }
    return [values[c] for c in header]


def _knob_cell(row: Row, name: str) -> str:
    """A knob's value in the table; '24 (past list)' for a value measured beyond the user's list
    (search/edges.py)."""
    value = str(row.knobs.get(name))
    beyond = row.beyond_list or {}
    return f"{value} (past list)" if name in beyond else value


def varying(header: list[str], rows: list[Row], knobs: list[str]) -> list[str]:
    """The header less the knob and metric columns whose value is the same in every row."""
    keep = []
    for col in header:
        values = {cells(r, knobs, [col])[0] for r in rows}
        if col == "#" or len(values) > 1 or len(rows) < 2:
            keep.append(col)
    return keep


def rich_table(rows: list[Row], knobs: list[str], title: str, task: str = "train") -> Table:
    """The trials table as a Rich Table."""
    from rich.table import Table

    header = varying(columns(knobs, rows, task), rows, knobs)
    table = Table(title=title)
    for col in header:
        left = col in (*knobs, "state", "reason")
        # a header wraps between words, never within one ("micro_batch_size", not "m/i/c/r/o")
        word = max(len(w) for w in col.split())
        table.add_column(col, overflow="fold", justify="left" if left else "right", min_width=word)
    for r in rows:
        table.add_row(*cells(r, knobs, header))
    return table
