"""The report in a terminal, readable at 80 columns: the chosen configuration first, then what the
search left out, the trials (a table without the columns that never change, or one record a trial
where even that cannot fit; `wide`: the whole table), which knobs mattered and what it cost."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from autotune.documents.confirmation import Arm, Confirmation
from autotune.protocol import reason_line
from autotune.report import _text
from autotune.report._data import Group, Report, Row, Stored
from autotune.report._render import compiles, confirmation_lines
from autotune.report._table import cells, columns, fmt, varying
from autotune.report._text import started

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

INDENT = 3
REASON_CHARS = 40  # the reason column's width in the table; the record view shows it whole


def render_rich(data: Report | Stored, console: Console, wide: bool = False) -> None:
    """The report's sections, each a heading and its wrapped lines. data: collect's Report, or the
    plain dict of its JSON."""
    data = Report.of(data)
    console.rule(f"{data.study} on {data.device}: {data.task}", style="dim")
    _section(console, "Chosen", _text.chosen_lines(data) + _text.projection_lines(data))
    if data.excluded:
        _excluded(console, data.excluded)
    _trials(console, data, wide)
    if data.confirmation:
        _section(console, "Confirmation", confirmation_lines(data.confirmation))
    if data.searched:
        _section(console, "Which knobs mattered", _text.effects_lines(data))
    _section(console, "Cost", [_text.cost_line(data), _phases_line(data)])
    _checks(console, data)


def _section(console: Console, heading: str, lines: list[str]) -> None:
    from rich.padding import Padding
    from rich.text import Text

    console.print(Text(heading, style="bold"))
    for line in lines:
        if line:
            console.print(Padding(Text(line), (0, 0, 0, INDENT), expand=False))


def _excluded(console: Console, groups: list[Group]) -> None:
    from rich.padding import Padding
    from rich.text import Text

    total = sum(g["count"] for g in groups)
    console.print(Text(f"Left out of the search: {total} trial(s)", style="bold"))
    for g in groups:
        first, *rest = _text.excluded_lines(g)
        console.print(Padding(Text("- " + first), (0, 0, 0, INDENT), expand=False))
        for line in rest:
            console.print(Padding(Text(line), (0, 0, 0, INDENT + 2), expand=False))


def _trials(console: Console, data: Report, wide: bool) -> None:
    rows = data.trials
    trials_view(console, rows, data.searched, data.task, f"Trials, best first ({len(rows)})", wide)


def trials_view(
    console: Console,
    rows: list[Row],
    knobs: list[str],
    task: str,
    heading: str,
    wide: bool = False,
) -> None:
    """Trials under a heading, readable at the console's width: the columns that never change as
    one line, then a table where it fits with no cell folded, else one record a trial (`wide`: the
    whole table, past the width). The report's trials and the end of a search."""
    from rich.text import Text

    full = columns(knobs, rows, task)
    header = full if wide else varying(full, rows, knobs)
    dropped = [c for c in full if c not in header]
    console.print(Text(heading, style="bold"))
    if dropped:
        same = ", ".join(f"{c}={cells(rows[0], knobs, [c])[0]}" for c in dropped)
        console.print(Text(f"   the same in every trial: {same}"))
    chars = None if wide else REASON_CHARS
    if wide or _fits(header, rows, knobs, console.width):
        _table(console, header, rows, knobs, chars, wide)
    else:
        _records(console, header, rows, knobs)
    if "step spread" in header:
        console.print(Text(f"   {_text.STEP_SPREAD}"))


def _natural(header: list[str], rows: list[Row], knobs: list[str]) -> int:
    """The table's width with no cell folded (reasons cut to REASON_CHARS), borders included."""
    widths = [
        max([len(c), *(len(cells(r, knobs, [c], REASON_CHARS)[0]) for r in rows)]) for c in header
    ]
    return sum(widths) + 3 * len(header) + 1


def _fits(header: list[str], rows: list[Row], knobs: list[str], width: int) -> bool:
    return _natural(header, rows, knobs) <= width


def _table(
    console: Console,
    header: list[str],
    rows: list[Row],
    knobs: list[str],
    chars: int | None,
    wide: bool,
) -> None:
    """The trials as a table; `wide`: as wide as it needs, past the terminal's width."""
    from rich.console import Console
    from rich.table import Table

    table = Table()
    for col in header:
        left = col in (*knobs, "state", "reason")
        table.add_column(col, justify="left" if left else "right", overflow="fold")
    for r in rows:
        table.add_row(*cells(r, knobs, header, chars or 10_000))
    if not wide:
        console.print(table)
        return
    width = max(console.width, _natural(header, rows, knobs) + 200)
    # Rich names its colour system by the value its constructor takes
    system = console.color_system
    Console(file=console.file, width=width, color_system=system).print(table)  # type: ignore[arg-type]


def _records(console: Console, header: list[str], rows: list[Row], knobs: list[str]) -> None:
    """One record a trial, when the table cannot fit: its outcome and figures on one line, then
    its knobs and its reason, wrapped."""
    from rich.padding import Padding
    from rich.text import Text

    figures = [c for c in header if c not in (*knobs, "#", "state", "reason")]
    for r in rows:
        values = dict(zip(header, cells(r, knobs, header, 10_000)))
        state = values.get("state", "ok")
        numbers = ", ".join(f"{c} {values[c]}" for c in figures if values[c] not in ("-", "n/a"))
        head = f"#{r.number} {state}" + (f": {numbers}" if numbers else "")
        console.print(Padding(Text(head), (0, 0, 0, INDENT), expand=False))
        set_knobs = ", ".join(f"{k}={values[k]}" for k in knobs if k in values)
        if set_knobs:
            console.print(Padding(Text(set_knobs), (0, 0, 0, INDENT + 2), expand=False))
        if values.get("reason"):
            console.print(
                Padding(Text(reason_line(r.reason, 300)), (0, 0, 0, INDENT + 2), expand=False)
            )


def _phases_line(data: Report) -> str:
    tm = data.time
    phases = ", ".join(f"{p} {s:,.0f} s" for p, s in tm["phases_s"].items())
    return f"Trial processes by phase: {phases or 'no phase data'}{started(tm)}."


def _checks(console: Console, data: Report) -> None:
    if data.check_history:
        last = data.check_history[-1]
        _section(
            console,
            "Checks",
            [
                f"{len(data.check_history)} check(s), last {last['checked_at']}: "
                f"{last['status']}, ratio {last['ratio']:.3f}"
            ],
        )
    if data.check_history_skipped:
        skipped = "; ".join(data.check_history_skipped[:5])
        _section(console, "Checks", [f"history.jsonl: skipped {skipped}"])


def confirmation_view(console: Console, conf: Confirmation) -> None:
    """The race after a search, readable at the console's width: the table where it fits with no
    cell wrapped, else one line an arm (its figure, interval, compiles and when it left)."""
    from rich.padding import Padding
    from rich.text import Text

    table = confirmation_table(conf)
    # its natural width: Rich narrows the widest columns first, folding words ("interva/l") long
    # before the shortest width its measure gives
    natural = console.measure(table, options=console.options.update_width(10_000)).maximum
    if natural <= console.width:
        console.print(table)
        return
    console.print(Text(f"Confirmation: {_text.rounds_text(conf)}", style="bold"))
    # the last line, the rounds and why: said apart (each arm's interval from its samples)
    for line in confirmation_lines(conf)[:-1]:
        console.print(Padding(Text(line), (0, 0, 0, INDENT), expand=False))


def chosen_interval(conf: Confirmation) -> str:
    """The chosen arm's confirmed median with its 95% interval, or why it has none and what would
    give one (the demo's 2 rounds: 'median of 2 samples: no interval ...')."""
    from autotune import intervals

    st = conf.arm(conf.chosen)  # a candidate, or the baseline's own arm (your setting)
    if st is None or not st.samples:
        return "the chosen trial has no confirmed sample: no median, no interval"
    n = len(st.samples)
    ci, why = st.interval()
    if ci is not None:
        return (
            f"the chosen median's 95% interval: {fmt(ci[0], 'tok')} to {fmt(ci[1], 'tok')} "
            f"tokens/s/GPU ({n} samples)"
        )
    more = max(intervals.MIN_INTERVAL_SAMPLES, n + 1)
    return (
        f"median of {n} sample(s): no interval: {why}; run more confirmation rounds for one "
        f"(study.confirm_rounds: {more} or more)"
    )


def confirmation_table(conf: Confirmation) -> Table:
    """The race after a search (the stored confirmation): each arm's samples, median, 95% interval,
    knobs changed from the baseline and, where any arm has them, its processes' compiles and when it
    left the race."""
    from rich.table import Table

    base = conf.baseline
    arms = [*conf.stats, *([base] if base and base.samples else [])]
    extra = {
        "compile": lambda st: compiles(st).removeprefix("; compile "),
        "race": _race_cell,
    }
    shown = {k: f for k, f in extra.items() if any(_SOURCE[k](st) for st in arms)}
    rounds = _text.rounds_text(conf)
    table = Table(title=f"Confirmation: {rounds}")
    for col in (
        "#",
        "search tok/s",
        "confirmed median",
        "95% interval",
        "samples",
        "knobs changed",
    ):
        table.add_column(col, overflow="fold")
    for col in (*shown, "chosen"):
        table.add_column(col, overflow="fold")
    for st in arms:
        is_base = st is base
        table.add_row(
            f"{st.trial} (baseline)" if is_base else str(st.trial),
            "-" if is_base else fmt(st.search_value, "tok"),
            fmt(st.median, "tok"),
            _interval_cell(st),
            ", ".join(fmt(x, "tok") for x in st.samples),
            "-" if is_base else ", ".join(st.changed_knobs) or "none",
            *(f(st) for f in shown.values()),
            ("yes (your setting)" if is_base else "yes") if st.trial == conf.chosen else "",
        )
    return table


# whether an arm has something for each optional column: a compiled process, a drop from the race
_SOURCE: dict[str, Callable[[Arm], bool]] = {
    "compile": lambda st: any(st.compile_cache or []),
    "race": lambda st: bool(st.dropped),
}


def _race_cell(st: Arm) -> str:
    d = st.dropped
    return f"left after round {d.round}: {d.why}" if d else "to the end"


def _interval_cell(st: Arm) -> str:
    """An arm's interval from its samples, or why it has none ("too few samples ...":
    intervals.unbounded; recomputed: a confirmation stored by an older release kept unbounded
    intervals)."""
    ci, why = st.interval()
    if ci is None:
        return str(why)
    return f"{fmt(ci[0], 'tok')} to {fmt(ci[1], 'tok')}"
