"""The workload interface every kind of trial implements: build (untimed), run the measured steps,
report the work.

A workload gets the trial's spec, its rank group (None for one process) and the fault switch;
`trial.py` drives it and turns what it measured into the TrialResult. Standard library only at
import.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, Protocol, cast

from autotune.protocol import TrialSpec
from autotune.workloads.faults import Fault
from autotune.workloads.ranks import Ranks
from autotune.workloads.timing import Timing


class InvalidConfig(Exception):
    """This combination of knobs cannot run here (the reason says why). `knobs` names the knobs
    whose values cause it: the search learns the rule (those values cannot run here) and launches no
    other trial that has them. No knobs: the cause is not a knob's (the trial's values teach
    nothing)."""

    def __init__(self, message: str, *knobs: str) -> None:
        super().__init__(message)
        self.knobs = knobs


class NonFiniteLoss(Exception):
    """The loss became NaN or inf."""


class Failed(Exception):
    """The trial ended as `status` (oom, crash, timeout, ...) for the reason given: a workload that
    sees its failure itself (task command: the user's job and its output) says so instead of raising
    its cause."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Work:
    """What one measured step does, for tokens/s and MFU (None where it does not apply: MFU is then
    n/a)."""

    tokens_per_step: int | None = None
    n_params: int | None = None
    flop_params: int | None = None  # N of the 6N + 12 L d T training FLOPs per token
    mfu_dims: dict[str, int] | None = None  # n_layers, d_model, seq_len of the attention term
    # counted by torch.utils.flop_counter (replaces the formula)
    flops_per_token: float | None = None


@dataclass
class Measured:
    """What `run` measured: the timed steps (None when the workload reports its own samples in
    `output`)."""

    timing: Timing | None
    losses: list[float] = field(default_factory=list)
    output: dict[str, Any] = field(default_factory=dict)
    # seconds of the checks run after the measured steps (train: the loss check), the record's
    # `check` phase
    check_s: float = 0.0
    # why the workload itself stopped before all its steps (task command: its limit, recompiling),
    # the reason of a trial whose timing.stopped_early; '' where the search's pruner stopped it
    stopped: str = ""


class Progress(Protocol):
    """What the trial passes a workload the search may prune (trial.Progress): the measured step
    times so far, and the tokens each stands for where the workload knows them only now (task
    command); True asks it to stop measuring."""

    def __call__(self, steps: list[float], tokens_per_step: int | None = None, /) -> bool: ...


class Workload(ABC):
    """One kind of trial. `build` does everything untimed; `run` times the steps; `work` says what a
    step did."""

    task: ClassVar[str]
    # False: the workload runs no torch on the device itself (task command: the user's job does), so
    # the trial creates no CUDA context beside it
    touches_device: ClassVar[bool] = True
    # False: the trial process never imports torch (task command: the job imports its own); it is
    # passed None, and the trial's torch and CUDA versions are read from the installed files
    imports_torch: ClassVar[bool] = True

    def __init__(
        self, torch: ModuleType | None, spec: TrialSpec, ranks: Ranks | None, fault: Fault
    ) -> None:
        """torch: None only for a workload that never imports it (imports_torch False), and such a
        workload never reads self.torch."""
        self.torch = cast(ModuleType, torch)
        self.spec, self.ranks, self.fault = spec, ranks, fault
        # what the trial really did for each knob (the record's `applied`)
        self.applied: dict[str, Any] = {}
        # set by the trial when the search may prune it: pass to time_steps(progress=...)
        self.progress: Progress | None = None
        self.run_dir: Path | None = None  # the trial's folder (set by the trial before build)

    @abstractmethod
    def build(self) -> None:
        """Model, data, optimizer and wrappers, on the device; nothing here is timed."""

    @abstractmethod
    def run(self) -> Measured:
        """Warm-up, then the measured steps (through timing.time_steps)."""

    def work(self) -> Work:
        """Tokens and FLOPs of one measured step."""
        return Work()
