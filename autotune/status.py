"""A trial's status: how a launched trial ended, or why the study recorded it without a launch.

Shared by both sides of the process boundary (standard library only). A `Status` is a `str`, so a
record stored before the enum existed reads as it was and a stored status compares equal to its
member.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """A trial's status, as its record stores it."""

    # how a trial process can end; failures never stop the study
    OK = "ok"
    PRUNED = "pruned"  # stopped by the pruner, or by the loss guard
    OVER_LIMIT = "over_limit"  # measured past study.limits
    OOM = "oom"
    TIMEOUT = "timeout"
    NONFINITE_LOSS = "nonfinite_loss"
    INVALID_CONFIG = "invalid_config"
    CRASH = "crash"
    # recorded by the study without a launch of its own
    DUPLICATE = "duplicate"  # an earlier trial's configuration: its figure is that trial's
    SKIPPED = "skipped"  # asked, then not launched
    INTERRUPTED = "interrupted"  # the search was stopped while it ran
    WORKER_LOST = "worker_lost"  # its worker stopped sending heartbeats: measured again


# How a trial process can end (a result's status).
STATUSES = (
    Status.OK,
    Status.PRUNED,
    Status.OVER_LIMIT,
    Status.OOM,
    Status.TIMEOUT,
    Status.NONFINITE_LOSS,
    Status.INVALID_CONFIG,
    Status.CRASH,
)
# Outcomes that say the configuration itself cannot run here (not the machine).
CONFIG_FAILURES = (Status.OOM, Status.INVALID_CONFIG, Status.NONFINITE_LOSS)
# Trials recorded without a launch; they never count toward the budget.
NOT_LAUNCHED = (Status.DUPLICATE, Status.SKIPPED)
