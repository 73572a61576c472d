"""Steps along a size knob toward the study's limits (knobs with `climb`: generate's batch_size).

Decode throughput grows with the batch until a latency limit (study.limits) or the GPU's memory
stops it, so the fastest configuration within the limits sits at that boundary. The samplers see
every knob as an unordered category and reach it slowly: on an H200 (Llama-3.1-8B shape,
docs/BENCHMARKS.md) a 16-trial TPE study kept to eager decoding at batch 16 (1,171 tokens/s) while
compiled decoding at batch 64 measured 6,365 tokens/s, 84% over the time-to-first-token limit, and
no batch between them was tried. So after each measured trial the loop enqueues, ahead of the
sampler, with the other knobs unchanged (a bisection by index in the list of sizes):
- the best trial's size halfway up to the smallest size known over a limit or out of memory for
  those knobs, or past the largest (a size beyond a measured bound is recorded as predicted, without
  a launch:
  predict.py);
- an over-limit trial's size halfway down to the largest size known within the limits for those
  knobs.
Each is one trial of the budget, at most two per measured trial. Training's micro_batch_size does
not climb: its best size is often inside the range (the recorded landscapes), not at a boundary.
"""

from __future__ import annotations

from typing import Any

import optuna

from autotune import knobs as catalogue
from autotune.documents.record import is_predicted, knobs_of, status_of
from autotune.protocol import Knobs
from autotune.space import ResolvedSpace
from autotune.status import Status
from autotune.study import predict
from autotune.study.history import History, Key, key


def _others(knobs: Knobs, name: str) -> Key:
    return key({k: v for k, v in knobs.items() if k != name})


def _bisect(
    t: optuna.trial.FrozenTrial,
    name: str,
    sizes: list[Any],
    h: History,
    up: bool,
    ooms: list[optuna.trial.FrozenTrial],
) -> dict[str, Any] | None:
    """t's params with `name` halfway (by index) to the nearest known size beyond it, the other
    knobs alike:
    up from a trial within the limits toward the smallest size over them (or out of memory, or past
    the largest size); down from an over-limit trial toward the largest size within them (or below
    the smallest). ooms: the out-of-memory trials that bound (predict.ooms: a flaky one, that a
    larger size contradicts, does not)."""
    if t.params.get(name) not in sizes:
        return None
    i, others = sizes.index(t.params[name]), _others(knobs_of(t), name)
    alike = [
        sizes.index(knobs_of(u)[name])
        for u in (h.over_limit + ooms if up else h.completed)
        if _others(knobs_of(u), name) == others and knobs_of(u).get(name) in sizes
    ]
    if up:
        j = (i + min([k for k in alike if k > i], default=len(sizes))) // 2
    else:
        j = -((-i - max([k for k in alike if k < i], default=-1)) // 2)  # halfway, rounded up
    return {**t.params, name: sizes[j]} if j != i and 0 <= j < len(sizes) else None


def steps(
    h: History, space: ResolvedSpace, finished: optuna.trial.FrozenTrial
) -> list[dict[str, Any]]:
    """Points (searched params) to measure next: not measured, not known to fail, best's step up
    first."""
    names = [n for n in space.searched if n in catalogue.BY_NAME and catalogue.BY_NAME[n].climb]
    points = []
    ooms = predict.ooms(h, space.task)
    for name in names:
        sizes = sorted(space.searched[name])
        best = h.best()
        if best is not None:
            points.append(_bisect(best, name, sizes, h, up=True, ooms=ooms))
        if status_of(finished) == Status.OVER_LIMIT and not is_predicted(finished):
            points.append(_bisect(finished, name, sizes, h, up=False, ooms=ooms))
    out: list[dict[str, Any]] = []
    for p in points:
        if p is None or set(p) != set(space.searched):
            continue
        knobs = space.knobs(p)
        if (
            key(knobs) not in h.seen
            and predict.failure(h, knobs, space.task) is None
            and p not in out
        ):
            out.append(p)
    return out
