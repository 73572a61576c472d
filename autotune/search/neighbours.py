"""Start from your setting (study.start neighbours): the baseline first, then its one-knob
neighbours, then the sampler.

A user who brings their own job brings a setting known to run. A sampler's first trials land
anywhere in the space (issue 51: 4 of 9 trials of an HF job ran out of memory, the first ones far
from the user's setting), so the search first measures what one change to that setting does:
- the size knob (micro-batch) one listed size down, then one up: two sizes give the measured
  memory line (study/peaks.py) before a larger size is tried, so a size that cannot fit is
  predicted instead of launched;
- each other searched knob at each of its other values, one at a time (once: a value measured at
  some size is not measured again), at the baseline's size; when the baseline's measured peak is
  above peaks.RISKY of the GPU, at the next smaller size that ran (a change of arithmetic,
  attention or optimizer can need more memory than the baseline left); when the baseline ran out
  of memory, one listed size below it (a size no larger than the one that just failed would fail
  the same way);
- by what the catalogue knows of a value's memory (Knob.memory_order, _size_for): one that needs no
  more than the baseline's at the largest size your setting ran at; one that needs more where the
  activations could double, until such a change ran out of memory there, then at the smallest size
  the global batch allows (below the list where it must);
- not the values the staged search spends on the leaders (the costly program: compile) or measures
  as an arithmetic's variant (fp8, fp16): those come where they can win (search/stages.py).
The points are computed after each told trial from what has been measured (a neighbour known to
fail is recorded as predicted by the claim, never launched); the sampler takes over once they are
measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune import knobs as catalogue
from autotune.documents.record import knobs_of
from autotune.knobs import Knobs, KnobValue
from autotune.search import edges
from autotune.search.stages import Plan
from autotune.space import ResolvedSpace
from autotune.study import peaks, predict
from autotune.study.history import History, key
from autotune.tasks import Task


def wanted(start: str, task: Task, grid: bool) -> bool:
    """Whether the search starts with the neighbours (study.start; auto: where the task says so,
    Task.starts_at_neighbours: your own job); never with the grid, which measures every point."""
    return not grid and (start == "neighbours" or start == "auto" and task.starts_at_neighbours)


def points(
    h: History, space: ResolvedSpace, plan: Plan, command: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The baseline's neighbours not yet measured, in the order they are measured; none until the
    baseline has been measured (or failed). command: the study's command section (a size below the
    list only where it renders: edges.unrendered)."""
    base = dict(space.baseline)
    if not base or key(space.knobs(base)) not in h.seen:
        return []
    size = space.task.size_knob
    out = _sizes(space, base, size)
    for name, values in space.searched.items():
        if name == size:
            continue
        for value in values:
            if value == base[name] or not _other_value(plan, name, value):
                continue
            if not _measured(h, space, {**base, name: value}):
                at = _size_for(h, space, base, name, value, command)
                out.append({**base, **({size: at} if at is not None else {}), name: value})
    fresh = []
    for p in out:
        if key(space.knobs(p)) not in h.seen and p not in fresh:
            fresh.append(p)
    return fresh


def _sizes(space: ResolvedSpace, base: Knobs, size: str) -> list[dict[str, Any]]:
    """The baseline one listed size down, then one up."""
    if size not in space.searched or size not in base:
        return []
    sizes = sorted(space.searched[size])
    i = sizes.index(base[size])
    steps = [sizes[j] for j in (i - 1, i + 1) if 0 <= j < len(sizes)]
    return [{**base, size: s} for s in steps]


def _other_value(plan: Plan, name: str, value: KnobValue) -> bool:
    """Whether a one-knob neighbour measures this value now (not the staged search's costly program
    or deferred arithmetic)."""
    if value in plan.costly.get(name, ()):
        return False
    return value not in plan.deferred.get(name, ())


def _measured(h: History, space: ResolvedSpace, point: Knobs) -> bool:
    """Whether this one-knob neighbour was measured (or predicted) at some size already: its size
    moves with what is learned, the neighbour is measured once."""
    group = peaks.group_of(space.knobs(point), space.task)
    return any(peaks.group_of(knobs_of(t), space.task) == group for t in h.seen.values())


def _size_for(
    h: History,
    space: ResolvedSpace,
    base: Knobs,
    name: str,
    value: KnobValue,
    command: Mapping[str, Any] | None,
) -> Any:
    """The size a neighbour that sets `name` to `value` runs at. A value that needs no more memory
    than the baseline's (Knob.memory_order: checkpointing where your setting has none, bf16 where
    it has fp32) runs at the largest size your setting ran at (the baseline's own where it ran):
    it fits. A value that can need more runs where the activations could double (_safe_size),
    until one such change of this study ran out of memory where they could: then the job's
    activations grow more than the premise allows, and the next runs at the smallest size the
    global batch allows, below the list where it must (one sequence a rank: it fits wherever a
    step of the job can). Any other value: where the activations could double."""
    size = space.task.size_knob
    if size not in base:
        return None
    if catalogue.needs_at_least(name, base[name], value):
        ran = _ran_size(h, space, base)
        if ran is not None:
            return ran
    if not _more(name, value, base[name]) or not _surprised(h, space, base):
        return _safe_size(h, space, base, size)
    return _smallest(space, size, command, base)


def _more(name: str, value: KnobValue, than: KnobValue) -> bool:
    """Whether the catalogue orders `value` as needing more memory than `than` (a later tier)."""
    return catalogue.needs_at_least(name, value, than) and not catalogue.needs_at_least(
        name, than, value
    )


def _ran_size(h: History, space: ResolvedSpace, base: Knobs) -> Any:
    """The largest size, no larger than the baseline's, at which your setting ran its steps."""
    size = space.task.size_knob
    group = peaks.group_of(space.knobs(base), space.task)
    sizes = [
        knobs_of(t)[size]
        for t in h.ran
        if peaks.group_of(knobs_of(t), space.task) == group
        and isinstance(knobs_of(t).get(size), int)
        and knobs_of(t)[size] <= base[size]
    ]
    return max(sizes, default=None)


def _surprised(h: History, space: ResolvedSpace, base: Knobs) -> bool:
    """Whether a neighbour that changed one knob of your setting to a value needing more memory
    ran out of memory at a size _safe_size gives now (where the activations could double)."""
    size = space.task.size_knob
    at = _safe_size(h, space, base, size)
    for t in h.ooms:
        knobs = knobs_of(t)
        changed = [
            n for n, v in base.items() if n not in space.task.batch_knobs and knobs.get(n) != v
        ]
        if (
            len(changed) == 1
            and _more(changed[0], knobs.get(changed[0]), base[changed[0]])
            and isinstance(knobs.get(size), int)
            and at is not None
            and knobs[size] <= at
        ):
            return True
    return False


def _smallest(
    space: ResolvedSpace, size: str, command: Mapping[str, Any] | None, base: Knobs
) -> Any:
    """The smallest size the global batch allows (edges.next_value down from the list's smallest),
    that the command renders; else the list's smallest."""
    listed = sorted(space.searched.get(size, [base[size]]))
    here = listed[0]
    while True:
        nxt, _ = edges.next_value(space, size, here, up=False)
        if nxt is None or edges.unrendered(command, space, {**base, size: nxt}):
            return here
        here = nxt


def _safe_size(h: History, space: ResolvedSpace, base: Knobs, size: str) -> Any:
    """The size the other knobs' neighbours run at: the largest listed size up to the baseline's
    at which the baseline's activations could double and still fit, by its setting's measured line
    (a change of arithmetic, attention or optimizer rarely more than doubles them); without a line,
    the baseline's unless its measured peak is above peaks.RISKY of the GPU, then the largest
    smaller size that ran with its other knobs. Below a size that ran out of memory with the
    baseline's knobs (predict.oom_bound: the baseline's own, or a smaller one's): the largest
    listed size below it at which the activations could double, by the one size below that ran
    (_below_a_failure), or the smallest listed."""
    if size not in base:
        return None
    knobs = space.knobs(base)
    sizes = sorted(s for s in space.searched.get(size, [base[size]]) if s <= base[size])
    failed = predict.oom_bound(h, knobs, space.task)
    if failed is not None:
        below = [s for s in sizes if s < knobs_of(failed)[size]]
        sizes = below or sizes[:1]
    line = peaks.line_of(h, knobs, space.task)
    if line is not None:
        slope, intercept, per_sequence, capacity = line
        room = peaks.USABLE_SHARE * capacity
        fits = [s for s in sizes if intercept + 2 * slope * per_sequence * s <= room]
        return max(fits, default=sizes[0])
    if failed is not None:
        return _below_a_failure(h, space, knobs, sizes)
    trial = h.seen.get(key(knobs))
    point = peaks.point_of(trial, space.task) if trial is not None else None
    if point is None or point.peak_gib <= peaks.RISKY * point.capacity_gib:
        return base[size]
    group = peaks.group_of(knobs, space.task)
    smaller = [
        knobs_of(t)[size]
        for t in h.ran
        if peaks.group_of(knobs_of(t), space.task) == group
        and knobs_of(t).get(size) is not None
        and knobs_of(t)[size] < base[size]
    ]
    return max(smaller, default=base[size])


def _below_a_failure(h: History, space: ResolvedSpace, knobs: Knobs, sizes: list[Any]) -> Any:
    """The other knobs' size where the baseline ran out of memory and its setting ran at one size
    below (no line yet): the largest listed size at which that size's measured peak, taken as all
    activations (the weights' share unknown from one point, so the whole peak scales with the
    batch), could double and still fit; the largest listed below the failure while nothing below it
    has run. Your setting sat at the edge of the card: fp32 where bf16 ran, eager attention where a
    fused kernel did, can need twice what the size below used (issue 61: fp32 and tf32 ran out at
    one size below a bf16 baseline that did not fit)."""
    group = peaks.group_of(knobs, space.task)
    ran = [
        p
        for t in h.ran
        if peaks.group_of(knobs_of(t), space.task) == group
        and (p := peaks.point_of(t, space.task)) is not None
        and p.size in sizes
    ]
    if not ran:
        return max(sizes)
    anchor = max(ran, key=lambda p: p.size)
    room = peaks.USABLE_SHARE * anchor.capacity_gib
    fits = [s for s in sizes if 2 * anchor.peak_gib * s / anchor.size <= room]
    return max(fits, default=sizes[0])
