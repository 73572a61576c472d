"""What a search reports while it runs: the interface the CLI's live view (views.LiveProgress)
implements."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

from autotune.documents.record import TrialRecord
from autotune.protocol import Knobs
from autotune.study.history import History


class SearchStart(TypedDict):
    """What a search tells its observer as it begins (Observer.started)."""

    name: str  # the study's
    device: str  # cuda or cpu
    budget: int  # the trials it may measure (history.MEASURED counts them)
    done: int  # those already measured (a resumed study's)
    space_size: int  # points of the resolved space
    searched: list[str]  # the knobs of two or more values
    sampler: str  # study.sampler
    timeout_s: float  # the search's time limit
    storage: str  # the study's URL, credentials masked
    baseline: Knobs  # the baseline trial's searched values
    imported: int  # trials a warm start copied in (counted in no budget)


class Observer:
    """Called by the search as it goes; every method is a no-op here."""

    def started(self, info: SearchStart) -> None: ...

    def trial_started(
        self, number: int, index: int, knobs: Knobs, beyond: Knobs | None = None
    ) -> None:
        """beyond: the values this trial runs past the user's list (search/edges.py)."""

    def poll(self) -> None: ...

    def trial_finished(self, record: TrialRecord, history: History) -> None: ...

    def device_busy(self, unit: str) -> None: ...

    def confirm_started(self, candidates: list[int], rounds: int, kept: int = 0) -> None: ...

    def confirm_sample(
        self, number: int, round_: int, value: float | None, status: str
    ) -> None: ...

    def confirm_disturbed(self, number: int, round_: int, disturbed: list[str]) -> None:
        """What disturbed that confirmation process, one phrase each (search/host.py): told after
        its sample, only where something did."""

    def confirm_dropped(self, number: int, why: str) -> None: ...


class Progress(Observer):
    """The Python API's progress callback: `callback(record)` with each finished trial's
    TrialRecord."""

    def __init__(self, callback: Callable[[TrialRecord], Any]) -> None:
        self.callback = callback

    def trial_finished(self, record: TrialRecord, history: History) -> None:
        self.callback(record)
