"""The resolved search space: which knobs are searched or fixed, the task's batch rule applied, and
Optuna suggestions.

The rules come from the knob catalogue (autotune/knobs): a knob that acts only under another knob's
value, only across ranks, or only on NCCL is fixed (and says why) where it cannot matter. Imports no
config module at run time: job.validate calls resolve_space, the rules beyond the schema.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from autotune import knobs as catalogue
from autotune import tasks
from autotune.errors import did_you_mean, excerpt
from autotune.knobs import Knobs, KnobValue

if TYPE_CHECKING:
    import random

    import optuna

    from autotune.config import Config


KNOBS = catalogue.NAMES  # in the order they are shown and suggested
# The most points a space may have: each trial scans the unmeasured points, and a grid enqueues them
# all. A space of more points than a study could ever measure is a mistake to be told about, not a
# search.
MAX_POINTS = 100_000


class SpaceView(TypedDict):
    """The resolved space as validate and --dry-run show it (ResolvedSpace.describe)."""

    searched: dict[str, list[KnobValue]]  # knob -> its values, two or more
    fixed: Knobs  # knob -> its one value
    notes: dict[str, str]  # knob -> why the YAML's values were changed
    size: int  # points
    baseline: Knobs  # the baseline's searched values
    inert: list[str]  # fixed knobs that cannot act in any trial here


@dataclass(frozen=True)
class ResolvedSpace:
    """The space as trials see it: searched knobs (two or more values), fixed knobs, and why."""

    searched: dict[str, list[Any]]
    fixed: dict[str, Any]
    task: tasks.Task  # its batch rule derives knobs (grad_accum_steps) from each point's values
    notes: dict[str, str] = field(default_factory=dict)
    global_batch_size: int | None = None
    world_size: int = 1
    baseline: dict[str, Any] = field(default_factory=dict)
    # the knobs the YAML declares itself (task command), after the catalogue's
    custom: tuple[str, ...] = ()
    # fixed knobs that cannot act in any trial here (validate and --dry-run hide them)
    inert: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        n = 1
        for values in self.searched.values():
            n *= len(values)
        return n

    def knobs(self, params: Knobs) -> dict[str, Any]:
        """Every knob's value for a trial with these searched params (derived knobs filled in; a
        knob that cannot act in this trial is None, so points that differ only there are one
        measurement)."""
        knobs = {**self.fixed, **params}
        knobs.update(self.task.derived_knobs(knobs, self.global_batch_size, self.world_size))
        if self.world_size == 1 and "parallel" in knobs:
            knobs["parallel"] = None  # one rank: no data parallelism to choose
        for k in catalogue.CATALOGUE:
            if k.name in knobs and k.only_with and not k.acts_with(knobs[k.only_with[0]]):
                knobs[k.name] = None
        return {k: knobs[k] for k in (*KNOBS, *self.custom) if k in knobs}  # the task's knobs

    def points(self) -> list[dict[str, Any]]:
        """Every point of the space as searched params (the grid)."""
        names = list(self.searched)
        return [dict(zip(names, combo)) for combo in itertools.product(*self.searched.values())]

    def distance(self, a: Knobs, b: Knobs) -> int:
        """Steps between two points: index distance on numeric knobs (ordered), 0/1 on the
        others."""
        d = 0
        for name, values in self.searched.items():
            if a[name] == b[name]:
                continue
            numeric = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
            d += abs(values.index(a[name]) - values.index(b[name])) if numeric else 1
        return d

    def nearest(self, params: Knobs, candidates: list[Knobs], rng: random.Random) -> dict[str, Any]:
        """The candidate closest to params (ties broken by rng): where the sampler wanted to
        look."""
        best = min(self.distance(params, c) for c in candidates)
        nearest: dict[str, Any] = rng.choice(
            [c for c in candidates if self.distance(params, c) == best]
        )
        return nearest

    def suggest(self, trial: optuna.trial.Trial) -> dict[str, Any]:
        """Ask Optuna for a value of each searched knob (all knobs are categorical)."""
        return {
            name: trial.suggest_categorical(name, values) for name, values in self.searched.items()
        }

    def describe(self) -> SpaceView:
        return {
            "searched": self.searched,
            "fixed": self.fixed,
            "notes": self.notes,
            "size": self.size,
            "baseline": self.baseline,
            "inert": list(self.inert),
        }


def resolve_space(cfg: Config, device: str | None = None) -> ResolvedSpace:
    """Apply the global-batch rule and the knobs' own rules; raise ValueError naming the YAML path.

    device "cpu" with world_size > 1 runs the gloo backend: the NCCL knobs are then fixed at
    default, noted as not applicable (their values were validated all the same)."""
    tasks.check_config(cfg)  # what the task asks of the sections (the schema checks each alone)
    space, wl = cfg.space, cfg.workload
    task, plugin = wl.task, tasks.task(wl.task)
    mine = [k.name for k in catalogue.CATALOGUE if task in k.tasks]
    for k in catalogue.CATALOGUE:  # a knob of another task, set: a mistake to be told about
        value = getattr(space, k.name)
        if task not in k.tasks and value != ("auto" if k.derived else [k.default]):
            raise ValueError(
                f"space.{k.name}: a knob of task {', '.join(k.tasks)}, not of {task}; task {task} "
                f"searches {', '.join(mine)}"
            )
    values: dict[str, list[Any]] = {
        k: list(getattr(space, k)) for k in mine if k != "grad_accum_steps"
    }
    notes: dict[str, str] = {}
    plugin.batch_rule(space, wl, values, notes)
    custom = plugin.user_knobs(cfg)
    values.update(custom)
    for k in catalogue.CATALOGUE:
        _fix_where_it_cannot_act(k, values, notes, wl.world_size, device)
    searched = {k: v for k, v in values.items() if len(v) > 1}
    fixed = {k: v[0] for k, v in values.items() if len(v) == 1}
    size = math.prod(len(v) for v in searched.values())
    if size > MAX_POINTS:
        biggest = sorted(searched, key=lambda k: -len(searched[k]))[:3]
        raise ValueError(
            f"space: {size:,} points; at most {MAX_POINTS:,} (a study measures tens): fix "
            "knobs or list fewer values, e.g. of "
            + ", ".join(f"{k} ({len(searched[k])})" for k in biggest)
        )
    return ResolvedSpace(
        searched=searched,
        fixed=fixed,
        task=plugin,
        notes=notes,
        global_batch_size=wl.global_batch_size,
        world_size=wl.world_size,
        baseline=_resolve_baseline(cfg.baseline, values),
        custom=tuple(custom),
        inert=_inert(values, wl.world_size, device),
    )


def _inert(values: dict[str, list[Any]], world_size: int, device: str | None) -> tuple[str, ...]:
    """The knobs of one value that act in no trial of this space, as the catalogue declares them:
    across ranks only (world_size 1), NCCL only (device cpu), or only with another knob's value that
    the space never takes (parallel is inert on one rank, so its DDP and FSDP knobs are too)."""
    inert: list[str] = []
    for k in catalogue.CATALOGUE:  # owners are declared before the knobs that act only with them
        if len(values.get(k.name, ())) != 1:
            continue
        if (k.multi_rank and world_size == 1) or (k.nccl and device == "cpu"):
            inert.append(k.name)
        elif k.only_with and (
            k.only_with[0] in inert or not any(map(k.acts_with, values.get(k.only_with[0], [])))
        ):
            inert.append(k.name)
    return tuple(inert)


def _fix_where_it_cannot_act(
    k: catalogue.Knob,
    values: dict[str, list[Any]],
    notes: dict[str, str],
    world_size: int,
    device: str | None,
) -> None:
    """A knob that cannot matter here is fixed (at its default, or its first value) with the
    reason."""
    if k.name not in values:
        return
    if k.multi_rank and world_size == 1:
        if values[k.name] != [k.default]:
            notes[k.name] = f"not searched: world_size is 1, so {values[k.name]} cannot matter"
        values[k.name] = [k.default]
    elif k.nccl and device == "cpu":
        if values[k.name] != [k.default]:
            notes[k.name] = (
                f"not applicable to gloo (device cpu has no NCCL): {values[k.name]} not searched"
            )
        values[k.name] = [k.default]
    if k.only_with:
        owner, value = k.only_with
        if not any(k.acts_with(v) for v in values[owner]) and len(values[k.name]) > 1:
            what = (
                f"{owner} is always {str(value.value).lower()}"
                if isinstance(value, catalogue.Not)
                else f"{owner} {value} is not in the space"
            )
            notes.setdefault(k.name, f"not searched: {what}, so {values[k.name]} cannot matter")
            values[k.name] = values[k.name][:1]


def _resolve_baseline(given: Knobs, values: dict[str, list[Any]]) -> dict[str, Any]:
    """The baseline's searched params; an absent knob takes its default if in the space, else the
    first value."""
    for key, value in given.items():
        if key not in KNOBS and key not in values:
            allowed = list(dict.fromkeys((*values, *KNOBS)))  # this task's knobs first, each once
            hint = did_you_mean(key, allowed)
            raise ValueError(
                f"baseline.{str(key)[:40]}: unknown knob; {hint}allowed: {', '.join(allowed)}"
            )
        if (
            key not in values
            and key != "grad_accum_steps"
            or key == "grad_accum_steps"
            and "micro_batch_size" not in values
        ):
            raise ValueError(
                f"baseline.{key}: not a knob of this task; allowed: {', '.join(values)}"
            )
        if key == "grad_accum_steps" and key not in values:
            raise ValueError(
                f"baseline.grad_accum_steps: {excerpt(value)} is derived from global_batch_size; "
                "remove it"
            )
        if not any(v == value and type(v) is type(value) for v in values[key]):
            raise ValueError(
                f"baseline.{key}: {excerpt(value)} is outside the space; allowed: "
                f"{excerpt(values[key])}"
            )
    baseline = {}
    for key, allowed in values.items():
        if len(allowed) < 2:
            continue
        # yours: the first
        default = catalogue.BY_NAME[key].default if key in catalogue.BY_NAME else allowed[0]
        baseline[key] = (
            given[key] if key in given else default if default in allowed else allowed[0]
        )
    return baseline
