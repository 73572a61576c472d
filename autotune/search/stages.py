"""The staged search (study.staged): screen cheap, compile what can win.

Compile time is a fixed cost per distinct program and the numerics check one per arithmetic, so a
search should spend them on the candidates that can win. Everything stays a search of the user's
space through Optuna, in three parts:
- Screening: an Optuna sampler around the study's own (tpe, gp, random) measures every point it
  proposes with the cheap value of each knob that has one (the catalogue's `screen`: per-block
  compile, a dynamic batch dimension, so one compiled program serves every micro-batch size) and
  with the reference arithmetic (bf16 for fp8 and fp16, the exact all-reduce, an fp32 reduction).
  The sampler searches the layout (micro-batch, checkpointing, padding, compile or not, ...) at the
  price of cheap programs.
- Variants: after a trial that leads its arithmetic (the best trial of its precision, recipe, hook),
  the loop enqueues it with each other arithmetic of the space (fp8 for the bf16 leader, the other
  recipe for the fp8 leader): the costlier programs and their checks are spent on layouts that lead.
  A variant whose expected value (the leader's, times the best ratio that same change showed on a
  measured pair of the same kind of program) falls short of the best by more than MARGIN is left
  out: the expected gain per second.
- Finals: the last FINAL_SHARE of the budget (at least one trial), or the moment `patience` trials
  in a row brought no gain over MIN_GAIN, measure the leaders with each costly value in place
  (whole-model, static compile: the program an expert would run). Then the search stops: the budget
  is spent or nothing more is gained.

Variants and finals are trials of the budget, enqueued ahead of the sampler; the confirmation
re-measures the leaders as it does any trial."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import optuna

from autotune import knobs as catalogue
from autotune import tasks
from autotune.documents import trial_marks
from autotune.documents.record import is_predicted, knobs_of
from autotune.knobs import Knobs, KnobValue
from autotune.search import boundary, edges
from autotune.space import ResolvedSpace
from autotune.study import predict
from autotune.study.history import History, completed_value, key, value_of

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial, TrialState

    from autotune.config.study import StudyConfig

PATIENCE_MIN = 8  # study.patience's default: half the budget, at least this many trials
MARGIN = 0.02  # a variant expected this far below the best is not measured
MIN_GAIN = 0.01  # a trial that beats the best by less brings nothing (about the step-to-step noise)
FINAL_SHARE = 0.05  # of the budget: the leaders' costly twins
# with compile: the kind of program a pair's ratio was measured on
PROGRAM = ("compile_scope", "compile_dynamic")


@dataclass(frozen=True)
class Plan:
    """Which knobs screening holds, at which values, and which values wait for the leaders."""

    screen: Knobs = field(default_factory=dict)  # cost knob -> its cheap value
    costly: dict[str, list[KnobValue]] = field(
        default_factory=dict
    )  # cost knob -> its other values (the finals')
    reference: Knobs = field(default_factory=dict)  # arithmetic knob -> the reference value
    deferred: dict[str, list[KnobValue]] = field(
        default_factory=dict
    )  # arithmetic knob -> the values that wait
    dependent: tuple[str, ...] = ()  # knobs that act only with a deferred value (fp8_recipe)

    @classmethod
    def of(cls, space: ResolvedSpace, task_screen: Knobs | None = None) -> Plan:
        """The plan of a space; task_screen: the task's own cheap values, beside the catalogue's
        (task command: compile off, since a job's compile is all or nothing)."""
        screen, costly, reference, deferred = {}, {}, {}, {}
        for name, values in space.searched.items():
            knob = catalogue.BY_NAME.get(name)
            cheap = (task_screen or {}).get(name, knob.screen if knob is not None else None)
            if cheap is not None and cheap in values:
                screen[name] = cheap
                costly[name] = [v for v in values if v != cheap]
            waiting = [v for v in values if catalogue.numerics({name: v})]
            ref = catalogue.reference_of({name: waiting[0]}).get(name) if waiting else None
            if waiting and ref in values:
                reference[name], deferred[name] = ref, waiting
        dependent = tuple(
            k.name
            for k in catalogue.CATALOGUE
            if k.name in space.searched and k.only_with and k.only_with[0] in deferred
        )
        return cls(screen, costly, reference, deferred, dependent)

    @property
    def active(self) -> bool:
        return bool(self.screen or self.deferred)

    def screened(self, name: str, value: KnobValue) -> KnobValue:
        """The value screening measures in place of a sampled one."""
        if name in self.screen:
            return self.screen[name]
        if value in self.deferred.get(name, ()):
            return self.reference[name]
        return value

    def is_screened(self, params: Knobs) -> bool:
        return all(self.screened(k, v) == v for k, v in params.items())

    def arithmetic(self, knobs: Knobs) -> tuple[KnobValue, ...]:
        return tuple(knobs.get(k) for k in (*self.deferred, *self.dependent))


class Screening(optuna.samplers.BaseSampler):
    """The study's sampler, its proposals measured with the screening values (Plan.screened).
    Enqueued trials (the baseline, variants, finals) keep their values: Optuna serves their fixed
    params first."""

    def __init__(self, base: optuna.samplers.BaseSampler, plan: Plan) -> None:
        self.base, self.plan = base, plan

    def reseed_rng(self) -> None:
        self.base.reseed_rng()

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self.base.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        values = self.base.sample_relative(study, trial, search_space)
        return {k: self._screened(study, trial, k, v) for k, v in values.items()}

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, name: str, distribution: BaseDistribution
    ) -> Any:
        value = self.base.sample_independent(study, trial, name, distribution)
        return self._screened(study, trial, name, value)

    def _screened(
        self, study: optuna.Study, trial: FrozenTrial, name: str, value: KnobValue
    ) -> KnobValue:
        """The screened value; the proposal it replaced is kept in the trial's user attribute
        `screened_from` (a repeat's reason names it: search/repeats.py)."""
        screened = self.plan.screened(name, value)
        if screened != value:
            trial_marks.note_screened(study, trial, name, value)
        return screened

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self.base.after_trial(study, trial, state, values)


def stale(h: History) -> int:
    """Launched trials since the last one that beat the best before it by more than MIN_GAIN."""
    best, since = None, 0
    launched = [
        t for t in h.seen.values() if not is_predicted(t) and not trial_marks.is_warm_start(t)
    ]
    for t in sorted(launched, key=lambda t: t.number):
        value = value_of(t) if t.state == optuna.trial.TrialState.COMPLETE else None
        gained = value is not None and (best is None or value > best * (1 + MIN_GAIN))
        since = 0 if gained else since + 1
        if value is not None:
            best = value if best is None else max(best, value)
    return since


def finals_count(budget: int) -> int:
    return max(1, round(budget * FINAL_SHARE))


def finals(h: History, space: ResolvedSpace, plan: Plan, count: int) -> list[Knobs]:
    """The `count` best configurations measured with the cheap compile, each with every costly value
    in place (one trial each): those not yet measured."""
    points = [edges.point_of(t) for t in h.ranked()]
    cheap = [p for p in points if all(p.get(k) == v for k, v in plan.screen.items())]
    twins = (
        [{**p, **{k: v[0] for k, v in plan.costly.items()}} for p in cheap[:count]]
        if plan.costly
        else []
    )
    return [p for p in twins if key(space.knobs(p)) not in h.seen]


def variants(
    h: History, space: ResolvedSpace, plan: Plan, trial: optuna.trial.FrozenTrial
) -> list[Knobs]:
    """The trial's other arithmetic, where it leads its own and a variant can reach the best
    (MARGIN)."""
    knobs = knobs_of(trial)
    mine = plan.arithmetic(knobs)
    peers = [t for t in h.completed if plan.arithmetic(knobs_of(t)) == mine]
    if not peers or max(peers, key=completed_value).number != trial.number:
        return []
    out = []
    for name in (*plan.deferred, *plan.dependent):
        for value in space.searched[name]:
            point = _switched(space, edges.point_of(trial), name, value)
            if point is None or key(space.knobs(point)) in h.seen or point in out:
                continue
            known = predict.failure(h, space.knobs(point), space.task)
            if known is None and _worth(h, space, trial, point):
                out.append(point)
    return out


def _switched(space: ResolvedSpace, params: Knobs, name: str, value: KnobValue) -> Knobs | None:
    """params with name at value (its dependent knobs at their defaults where they start to act);
    None where that changes nothing the trial does."""
    if params.get(name) == value:
        return None
    point = {**params, name: value}
    for k in catalogue.CATALOGUE:
        if (
            k.only_with
            and k.only_with[0] == name
            and k.name in point
            and k.default in space.searched[k.name]
        ):
            point[k.name] = k.default
    return point if key(space.knobs(point)) != key(space.knobs(params)) else None


def _worth(h: History, space: ResolvedSpace, trial: optuna.trial.FrozenTrial, point: Knobs) -> bool:
    """Whether the variant may reach within MARGIN of the best: the trial's value times the best
    ratio that same change showed on a measured pair of the same kind of program (compile on or off,
    its scope and dynamic batch as the trial's: fp8's gain eager says little of its gain compiled);
    no such pair: it may."""
    best = h.best()
    before, after = knobs_of(trial), space.knobs(point)
    ratio = _pair_ratio(h, before, after, ("compile", *PROGRAM))
    if best is None or ratio is None:
        return True
    return (value_of(trial) or 0.0) * ratio >= (1 - MARGIN) * (value_of(best) or 0.0)


def _pair_ratio(h: History, before: Knobs, after: Knobs, same: tuple[str, ...]) -> float | None:
    """The best value ratio of completed pairs whose knobs differ as before and after do, nothing
    else, and agree with before on the knobs `same` names. Knobs, not params: a value the sampler
    drew for a knob that does not act (fp8_recipe under bf16) is no difference (it is None in the
    knobs)."""
    changed = {k for k in after if after[k] != before.get(k)}
    by_rest: dict[tuple[tuple[str, KnobValue], ...], dict[str, float]] = {}
    for t in h.completed:
        knobs = knobs_of(t)
        side = _side(knobs, before, after, changed)
        if side is not None and all(
            knobs.get(k) == before.get(k) for k in same if k not in changed
        ):
            rest = tuple(sorted((k, v) for k, v in knobs.items() if k not in changed))
            by_rest.setdefault(rest, {})[side] = value_of(t) or 0.0
    ratios = [
        pair["after"] / pair["before"]
        for pair in by_rest.values()
        if len(pair) == 2 and pair["before"]
    ]
    return max(ratios) if ratios else None


def _side(params: Knobs, before: Knobs, after: Knobs, changed: set[str]) -> str | None:
    if all(params.get(k) == before.get(k) for k in changed):
        return "before"
    if all(params.get(k) == after.get(k) for k in changed):
        return "after"
    return None


def staging(
    study: StudyConfig, space: ResolvedSpace, budget: int, task: str = "train"
) -> tuple[Plan, int]:
    """The plan and the patience (0: never stop early) of a study (config.StudyConfig) of `task`
    (its own cheap values: Task.screen). The grid measures every point: nothing to stage, nothing
    to stop early."""
    if study.sampler == "grid":
        return Plan(), 0
    plan = Plan.of(space, tasks.task(task).screen) if study.staged else Plan()
    return plan, max(PATIENCE_MIN, budget // 2) if study.patience is None else study.patience


def ahead(
    h: History,
    space: ResolvedSpace,
    plan: Plan,
    trial: optuna.trial.FrozenTrial,
    *,
    budget: int,
    room: int,
    waiting: int,
    patience: int,
    past: Sequence[Knobs] = (),
) -> tuple[list[Knobs], str]:
    """(points to enqueue ahead of the sampler, why the search stops or ''), after `trial` was told.
    While the budget has room beyond the finals: the steps past the edge of the list (`past`:
    edges.steps, where study.extend_edges is on), the boundary steps and the variants; once it has
    not, or once `patience` trials in a row brought no gain: the finals, then the stop."""
    count = finals_count(budget) if plan.costly else 0
    idle = stale(h)
    tired = bool(patience) and idle >= patience
    if room <= count or tired:
        last = finals(h, space, plan, count)
        # a tired search still looks past the edge of the list before it stops
        last += list(past[: max(0, room - len(last))]) if tired else []
        done = tired and not last and not waiting
        return last, f"no gain over {MIN_GAIN:.0%} in the last {idle} trials" if done else ""
    points = [*past, *boundary.steps(h, space, trial)] + variants(h, space, plan, trial)
    return points[: max(0, room - count)], ""


def enqueue(
    study: optuna.Study,
    space: ResolvedSpace,
    points: list[Knobs],
    limit: int | None = None,
) -> None:
    """Enqueue the points not yet measured and not already waiting (resume-safe, unlike
    skip_if_exists, which would also skip a point whose trial was interrupted), at most `limit` of
    them (None: all). A value beyond its knob's list is enqueued as the list's end, the value itself
    in the trial's `beyond_list` (search/edges.py)."""
    h = History.of(study)
    states = (optuna.trial.TrialState.WAITING,)
    waiting = {
        key({**trial_marks.enqueued_params(t), **trial_marks.beyond_of(t)})
        for t in study.get_trials(deepcopy=False, states=states)
    }
    for p in points:
        if limit is not None and limit <= 0:
            break
        if key(space.knobs(p)) not in h.seen and key(p) not in waiting:
            limit = None if limit is None else limit - 1
            params, beyond = edges.split(space, p)
            trial_marks.enqueue(study, params, beyond)
            waiting.add(key(p))
