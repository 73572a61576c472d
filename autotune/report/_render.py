"""The report as text for scripts and pull requests: JSON, and Markdown for a PR comment."""

from __future__ import annotations

from autotune.documents import strict_json
from autotune.documents.confirmation import Arm, Confirmation
from autotune.report import _text
from autotune.report._data import Report, Row, Stored
from autotune.report._escape import md
from autotune.report._table import cells, columns, fmt, varying
from autotune.status import Status


def to_json(data: Report | Stored) -> str:
    """Strict JSON: a non-finite number (NaN, an infinity) is null (documents.strict_json). data:
    collect's Report (its to_dict), or a plain dict (the JSON of one, read back)."""
    plain = data.to_dict() if isinstance(data, Report) else data
    return strict_json.dumps(plain, indent=1, default=str)


def confirmed(st: Arm) -> str:
    """One confirmation candidate's result in words."""
    if st.median is None:
        return "no sample succeeded (" + "; ".join(st.failures[:2]) + ")"
    return (
        f"median {fmt(st.median, 'tok')} tokens/s/GPU over {len(st.samples)} fresh processes "
        f"({interval(st)}; search {fmt(st.search_value, 'tok')}){compiles(st)}{left(st)}"
    )


def compiles(st: Arm) -> str:
    """'; compile warm 3 s, warm 3 s': each confirmation process's compile and what the cache
    served it ('' where nothing was compiled or the study predates the record)."""
    secs, states = st.compile_s or [], st.compile_cache or []
    # a process that compiled records what the cache served it; one that compiled nothing, no state
    shown = [f"{state} {s:,.0f} s" for s, state in zip(secs, states) if s is not None and state]
    return f"; compile {', '.join(shown)}" if shown else ""


def left(st: Arm) -> str:
    """'; left the race after round 2: 6.1% slower ...' ('' for an arm that ran to the end)."""
    d = st.dropped
    return f"; left the race after round {d.round}: {d.why}" if d else ""


def interval(st: Arm) -> str:
    """'95% interval LO to HI', or why there is none ('95% interval: too few samples ...',
    intervals.unbounded)."""
    ci, why = st.interval()
    if ci is None:
        return f"95% interval: {why or 'none'}"
    lo, hi = ci
    return f"95% interval {fmt(lo, 'tok')} to {fmt(hi, 'tok')}"


def confirmation_lines(conf: Confirmation) -> list[str]:
    """The race, one line an arm: its confirmed figure, its processes' compiles, when it left."""
    lines = [
        f"trial {st.trial}{' (chosen)' if st.trial == conf.chosen else ''}: "
        f"{confirmed(st)}" + (f"; failures: {'; '.join(st.failures[:2])}" if st.failures else "")
        for st in conf.stats
    ]
    base = conf.baseline
    if base and base.median:
        mine = " (chosen: your setting)" if base.trial == conf.chosen else ""
        lines.append(
            f"baseline, trial {base.trial}{mine}: median {fmt(base.median, 'tok')} "
            f"tokens/s/GPU over {len(base.samples)} fresh processes ({interval(base)})"
            f"{left(base)}"
        )
    return [*lines, f"{_text.rounds_text(conf)}; {conf.why}"]


def to_markdown(data: Report | Stored, top: int = 10) -> str:
    """A PR-comment-sized summary: the chosen configuration, what was left out, the top trials,
    which knobs mattered, the cost. Every text a study holds is escaped (md). data: collect's
    Report, or the plain dict of its JSON."""
    data = Report.of(data)
    lines = [f"### autotune: {md(data.study)} ({md(data.device)})", ""]
    chosen, *details = _text.chosen_lines(data) + _text.projection_lines(data)
    lines += [f"**{md(chosen)}**", "", *(f"- {md(line)}" for line in details), ""]
    if data.excluded:
        total = sum(g["count"] for g in data.excluded)
        lines += [f"**Left out of the search: {total} trial(s)**", ""]
        for g in data.excluded:
            first, *rest = _text.excluded_lines(g)
            lines += [f"- {md(first)}", *(f"  - {md(x)}" for x in rest)]
        lines.append("")
    lines += _trials_markdown(data, top)
    if data.confirmation:
        lines += ["", "**Confirmation**", ""]
        lines += [f"- {md(line)}" for line in confirmation_lines(data.confirmation)]
    if data.front:
        lines += [
            "",
            "Front, tokens/s against p99 time per output token (no other trial beats these on "
            "both): " + "; ".join(_front_point(r) for r in data.front),
        ]
    if data.searched:
        lines += ["", "**Which knobs mattered**", ""]
        for x in _text.effects_lines(data):
            lines.append(md(x) if x[0].isdigit() or x.startswith("-") else f"- {md(x)}")
    lines += ["", md(_text.cost_line(data))]
    return "\n".join(lines) + "\n"


def _trials_markdown(data: Report, top: int) -> list[str]:
    """The top trials as a table, without the columns that never change (named above it)."""
    knobs, rows = data.searched, data.trials[:top]
    full = columns(knobs, data.trials, data.task)
    header = varying(full, data.trials, knobs)
    lines = [f"**Top {len(rows)} of {len(data.trials)} trials**", ""]
    same = [c for c in full if c not in header]
    if same and data.trials:
        row = data.trials[0]
        fixed = ", ".join(f"{c}={cells(row, knobs, [c])[0]}" for c in same)
        lines += [f"The same in every trial: {md(fixed)}", ""]
    lines.append("| " + " | ".join(md(c) for c in header) + " |")
    lines.append("|---" * len(header) + "|")
    for r in rows:
        lines.append("| " + " | ".join(md(c) for c in cells(r, knobs, header)) + " |")
    if "step spread" in header:
        lines += ["", md(_text.STEP_SPREAD)]
    return lines


def _front_point(r: Row) -> str:
    over = " (over limit)" if r.state == Status.OVER_LIMIT else ""
    return (
        f"trial {r.number}: {fmt(r.tpot_ms_p99, 'ms')} ms, "
        f"{fmt(r.tokens_per_s_per_gpu, 'tok')} tokens/s{over}"
    )
