"""The confirmation: race the top configurations and the baseline in interleaved rounds of fresh
processes (search/race.py), then choose within noise: the baseline's own arm too."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from autotune import intervals
from autotune.documents import confirmation
from autotune.documents.confirmation import Arm, Confirmation, Dropped
from autotune.documents.record import Metric, TrialRecord, knobs_of
from autotune.launch.runner import Bench, measure
from autotune.protocol import Knobs, reason_line, with_loss_check
from autotune.search import race
from autotune.search.observer import Observer
from autotune.status import Status
from autotune.study.chosen import KEEP
from autotune.study.history import History, value_of


def changed_knobs(knobs: Knobs, baseline: Knobs) -> list[str]:
    """Knobs set differently from the baseline (derived grad_accum_steps not counted)."""
    return [k for k, v in knobs.items() if k != "grad_accum_steps" and baseline.get(k) != v]


def confirm(
    study: optuna.Study,
    bench: Bench,
    *,
    top: int,
    rounds: int,
    base_knobs: Knobs,
    runs: Path,
    observer: Observer,
    measure_fn: Callable[..., TrialRecord] = measure,
) -> Confirmation | None:
    """Race the top configurations and the baseline in interleaved rounds (A B C base A B C base
    ...), each sample a fresh process, and choose.

    From the second round on, an arm whose ratio to the leader (the baseline may lead) is wholly
    below 1 (95%) leaves the race; further rounds, up to `rounds`, measure only the arms still tied
    (search/race.py). The choice (race.pick): your setting, the baseline, where it is within noise
    of the fastest; else among the arms within noise of the fastest, the cheapest program, then the
    fewest knobs changed from the baseline; the runner-up is named with its cost. The baseline's
    samples bound the gain. Stored in the study (documents/confirmation.py, its user attribute
    `confirmation`) after every sample, with the rounds asked, the rounds done, whether the race is
    complete (decided, or every round measured), which arms left it and why, and each process's
    wall time, compile seconds and compile cache state: a resumed study does not confirm the same
    candidates again, and an interrupted confirmation goes on from the samples it kept. bench: the
    search's; the confirmation re-measures speed only (the numerics check was made once, in the
    search).
    measure_fn: measures one sample, the search's own measurement (run_search's; default
    runner.measure, a fresh process a sample). Returns the document as stored (None: nothing to
    race).
    """
    h = History.of(study)
    candidates = h.ranked()[:top]
    if not candidates or rounds < 1:
        return None
    bench = dataclasses.replace(bench, params=with_loss_check(bench.params, None))
    numbers = [t.number for t in candidates]
    base = h.baseline if h.baseline is not None and h.baseline.number not in numbers else None
    arms = [*candidates, *([base] if base is not None else [])]
    if len(arms) < 2 and h.baseline is not None:
        return None  # your setting measured alone: nothing to race, and no other to choose
    previous = confirmation.of(study)
    kept = _kept(previous, numbers, arms, rounds)
    if kept is None:  # this top was confirmed in full already
        return previous
    observer.confirm_started([t.number for t in arms], rounds, sum(map(kept.taken, kept.numbers)))
    while todo := kept.next_round(arms, rounds):
        r, round_arms = todo
        for t in round_arms:
            record = measure_fn(
                bench,
                knobs_of(t),
                runs / f"confirm-{t.number:04d}-{r}",
                number=t.number,
                on_poll=observer.poll,
            )
            value = kept.add(t.number, record)
            # after every sample: an interruption keeps what was measured, and a resume goes on from
            # there
            _save(study, candidates, kept, base, base_knobs, rounds)
            observer.confirm_sample(t.number, r, value, record.status)
            if record.disturbed:
                observer.confirm_disturbed(t.number, r, record.disturbed)
        left = race.drops(
            kept.samples, kept.failures, kept.alive(), kept.searched, base.number if base else None
        )
        for n, why in left.items():
            kept.dropped[n] = Dropped(round=r + 1, why=why)
            observer.confirm_dropped(n, why)
        _save(study, candidates, kept, base, base_knobs, rounds)
    return confirmation.of(study)


def _save(
    study: optuna.Study,
    candidates: list[optuna.trial.FrozenTrial],
    kept: _Arms,
    base: optuna.trial.FrozenTrial | None,
    base_knobs: Knobs,
    rounds: int,
) -> None:
    """The confirmation as it stands, stored in the study: the choice, the rounds asked, whether
    the race is complete, and each arm's (the baseline's own too) wall times, compile seconds,
    cache states and what disturbed each process (`disturbed`)."""
    doc = choose(
        candidates, kept.samples, kept.failures, base_knobs, kept.done(), kept.dropped, base=base
    )
    for arm in doc.arms:
        n = arm.trial
        arm.walls_s, arm.compile_s = kept.walls[n], kept.compiles[n]
        arm.compile_cache, arm.disturbed = kept.caches[n], kept.hosts[n]
    doc.rounds, doc.complete, doc.decided = rounds, kept.complete(rounds), kept.decided()
    confirmation.store(study, doc)


@dataclasses.dataclass
class _Arms:
    """The confirmation's samples so far, by trial: measured values, failures, each process's wall
    time, compile seconds, compile cache state (None where the record had none) and what disturbed
    it (search/host.py: [] where nothing did, None where nothing was sampled), and the arms that
    left the race (round and why)."""

    numbers: list[int]
    samples: dict[int, list[float]]
    failures: dict[int, list[str]]
    walls: dict[int, list[float | None]]
    compiles: dict[int, list[float | None]]
    caches: dict[int, list[str | None]]
    hosts: dict[int, list[list[str] | None]]
    dropped: dict[int, Dropped] = dataclasses.field(default_factory=dict)
    # each arm's search trial figure: one more fresh process of it, for the race's noise
    searched: dict[int, float | None] = dataclasses.field(default_factory=dict)

    @classmethod
    def empty(cls, numbers: list[int]) -> _Arms:
        def each() -> dict[int, list[Any]]:
            return {n: [] for n in numbers}

        return cls(numbers, each(), each(), each(), each(), each(), each())

    def taken(self, n: int) -> int:
        """Confirmation runs of trial n so far, measured or failed."""
        return len(self.samples[n]) + len(self.failures[n])

    def alive(self) -> list[int]:
        """The arms still in the race."""
        return [n for n in self.numbers if n not in self.dropped]

    def done(self) -> int:
        """Complete rounds: those every arm still in the race has run."""
        return min(map(self.taken, self.alive()))

    def decided(self) -> bool:
        """One arm is left (every other separated from it), or those left are as fast as the
        leader within the tie band (race.settled)."""
        alive = self.alive()
        return len(alive) <= 1 or race.settled(self.samples, alive, self.searched)

    def complete(self, rounds: int) -> bool:
        """Every round asked measured, or the race decided and its winner measured often enough
        for an interval of its own (race.LEADER_SAMPLES, at most the rounds asked)."""
        if self.done() >= rounds:
            return True
        return self.decided() and self.taken(self.top()) >= min(rounds, race.LEADER_SAMPLES)

    def top(self) -> int:
        """The leader among the arms still in the race (the first of them before any sample)."""
        found = race.leader(self.samples, self.alive())
        return self.alive()[0] if found is None else found

    def next_round(
        self, arms: list[optuna.trial.FrozenTrial], rounds: int
    ) -> tuple[int, list[optuna.trial.FrozenTrial]] | None:
        """The next round's number and the arms it still measures (those an interruption left
        unmeasured in it); None once the race is complete."""
        if self.complete(rounds):
            return None
        if self.decided():  # only the leader is measured on, for its own interval
            top = self.top()
            return self.taken(top), [t for t in arms if t.number == top]
        r = self.done()
        return r, [t for t in arms if t.number in self.alive() and self.taken(t.number) == r]

    def add(self, n: int, record: TrialRecord) -> float | None:
        """One run's record kept; its tokens/s per GPU (None: it failed)."""
        self.walls[n].append(record.wall_s)
        self.compiles[n].append((record.phases_s or {}).get("compile"))
        self.caches[n].append(((record.applied or {}).get("compile_cache") or {}).get("state"))
        self.hosts[n].append(record.disturbed if record.host is not None else None)
        if record.status != Status.OK:
            self.failures[n].append(f"{record.status}: {reason_line(record.reason)}")
            return None
        value = record.tokens_per_gpu
        assert value is not None  # an ok record has its metrics (runner.record_of)
        self.samples[n].append(value)
        return value


def _kept(
    previous: Confirmation | None,
    numbers: list[int],
    arms: list[optuna.trial.FrozenTrial],
    rounds: int,
) -> _Arms | None:
    """What an interrupted confirmation of the same top kept (empty arms for a new one); None when
    it was complete."""
    every = [t.number for t in arms]
    kept = _Arms.empty(every)
    kept.searched = {t.number: value_of(t) for t in arms}
    if previous is None or previous.candidates != numbers:
        return kept
    for arm in previous.arms:
        n = arm.trial
        if n in kept.samples:
            kept.samples[n] = list(arm.samples)
            kept.failures[n] = list(arm.failures)
            runs = arm.runs
            kept.walls[n] = list(arm.walls_s or [None] * runs)
            kept.compiles[n] = list(arm.compile_s or [None] * runs)
            kept.caches[n] = list(arm.compile_cache or [None] * runs)
            kept.hosts[n] = list(arm.disturbed or [None] * runs)
            if arm.dropped:
                kept.dropped[n] = arm.dropped
    if kept.complete(rounds):
        return None
    return kept


def choose(
    candidates: list[optuna.trial.FrozenTrial],
    samples: dict[int, list[float]],
    failures: dict[int, list[str]],
    base_knobs: Knobs,
    rounds_done: int,
    dropped: dict[int, Dropped] | None = None,
    *,
    base: optuna.trial.FrozenTrial | None = None,
) -> Confirmation:
    """The confirmed choice (race.pick) among the candidates and the baseline's own arm (`base`,
    where it raced beside them; it changes no knob): your setting where it is within the noise of
    the fastest, else within that noise the cheapest program, then the fewest knobs changed from
    the baseline; and the runner-up with its cost. The baseline's arm is its `baseline`. The rounds
    asked are the rounds done, and no process's wall or compile is in it (_save adds them)."""
    stats = [_stat(t, samples, failures, base_knobs, dropped or {}) for t in candidates]
    own = _stat(base, samples, failures, base_knobs, dropped or {}) if base is not None else None
    if own is not None:
        own.changed_knobs = []  # the reference itself: no knob changed, whatever the derived say
    doc = Confirmation(
        candidates=[t.number for t in candidates],
        rounds_done=rounds_done,
        stats=stats,
        baseline=own,
        chosen=candidates[0].number,
        why="no confirmation sample succeeded; the search's best is kept",
        runner_up=None,
        rounds=rounds_done,
        complete=True,
        decided=False,
    )
    measured = [st for st in doc.arms if st.median is not None]
    if measured:
        chosen, top, close = race.pick(measured)
        doc.chosen, doc.why = chosen.trial, _why(chosen, top, close)
        doc.runner_up = race.runner_up(chosen, measured)
    return doc


def _stat(
    t: optuna.trial.FrozenTrial,
    samples: dict[int, list[float]],
    failures: dict[int, list[str]],
    base_knobs: Knobs,
    dropped: dict[int, Dropped],
) -> Arm:
    """One candidate's confirmation so far, with what its search trial measured of its cost."""
    s = samples[t.number]
    record = TrialRecord.of(t)
    # None where the samples bound nothing (intervals.unbounded), and why: never "0 to
    # 1,108,731,079,831"
    ci, ci_why = intervals.bounded_interval(s)
    return Arm(
        trial=t.number,
        knobs=record.knobs,
        changed_knobs=changed_knobs(record.knobs, base_knobs),
        samples=s,
        search_value=value_of(t),
        search_compile_s=(record.phases_s or {}).get("compile"),
        peak_mem_gib=record.metric(Metric.PEAK_MEM_GIB),
        failures=failures[t.number],
        median=statistics.median(s) if s else None,
        dropped=dropped.get(t.number),
        ci95=ci,
        ci95_why=ci_why,
        walls_s=None,
        compile_s=None,
        compile_cache=None,
        disturbed=None,
    )


def _why(chosen: Arm, top: Arm, close: list[Arm]) -> str:
    """Why the race chose what it chose, in one sentence."""
    if not chosen.changed_knobs:
        return f"{KEEP} ({_yours(chosen, top)})"
    assert top.median is not None  # measured arms (choose)
    if chosen is top:
        why = (
            f"highest confirmed median ({top.median:,.0f} tokens/s/GPU over "
            f"{len(top.samples)} processes)"
        )
        if len(close) > 1:
            why += (
                "; within noise of trial(s) "
                f"{', '.join(str(st.trial) for st in close if st is not top)}, "
                "and no cheaper program nor one that changes fewer knobs from the baseline"
            )
        return why
    cheaper = race.cost(chosen) < race.cost(top)
    reason = (
        f"a cheaper program ({_program(chosen)} against {_program(top)})"
        if cheaper
        else (
            f"changes fewer knobs from the baseline ({len(chosen.changed_knobs)} against "
            f"{len(top.changed_knobs)})"
        )
    )
    return (
        f"within the measured noise of trial {top.trial} (confirmed median "
        f"{top.median:,.0f}; the ratio's 95% interval reaches 1) and {reason}"
    )


def _yours(mine: Arm, top: Arm) -> str:
    """How your setting's confirmed median stands against the fastest's."""
    assert mine.median is not None and top.median is not None  # measured arms (choose)
    said = (
        f"your setting, trial {mine.trial}: confirmed median {mine.median:,.0f} "
        f"tokens/s/GPU over {len(mine.samples)} processes"
    )
    if top is mine:
        return f"{said}, the highest"
    gap = (top.median / mine.median - 1) * 100
    return (
        f"{said}; trial {top.trial}'s is {gap:.1f}% higher, within the measured noise (the "
        "ratio's 95% interval reaches 1)"
        if race.within_noise(mine, top)
        else f"{said}; trial {top.trial}'s is {gap:.1f}% higher, no interval to tell them apart"
    )


def _program(st: Arm) -> str:
    """'whole-model compile, 131 s' / 'per-block compile, 6 s' / 'no compile'."""
    knobs = st.knobs
    if not knobs.get("compile"):
        return "no compile"
    scope = "per-block" if knobs.get("compile_scope") == "block" else "whole-model"
    secs = st.search_compile_s
    return f"{scope} compile" + (f", {secs:,.0f} s" if secs is not None else "")
