"""task command's plug-in (tasks.TASKS): what the search asks of a task, answered by task command's
own package (autotune/command/task.py), which imports nothing of tasks/ (this package's registry
imports this module; the trial's side is command/trial.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from autotune.command import task
from autotune.tasks._train import TRAINING_EXPORTS, Training

if TYPE_CHECKING:
    from autotune.config import Config
    from autotune.config.command import CommandConfig, Scalar
    from autotune.documents.record import TrialRecord
    from autotune.protocol import TaskParams, TrialResult, TrialSpec


class Command(Training):
    name: ClassVar[str] = task.TASK
    needs_model: ClassVar[bool] = False
    imports_torch: ClassVar[bool] = False
    starts_at_neighbours: ClassVar[bool] = True
    columns: ClassVar[tuple[str, ...]] = ("padding",)
    # your command as measured first, then the training forms
    exports: ClassVar[tuple[str, ...]] = ("command", *TRAINING_EXPORTS)
    # a job compiles the whole model for each new shape: the search screens without it and measures
    # compile on the leaders (search/stages.py's finals)
    screen: ClassVar[dict[str, Any]] = {"compile": False}

    def check_config(self, cfg: Config) -> None:
        """The command's knob mappings against the catalogue and the space (task.check_config)."""
        task.check_config(cfg)

    def notes(self, cfg: Config) -> list[str]:
        """A secret written into the command's arguments (task.notes)."""
        return task.notes(cfg)

    def user_knobs(self, cfg: Config) -> dict[str, list[Scalar]]:
        """The command's own knobs (command.knobs with values), in their order."""
        return task.user_knobs(cfg)

    def trial_params(
        self,
        drift: dict[str, Any] | None,
        loss_check: dict[str, Any] | None,
        *,
        command: CommandConfig | None = None,
        timeout_s: float = 3600.0,
    ) -> TaskParams:
        """The command section, when the job is ended and the trial's limit (task.trial_params);
        a command has no drift or loss check of autotune's."""
        return task.trial_params(command, timeout_s)

    def prepare(self, spec: TrialSpec, run_dir: Path) -> tuple[TrialSpec, dict[str, str]]:
        """The command rendered with this trial's knob values, its secrets apart (task.prepare)."""
        return task.prepare(spec, run_dir)

    def metrics(self, record: TrialRecord, result: TrialResult, limits: dict[str, float]) -> None:
        """The figure from the job's measured window (task.metrics)."""
        task.metrics(record, result)
