"""A journal-file study (study.storage journal:PATH) made safe to resume after a crash or a full
disk.

Optuna's JournalFileBackend appends one JSON line per operation. A writer that died mid-append (the
disk filled, the worker was killed) leaves a last line without its newline: Optuna's reader skips
it, but the next append glues onto it, and from then on the file cannot be read at all (a decode
error before later lines).
Before a search writes to a journal, `repair` cuts such a torn end off under Optuna's own lock,
keeping the cut bytes in a file beside it; a damaged line before the end is refused, never written
after."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from autotune.errors import StudyError


def repair(path: Path) -> str | None:
    """Cut a torn last record off the journal (None: nothing to do); StudyError for damage before
    the end."""
    import optuna.storages.journal

    if not path.is_file() or path.stat().st_size == 0:
        return None
    # the lock Optuna's writers take
    lock = optuna.storages.journal.JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        return _repair_locked(path)
    finally:
        lock.release()


def _repair_locked(path: Path) -> str | None:
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    _check_lines(path, data[:end])
    if end == len(data):
        return None
    torn = data[end:]
    kept = path.with_name(f"{path.name}.torn-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%S%fZ}")
    kept.write_bytes(torn)
    with open(path, "r+b") as f:
        f.truncate(end)
    return (
        f"journal {path}: its last record was torn ({len(torn)} bytes, a write cut short); cut "
        f"off and kept in {kept.name}, the completed trials before it are intact"
    )


def _check_lines(path: Path, complete: bytes) -> None:
    """Every complete line must be a JSON record: a damaged one in the middle is not ours to
    mend."""
    for number, line in enumerate(complete.splitlines(), 1):
        try:
            json.loads(line)
        except ValueError:
            raise StudyError(
                f"journal {path}: line {number} is not a record (damaged); the study cannot be "
                "resumed safely. Copy the file, remove that line, and run again"
            ) from None
