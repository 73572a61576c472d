"""The confirmation: one typed, versioned document of the race search/confirm.py ran (its arms'
statistics, rounds and choice), stored as the study's user attribute `confirmation`.

`store` is its one writer and `of` its one reader. What `store` writes is the layout the search
has written since 2026-12-07, key for key in the order the fields are declared: a study written by
this release and one written by the previous read alike. `of` reads every layout earlier releases
stored, each key taken at the default its readers took where it was not stored yet:

- 2026-11-30: candidates, rounds_done, stats (trial, knobs, changed_knobs, samples, search_value,
  failures, median, ci95), chosen, why.
- 2026-12-01: an arm's ci95_why (None before).
- 2026-12-05: rounds (before: the rounds done), complete (before: every round asked measured), the
  baseline's own arm (trial, knobs, samples, failures, median: no knob changed), an arm's walls_s
  and compile_s (None before); then an arm's dropped, compile_cache, search_compile_s and
  peak_mem_gib, the runner_up and decided (False before).
- 2026-12-07: an arm's disturbed (None before).

Layouts carry no version key (schema 1, today's); a stored `schema` newer than SCHEMA_VERSION is
refused (ConfirmationError), as documents/record.py refuses a trial record of a newer schema.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeGuard

from autotune import intervals
from autotune.protocol import Knobs

if TYPE_CHECKING:
    import optuna

ATTR = "confirmation"  # the study's user attribute
# 1: every layout stored so far (no `schema` key). A later layout writes `schema`.
SCHEMA_VERSION = 1
Json = dict[str, Any]


class ConfirmationError(ValueError):
    """A stored confirmation this release cannot read (of a newer schema)."""


@dataclass(frozen=True)
class Dropped:
    """When an arm left the race, and why (search/race.py drops)."""

    round: int  # the round it would have run next (1: after the first)
    why: str

    def as_dict(self) -> Json:
        return {"round": self.round, "why": self.why}


@dataclass(frozen=True)
class RunnerUp:
    """The best other confirmed arm beside the chosen (race.runner_up)."""

    trial: int
    gap_pct: float  # its median over the chosen's, less 1, in percent (negative: slower)
    within_noise: bool  # its ratio to the chosen has an interval that reaches 1
    compile_s: float | None  # its search trial's compile seconds
    chosen_compile_s: float | None  # the chosen's search trial's
    peak_mem_gib: float | None  # its search trial's
    dropped: Dropped | None  # it left the race early

    def as_dict(self) -> Json:
        return {
            **{f.name: getattr(self, f.name) for f in fields(self) if f.name != "dropped"},
            "dropped": self.dropped.as_dict() if self.dropped else None,
        }


@dataclass
class Arm:
    """One arm's statistics: a candidate, or the baseline's own arm (which changes no knob). The
    per-process lists are None where the layout stored none (an earlier release)."""

    trial: int
    knobs: Knobs
    changed_knobs: list[str]  # set differently from the baseline (confirm.changed_knobs)
    samples: list[float]  # tokens/s per GPU, one a fresh process that succeeded
    search_value: float | None  # its search trial's figure (None: a baseline arm stored without)
    search_compile_s: float | None  # its search trial's compile seconds
    peak_mem_gib: float | None  # its search trial's
    failures: list[str]  # "status: reason", one a process that failed
    median: float | None  # of its samples (None: no sample succeeded)
    dropped: Dropped | None  # it left the race early
    ci95: list[float] | None  # the median's 95% interval (None: it bounds nothing)
    ci95_why: str | None  # why there is no interval
    walls_s: list[float | None] | None  # each process's wall time
    compile_s: list[float | None] | None  # each process's compile seconds
    compile_cache: list[str | None] | None  # what the compile cache served each process
    # what disturbed each process (search/host.py: [] where nothing did, None: unsampled)
    disturbed: list[list[str] | None] | None

    @property
    def runs(self) -> int:
        """Its processes so far, measured or failed."""
        return len(self.samples) + len(self.failures)

    def interval(self) -> tuple[list[float] | None, str | None]:
        """The median's 95% interval recomputed from its samples, or None and why (what the report
        shows: a confirmation stored before 2026-12-01 kept intervals that bounded nothing)."""
        return intervals.bounded_interval(self.samples)

    def to_json(self) -> Json:
        """The arm as the study stores it."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["dropped"] = self.dropped.as_dict() if self.dropped else None
        return out

    @classmethod
    def from_json(cls, st: Json, *, baseline: bool = False) -> Arm:
        """An arm of any stored layout (module docstring), or of the report's JSON form."""
        samples = list(st["samples"])
        dropped = st.get("dropped")
        return cls(
            trial=st["trial"],
            knobs=dict(st.get("knobs") or {}),
            changed_knobs=[] if baseline else list(st.get("changed_knobs") or []),
            samples=samples,
            search_value=st.get("search_value"),
            search_compile_s=st.get("search_compile_s"),
            peak_mem_gib=st.get("peak_mem_gib"),
            failures=list(st.get("failures") or []),
            median=st.get("median", statistics.median(samples) if samples else None),
            dropped=Dropped(dropped["round"], dropped["why"]) if dropped else None,
            ci95=st.get("ci95"),
            ci95_why=st.get("ci95_why"),
            walls_s=_copy(st.get("walls_s")),
            compile_s=_copy(st.get("compile_s")),
            compile_cache=_copy(st.get("compile_cache")),
            disturbed=_copy(st.get("disturbed")),
        )

    def report_dict(self, *, candidate: bool) -> Json:
        """The arm in the report's JSON form: its interval recomputed from its samples (an earlier
        release stored intervals that bounded nothing)."""
        ci, why = self.interval()
        head: Json = (
            {"trial": self.trial, "median": self.median, "samples": self.samples}
            | {"search_value": self.search_value, "failures": self.failures}
            if candidate
            else {"trial": self.trial, "samples": self.samples, "failures": self.failures}
            | {"median": self.median}
        )
        return {
            **head,
            "ci95": ci,
            "ci95_why": why,
            "walls_s": self.walls_s,
            "compile_s": self.compile_s,
            "compile_cache": self.compile_cache,
            "dropped": self.dropped.as_dict() if self.dropped else None,
        }


@dataclass(frozen=True)
class Outcome:
    """What best.yaml says of a confirmation (search/best.py): the arms it raced, each with
    whether it is the baseline's own, the runner-up, and the baseline's confirmed samples."""

    arms: list[tuple[Arm, bool]]  # the candidates, then the baseline's own arm (True)
    runner_up: RunnerUp | None
    baseline_samples: list[float]  # its own arm's, or its candidate's; [] where not re-measured


@dataclass
class Confirmation:
    """The confirmation's race: the top configurations it raced, their arms and the baseline's
    own, the rounds, and what it chose and why (search/confirm.py choose)."""

    candidates: list[int]  # the top trials raced, best first
    rounds_done: int  # complete rounds: those every arm still in the race ran
    stats: list[Arm]  # the candidates' arms, in the candidates' order
    baseline: Arm | None  # the baseline's own arm, where it raced beside the candidates
    chosen: int  # the trial chosen (the baseline's where the race kept your setting)
    why: str  # why, in one sentence
    runner_up: RunnerUp | None  # the best other confirmed arm (None: none, or nothing measured)
    rounds: int  # the rounds asked
    complete: bool  # ended by its rule (decided, or every round asked measured), not cut
    decided: bool  # one arm left, or those left tied within the band (race.settled)
    schema: int = field(default=SCHEMA_VERSION, compare=False)

    @property
    def arms(self) -> list[Arm]:
        """Every arm: the candidates, then the baseline's own where it raced."""
        return [*self.stats, *([self.baseline] if self.baseline else [])]

    def arm(self, trial: int | None) -> Arm | None:
        """The arm of that trial (a candidate, or the baseline's own); None where it did not
        race."""
        return next((a for a in self.arms if a.trial == trial), None)

    @property
    def chosen_arm(self) -> Arm:
        """The chosen's arm (the choice is one of the arms: confirm.choose)."""
        found = self.arm(self.chosen)
        assert found is not None, f"trial {self.chosen} chosen but not raced"
        return found

    @property
    def measured(self) -> bool:
        """Whether any arm has a sample (the choice rests on samples, and a runner-up was asked)."""
        return any(a.median is not None for a in self.arms)

    def samples_of(self, trial: int | None) -> list[float]:
        """That trial's confirmed samples ([] where it did not race)."""
        found = self.arm(trial)
        return list(found.samples) if found else []

    def outcome(self, baseline: int | None) -> Outcome:
        """What best.yaml says of it; baseline: the baseline's trial (None: none ran)."""
        return Outcome(
            arms=[(a, a is self.baseline) for a in self.arms],
            runner_up=self.runner_up,
            baseline_samples=self.samples_of(baseline) if baseline is not None else [],
        )

    def to_json(self) -> Json:
        """The study's stored form: the dict the search wrote before the document, key for key."""
        out: Json = {
            "candidates": self.candidates,
            "rounds_done": self.rounds_done,
            "stats": [a.to_json() for a in self.stats],
        }
        if self.baseline is not None:
            out["baseline"] = self.baseline.to_json()
        out.update(chosen=self.chosen, why=self.why)
        if self.measured:  # the choice without a sample asked for no runner-up
            out["runner_up"] = self.runner_up.as_dict() if self.runner_up else None
        out.update(rounds=self.rounds, complete=self.complete, decided=self.decided)
        return out

    @classmethod
    def from_json(cls, conf: Json) -> Confirmation:
        """A stored confirmation of any layout (module docstring), or the report's JSON form."""
        _check_schema(conf.get("schema", 1))
        stats = [Arm.from_json(st) for st in conf["stats"]]
        base = conf.get("baseline")
        rounds_done = int(conf["rounds_done"])
        asked = conf.get("rounds")
        rounds = asked if isinstance(asked, int) else rounds_done
        complete = conf.get("complete")
        up = conf.get("runner_up")
        return cls(
            candidates=list(conf.get("candidates", [a.trial for a in stats])),
            rounds_done=rounds_done,
            stats=stats,
            baseline=Arm.from_json(base, baseline=True) if _sampled(base) else None,
            chosen=conf["chosen"],
            why=conf["why"],
            runner_up=_runner_up(up) if isinstance(up, dict) else None,
            rounds=rounds,
            complete=complete if isinstance(complete, bool) else rounds_done >= rounds,
            decided=bool(conf.get("decided")),
        )

    def report_dict(self) -> Json:
        """The report's JSON form (`autotune report --format json`): the race's choice, rounds and
        each arm's samples, intervals and processes."""
        return {
            "chosen": self.chosen,
            "why": self.why,
            "rounds_done": self.rounds_done,
            "rounds": self.rounds,
            "complete": self.complete,
            "decided": self.decided,
            "stats": [a.report_dict(candidate=True) for a in self.stats],
            "baseline": self.baseline.report_dict(candidate=False) if self.baseline else None,
            "runner_up": self.runner_up.as_dict() if self.runner_up else None,
        }


def _copy(values: list[Any] | None) -> list[Any] | None:
    return list(values) if values is not None else None


def _check_schema(schema: object) -> None:
    if not isinstance(schema, int) or schema > SCHEMA_VERSION:
        raise ConfirmationError(
            f"the study's confirmation has schema {schema!r}, newer than this autotune reads "
            f"(up to {SCHEMA_VERSION}); upgrade autotune"
        )


def _sampled(st: object) -> TypeGuard[Json]:
    return isinstance(st, dict) and isinstance(st.get("samples"), list) and "trial" in st


def _runner_up(up: Json) -> RunnerUp:
    dropped = up.get("dropped")
    return RunnerUp(
        trial=up["trial"],
        gap_pct=up["gap_pct"],
        within_noise=up["within_noise"],
        compile_s=up.get("compile_s"),
        chosen_compile_s=up.get("chosen_compile_s"),
        peak_mem_gib=up.get("peak_mem_gib"),
        dropped=Dropped(dropped["round"], dropped["why"]) if dropped else None,
    )


# the keys every arm of every layout stored (a confirmation without them is damaged: none)
_ARM_KEYS = ("trial", "median", "samples", "search_value", "failures")


def readable(conf: object) -> TypeGuard[Json]:
    """Whether a stored value is a confirmation this release reads (not damaged)."""
    return (
        isinstance(conf, dict)
        and isinstance(conf.get("candidates"), list)
        and isinstance(conf.get("stats"), list)
        and all(isinstance(st, dict) and set(_ARM_KEYS) <= set(st) for st in conf["stats"])
        and all(k in conf for k in ("rounds_done", "chosen", "why"))
    )


def of(study: optuna.Study) -> Confirmation | None:
    """The study's stored confirmation; None where it has none, or a damaged one. Raises
    ConfirmationError for one of a newer schema."""
    conf = study.user_attrs.get(ATTR)
    if isinstance(conf, dict) and "schema" in conf:
        _check_schema(conf["schema"])  # a newer layout is refused, never taken for a damaged one
    return Confirmation.from_json(conf) if readable(conf) else None


def store(study: optuna.Study, conf: Confirmation) -> None:
    """The confirmation stored in the study (the one writer of its `confirmation`)."""
    study.set_user_attr(ATTR, conf.to_json())
