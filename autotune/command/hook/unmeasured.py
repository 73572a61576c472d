"""command.measure hf / lightning: the trainings of a job that autotune does not measure, noted
beside its report (steps.jsonl -> steps.unmeasured) so that the trial's reason can name them
(command/said.py) where it would otherwise say the job reported no step or ignored the stop:

- a Trainer trained in a child of the job's first process (a multiprocessing spawn or forkserver
  child, a subprocess): the hook does not act there (_site/sitecustomize.py), so it watches only,
  and notes the training as it begins (launch.witness);
- a second Trainer of the measured process that begins training after autotune stopped the first
  (the callbacks: reporting.Reporter.claim refused it, rightly, and nothing failed).

JSON lines, each one short write with O_APPEND (a reader never sees half of one), at most MAX_BYTES
in all. Runs in the job's processes and the trial's (the parent reads its markers of the reasons):
standard library and autotune.reporting only.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from autotune import reporting

SUFFIX = ".unmeasured"
# what the hook measures, in the reason of a job whose Trainer trained in a child of its first
# process (_site/sitecustomize.py: the processes the hook acts in); command/task.py's UNMEASURED
# knows it (every trial of such a job measures nothing)
HOOK_MEASURES = (
    "the hook measures the job's first process and its launcher's ranks; the Trainer trained in a "
    "child"
)
# the start of a measured trial's stop (record.applied.stop) when a second Trainer kept the job
# running past its stop request (command/task.py's metrics says it in the reason)
SECOND_TRAINER = "trained a second Trainer after the measured one"
# a line is under 400 bytes: a job that trains in every one of its workers is named by its first
MAX_BYTES = 16 << 10


def path_of(report: str) -> str:
    """The note file beside the report (steps.jsonl -> steps.unmeasured)."""
    return os.path.splitext(report)[0] + SUFFIX


def note(report: str, **line: Any) -> None:
    """Note a training autotune does not measure (its pid and program added), within MAX_BYTES."""
    path = path_of(report)
    text = json.dumps({"pid": os.getpid(), "program": reporting._program(), **line}) + "\n"
    try:
        if os.path.exists(path) and os.path.getsize(path) + len(text) > MAX_BYTES:
            return
        with open(path, "a") as f:
            f.write(text)
    except OSError:
        pass  # a folder the job cannot write: the trial says what it says without the note


def read(report: str) -> list[dict[str, Any]]:
    """The notes of the job so far (none: [])."""
    try:
        with open(path_of(report), "rb") as f:
            lines = f.read(MAX_BYTES).decode(errors="replace").splitlines()
    except OSError:
        return []
    return [d for d in map(_parsed, lines) if d is not None]


def _parsed(line: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(line)
    except ValueError:
        return None  # a line cut short by MAX_BYTES, or one the job wrote there itself
    return doc if isinstance(doc, dict) else None


def child_kind() -> str:
    """What kind of child this process is, from its command line (multiprocessing's own)."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    if "--multiprocessing-fork" in argv:
        return "a multiprocessing spawn child"
    if any("multiprocessing.forkserver" in a for a in argv):
        return "a multiprocessing forkserver child"
    return f"a child process ({reporting._program()})"


def program_of(pid: str) -> str:
    """Another process's program (its /proc cmdline, Linux), or '' where it cannot be read."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
            argv = f.read(4096).decode(errors="replace").split("\0")
    except (OSError, ValueError):
        return ""
    return reporting._program([a for a in argv if a]) if any(argv) else ""
