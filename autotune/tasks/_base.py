"""The Task interface: what one kind of study is on the parent's side, the twin of the trial's
Workload."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from autotune.documents.record import TrialRecord
from autotune.protocol import PARAMS, Knobs, TaskParams, TrialResult, TrialSpec
from autotune.tasks._objective import TOKENS_PER_S, Objective

if TYPE_CHECKING:
    from autotune.config import Config, WorkloadConfig
    from autotune.config.command import CommandConfig, Scalar
    from autotune.config.space import SpaceConfig


class Decision(Protocol):
    """What check's decide returns (check.stats.Decision), as a task's gate reads it: a protocol,
    since the tasks import nothing of autotune above them."""

    @property
    def status(self) -> str: ...  # pass | faster | regression | inconclusive
    @property
    def ratio(self) -> float: ...
    @property
    def ci(self) -> tuple[float, float]: ...
    @property
    def reason(self) -> str: ...
    @property
    def settle(self) -> str: ...


Decide = Callable[[list[float], list[float], float], Decision]


# The sections a Task reads are the YAML schema's (config.Config, config.WorkloadConfig,
# config.space.SpaceConfig): config/ is the schema only and imports no task, so the tasks sit above
# it (space, runner and the search loop import the tasks).
class Task(ABC):
    """One kind of study (workload.task). The parent never branches on the task's name: config
    validation, the space's batch rule and derived knobs, the size knob of the predicted bounds, the
    trial's parameters, its metrics, the memory estimate, the precision guard, best.yaml's notes,
    the report's columns and the check's extra gate ask the study's Task. A new task is this
    plug-in, its Workload (workloads/) and its config fields; the registry is tasks.TASKS."""

    name: ClassVar[str]
    # the workload fields only this task reads (another task's config naming them is an error)
    fields: ClassVar[tuple[str, ...]] = ()
    # the knob its batch rule sizes (sequences per pass), and every knob that rule ranges over: one
    # trial speaks for another whose knobs outside these are the same (study/predict.py's bounds)
    size_knob: ClassVar[str]
    batch_knobs: ClassVar[tuple[str, ...]]
    # study.objective values it takes; whether study.limits (latency limits) applies
    objectives: ClassVar[tuple[Objective, ...]] = (TOKENS_PER_S,)
    latency_limits: ClassVar[bool] = False
    # the memory estimate (autotune/memory) and its OOM prediction; the precision loss check
    # (search/loss_guard.py)
    estimates_memory: ClassVar[bool] = False
    loss_check: ClassVar[bool] = False
    # the report's efficiency columns (report._table's column titles)
    columns: ClassVar[tuple[str, ...]] = ()
    # the YAML's model section: the model autotune builds (task command's job builds its own)
    needs_model: ClassVar[bool] = True
    # False: its trial process never imports torch (the workload's imports_torch), so none is
    # started ahead for it by default (a process started ahead is one that imported torch already)
    imports_torch: ClassVar[bool] = True
    # the staged search's cheap values of this task's own (search/stages.py), beside the catalogue's
    screen: ClassVar[dict[str, Any]] = {}
    # autotune export's forms of the winner (export.FORMS' names); json reads any task's
    exports: ClassVar[tuple[str, ...]] = ("json",)
    # study.start auto: the search starts from the baseline's neighbours (search/neighbours.py),
    # where the baseline is the user's own setting, the one to beat (task command's job)
    starts_at_neighbours: ClassVar[bool] = False

    def user_knobs(self, cfg: Config) -> dict[str, list[Scalar]]:
        """Knobs the YAML declares itself beside the catalogue's (task command's), name ->
        values."""
        return {}

    def check_workload(self, wl: WorkloadConfig) -> None:
        """The workload section's rules of this task, beyond its fields' own (ValueError naming the
        YAML path)."""

    def check_config(self, cfg: Config) -> None:
        """The task's rules across sections (ValueError naming the YAML path); the objective and
        limits it takes are checked by tasks.check_config first."""

    @abstractmethod
    def batch_rule(
        self,
        space: SpaceConfig,
        wl: WorkloadConfig,
        values: dict[str, list[Any]],
        notes: dict[str, str],
    ) -> None:
        """resolve_space's batch step: check or derive the batch knobs' values in place
        (ValueError)."""

    def derived_knobs(
        self, knobs: Knobs, global_batch_size: int | None, world_size: int
    ) -> dict[str, Any]:
        """The knobs a point's values decide, filled in by space.ResolvedSpace.knobs: batch_rule's
        part for one point (train: grad_accum_steps); none by default."""
        return {}

    def trial_params(
        self,
        drift: dict[str, Any] | None,
        loss_check: dict[str, Any] | None,
        *,
        command: CommandConfig | None = None,
        timeout_s: float = 3600.0,
    ) -> TaskParams:
        """The trial spec's parameters of this task (TrialSpec.params: protocol.PARAMS), from the
        study's sections it reads: study.drift and study.loss_check (as dumped), the command section
        (task command), the trial's hard limit in seconds."""
        return PARAMS[self.name]()

    def notes(self, cfg: Config) -> list[str]:
        """What `search` and `validate` say of the config before anything runs (one line each)."""
        return []

    def prepare(self, spec: TrialSpec, run_dir: Path) -> tuple[TrialSpec, dict[str, str]]:
        """Before a trial starts (its spec, its folder): the spec as the trial gets it (a new one:
        the parent's is left as it was), and environment variables for the trial process alone
        (never written to a file)."""
        return spec, {}

    def metrics(self, record: TrialRecord, result: TrialResult, limits: dict[str, float]) -> None:
        """Task-specific metrics into a measured trial's record (record.TrialRecord; its status may
        become over_limit)."""

    def check_gate(
        self,
        best: dict[str, Any],
        details: list[dict[str, Any]],
        tolerance_pct: float,
        decide: Decide,
    ) -> dict[str, Any] | None:
        """A second decision of `autotune check` beside tokens/s (generate: time per output token),
        or None."""
        return None
