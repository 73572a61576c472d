"""What a measure mode of task command declares (Mode), and the rule the modes share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

# Where the trial reads the job's steps: "report", the steps.jsonl the job writes
# (autotune.reporting, the callbacks: command/report.py); "output", lines of its output
# (command.log_pattern: command/log.py). A job's own lines carry no clock of the job's.
Reads = Literal["report", "output"]
# How the job is asked to stop: "file", its stop file touched (autotune.reporting and the callbacks
# watch it); "signal", SIGTERM to its process group.
Stop = Literal["file", "signal"]
# a knob reaching the job as a variable its framework reads without a mapping -> (the variable,
# each value's text: None for the value as it is). Optional, not `| None`: an alias is evaluated at
# import, in the job's own Python too (the hook reads the modes there)
KnobEnv = Mapping[str, tuple[str, Optional[Mapping[str, str]]]]


@dataclass(frozen=True)
class Trainer:
    """The framework whose Trainer the hook adds autotune's callback to (command/hook/launch.py),
    in the job's processes: each name is imported only once the job has imported the framework."""

    module: str  # the module defining its Trainer
    callback: str  # the module of autotune's AutotuneCallback for it
    trains: str  # its Trainer's method that trains (launch.witness wraps it)
    named: str  # how a reason names the Trainer ("an HF Trainer")
    add: Callable[[Any, Any], None]  # (the Trainer, the callback class): the callback added once
    model: Callable[[Any, dict[str, Any]], Any]  # (the Trainer, its training's kwargs): its model


@dataclass(frozen=True)
class Mode:
    """One value of command.measure: everything that differs with how a job is measured. Standard
    library only, its fields plain: the schema (config/command.py), the parent's rendering, export,
    the trial process and the hook in the job's own processes all read it."""

    name: str
    # what the mode is, in a clause: command.measure's description joins them (modes.described)
    help: str
    # the command section's rules for this mode, on its fields as plain values (config/command.py
    # calls it from the section's validator): ValueError with the message shown
    rules: Callable[[Mapping[str, Any]], None]
    reads: Reads  # the trial side: where it reads the job's steps
    stop: Stop  # the trial side: how it asks the job to stop
    # the environment: the Trainer whose callback the hook adds (None: no hook, nothing added)
    trainer: Trainer | None = None
    # the environment: autotune's knobs that reach the job without a mapping (PL_TRAINER_*)
    knob_env: KnobEnv = field(default_factory=dict)
    # the config's rule on knob_env: ValueError for a searched value the variable has no text for
    knob_values: Callable[[str, list[Any]], None] | None = None
    # export: the forms that fit a job measured so, beside its command and json (none: the HF
    # form where its program builds an HF Trainer, export/_hf_command.builds_trainer)
    exports: tuple[str, ...] = ()


def no_log_pattern(section: Mapping[str, Any]) -> None:
    """A mode that reads no output lines takes no log_pattern, nor the tokens of its lines."""
    if section.get("log_pattern"):
        raise ValueError(
            "command.log_pattern: only with measure log; remove it or set measure: log"
        )
    if section.get("tokens_per_step") is not None:
        raise ValueError(
            "command.tokens_per_step: only with measure log (the tokens of a log line that "
            "counts none); the job reports its steps' tokens itself here: remove it"
        )
