"""Rich renderables: the live view of a running search and the tables the CLI prints."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from autotune.study import History, Observer


def fmt_knobs(knobs: dict[str, Any], keys: list[str] | None = None) -> str:
    keys = keys or list(knobs)
    return " ".join(f"{k}={knobs[k]}" for k in keys if k in knobs)


def _hms(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _tok(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


class LiveProgress(Observer):
    """Trial i of N, the config being measured, best so far (tokens/s and x baseline), elapsed, remaining."""

    def __init__(self, console: Console, searched: list[str]) -> None:
        self.console = console
        self.searched = searched or None
        self.info: dict[str, Any] = {}
        self.t0 = time.monotonic()
        self.current: dict[int, tuple[int, dict[str, Any], float]] = {}
        self.best: dict[str, Any] | None = None
        self.baseline_value: float | None = None
        self.last: list[str] = []
        self.live = Live(console=console, refresh_per_second=2, get_renderable=self._render, transient=True)

    def __enter__(self) -> LiveProgress:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.current = {}
        self.live.__exit__(*exc)

    def started(self, info: dict[str, Any]) -> None:
        self.info = info
        self.t0 = time.monotonic()
        self.console.print(
            f"[bold]autotune search[/] {info['name']} on {info['device']}: space of {info['space_size']} points, "
            f"sampler {info['sampler']}, budget {info['budget']} trials ({info['done']} already measured), "
            f"storage {info['storage']}"
        )

    def trial_started(self, number: int, index: int, knobs: dict[str, Any]) -> None:
        self.current[number] = (index, knobs, time.monotonic())

    def trial_finished(self, record: dict[str, Any], history: History) -> None:
        self.current.pop(record["number"], None)
        best = history.best()
        if best is not None:
            base = self.info.get("baseline")
            for t in history.completed:
                if base is not None and all(t.params.get(k) == v for k, v in base.items()):
                    self.baseline_value = t.value
                    break
            self.best = {"number": best.number, "value": best.value, "knobs": best.user_attrs["knobs"],
                         "mfu": best.user_attrs["metrics"]["mfu"]}
        knobs = fmt_knobs(record["knobs"], self.searched)
        if record["status"] == "ok":
            m = record["metrics"]
            line = f"#{record['number']} [green]ok[/] {_tok(m['tokens_per_s_per_gpu'])} tok/s  MFU {_pct(m['mfu'])}  {knobs}"
        else:
            tag = " (predicted)" if record.get("predicted") else ""
            reason = record["reason"].splitlines()[-1][:120] if record["reason"] else ""
            line = f"#{record['number']} [red]{record['status']}{tag}[/] {knobs}  {reason}"
        self.console.print(line)
        self.last = [line]

    def confirm_started(self, candidates: list[int], rounds: int, kept: int = 0) -> None:
        again = f" (going on from {kept} samples of an interrupted confirmation)" if kept else ""
        self.console.print(f"confirming trials {', '.join(map(str, candidates))}: {rounds} interleaved rounds, "
                           f"each a fresh process{again}")

    def confirm_sample(self, number: int, round_: int, value: float | None, status: str) -> None:
        shown = f"{_tok(value)} tok/s" if value is not None else f"[red]{status}[/]"
        self.console.print(f"  round {round_ + 1}: #{number} {shown}")

    def _render(self) -> Group:
        elapsed = time.monotonic() - self.t0
        rows = []
        for number, (index, knobs, since) in sorted(self.current.items()):
            rows.append(Text.from_markup(
                f"trial {index} of {self.info.get('budget', '?')} (#{number}): {fmt_knobs(knobs, self.searched)}"
                f"  [dim]running {_hms(time.monotonic() - since)}[/]"))
        if self.best:
            x = f" = {self.best['value'] / self.baseline_value:.2f}x baseline" if self.baseline_value else ""
            rows.append(Text.from_markup(
                f"best: [bold]{_tok(self.best['value'])}[/] tok/s/GPU{x}, MFU {_pct(self.best['mfu'])} "
                f"(#{self.best['number']})"))
        remaining = self.info.get("timeout_s", 0) - elapsed
        rows.append(Text(f"elapsed {_hms(elapsed)}, at most {_hms(remaining)} left (timeout)"))
        return Group(*rows)


def trials_table(history: History, searched: list[str], baseline_value: float | None, top: int = 5) -> Table:
    """The top trials, best first."""
    table = Table(title=f"Top {top} of {len(history.completed)} completed trials")
    for col in ["#", *searched, "tokens/s/GPU", "x baseline", "MFU", "peak mem GiB", "step spread"]:
        table.add_column(col, justify="right" if col not in searched else "left")
    for t in sorted(history.completed, key=lambda t: t.value, reverse=True)[:top]:
        m, k = t.user_attrs["metrics"], t.user_attrs["knobs"]
        table.add_row(
            str(t.number), *[str(k[s]) for s in searched], _tok(t.value),
            f"{t.value / baseline_value:.2f}" if baseline_value else "-", _pct(m["mfu"]),
            f"{m['peak_mem_gib']:.2f}", f"{m['step_time']['spread_pct']:.1f}%",
        )
    return table


def space_table(described: dict[str, Any]) -> Table:
    """The resolved space: each knob searched or fixed, with the reason where the YAML was changed."""
    table = Table(title=f"Resolved space: {described['size']} points")
    for col in ("knob", "values", "role", "note"):
        table.add_column(col)
    base = described["baseline"]
    for knob, values in described["searched"].items():
        table.add_row(knob, ", ".join(map(str, values)), f"searched (baseline {base.get(knob)})",
                      described["notes"].get(knob, ""))
    for knob, value in described["fixed"].items():
        table.add_row(knob, str(value), "fixed", described["notes"].get(knob, ""))
    if "grad_accum_steps" not in described["searched"] and "grad_accum_steps" not in described["fixed"]:
        table.add_row("grad_accum_steps", "auto", "derived", described["notes"].get("grad_accum_steps", ""))
    return table


def confirmation_table(conf: dict[str, Any]) -> Table:
    """The re-measured top configurations: samples, median, 95% interval, knobs changed from the baseline."""
    table = Table(title=f"Confirmation: {conf['rounds_done']} interleaved rounds")
    for col in ("#", "search tok/s", "confirmed median", "95% interval", "samples", "knobs changed", "chosen"):
        table.add_column(col)
    for st in conf["stats"]:
        ci = st["ci95"]
        table.add_row(str(st["trial"]), _tok(st["search_value"]), _tok(st["median"]),
                      "-" if not ci else f"{_tok(ci[0])} to {_tok(ci[1])}" if ci[1] != float("inf") else "unknown (1 sample)",
                      ", ".join(_tok(x) for x in st["samples"]), ", ".join(st["changed_knobs"]) or "none",
                      "yes" if st["trial"] == conf["chosen"] else "")
    return table
