"""What a command trial says of its job in a reason: where its time went by the trial's limit,
why the trial stopped it, a figure it refused. Standard library only (the trial's process)."""

from __future__ import annotations

import time
from typing import Any


def time_went(steps: list[dict[str, Any]], t0: float) -> str:
    """Where a job's time went by the trial's limit: to its first step (its start: imports, data,
    model, the first compile), its other steps, and the wait since its last."""
    now = time.time()
    if not steps:
        return f"its start (imports, data, model, first compile) took all {now - t0:.0f} s"
    first, last = float(steps[0].get("at", now)), float(steps[-1].get("at", now))
    went = f"{first - t0:.0f} s to its first step (start, model, first compile)"
    if len(steps) > 1:
        went += f", {len(steps) - 1} more in {last - first:.0f} s"
    idle = now - last
    if idle > max(1.0, 2 * max(float(s["s"]) for s in steps)):  # no step for longer than two
        went += f", then {idle:.0f} s without a step"
    return went


def stopped_said(stopped: str, steps: int, needed: int, tokens_per_s: float) -> str:
    """The reason of a job the trial stopped before its window (the record's), its figure so far in
    it."""
    if not stopped:
        return ""
    if stopped == "pruned":
        return ""  # the search's pruner says why (search/prune.py)
    head, _, rest = stopped.partition(": ")
    if head.startswith("timeout"):
        return f"{head}, {tokens_per_s:,.0f} tokens/s: {rest}"
    return f"{stopped} (after {steps} steps, {tokens_per_s:,.0f} tokens/s)"


def average_said(line: str) -> str:
    return (
        "command.log_pattern matched an average since the start, not a step's figure: "
        f"{line!r}; use measure: hf or lightning (autotune's callback, no edit), a per-step "
        "figure, or a "
        "running count as the group tokens_total"
    )
