"""The HTML report: PNG plots (matplotlib, computed from `collect`'s data first) in one self-contained page."""

from __future__ import annotations

import base64
import contextlib
import html
import os
import signal
from pathlib import Path
from typing import Any

from autotune.record import Metric
from autotune.report._render import to_markdown
from autotune.report._table import cells, columns, fmt, pareto


def pareto_front(points: list[tuple[float, float, int]]) -> list[int]:
    """Trials not beaten on both axes: higher tokens/s and lower peak memory. points: (mem, tok, number)."""
    return [number for _, _, number in pareto(points, up=lambda p: p[1], down=lambda p: p[0])]


def plot_data(data: dict[str, Any]) -> dict[str, Any]:
    """What each plot draws, computed before any drawing."""
    ok = sorted((r for r in data["trials"] if r["state"] == "ok"), key=lambda r: r["number"])
    history, best_so_far, running = [], [], float("-inf")
    for r in ok:
        running = max(running, r[Metric.TOKENS_PER_GPU])
        history.append((r["number"], r[Metric.TOKENS_PER_GPU]))
        best_so_far.append((r["number"], running))
    mem = [(r["peak_mem_gib"], r[Metric.TOKENS_PER_GPU], r["number"]) for r in ok]
    per_knob = {k: [(str(r["knobs"][k]), r[Metric.TOKENS_PER_GPU]) for r in ok] for k in data["searched"]}
    tele = data.get("best_telemetry") or {}
    series = tele.get("series") or []
    t0 = series[0]["t"] if series else 0.0
    checks = [
        (i, c["ratio"], c["ci"][0], c["ci"][1], c["status"]) for i, c in enumerate(data.get("check_history") or [])
    ]
    return {
        "history": history,
        "best_so_far": best_so_far,
        "baseline": data["baseline"][Metric.TOKENS_PER_GPU] if data["baseline"] else None,
        "memory": mem,
        "pareto": pareto_front(mem),
        "per_knob": per_knob,
        "telemetry": [(s["t"] - t0, s["power_w"], s["sm_clock_mhz"]) for s in series],
        "checks": checks,
        "tolerance_pct": (data.get("check_history") or [{}])[-1].get("tolerance_pct"),
    }


PLOT_FILES = ("history.png", "pareto.png", "knobs.png", "telemetry.png", "checks.png")  # in draw's order


def draw(pd: dict[str, Any], out: Path) -> list[Path]:
    """Write the PNGs; return their paths (plots without data are skipped)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    plots = (
        ("history", _history),
        ("memory", _memory),
        ("per_knob", _per_knob),
        ("telemetry", _telemetry),
        ("checks", _checks),
    )
    for (key, plot), name in zip(plots, PLOT_FILES):
        if not any(pd[key].values()) if isinstance(pd[key], dict) else not pd[key]:
            continue
        fig = plot(plt, pd)
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        written.append(out / name)
    return written


def _history(plt: Any, pd: dict[str, Any]) -> Any:
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.scatter(*zip(*pd["history"]), s=18, label="completed trial")
    ax.step(*zip(*pd["best_so_far"]), where="post", color="C1", label="best so far")
    if pd["baseline"]:
        ax.axhline(pd["baseline"], color="grey", ls="--", label="baseline")
    ax.set(xlabel="trial", ylabel="tokens/s per GPU", title="Optimization history")
    ax.legend()
    return fig


def _memory(plt: Any, pd: dict[str, Any]) -> Any:
    fig, ax = plt.subplots(figsize=(7, 4))
    mem, tok, num = zip(*pd["memory"])
    ax.scatter(mem, tok, s=18, label="completed trial")
    front = sorted((m, t) for m, t, n in pd["memory"] if n in pd["pareto"])
    ax.plot(*zip(*front), "o-", color="C3", label="Pareto front")
    ax.set(xlabel="peak memory (GiB)", ylabel="tokens/s per GPU", title="Throughput against memory")
    ax.legend()
    return fig


def _per_knob(plt: Any, pd: dict[str, Any]) -> Any:
    knobs = [k for k, v in pd["per_knob"].items() if v]
    fig, axes = plt.subplots(1, len(knobs), figsize=(3.2 * len(knobs), 3.6), squeeze=False)
    for ax, knob in zip(axes[0], knobs):
        values = list(dict.fromkeys(v for v, _ in sorted(pd["per_knob"][knob], key=lambda p: _order(p[0]))))
        xs = [values.index(v) for v, _ in pd["per_knob"][knob]]
        ax.scatter(xs, [t for _, t in pd["per_knob"][knob]], s=16)
        ax.set_xticks(range(len(values)), values)
        ax.set(title=knob, ylabel="tokens/s per GPU")
    return fig


def _telemetry(plt: Any, pd: dict[str, Any]) -> Any:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    t, power, clock = zip(*pd["telemetry"])
    ax.plot(t, power, color="C0", label="power (W)")
    ax.set(xlabel="seconds into the measured window", ylabel="power (W)", title="Best trial: telemetry")
    ax2 = ax.twinx()
    ax2.plot(t, clock, color="C1", label="SM clock (MHz)")
    ax2.set_ylabel("SM clock (MHz)")
    return fig


def _checks(plt: Any, pd: dict[str, Any]) -> Any:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    i, ratio, lo, hi, status = zip(*pd["checks"])
    colors = ["C3" if s == "regression" else "C2" for s in status]
    ax.errorbar(
        i,
        ratio,
        yerr=[[r - a for r, a in zip(ratio, lo)], [b - r for r, b in zip(ratio, hi)]],
        fmt="none",
        ecolor="grey",
    )
    ax.scatter(i, ratio, c=colors, zorder=3)
    ax.axhline(1.0, color="grey", ls="--")
    if pd["tolerance_pct"] is not None:
        ax.axhline(1 - pd["tolerance_pct"] / 100, color="C3", ls=":", label="tolerance")
        ax.legend()
    ax.set(xlabel="check", ylabel="check / baseline tokens/s", title="autotune check history")
    return fig


def _order(value: str) -> tuple[int, Any]:
    try:
        return (0, float(value))
    except ValueError:
        return (1, value)


def write_html(data: dict[str, Any], out: Path) -> Path:
    """report.html with every PNG embedded (one file to attach or open), PNGs also beside it. Everything is
    drawn in a temporary folder first, then put in place with Ctrl-C and SIGTERM held back: a page and its
    plots are always of one report (an older report's plot that this one lacks is removed)."""
    import tempfile

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out, prefix=".report-") as tmp:
        pngs = draw(plot_data(data), Path(tmp))
        (Path(tmp) / "report.html").write_text(_page(data, pngs))
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


def _page(data: dict[str, Any], pngs: list[Path]) -> str:
    """The report's HTML, its plots embedded."""
    images = "\n".join(
        f'<figure><img alt="{p.stem}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}"></figure>'
        for p in pngs
    )
    knobs = data["searched"]
    header = columns(knobs, data["trials"], data["task"])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in header)
    rows = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells(r, knobs, header, 120)) + "</tr>"
        for r in data["trials"]
    )
    imp = data["importance"]
    importance = ""
    for k in knobs:
        value = (imp["values"] or {}).get(k)
        effects = ", ".join(f"{a}: {fmt(b, 'tok')}" for a, b in data["knob_effects"].get(k, {}).items())
        shown = "-" if value is None else f"{value:.2f}"
        importance += f"<tr><td>{html.escape(k)}</td><td>{shown}</td><td>{html.escape(effects)}</td></tr>"
    phases = ", ".join(f"{p} {s:,.0f} s" for p, s in data["time"]["phases_s"].items())
    tm = data["time"]
    ahead = f"; {tm['started_ahead']} of {tm['processes']} started ahead" if tm.get("started_ahead") else ""
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>autotune report: {html.escape(data["study"])}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:right}}th{{background:#eee}}
figure{{display:inline-block;margin:0.5em}}img{{max-width:100%}}pre{{background:#f6f6f6;padding:1em}}</style></head>
<body><h1>autotune report: {html.escape(data["study"])}</h1>
<pre>{html.escape(to_markdown(data, top=5))}</pre>
<h2>Plots</h2>{images}
<h2>Trials, best first</h2><table><tr>{head}</tr>{rows}</table>
<h2>Which knobs mattered</h2><p>{html.escape(imp["why"])}</p>
<table><tr><th>knob</th><th>importance</th><th>best tokens/s/GPU at each value</th></tr>{importance}</table>
<h2>Where time went</h2><p>Trials by state: {html.escape(", ".join(f"{k} {v}" for k, v in data["counts"].items()))}.
Time in trial processes: {data["time"]["trial_wall_s"]:,.0f} s ({html.escape(phases)}){ahead}.</p>
</body></html>
"""
    return page
