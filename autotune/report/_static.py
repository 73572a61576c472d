"""The page's static plots (matplotlib PNGs): telemetry and the check history always (Optuna draws
neither), and, where plotly is not installed, the history, the memory front, each knob and the
time by phase."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypedDict

from autotune.report import _effects
from autotune.report._data import Report, Stored
from autotune.report._measured import PHASES, Phases
from autotune.report._table import pareto
from autotune.status import Status

if TYPE_CHECKING:
    from matplotlib.axes import Axes


class PlotData(TypedDict):
    """What each static plot draws (plot_data), computed before any drawing."""

    history: list[tuple[int, float]]  # (trial, tokens/s) of each completed trial, in order
    best_so_far: list[tuple[int, float]]
    baseline: float | None
    memory: list[tuple[float, float, int]]  # (peak GiB, tokens/s, trial) where memory was reported
    pareto: list[int]  # the trials on the memory front
    per_knob: dict[str, list[tuple[str, float]]]  # (value, tokens/s) where the knob acts
    telemetry: list[tuple[float, float, float]]  # (seconds, watts, SM MHz)
    telemetry_title: str
    checks: list[tuple[datetime, float, float, float, str]]  # each night's ratio, interval, status
    chosen: list[tuple[int, float]]
    chosen_memory: list[tuple[float, float]]
    time: list[tuple[int | str, dict[str, float]]]  # each process's seconds by phase
    chosen_time: int | str | None
    tolerance_pct: float | None


def pareto_front(points: list[tuple[float, float, int]]) -> list[int]:
    """Trials not beaten on both axes: higher tokens/s and lower peak memory. points: (mem, tok,
    number); a trial whose job reported no peak memory (a CPU job, a command's `measure: log`) has
    no place on the memory axis and is left out: without any, there is no front ([])."""
    return [number for _, _, number in pareto(points, up=lambda p: p[1], down=lambda p: p[0])]


def plot_data(
    data: Report,
    phases: list[Phases] | None = None,
    chosen: int | None = None,
    telemetry: tuple[int | None, Stored] | None = None,
) -> PlotData:
    """What each plot draws, computed before any drawing; phases: _measured.phases_of of each trial;
    chosen: the chosen trial (best.yaml's), marked; telemetry: (trial, its telemetry) drawn, else
    the search's best's."""
    ok = sorted((r for r in data.trials if r.state == Status.OK), key=lambda r: r.number)
    history: list[tuple[int, float]] = []
    best_so_far: list[tuple[int, float]] = []
    running = float("-inf")
    for r in ok:
        running = max(running, r.figure)
        history.append((r.number, r.figure))
        best_so_far.append((r.number, running))
    # no memory reported: not on the memory axis
    mem = [(r.peak_mem_gib, r.figure, r.number) for r in ok if r.peak_mem_gib is not None]
    # a conditional knob drawn only where it acts (_effects.acting): its None is its parent's off
    per_knob = {
        k: [(str(r.knobs[k]), r.figure) for r in _effects.acting(ok, k)[0]] for k in data.searched
    }
    best = data.best.number if data.best else None
    tele_trial, tele = telemetry or (best, data.best_telemetry or {})
    series = tele.get("series") or []
    t0 = series[0]["t"] if series else 0.0
    checks = _nights(data.check_history)
    return {
        "history": history,
        "best_so_far": best_so_far,
        "baseline": data.baseline.tokens_per_s_per_gpu if data.baseline else None,
        "memory": mem,
        "pareto": pareto_front(mem),
        "per_knob": per_knob,
        "telemetry": [(s["t"] - t0, s["power_w"], s["sm_clock_mhz"]) for s in series],
        "telemetry_title": f"Trial {tele_trial}"
        + (" (chosen)" if tele_trial == chosen else " (the search's best)")
        + ": telemetry",
        "checks": checks,
        "chosen": [(n, v) for n, v in history if n == chosen],
        "chosen_memory": [(m, t) for m, t, n in mem if n == chosen],
        "time": [(p["number"], p["seconds"]) for p in phases or []],
        "chosen_time": next((p["number"] for p in phases or [] if p["number"] == chosen), None),
        "tolerance_pct": (data.check_history or [{}])[-1].get("tolerance_pct"),
    }


def _nights(history: list[Stored]) -> list[tuple[datetime, float, float, float, str]]:
    """Each night of autotune check with a readable date: when, its ratio, its interval (a bound
    that is null, not finite: documents.strict_json, gives no bar on that side) and its status."""
    nights = []
    for c in history:
        when = _when(c["checked_at"])
        if when is not None:
            nights.append(
                (when, c["ratio"], c["ci"][0] or 0.0, c["ci"][1] or c["ratio"], c["status"])
            )
    return nights


def _when(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


PLOT_FILES = (
    "history.png",
    "pareto.png",
    "knobs.png",
    "time.png",
    "telemetry.png",
    "checks.png",
)  # draw's order
ALWAYS = ("telemetry.png", "checks.png")  # what Optuna's interactive plots do not show


def draw(pd: PlotData, out: Path, interactive: bool) -> list[Path]:
    """Write the PNGs; return their paths (plots without data are skipped; interactive: only those
    Optuna's plotly plots lack). matplotlib is imported only when there is something to draw (it
    takes seconds)."""
    plots = (
        (pd["history"], _history),
        (pd["memory"], _memory),
        (pd["per_knob"], _per_knob),
        (pd["time"], _time),
        (pd["telemetry"], _telemetry),
        (pd["checks"], _checks),
    )
    todo = [
        (plot, name)
        for (values, plot), name in zip(plots, PLOT_FILES)
        if (name in ALWAYS or not interactive) and _has(values)
    ]
    if not todo:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for plot, name in todo:
        fig = plot(plt, pd)
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
    return [out / name for _, name in todo]


def _has(values: object) -> bool:
    return any(values.values()) if isinstance(values, dict) else bool(values)


def _history(plt: ModuleType, pd: PlotData) -> Any:
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.scatter(*zip(*pd["history"]), s=18, label="completed trial")
    ax.step(*zip(*pd["best_so_far"]), where="post", color="C1", label="best so far")
    if pd["baseline"]:
        ax.axhline(pd["baseline"], color="grey", ls="--", label="baseline")
    _star(ax, pd["chosen"])
    ax.set(xlabel="trial", ylabel="tokens/s per GPU", title="Optimization history")
    ax.legend()
    return fig


def _memory(plt: ModuleType, pd: PlotData) -> Any:
    fig, ax = plt.subplots(figsize=(7, 4))
    mem, tok, _ = zip(*pd["memory"])
    ax.scatter(mem, tok, s=18, label="completed trial")
    front = sorted((m, t) for m, t, n in pd["memory"] if n in pd["pareto"])
    ax.plot(*zip(*front), "o-", color="C3", label="Pareto front")
    _star(ax, pd["chosen_memory"])
    ax.set(xlabel="peak memory (GiB)", ylabel="tokens/s per GPU", title="Throughput against memory")
    ax.legend()
    return fig


def _star(ax: Axes, points: Sequence[tuple[float, float]]) -> None:
    if points:
        xs, ys = zip(*points)
        ax.scatter(
            xs,
            ys,
            marker="*",
            s=220,
            color="#d62728",
            edgecolor="black",
            zorder=4,
            label="chosen",
        )


def _per_knob(plt: ModuleType, pd: PlotData) -> Any:
    knobs = [k for k, v in pd["per_knob"].items() if v]
    fig, axes = plt.subplots(1, len(knobs), figsize=(3.2 * len(knobs), 3.6), squeeze=False)
    for ax, knob in zip(axes[0], knobs):
        values = list(
            dict.fromkeys(v for v, _ in sorted(pd["per_knob"][knob], key=lambda p: _order(p[0])))
        )
        xs = [values.index(v) for v, _ in pd["per_knob"][knob]]
        ax.scatter(xs, [t for _, t in pd["per_knob"][knob]], s=16)
        ax.set_xticks(range(len(values)), values)
        ax.set(title=knob, ylabel="tokens/s per GPU")
    return fig


def _telemetry(plt: ModuleType, pd: PlotData) -> Any:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    t, power, clock = zip(*pd["telemetry"])
    ax.plot(t, power, color="C0", label="power (W)")
    ax.set(
        xlabel="seconds into the measured window", ylabel="power (W)", title=pd["telemetry_title"]
    )
    ax2 = ax.twinx()
    ax2.plot(t, clock, color="C1", label="SM clock (MHz)")
    ax2.set_ylabel("SM clock (MHz)", color="C1")
    ax.yaxis.label.set_color("C0")  # each axis's label in its line's colour
    return fig


def _checks(plt: ModuleType, pd: PlotData) -> Any:
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
    ax.set(xlabel="checked at", ylabel="check / baseline tokens/s", title="autotune check history")
    fig.autofmt_xdate()
    return fig


def _time(plt: ModuleType, pd: PlotData) -> Any:
    """Stacked bars, one filled step line a phase (ax.bar would make a patch per trial and phase:
    seconds for a hundred trials); trials side by side in their order, ticked with their numbers."""
    fig, ax = plt.subplots(figsize=(9, 4))
    numbers = [n for n, _ in pd["time"]]
    edges = list(range(len(numbers) + 1))
    bottom = [0.0] * len(numbers)
    for phase in PHASES:
        top = [b + s[phase] for b, (_, s) in zip(bottom, pd["time"])]
        if top != bottom:
            ax.stairs(top, edges, baseline=bottom, fill=True, label=phase)
        bottom = top
    ticks = list(range(0, len(numbers), max(1, len(numbers) // 20)))
    ax.set_xticks([i + 0.5 for i in ticks], [str(numbers[i]) for i in ticks])
    if pd["chosen_time"] is not None:
        i = numbers.index(pd["chosen_time"])
        ax.annotate("chosen", (i + 0.5, bottom[i]), ha="center", va="bottom", color="#d62728")
    ax.set(
        xlabel="trial", ylabel="seconds in the trial process", title="Where each trial's time went"
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def _order(value: str) -> tuple[int, Any]:
    try:
        return (0, float(value))
    except ValueError:
        return (1, value)
