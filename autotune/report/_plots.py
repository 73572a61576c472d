"""The page's interactive plots (plotly): Optuna's own (history, parallel coordinates, slice,
Pareto front), each with the chosen trial marked, and those Optuna lacks (throughput with
its measured spread, the confirmation's samples, the latency or memory front with its limits,
each trial's time by phase).

Plotly draws text as text (never as markup) and its JSON is written with `<` escaped; strings of
ours that plotly reads as its small HTML subset (hover text, tick labels) are escaped first as
well, and a tag with attributes anywhere in a figure (a knob's value in Optuna's slice plot) is
made text when the figure is written (`to_div`): the page loads and links nothing outside itself."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autotune.report._card import Card
from autotune.report._data import Report, Row
from autotune.report._escape import escape
from autotune.report._measured import PHASES, Measured
from autotune.report._snapshot import bare_snapshot, target
from autotune.status import Status

if TYPE_CHECKING:
    from types import ModuleType

    import optuna
    import plotly.graph_objects as go
    from optuna.trial import FrozenTrial

CHOSEN = {"symbol": "star", "size": 18, "color": "#d62728", "line": {"width": 1, "color": "black"}}
TOKENS = "tokens/s per GPU"
# plotly.js's options for every figure: the page works offline and sends nothing. Without them
# the mode bar shows plotly's logo (a link to plotly.com) and, by default in plotly.js 4 (which
# plotly 7 inlines), a "Share chart" button that posts the chart to plotlyServerURL (Plotly's
# cloud). plotly.py leaves plotlyServerURL out of the page when showSendToCloud is off
# (plotly/io/_html.py).
CONFIG = {"displaylogo": False, "showSendToCloud": False, "watermark": False, "responsive": True}
# plotly.js reads its text (hover, ticks, legend, titles) as a small HTML subset in which a tag's
# href is a live link and its style may hold a url(): the `<` of any tag with attributes is
# written as `&lt;`, which plotly shows as the character (our own `<br>` has none)
ATTRIBUTED_TAG = re.compile(r"<(?=/?[^\s<>]*\s[^<>]*>)")


def available() -> bool:
    """Whether plotly is installed (the `report` extra)."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        return False
    return True


def to_div(fig: go.Figure) -> str:
    """A figure's <div> and script for the page (plotly.js inlined once elsewhere): no link to
    plotly, no button that sends the chart away, no tag with attributes in its strings."""
    import plotly.io

    div: str = plotly.io.to_html(
        _inert(fig.to_dict()),
        full_html=False,
        include_plotlyjs=False,
        config=CONFIG,
        validate=False,
    )
    return div


def _inert(value: object) -> object:
    """The figure's data with every string's attributed tags made text (ATTRIBUTED_TAG)."""
    if isinstance(value, str):
        return ATTRIBUTED_TAG.sub("&lt;", value)
    if isinstance(value, dict):
        return {k: _inert(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_inert(v) for v in value]
    return value


def figures(
    study: optuna.Study, data: Report, m: Measured, c: Card | None
) -> list[tuple[str, go.Figure]]:
    """(heading, figure) for each plot that has data, in the page's order."""
    steps = (
        ("Throughput of each trial, with its measured spread", _spread),
        ("Confirmation: each candidate re-measured in fresh processes", _confirmation),
        ("Optimization history (Optuna)", _history),
        ("Parallel coordinates (Optuna)", _parallel),
        ("Each knob against throughput (Optuna slice)", _slice),
        ("Pareto front (Optuna)", _pareto),
        ("Throughput against the latency or memory it costs", _front),
        ("Where each trial's GPU time went", _time),
    )
    out = []
    study = bare_snapshot(study)
    for heading, make in steps:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna's experimental-API warnings
            try:
                fig = make(study, data, m, c)
            except (ValueError, RuntimeError, KeyError, TypeError, ZeroDivisionError):
                # a plot Optuna cannot draw for this study (too few trials, one value): left out
                fig = None
        if fig is not None:
            fig.update_layout(template="plotly_white", margin={"t": 40, "b": 40}, height=420)
            out.append((heading, fig))
    return out


def _ok(data: Report) -> list[Row]:
    return sorted((r for r in data.trials if r.state == Status.OK), key=lambda r: r.number)


def _label(r: Row, searched: list[str]) -> str:
    knobs = "<br>".join(escape(f"{k}={r.knobs.get(k)}") for k in searched)
    return f"trial {r.number}<br>{knobs}"


def _star(go: ModuleType, x: list[Any], y: list[Any], **kw: Any) -> go.Scatter:
    return go.Scatter(x=x, y=y, mode="markers", marker=CHOSEN, name="chosen (best.yaml)", **kw)


def _spread(study: optuna.Study, data: Report, m: Measured, c: Card | None) -> go.Figure | None:
    import plotly.graph_objects as go

    ok = [r for r in _ok(data) if r.number in m["spread"]]
    if not ok:
        return None
    y = [r.figure for r in ok]
    lo = [v - m["spread"][r.number][0] for v, r in zip(y, ok)]
    hi = [m["spread"][r.number][1] - v for v, r in zip(y, ok)]
    fig = go.Figure(
        go.Scatter(
            x=[r.number for r in ok],
            y=y,
            mode="markers",
            name="median of the measured steps",
            error_y={"type": "data", "array": hi, "arrayminus": lo, "color": "grey"},
            text=[_label(r, data.searched) for r in ok],
            hovertemplate="%{text}<br>%{y:,.0f} tokens/s<extra></extra>",
        )
    )
    _mark_baseline(fig, data)
    chosen = [r for r in ok if c and r.number == c["trial"]]
    if chosen:
        fig.add_trace(_star(go, [chosen[0].number], [chosen[0].tokens_per_s_per_gpu]))
    bars = f"{', '.join(f'{100 * q:.0f}th' for q in (0.1, 0.9))} percentile steps"
    return fig.update_layout(xaxis_title="trial", yaxis_title=f"{TOKENS} (bars: {bars})")


def _mark_baseline(fig: go.Figure, data: Report) -> None:
    if data.baseline:
        fig.add_hline(
            y=data.baseline.tokens_per_s_per_gpu,
            line_dash="dash",
            line_color="grey",
            annotation_text="baseline",
        )


def _confirmation(
    study: optuna.Study, data: Report, m: Measured, c: Card | None
) -> go.Figure | None:
    import plotly.graph_objects as go

    conf = data.confirmation
    if not conf:
        return None
    fig = go.Figure()
    base = conf.baseline
    # your setting kept: its own arm drawn first, beside the candidates it beat
    mine = base if base and base.samples and base.trial == conf.chosen else None
    for st in [*([mine] if mine else []), *conf.stats]:
        chosen = " (chosen)" if st.trial == conf.chosen else ""
        name = f"trial {st.trial}" + (" (baseline, chosen)" if st is mine else chosen)
        fig.add_trace(
            go.Box(
                y=st.samples,
                name=name,
                boxpoints="all",
                jitter=0.3,
                pointpos=0,
                marker_size=9,
                boxmean=False,
            )
        )
        if st is mine:
            continue
        fig.add_trace(
            go.Scatter(
                x=[name],
                y=[st.search_value],
                mode="markers",
                marker={"symbol": "x", "size": 11, "color": "black"},
                name="its search measurement",
                showlegend=st is conf.stats[0],
            )
        )
    return fig.update_layout(
        yaxis_title=f"{TOKENS} (each point: one fresh process)", xaxis_title="candidate"
    )


def _history(study: optuna.Study, data: Report, m: Measured, c: Card | None) -> go.Figure | None:
    import plotly.graph_objects as go
    from optuna.visualization import plot_optimization_history

    ok = _ok(data)
    if not ok:
        return None
    fig = plot_optimization_history(study, target=target(study), target_name=TOKENS)
    _mark_baseline(fig, data)
    if c:
        row = next((r for r in ok if r.number == c["trial"]), None)
        if row is not None:
            fig.add_trace(_star(go, [row.number], [row.tokens_per_s_per_gpu]))
    return fig.update_layout(title=None)


def _parallel(study: optuna.Study, data: Report, m: Measured, c: Card | None) -> go.Figure | None:
    from optuna.visualization import plot_parallel_coordinate

    if len(data.searched) < 2 or len(_ok(data)) < 2:
        return None
    fig = plot_parallel_coordinate(
        study, params=data.searched, target=target(study), target_name=TOKENS
    )
    chosen = (
        ""
        if c is None
        else f"chosen (best.yaml): trial {c['trial']}, " + _label_line(c, data.searched)
    )
    return fig.update_layout(title={"text": chosen, "font": {"size": 13}})


def _label_line(c: Card, searched: list[str]) -> str:
    return escape(", ".join(f"{k}={c['knobs'].get(k)}" for k in searched))


def _slice(study: optuna.Study, data: Report, m: Measured, c: Card | None) -> go.Figure | None:
    import plotly.graph_objects as go
    from optuna.visualization import plot_slice

    if not data.searched or len(_ok(data)) < 2:
        return None
    fig = plot_slice(study, params=data.searched, target=target(study), target_name=TOKENS)
    trial = next(
        (t for t in study.get_trials(deepcopy=False) if c and t.number == c["trial"]), None
    )
    if (
        trial is not None and trial.values
    ):  # Optuna draws one panel a knob, in sorted order, on axes x, x2, x3, ...
        for i, knob in enumerate(sorted(data.searched)):
            axis = "" if i == 0 else str(i + 1)
            x = _slice_x(trial, knob)
            if x is not None:
                fig.add_trace(
                    _star(
                        go,
                        [x],
                        [trial.values[0]],
                        xaxis=f"x{axis}",
                        yaxis=f"y{axis}",
                        showlegend=i == 0,
                    )
                )
    return fig.update_layout(title=None, legend={"orientation": "h", "y": 1.12})


def _slice_x(trial: FrozenTrial, knob: str) -> object:
    """The trial's value of a knob where Optuna's slice plot places it: a categorical choice by its
    repr."""
    from optuna.distributions import CategoricalDistribution

    if knob not in trial.params:
        return None
    value = trial.params[knob]
    return repr(value) if isinstance(trial.distributions[knob], CategoricalDistribution) else value


def _pareto(study: optuna.Study, data: Report, m: Measured, c: Card | None) -> go.Figure | None:
    import plotly.graph_objects as go
    from optuna.visualization import plot_pareto_front

    if len(study.directions) < 2:
        return None
    fig = plot_pareto_front(study, target_names=[TOKENS, "p99 time per output token (ms)"])
    if "p99_tpot_ms" in m["limits"]:
        fig.add_hline(
            y=m["limits"]["p99_tpot_ms"],
            line_dash="dot",
            line_color="#d62728",
            annotation_text="limit",
        )
    row = next((r for r in data.trials if c and r.number == c["trial"]), None)
    if row is not None and row.tpot_ms_p99 is not None:
        fig.add_trace(_star(go, [row.tokens_per_s_per_gpu], [row.tpot_ms_p99]))
    return fig.update_layout(title=None)


def _front(study: optuna.Study, data: Report, m: Measured, c: Card | None) -> go.Figure | None:
    """Latency (p99 time per output token) where trials have it, else peak memory, with the front
    drawn (a pareto study's latency front is Optuna's: _pareto)."""
    from autotune.report._table import pareto

    latency = [r for r in data.trials if r.tpot_ms_p99 is not None and r.tokens_per_s_per_gpu]
    key: Callable[[Row], float | None] = _latency
    title, limit = "p99 time per output token (ms)", m["limits"].get("p99_tpot_ms")
    if latency and len(study.directions) > 1:
        return None
    points = latency
    if not latency:
        points = [r for r in _ok(data) if r.peak_mem_gib is not None]
        key, title, limit = _memory, "peak memory (GiB)", None
    if len(points) < 2:
        return None
    front = pareto(points, up=lambda r: r.tokens_per_s_per_gpu, down=key)
    return _front_figure(data, points, front, key, title, limit, c)


def _latency(r: Row) -> float | None:
    return r.tpot_ms_p99


def _memory(r: Row) -> float | None:
    return r.peak_mem_gib


def _front_figure(
    data: Report,
    points: list[Row],
    front: list[Row],
    key: Callable[[Row], float | None],
    title: str,
    limit: float | None,
    c: Card | None,
) -> go.Figure:
    import plotly.graph_objects as go

    fig = go.Figure()
    for state in sorted({r.state for r in points}):
        mine = [r for r in points if r.state == state]
        fig.add_trace(
            go.Scatter(
                x=[key(r) for r in mine],
                y=[r.tokens_per_s_per_gpu for r in mine],
                mode="markers",
                name=escape(state),
                text=[_label(r, data.searched) for r in mine],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=[key(r) for r in front],
            y=[r.tokens_per_s_per_gpu for r in front],
            mode="lines",
            name="front (no trial beats these on both)",
            line={"color": "#ff7f0e"},
        )
    )
    if limit is not None:
        fig.add_vline(x=limit, line_dash="dot", line_color="#d62728", annotation_text="limit")
    row = next((r for r in points if c and r.number == c["trial"]), None)
    if row is not None:
        fig.add_trace(_star(go, [key(row)], [row.tokens_per_s_per_gpu]))
    return fig.update_layout(xaxis_title=title, yaxis_title=TOKENS)


def _time(study: optuna.Study, data: Report, m: Measured, c: Card | None) -> go.Figure | None:
    import plotly.graph_objects as go

    phases = m["phases"]
    if not phases:
        return None
    xs = [f"{p['number']}{' (chosen)' if c and p['number'] == c['trial'] else ''}" for p in phases]
    fig = go.Figure()
    # GPU-minutes on a GPU, process-minutes on a CPU (report/_summary.cost)
    cpu = data.cost.get("unit") == "process-minutes"
    unit = "min" if cpu else "GPU-min"
    for phase in PHASES:
        minutes = [p["seconds"][phase] * (1 if cpu else m["gpus"]) / 60 for p in phases]
        if any(minutes):
            fig.add_trace(
                go.Bar(
                    x=xs,
                    y=minutes,
                    name=phase,
                    hovertemplate=f"%{{y:.2f}} {unit}<extra>{phase}</extra>",
                )
            )
    total = data.cost.get("minutes", data.cost["gpu_min"] or 0.0)  # every process the search ran
    title = (
        f"process-minutes ({total:,.1f} in all)"
        if cpu
        else f"GPU-minutes ({m['gpus']} GPU a trial; {total:,.1f} in all)"
    )
    return fig.update_layout(
        barmode="stack",
        xaxis_title="trial",
        xaxis_type="category",
        yaxis_title=title,
    )
