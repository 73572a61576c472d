"""What a search reports while it runs: the interface the CLI's live view (views.LiveProgress) implements."""

from __future__ import annotations

from typing import Any

from autotune.record import TrialRecord
from autotune.search.history import History


class Observer:
    """Called by the search as it goes; every method is a no-op here."""

    def started(self, info: dict[str, Any]) -> None: ...

    def trial_started(self, number: int, index: int, knobs: dict[str, Any]) -> None: ...

    def poll(self) -> None: ...

    def trial_finished(self, record: TrialRecord, history: History) -> None: ...

    def device_busy(self, unit: str) -> None: ...

    def confirm_started(self, candidates: list[int], rounds: int, kept: int = 0) -> None: ...

    def confirm_sample(self, number: int, round_: int, value: float | None, status: str) -> None: ...
