"""The parent's task plug-ins, one per workload.task: `TASKS[name]` (see Task), and what each
study.objective optimises: `OBJECTIVES[name]` (see Objective). The trial's side is
workloads.WORKLOADS; knobs.TASKS names both (a test holds the three registries equal)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.tasks._base import Task
from autotune.tasks._command import Command
from autotune.tasks._generate import Generate
from autotune.tasks._objective import OBJECTIVES, Objective, ObjectiveName
from autotune.tasks._train import Train

if TYPE_CHECKING:
    from autotune.config import Config, WorkloadConfig

TASKS: dict[str, Task] = {t.name: t for t in (Train(), Generate(), Command())}

__all__ = [
    "OBJECTIVES",
    "TASKS",
    "Objective",
    "ObjectiveName",
    "Task",
    "check_config",
    "check_workload",
    "objective",
    "task",
]


def task(name: str) -> Task:
    """The plug-in of workload.task `name`."""
    return TASKS[name]


def objective(name: str) -> Objective:
    """What study.objective `name` optimises."""
    return OBJECTIVES[name]


def check_workload(wl: WorkloadConfig) -> None:
    """The workload section (config.WorkloadConfig) against its task: another task's fields are
    refused, then the task's own rules (ValueError naming the YAML path)."""
    mine = TASKS[wl.task]
    for other in TASKS.values():
        given = [
            f for f in other.fields if f not in mine.fields and getattr(wl, f, None) is not None
        ]
        if given:
            raise ValueError(
                f"workload.{given[0]}: only for task {other.name} (task is {mine.name}); remove it"
            )
    mine.check_workload(wl)


def check_config(cfg: Config) -> None:
    """The config (config.Config) against its task, the one place the sections are checked
    together (resolve_space runs it first; config/ is schema only): the workload's fields
    (check_workload), the objective and latency limits it takes, then the task's own rules across
    sections (ValueError naming the YAML path)."""
    check_workload(cfg.workload)
    mine, wanted = TASKS[cfg.workload.task], OBJECTIVES[cfg.study.objective]
    if wanted not in mine.objectives:
        takers = ", ".join(t.name for t in TASKS.values() if wanted in t.objectives)
        raise ValueError(
            f"study.objective: {wanted.name} ({wanted.description}) is for task {takers} (task is "
            f"{mine.name}); use {' or '.join(o.name for o in mine.objectives)}"
        )
    _check_sections(cfg, mine)
    if cfg.study.limits is not None and not mine.latency_limits:
        takers = ", ".join(t.name for t in TASKS.values() if t.latency_limits)
        raise ValueError(
            f"study.limits: latency limits are for task {takers} (task is {mine.name}); remove them"
        )
    mine.check_config(cfg)


def _check_sections(cfg: Config, mine: Task) -> None:
    """The model section for the tasks that build a model, the command section for task command
    only."""
    if mine.needs_model and cfg.model is None:
        raise ValueError(f"model: required with task {mine.name} (family, hf_config or entrypoint)")
    if not mine.needs_model and cfg.model is not None:
        raise ValueError(
            f"model: not used with task {mine.name} (your command builds its own model); remove it"
        )
    if cfg.command is not None and mine.name != "command":
        raise ValueError(
            f"command: only for task command (task is {mine.name}); remove it or set "
            "workload.task: command"
        )
