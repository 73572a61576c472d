"""Files written whole or not at all, never through a link: a temporary file of a fresh random name
beside the target (tempfile.mkstemp: O_CREAT | O_EXCL, so a link planted there is never opened),
then renamed over it (a link at the target is replaced, not written through). Standard library only:
the trial uses it too."""

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
