"""A job's step lines held back by a filter that buffers them (its output piped through grep, awk or
a Python without -u): told from the lines' arrival times, named with the fix. Standard library
only (the trial's process)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

# A step line within 10 ms of the one before came with it: a burst. Four optimizer steps in 10 ms
# is 2.5 ms a step or less, which a training step worth tuning does not take; a filter that
# buffers passes on a whole block of its buffer (4 to 8 KiB: many lines) at once, as fast as the
# trial reads them (well under a millisecond a line).
BURST_S = 0.010
BURST_LINES = 4
# Most step lines came in bursts (a job's first and last lines may come alone) ...
SHARE = 0.8
# ... and between bursts, silences at least 10x a burst's own span and 10x BURST_S: a buffer holds
# the lines while the job runs the steps they tell of, so the silence before a burst is the time of
# its steps and the burst itself only the copy. A job that runs such short steps for real writes
# them evenly: its groups span their steps' time, longer than the gaps a busy machine puts between
# them (a CPU job's 4 ms steps arrive in groups apart by 15 to 50 ms, never so).
SILENCE = 10.0
FIXES = "python -u (or PYTHONUNBUFFERED=1), stdbuf -oL, mawk -W interactive, grep --line-buffered"


def _groups(arrivals: Sequence[float]) -> list[list[float]]:
    """The arrival times in groups: each time within BURST_S of the one before joins its group."""
    groups: list[list[float]] = []
    for i, at in enumerate(arrivals):
        if i and at - arrivals[i - 1] <= BURST_S:
            groups[-1].append(at)
        else:
            groups.append([at])
    return groups


def buffered(arrivals: Sequence[float]) -> str:
    """What the step lines' arrival times (in order, seconds) say of a filter that held them back,
    for a reason: the bursts and silences seen; '' where they came as steps end."""
    groups = _groups(arrivals)
    bursts = [g for g in groups if len(g) >= BURST_LINES]
    in_bursts = sum(len(g) for g in bursts)
    if len(bursts) < 2 or in_bursts < SHARE * len(arrivals):
        return ""
    silences = [after[0] - before[-1] for before, after in zip(groups, groups[1:])]
    silence = statistics.median(silences)
    span = statistics.median(g[-1] - g[0] for g in bursts)
    if silence < SILENCE * max(span, BURST_S):
        return ""
    return (
        f"its step lines came in bursts ({in_bursts} of {len(arrivals)} within "
        f"{BURST_S * 1000:.0f} ms of the one before, {len(bursts)} bursts between silences of "
        f"{silence:.2g} s): something between the job and autotune buffers its output (a pipe "
        "through grep, awk, sed or a Python without -u), so the lines' arrival times are not its "
        f"steps'; make it pass each line on: {FIXES}"
    )


def noted(reason: str, samples: Sequence[dict[str, object]]) -> str:
    """The reason with what the log samples' arrival times ("at") say of a buffering filter."""
    arrivals = [float(at) for s in samples if isinstance(at := s.get("at"), (int, float))]
    said = buffered(arrivals)
    return f"{reason}; {said}" if reason and said else reason or said
