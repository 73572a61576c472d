"""The parent's task plug-ins, one per workload.task: `TASKS[name]` (see Task). The trial's side is
workloads.WORKLOADS; knobs.TASKS names both (a test holds the three registries equal)."""

from __future__ import annotations

from typing import Any

from autotune.tasks._base import Task
from autotune.tasks._command import Command
from autotune.tasks._generate import Generate
from autotune.tasks._train import Train

TASKS: dict[str, Task] = {t.name: t for t in (Train(), Generate(), Command())}

__all__ = ["TASKS", "Task", "check_config", "check_workload", "task"]
# What each study.objective optimises, for the message naming the tasks that take it
OBJECTIVES = {
    "tokens_per_s": "tokens/s per GPU",
    "pareto": "tokens/s against p99 time per output token",
}


def task(name: str) -> Task:
    """The plug-in of workload.task `name`."""
    return TASKS[name]


def check_workload(wl: Any) -> None:
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


def check_config(cfg: Any) -> None:
    """The config (config.Config) against its task: the objective and latency limits it takes, then
    the task's own rules across sections (ValueError naming the YAML path)."""
    mine, objective = TASKS[cfg.workload.task], cfg.study.objective
    if objective not in mine.objectives:
        takers = ", ".join(t.name for t in TASKS.values() if objective in t.objectives)
        raise ValueError(
            f"study.objective: {objective} ({OBJECTIVES.get(objective, objective)}) is for task "
            f"{takers} (task is {mine.name}); use {' or '.join(mine.objectives)}"
        )
    _check_sections(cfg, mine)
    if cfg.study.limits is not None and not mine.latency_limits:
        takers = ", ".join(t.name for t in TASKS.values() if t.latency_limits)
        raise ValueError(
            f"study.limits: latency limits are for task {takers} (task is {mine.name}); remove them"
        )
    mine.check_config(cfg)


def _check_sections(cfg: Any, mine: Task) -> None:
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
