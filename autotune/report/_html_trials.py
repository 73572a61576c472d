"""The page's trials table, readable at any width without a scroll bar: the columns that change
(the others named above it), each reason in a row of its own under its trial (the first words
shown, the whole on a click), and below NARROW_PX (or in print) the knobs in one wrapping column
instead of one column each."""

from __future__ import annotations

from autotune.protocol import reason_line
from autotune.report._data import Report, Row
from autotune.report._escape import escape
from autotune.report._table import cells, columns, varying
from autotune.report._text import STEP_SPREAD

NARROW_PX = 1100  # below this, one knob column each no longer fits beside the figures
STYLE = f"""
td.kc,th.kc{{display:none}}
td.kc{{min-width:12em;overflow-wrap:anywhere}}
td.n{{white-space:normal}}
@media (max-width:{NARROW_PX}px){{td.k,th.k{{display:none}} td.kc,th.kc{{display:table-cell}}}}
@media print{{td.k,th.k{{display:none}} td.kc,th.kc{{display:table-cell}}}}
"""


def trials_table(data: Report, chosen_number: int | None) -> str:
    """The trials, best first, with the chosen one marked."""
    knobs, trials = data.searched, data.trials
    full = [c for c in columns(knobs, trials, data.task) if c != "reason"]
    header = varying(full, trials, knobs)
    shown = [c for c in header if c in knobs]
    rows = []
    for r in trials:
        rows.append(_row(r, knobs, header, shown, r.number == chosen_number))
        if r.reason:
            rows.append(_reason_row(r.reason, len(header) + 1))
    heads = [f'<th class="{_kind(c, knobs)}">{_breakable(c)}</th>' for c in header]
    heads.insert(1, '<th class="kc">configuration</th>')
    table = f"<table><tr>{''.join(heads)}</tr>\n" + "\n".join(rows) + "</table>"
    note = _same_note(data, full, header)
    return f"<h2>Trials, best first ({len(trials)})</h2>{note}{table}<p>{escape(STEP_SPREAD)}</p>"


def _kind(column: str, knobs: list[str]) -> str:
    """A cell's classes: a knob's own column (k), words (text), the trial's number and mark (n,
    which may wrap) or a figure (none: never wrapped)."""
    if column in knobs:
        return "text k"
    return {"state": "text", "#": "n"}.get(column, "")


def _row(r: Row, knobs: list[str], header: list[str], shown: list[str], mine: bool) -> str:
    values = cells(r, knobs, header)
    values[0] += " \u2605 chosen" if mine else ""
    tds = [f'<td class="{_kind(c, knobs)}">{escape(v)}</td>' for c, v in zip(header, values)]
    configuration = ", ".join(f"{k}={r.knobs.get(k)}" for k in shown)
    tds.insert(1, f'<td class="text kc">{escape(configuration)}</td>')
    return f'<tr class="{"chosen" if mine else ""}">{"".join(tds)}</tr>'


def _same_note(data: Report, full: list[str], header: list[str]) -> str:
    same = [c for c in full if c not in header]
    if not same or not data.trials:
        return ""
    row = data.trials[0]
    fixed = ", ".join(f"{c}={cells(row, data.searched, [c])[0]}" for c in same)
    return f"<p>The same in every trial: {escape(fixed)}</p>"


def _breakable(name: str) -> str:
    """A header that may break after its underscores and slashes ("micro_batch_size",
    "tokens/s/GPU"), never within a word."""
    return escape(name).replace("_", "_<wbr>").replace("/", "/<wbr>")


def _reason_row(reason: str, span: int) -> str:
    """A trial's reason under its row: the first words shown, the whole on a click."""
    short = reason_line(reason, 140)
    body = escape(reason)
    if short != reason:
        body = f"<details><summary>{escape(short)}</summary>{body}</details>"
    return f'<tr class="reason"><td colspan="{span}">{body}</td></tr>'
