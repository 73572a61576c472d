"""Which measurements of a study were taken while the host was busy (their records' `host`, the
confirmation's `disturbed`: search/host.py), and what the card, the end of a search and every form
of the report say when the choice rests on them.

The choice rests on every trial that measured steps (a completed one ranks, a pruned one was judged
against the best) and on every confirmation process: a trial slowed by another job can lose a race
it would have won, or make your setting look slower than it is. So one disturbed measurement among
them is said, with the trials and processes it took and what disturbed them; nothing is failed.
"""

from __future__ import annotations

from typing import Any

from autotune.documents.confirmation import Confirmation
from autotune.documents.record import RecordError, TrialRecord
from autotune.study.history import History

MAX_NAMED = 8  # trial numbers named in the sentence; the rest are "..."


def disturbed(h: History, conf: Confirmation | None) -> dict[str, Any] | None:
    """{trials, processes, of, why, text} of the measurements the choice rests on that were taken
    while disturbed: the trials (numbers), the confirmation processes (how many of how many), what
    disturbed each, and the sentence every form prints; None where none was (or nothing was
    sampled)."""
    trials, why = [], []
    for t in sorted([*h.completed, *h.pruned], key=lambda t: t.number):
        try:
            said = TrialRecord.of(t).disturbed
        except RecordError:
            continue
        if said:
            trials.append(t.number)
            why.append(f"trial {t.number}: {said[0]}")
    processes, total = 0, 0
    for arm in conf.arms if conf else []:
        for what in arm.disturbed or []:
            total += 1
            if what:
                processes += 1
                why.append(f"a confirmation process of trial {arm.trial}: {what[0]}")
    if not trials and not processes:
        return None
    return {
        "trials": trials,
        "processes": processes,
        "of": total,
        "why": why,
        "text": _text(trials, processes, total, why[0]),
    }


def _text(trials: list[int], processes: int, total: int, first: str) -> str:
    """'Measured on a busy host: trials 0, 3 and 2 of 8 confirmation processes were disturbed
    (trial 0: host load ...); the choice among them may not hold on a quiet machine: ...'."""
    parts = []
    if trials:
        shown = ", ".join(map(str, trials[:MAX_NAMED])) + (
            ", ..." if len(trials) > MAX_NAMED else ""
        )
        parts.append(f"trial{'s' if len(trials) > 1 else ''} {shown}")
    if processes:
        parts.append(f"{processes} of {total} confirmation processes")
    return (
        f"Measured on a busy host: {' and '.join(parts)} ran while other work disturbed them "
        f"({first}); the choice among them and its gain may not hold on a quiet machine: run the "
        "search again (--fresh) where nothing else runs."
    )
