"""The HTML report: one self-contained page that works offline (plotly.js inlined once, PNGs
embedded): the summary card, the tables with the chosen trial marked, Optuna's interactive plots
and matplotlib's for what Optuna lacks. Every string from the study is escaped (html.escape)
before it reaches the page."""

from __future__ import annotations

import base64
import contextlib
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.report import _html_trials, _plots
from autotune.report._card import Card, card_html, chosen, interval
from autotune.report._curves import loss_svg
from autotune.report._data import Group, Report, Stored
from autotune.report._escape import escape
from autotune.report._html_trials import trials_table
from autotune.report._measured import PHASES, measured, telemetry_of
from autotune.report._static import PLOT_FILES, draw, pareto_front, plot_data
from autotune.report._table import fmt
from autotune.report._text import (
    cost_line,
    effects_lines,
    excluded_lines,
    memory_axis_line,
    rounds_text,
    started,
)

if TYPE_CHECKING:
    import optuna
    import plotly.graph_objects as go

__all__ = ["pareto_front", "write_html"]

INSTALL = "pip install 'autotune-llm[report]'"  # the extra that brings plotly (pyproject.toml)
STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1300px;padding:0 1em;color:#222;
overflow-wrap:anywhere}
table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px;text-align:right;overflow-wrap:normal}
td{white-space:nowrap}
td.text,td.long,tr.reason td{white-space:normal;overflow-wrap:anywhere}
td.text{text-align:left}
td.long{text-align:left}
tr.reason td{text-align:left;color:#555;border-top:none}
details summary{cursor:pointer}
.curves svg{border:1px solid #ccc;margin:0.3em}
th{background:#eee}
tr.chosen td{background:#fff3c4;font-weight:600}
.card{border:2px solid #d62728;border-radius:8px;padding:0.5em 1.5em;margin:1em 0;background:#fffaf0}
.card .headline{font-size:1.4em}
.star{color:#d62728}
.note{background:#eef4ff;border-left:4px solid #4477cc;padding:0.5em 1em}
figure{display:inline-block;margin:0.5em}
img{max-width:100%}
.plot{margin-bottom:2em;max-width:100%;overflow:hidden;position:relative}
"""  # noqa: E501


def write_html(data: Report | Stored, out: Path, study: optuna.Study | None = None) -> Path:
    """report.html (one file to attach or open) and its PNGs beside it. data: collect's Report, or
    the plain dict of its JSON. study: the Optuna study the data was collected from, for the
    interactive plots and the measured spread (without it, static plots only). Everything is drawn
    in a temporary folder first, then put in place with Ctrl-C and SIGTERM held back: a page and
    its plots are always of one report (an older report's plot that this one lacks is removed)."""
    import tempfile

    data = Report.of(data)
    m = measured(data, study)
    card = chosen(data)
    interactive = study is not None and _plots.available()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out, prefix=".report-") as tmp:
        tele = telemetry_of(study, card["trial"]) if study is not None and card else None
        pngs = draw(
            plot_data(data, m["phases"], card["trial"] if card else None, tele),
            Path(tmp),
            interactive,
        )
        figs = _plots.figures(study, data, m, card) if study is not None and interactive else []
        (Path(tmp) / "report.html").write_text(page(data, card, figs, pngs))
        with _signals_held():
            for name in PLOT_FILES:
                if not (Path(tmp) / name).exists():
                    (out / name).unlink(missing_ok=True)
            for p in pngs:
                os.replace(p, out / p.name)
            os.replace(Path(tmp) / "report.html", out / "report.html")
    return out / "report.html"


@contextlib.contextmanager
def _signals_held() -> Any:
    """SIGINT and SIGTERM delivered after the block, not within it (a few renames)."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def page(
    data: Report,
    card: Card | None,
    figs: list[tuple[str, Any]],
    pngs: list[Path],
) -> str:
    """The whole page: head (plotly.js inlined once), card, tables, plots."""
    title = escape(f"autotune report: {data.study}")
    chosen_number = card["trial"] if card else None
    body = [
        f"<h1>{title}</h1>",
        f"<p>{_subtitle(data)}</p>",
        card_html(data, card),
        _excluded_html(data.excluded),
        "" if _plots.available() else _no_plotly_note(),
        trials_table(data, chosen_number),
        _confirmation_table(data),
        *(_figure_html(heading, fig) for heading, fig in figs),
        _images(pngs, "Telemetry and check history" if figs else "Plots"),
        _note(memory_axis_line(data)),
        _effects_html(data),
        _time_section(data),
    ]
    plotly_js = _plotly_js() if figs else ""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{STYLE}{_html_trials.STYLE}</style>{plotly_js}</head>\n"
        "<body>\n" + "\n".join(b for b in body if b) + "\n</body></html>\n"
    )


def _subtitle(data: Report) -> str:
    counts = ", ".join(f"{k} {v}" for k, v in data.counts.items())
    family = (data.model or {}).get("family") if isinstance(data.model, dict) else None
    parts = [
        f"device {data.device}",
        f"task {data.task}",
        *([f"model {family}"] if family else []),
    ]
    return escape("; ".join(str(p) for p in parts) + f". Trials by state: {counts}.")


def _note(text: str) -> str:
    """A sentence of the report set apart on the page (none for "")."""
    return f'<p class="note">{escape(text)}</p>' if text else ""


def _no_plotly_note() -> str:
    return (
        '<p class="note">Static plots only: the interactive plots (Optuna\'s history, parallel '
        f"coordinates, slice, Pareto front) need plotly: <code>{escape(INSTALL)}</code>, then run "
        "<code>autotune report</code> again.</p>"
    )


def _plotly_js() -> str:
    """plotly.js itself, inlined once (the page needs no network)."""
    from plotly.offline import get_plotlyjs

    return f'<script type="text/javascript">{get_plotlyjs()}</script>'


def _figure_html(heading: str, fig: go.Figure) -> str:
    div = _plots.to_div(fig)
    return f'<section class="plot"><h2>{escape(heading)}</h2>{div}</section>'


def _images(pngs: list[Path], heading: str) -> str:
    if not pngs:
        return ""
    figures = "\n".join(
        f'<figure><img alt="{escape(p.stem)}" '
        f'src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}"></figure>'
        for p in pngs
    )
    return f"<h2>{escape(heading)}</h2>{figures}"


def _table(
    header: list[str],
    rows: list[tuple[list[str], str]],
    text: tuple[str, ...] = (),
    wrap: str | None = None,
) -> str:
    """A table of already formatted cells, escaped here; rows: (cells, the row's class); text: the
    columns of words (left-aligned); wrap: the one column whose long lines wrap."""
    head = "".join(f"<th>{escape(c)}</th>" for c in header)
    kinds = ["long" if c == wrap else "text" if c in text else "" for c in header]
    body = "\n".join(
        f'<tr class="{cls}">'
        + "".join(f'<td class="{k}">{escape(c)}</td>' for c, k in zip(row, kinds))
        + "</tr>"
        for row, cls in rows
    )
    return f"<table><tr>{head}</tr>\n{body}</table>"


def _excluded_html(groups: list[Group]) -> str:
    """What the search left out, each group with its reason, loss curves and remedy."""
    if not groups:
        return ""
    total = sum(g["count"] for g in groups)
    items = []
    for g in groups:
        first, *rest = excluded_lines(g, 2000)
        sub = "".join(f"<li>{escape(x)}</li>" for x in rest)
        evidence = g["evidence"]
        curves = loss_svg(evidence) if evidence else ""
        items.append(f"<li>{escape(first)}<ul>{sub}</ul>{curves}</li>")
    heading = f"<h2>Left out of the search: {total} trial(s)</h2>"
    return f'{heading}<ul id="excluded">{"".join(items)}</ul>'


def _confirmation_table(data: Report) -> str:
    conf = data.confirmation
    if not conf:
        return ""
    header = [
        "trial",
        "median tokens/s/GPU",
        "interval",
        "samples (one a fresh process)",
        "search",
        "failures",
    ]
    rows = []
    for st in conf.stats:
        samples = ", ".join(fmt(s, "tok") for s in st.samples)
        mine = st.trial == conf.chosen
        number = f"{st.trial}" + (" \u2605 chosen" if mine else "")
        row = [
            number,
            fmt(st.median, "tok"),
            interval(st),
            samples,
            fmt(st.search_value, "tok"),
        ]
        rows.append(
            (
                [*row, "; ".join(str(f) for f in st.failures[:3]) or "-"],
                "chosen" if mine else "",
            )
        )
    base = conf.baseline
    if base and base.samples:
        samples = ", ".join(fmt(s, "tok") for s in base.samples)
        failed = "; ".join(str(f) for f in base.failures[:3]) or "-"
        mine = base.trial == conf.chosen
        number = f"{base.trial} baseline" + (" \u2605 chosen: your setting" if mine else "")
        cells = [number, fmt(base.median, "tok"), interval(base), samples]
        rows.append(([*cells, "-", failed], "chosen" if mine else ""))
    rounds = f"{rounds_text(conf)} of the top {len(conf.stats)} and the baseline"
    table = _table(header, rows, ("interval", "samples (one a fresh process)"), wrap="failures")
    return f"<h2>Confirmation</h2><p>{escape(rounds)}: {escape(str(conf.why))}</p>" + table


def _effects_html(data: Report) -> str:
    if not data.searched:
        return ""
    items = "".join(f"<li>{escape(x)}</li>" for x in effects_lines(data))
    return f"<h2>Which knobs mattered</h2><ul>{items}</ul>"


def _time_section(data: Report) -> str:
    tm = data.time
    phases = tm["phases_s"]
    ahead = started(tm)
    order = [p for p in PHASES if p in phases] + [p for p in phases if p not in PHASES]
    rows = [
        ([p, f"{phases[p]:,.0f}", f"{100 * phases[p] / tm['trial_wall_s']:.0f}%"], "")
        for p in order
        if tm["trial_wall_s"]
    ]
    text = f"{cost_line(data)} Trial processes by phase{ahead}:"
    table = _table(["phase", "seconds", "share"], rows, ("phase",)) if rows else ""
    return f"<h2>Where time went</h2><p>{escape(text)}</p>" + table
