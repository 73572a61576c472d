"""history.jsonl, the nightly series of `autotune check` beside best.yaml: read line by line, a bad
line skipped and named (torn by a full disk, edited by hand), appended so that a torn line never
glues onto the next night's, never through a link planted in the study's folder."""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.documents import strict_json

FILE = "history.jsonl"
# unreliable: disturbed (check/conditions.py); inconclusive: measured, its interval decided nothing
STATUSES = ("pass", "faster", "regression", "unreliable", "inconclusive")


def _positive(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def problem(doc: object) -> str | None:
    """Why a line is not a night (None: it is): what the series, the report and the plots read of
    it."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    if doc.get("status") not in STATUSES:
        return f"status {str(doc.get('status'))[:20]!r} is not one of {', '.join(STATUSES)}"
    for key in ("check_median", "ratio"):
        if not _positive(doc.get(key)):
            return f"{key} is not a positive number"
    samples = doc.get("check_samples")
    if not isinstance(samples, list) or not all(_positive(s) for s in samples):
        return "check_samples is not a list of positive numbers"
    ci = doc.get("ci")
    # null: a bound that is not finite (documents.strict_json), as (0, inf) where none was computed
    numbers = all(c is None or isinstance(c, (int, float)) for c in ci or [])
    if not isinstance(ci, list) or len(ci) != 2 or not numbers:
        return "ci is not two numbers"
    if not isinstance(doc.get("checked_at"), str):
        return "checked_at is not a time"
    return None


@dataclass(frozen=True)
class Night:
    """One night of history.jsonl (one check's verdict): what the series, the report and its plots
    read of it, typed; the whole line as written in `doc` (the report's JSON shows it as is)."""

    status: str
    check_median: float
    ratio: float
    check_samples: list[float]
    ci: tuple[float, float]
    checked_at: str
    name: str | None = None  # the best.yaml's name (several configurations may share a folder)
    disturbed: bool = False  # measured beside other work: no level of the series
    doc: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_level(self) -> bool:
        """A level of the nightly series: neither measured beside other work (disturbed) nor
        inconclusive (its repeats scattered, or too few: its median says nothing of the night)."""
        return not self.disturbed and self.status != "inconclusive"

    @classmethod
    def of(cls, doc: dict[str, Any]) -> Night:
        """A line that is a night (problem(doc) is None: ValueError otherwise)."""
        why = problem(doc)
        if why is not None:
            raise ValueError(f"not a night: {why}")
        name = doc.get("name")
        return cls(
            status=doc["status"],
            check_median=float(doc["check_median"]),
            ratio=float(doc["ratio"]),
            check_samples=[float(s) for s in doc["check_samples"]],
            ci=(
                float(doc["ci"][0] or 0.0),
                math.inf if doc["ci"][1] is None else float(doc["ci"][1]),
            ),
            checked_at=doc["checked_at"],
            name=name if isinstance(name, str) else None,
            disturbed=bool(doc.get("disturbed")),
            doc=doc,
        )


def read(path: Path) -> tuple[list[Night], list[str]]:
    """The nights of history.jsonl and, for each line skipped, 'line N: why'."""
    nights: list[Night] = []
    skipped: list[str] = []
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO is never opened: it would wait
            return nights, [f"{path}: not a regular file, not read"]
        with open(path, "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
    except FileNotFoundError:
        return nights, skipped
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            skipped.append(f"line {number}: not JSON (torn or edited)")
            continue
        why = problem(doc)
        if why is None:
            nights.append(Night.of(doc))
        else:
            skipped.append(f"line {number}: {why}")
    return nights, skipped


def append(path: Path, doc: dict[str, Any]) -> None:
    """One night appended: a newline first when the file's last line was torn (so the two stay
    apart), one write of the whole line, never through a symbolic link (OSError: ELOOP)."""
    line = (strict_json.dumps(doc, default=str) + "\n").encode()  # Infinity: null
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    fd = os.open(path, flags, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file (a FIFO, device or folder)")
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(f"wrote {written} of {len(line)} bytes (is the disk full?)")
    finally:
        os.close(fd)
