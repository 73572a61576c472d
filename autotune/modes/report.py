"""measure report (the default): the job reports its steps itself (autotune.reporting, or the
AutotuneCallback of autotune.callbacks.hf / .lightning added by hand) into steps.jsonl."""

from __future__ import annotations

from autotune.modes._base import Mode, no_log_pattern

MODE = Mode(
    name="report",
    help=(
        "the job reports its steps (autotune.reporting, or the HF Trainer / Lightning callbacks "
        "in autotune.callbacks)"
    ),
    rules=no_log_pattern,
    reads="report",
    stop="file",
)
