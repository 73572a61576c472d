"""Files written whole or not at all, never through a link: a temporary file of a fresh random name
beside the target (tempfile.mkstemp: O_CREAT | O_EXCL, so a link planted there is never opened),
then renamed over it (a link at the target is replaced, not written through); a log or a signal file
opened with O_NOFOLLOW. Standard library only: the trial uses it too."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode())


# A file opened where a link may have been planted since autotune last removed it: the open fails
# (ELOOP) rather than write outside the study
_NEW = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def create(path: str | Path) -> int:
    """path opened to write from its start (a trial's log), never through a link: its descriptor."""
    return os.open(path, _NEW | os.O_TRUNC, 0o644)


def touch(path: str | Path) -> None:
    """An empty file at path (a signal file: prune, stop), made without following a link there."""
    os.close(os.open(path, _NEW, 0o644))
