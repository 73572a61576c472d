"""What a study optimises (study.objective): the values Optuna is told of each completed trial,
formed from its record's metrics, and which way each is better. Declared once; each task names
those it takes (Task.objectives)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from autotune.config.study import ObjectiveName as ObjectiveName  # the schema's names of OBJECTIVES
from autotune.documents.record import Metric, TrialRecord

Direction = Literal["maximize", "minimize"]


@dataclass(frozen=True)
class Value:
    """One value Optuna is told of a completed trial."""

    metric: str  # the record's metric it is (record.Metric)
    direction: Direction
    label: str  # how a table or a plot names it
    digits: int  # the decimals best.yaml's front keeps of it


@dataclass(frozen=True)
class Objective:
    """What a study optimises: its values in Optuna's order, the first always tokens/s per GPU
    (history.value_of reads a trial's speed there, whatever the objective)."""

    name: str
    description: str  # what it optimises, in the message of a task that does not take it
    values: tuple[Value, ...]

    def __post_init__(self) -> None:
        if not self.values or self.values[0].metric != Metric.TOKENS_PER_GPU:
            raise ValueError(
                f"objective {self.name}: its first value must be {Metric.TOKENS_PER_GPU} but got "
                f"{[v.metric for v in self.values]}"
            )

    @property
    def directions(self) -> list[Direction]:
        """Optuna's directions: the study is created with them (search/storage.py)."""
        return [v.direction for v in self.values]

    @property
    def single(self) -> bool:
        """One value, tokens/s per GPU: Optuna's pruners take only such trials, and a recovered
        trial's value is its tokens/s (search/recover.py)."""
        return len(self.values) == 1

    def of(self, record: TrialRecord) -> float | tuple[float, ...]:
        """What Optuna is told of a completed trial: its one value, or its values as a tuple."""
        values: tuple[float, ...] = tuple(record.metric(v.metric) for v in self.values)
        return values[0] if self.single else values

    def named(self, values: Sequence[float]) -> dict[str, float]:
        """A trial's values by metric, rounded as best.yaml keeps them (its front)."""
        return {v.metric: round(x, v.digits) for v, x in zip(self.values, values)}


_SPEED = Value(Metric.TOKENS_PER_GPU, "maximize", "tokens/s per GPU", 1)
TOKENS_PER_S = Objective("tokens_per_s", "tokens/s per GPU", (_SPEED,))
# Optuna's multi-objective study: speed against the slowest decode steps
PARETO = Objective(
    "pareto",
    "tokens/s against p99 time per output token",
    (_SPEED, Value(Metric.TPOT_P99_MS, "minimize", "p99 time per output token (ms)", 3)),
)
OBJECTIVES: dict[str, Objective] = {o.name: o for o in (TOKENS_PER_S, PARETO)}
