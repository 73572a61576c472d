"""Past the edge of the user's list: the best trial at the largest (or smallest) listed value of a
numeric knob gets the next value measured, beyond the list.

A tuner that only searches the box it is given cannot beat the person who drew the box (issue 50:
the winner sat at micro-batch 16, the largest listed, with 62.6 of 140 GiB used; no trial tried 24
or 32). After each told trial, where study.extend_edges is on, the best trial's value of each knob
with an `edge` rule (the catalogue: micro_batch_size the next that divides the global batch per
rank, padding multiples and bucket sizes doubled) is checked; at an end of the list, the next value
beyond it is measured with the best's other knobs (with screening's cheap program where the search
is staged, so a compiled per-block program of every size is served by the compile cache). The
claim's predictions (study/predict.py: the memory estimate, measured peaks, an OOM of a smaller
size) keep a step that cannot fit from launching: it is recorded as predicted, with why. A step
that becomes the best is at the edge again, so the search goes on while it gains and fits. A step
whose values the command cannot render (task command: a knob's `map` without an entry for it and
without one pattern to render it through, command/render.unrendered) is not measured; the note
says why (issue 61: `--batch_size 32` where the job takes `--batch_size=32` crashed).

Optuna's categorical distributions hold only the listed values, so a trial beyond the list is
stored with the nearest listed value as its parameter (the sampler reads it as the end of the list,
where the value was measured) and the value it ran in its knobs and its `beyond_list` attribute,
which the live view, the report and best.yaml show.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna

from autotune import knobs as catalogue
from autotune.documents import trial_marks
from autotune.documents.record import reason_of, status_of
from autotune.knobs import Knobs, KnobValue
from autotune.space import ResolvedSpace
from autotune.status import Status
from autotune.study.history import History, key, value_of


def point_of(t: optuna.trial.FrozenTrial) -> Knobs:
    """The values a trial ran: its Optuna params, with those beyond the list in their place."""
    return {**t.params, **trial_marks.beyond_of(t)}


def listed(space: ResolvedSpace, name: str) -> list[int]:
    """The knob's whole-number values in the user's list, ascending."""
    values = space.searched.get(name, [])
    return sorted(v for v in values if isinstance(v, int) and not isinstance(v, bool))


def next_value(space: ResolvedSpace, name: str, value: int, up: bool) -> tuple[int | None, str]:
    """The next value past `value` away from the list (up or down), or None and why there is
    none."""
    rule = catalogue.BY_NAME[name].edge
    per_rank = (space.global_batch_size or 0) // space.world_size
    if rule == "divisor" and per_rank:
        fits = [d for d in range(1, per_rank + 1) if per_rank % d == 0]
        beyond = [d for d in fits if d > value] if up else [d for d in fits if d < value]
        if beyond:
            return (min(beyond) if up else max(beyond)), ""
        what = "larger" if up else "smaller"
        return None, f"no {what} {name} divides the global batch per rank ({per_rank})"
    step = value * 2 if up else value // 2
    if 1 <= step <= catalogue.MAX_SIZE:
        return step, ""
    return None, f"{name} {value} is at the end of the sizes allowed (1 to {catalogue.MAX_SIZE})"


def edge_knobs(space: ResolvedSpace) -> list[str]:
    """The searched knobs with an edge rule and at least two listed whole numbers."""
    return [
        n
        for n in space.searched
        if n in catalogue.BY_NAME and catalogue.BY_NAME[n].edge and len(listed(space, n)) > 1
    ]


def at_edge(h: History, space: ResolvedSpace, name: str, value: KnobValue) -> list[bool]:
    """The directions (True: up) in which `value` sits at or past an end of the list, once a
    completed trial ran the knob at another listed value (the best beat the inside of the list:
    a baseline at the list's end, measured first, is no evidence of a slope)."""
    values = listed(space, name)
    if not isinstance(value, int) or isinstance(value, bool) or not values:
        return []
    inside = {point_of(t).get(name) for t in h.completed} & set(values) - {value}
    if not inside:
        return []
    return [up for up, end in ((True, value >= values[-1]), (False, value <= values[0])) if end]


def unrendered(command: Mapping[str, Any] | None, space: ResolvedSpace, point: Knobs) -> str:
    """Why the point's values cannot reach the command ('' where they can, or with no command):
    command/render.unrendered of its knobs, the derived ones included (an accumulation)."""
    if not command:
        return ""
    from autotune.command.render import unrendered as why

    return why(command, space.knobs(point))


def steps(
    h: History, space: ResolvedSpace, screen: Knobs, command: Mapping[str, Any] | None = None
) -> list[Knobs]:
    """Points (knob values, some beyond the list) to measure next: the best trial's next value past
    each end of the list it sits at, its other values as they are but the cost knobs at screening's
    cheap values (`screen`: stages.Plan.screen); none the command (its section as JSON, its knob
    mappings) cannot render (`unrendered`)."""
    best = h.best()
    if best is None:
        return []
    out = []
    for name in edge_knobs(space):
        here = point_of(best)
        value = here.get(name)
        if not isinstance(value, int):
            continue  # no whole number: at no edge (at_edge)
        for up in at_edge(h, space, name, value):
            nxt, _ = next_value(space, name, value, up)
            if nxt is None:
                continue
            point = {**here, name: nxt, **{k: v for k, v in screen.items() if k in here}}
            k = key(space.knobs(point))
            if k in h.seen or k in h.running or point in out or unrendered(command, space, point):
                continue
            out.append(point)
    return out


def split(space: ResolvedSpace, point: Knobs) -> tuple[Knobs, Knobs]:
    """(Optuna params, values beyond the list): a value outside its knob's list stands as the
    nearest end of the list in the params."""
    params: Knobs = {}
    beyond: Knobs = {}
    for name, value in point.items():
        values = space.searched.get(name)
        if values is None or value in values:
            params[name] = value
            continue
        assert isinstance(value, int)  # only a whole number steps past its list's end (steps)
        ends = listed(space, name)
        params[name] = ends[-1] if value > ends[-1] else ends[0]
        beyond[name] = value
    return params, beyond


def stop_note(
    h: History, space: ResolvedSpace, on: bool, command: Mapping[str, Any] | None = None
) -> str:
    """Why nothing past the list is being measured for the best trial now ('' while a step is, or
    where the best sits inside the list); command: as steps takes it."""
    best = h.best()
    if best is None:
        return ""
    notes = []
    for name in edge_knobs(space):
        here = point_of(best)
        value = here.get(name)
        if not isinstance(value, int):
            continue  # no whole number: at no edge (at_edge)
        for up in at_edge(h, space, name, value):
            side = "largest" if up else "smallest"
            where = f"trial {best.number} sits at the {side} {name} ({here[name]})"
            if not on:
                notes.append(f"{where}; study.extend_edges is false")
                continue
            nxt, why = next_value(space, name, value, up)
            if nxt is None:
                notes.append(f"{where}; {why}")
                continue
            if cannot := unrendered(command, space, {**here, name: nxt}):
                notes.append(f"{where}; {name} {nxt} not measured: {cannot}")
                continue
            notes.append(_outcome(h, space, {**here, name: nxt}, name, nxt, where))
    return "; ".join(n for n in notes if n)


def _outcome(
    h: History, space: ResolvedSpace, point: Knobs, name: str, nxt: int, where: str
) -> str:
    """What became of the next value past the best: measured slower, predicted not to fit, or not
    measured yet."""
    twin = next(
        (
            t
            for t in h.seen.values()
            if trial_marks.beyond_of(t).get(name) == nxt and _same_but(point_of(t), point, name)
        ),
        None,
    )
    if twin is None:
        return f"{where}; {name} {nxt} not measured (the budget ended first)"
    status = status_of(twin)
    best = h.best()
    best_value = value_of(best) if best is not None else None
    if status == Status.OK and twin.values and best_value:
        ratio = twin.values[0] / best_value
        return f"{where}; {name} {nxt} measured (trial {twin.number}): {ratio:.3f}x of it"
    reason = (reason_of(twin) or str(status))[:200]
    return f"{where}; {name} {nxt} (trial {twin.number}): {status}, {reason}"


def _same_but(a: Knobs, b: Knobs, name: str) -> bool:
    """a and b alike but for `name` and the cost knobs screening sets (the catalogue's `screen`)."""
    return all(
        a.get(k) == v
        for k, v in b.items()
        if k != name and (k not in catalogue.BY_NAME or catalogue.BY_NAME[k].screen is None)
    )
