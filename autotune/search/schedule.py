"""What a search measures next, ahead of its sampler, and why it stops: the baseline first, then
(study.start neighbours) its one-knob neighbours; a grid
enqueued a few points at a time; a repeat's region given its nearest unmeasured point; the staged
search's variants and finals (stages.ahead); the end of the budget or of the space.

The budget counts measured trials (history.MEASURED); a lost trial's point (its worker killed or
interrupted) is enqueued again, and nothing is enqueued past the budget's room (Schedule.room), so
a search that ends at its budget leaves no trial waiting."""

from __future__ import annotations

import random
import threading
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.documents import study_attrs, trial_marks
from autotune.documents.record import knobs_of, status_of
from autotune.knobs import Knobs
from autotune.protocol import STATUSES
from autotune.search import edges, neighbours, stages
from autotune.space import ResolvedSpace
from autotune.study.history import NOT_LAUNCHED, History, key, launch_cap

R = TrialState.RUNNING


class Schedule:
    """One worker's view of what is measured next (the study is shared; each call reads it anew)."""

    def __init__(
        self,
        study: optuna.Study,
        space: ResolvedSpace,
        staging: tuple[stages.Plan, int],
        budget: int,
        n_jobs: int,
        seed: int | None,
        grid: bool,
        extend_edges: bool = True,
    ) -> None:
        """extend_edges: measure past the edge of the user's list (search/edges.py; not with the
        grid, which measures the list)."""
        self.study, self.space, self.budget, self.n_jobs = study, space, budget, n_jobs
        self.extend_edges = extend_edges and not grid
        # the command's knob mappings (task command), as the study stores its config: a step past
        # the list's edge they cannot render is not measured (search/edges.py)
        self.command = (study_attrs.config(study) or {}).get("command")
        # the baseline's one-knob neighbours before the sampler (search/neighbours.py; set by the
        # loop from study.start)
        self.neighbours = False
        self.plan, self.patience = staging
        self.rng = random.Random(seed)
        self.points = space.points()
        # a point's identity, computed once
        self.point_keys = [key(space.knobs(p)) for p in self.points]
        # grid: every point in a seeded random order, enqueued a few at a time (a large space is
        # never enqueued whole: each enqueue is a write to the storage)
        self.grid_order = self.rng.sample(self.points, len(self.points)) if grid else []
        # this process's workers enqueue and ask one at a time (Drive takes it around study.ask):
        # an ask that found no waiting trial and then created one, while another worker enqueued
        # the budget's last point, left that point waiting past the budget's end. Workers in other
        # processes are not covered: a point one leaves waiting is the next ask's, here or there
        self.queue_lock = threading.Lock()

    def start(self) -> None:
        """The baseline first, then the points of trials lost with their worker (lost), the grid's
        first points; on a resume, the steps past the list's edge the study had left."""
        self.enqueue([self.space.baseline])
        h = History.of(self.study)
        self.enqueue(self.lost(h))
        self.enqueue_grid()
        self.enqueue(self.past(h))

    def lost(self, h: History) -> list[dict[str, Any]]:
        """The points of trials that ended without a record (their worker killed or lost, an
        interruption), neither measured since nor being measured: each is measured again, first."""
        trials = self.study.get_trials(deepcopy=False, states=(TrialState.FAIL, TrialState.RUNNING))
        taken = {*h.seen, *(key(knobs_of(t)) for t in trials if t.state == R)}
        out = []
        for t in trials:
            # an enqueued point is the trial's before it is suggested (lost right after the ask)
            point = {**trial_marks.enqueued_params(t), **edges.point_of(t)}
            if (
                t.state == R
                or status_of(t) in (*STATUSES, *NOT_LAUNCHED)
                or set(point) != set(self.space.searched)  # never given its point whole
                or key(self.space.knobs(point)) in taken
                or point in out
            ):
                continue
            out.append(point)
        return out

    def room(self, own: int | None = None) -> int:
        """How many more trials may be launched or enqueued: the budget's measured trials less
        those measured, running (but `own`) and waiting, within the launch cap (history.launch_cap).
        A running trial recorded without a launch (a repeat, a skip) takes none."""
        h = History.of(self.study)
        states = (TrialState.RUNNING, TrialState.WAITING)
        taken = sum(
            1
            for t in self.study.get_trials(deepcopy=False, states=states)
            if t.number != own and status_of(t) not in NOT_LAUNCHED
        )
        return max(0, min(self.budget - h.measured, launch_cap(self.budget) - h.launched) - taken)

    def unseen(self, h: History) -> list[dict[str, Any]]:
        """Points neither measured nor being measured by another worker."""
        pairs = zip(self.points, self.point_keys)
        return [p for p, k in pairs if k not in h.seen and k not in h.running]

    def nearest(self, params: Knobs, h: History, own: int | None = None) -> bool:
        """A repeat of `params` (trial `own`): its nearest unmeasured point (a screened one first,
        when staged) is measured next. False when every other point is measured or being measured
        elsewhere."""
        unseen = self.unseen(h)
        screened = [p for p in unseen if self.plan.is_screened(p)]
        left = screened or unseen
        if left:
            self.enqueue([self.space.nearest(params, left, self.rng)], own)
        return bool(left)

    def after(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> str | None:
        """After each told trial: the grid topped up, the staged search's next points; returns why
        the study stops, or None."""
        h = History.of(study)
        self.note_edges(study, h)
        if h.measured >= self.budget:
            return "budget reached"
        if h.launched >= launch_cap(self.budget):
            return (
                f"launch cap reached: {h.launched} trials launched, {h.measured} of the "
                f"{self.budget} asked measured (the others failed or were pruned)"
            )
        self.enqueue(self.lost(h))
        self.enqueue_grid()
        past = self.past(h)
        # the list measured whole: only steps past its edge are left (search/edges.py)
        if not self.unseen(h) and not past:
            return "space exhausted"
        if self.grid_order:  # the grid measures every point anyway
            return None
        if self.enqueue_neighbours(study, h):
            return None
        return self._ahead(study, h, trial, past)

    def enqueue_neighbours(self, study: optuna.Study, h: History) -> bool:
        """The baseline's next one-knob neighbours, one per worker (search/neighbours.py); False
        once they are all measured (or where the study starts with the sampler)."""
        if not self.neighbours:
            return False
        left = neighbours.points(h, self.space, self.plan, self.command)
        if not left:
            return False
        waiting = len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
        self.enqueue(left[: max(0, self.n_jobs - waiting)])
        return True

    def past(self, h: History) -> list[dict[str, Any]]:
        """The steps past the edge of the list still to measure (none where extend_edges is
        off)."""
        if not self.extend_edges:
            return []
        return edges.steps(h, self.space, self.plan.screen, self.command)

    def _ahead(
        self,
        study: optuna.Study,
        h: History,
        trial: optuna.trial.FrozenTrial,
        past: list[dict[str, Any]],
    ) -> str | None:
        """What the staged search measures next ahead of the sampler, or its stop (stages.ahead);
        past: the steps past the list's edge (Schedule.past)."""
        waiting = len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
        points, stop = stages.ahead(
            h,
            self.space,
            self.plan,
            trial,
            budget=self.budget,
            room=self.room(),
            waiting=waiting,
            patience=self.patience,
            past=past,
        )
        self.enqueue(points)
        return stop or None

    def note_edges(self, study: optuna.Study, h: History) -> None:
        """Why nothing is measured past the list's edge for the best trial (study attribute
        `edges`, which the report shows), stored where it changed."""
        note = edges.stop_note(h, self.space, self.extend_edges, self.command)
        study_attrs.set_edges_note(study, note)

    def enqueue_grid(self) -> None:
        """Keep the next unmeasured grid points waiting, one more than trials run at once."""
        if not self.grid_order:
            return
        h = History.of(self.study)
        waiting = self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        wanted = min(self.n_jobs + 1 - len(waiting), self.room())
        next_points: list[dict[str, Any]] = []
        while wanted > len(next_points) and self.grid_order:
            p = self.grid_order.pop(0)
            if key(self.space.knobs(p)) not in h.seen:
                next_points.append(p)
        self.enqueue(next_points)

    def enqueue(self, points: list[dict[str, Any]], own: int | None = None) -> None:
        """Those of the points not measured nor waiting, as many as the budget has room for (own:
        the running trial asking, which takes none)."""
        if not points:
            return
        with self.queue_lock:
            stages.enqueue(self.study, self.space, points, self.room(own))
