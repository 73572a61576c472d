"""A trial's log kept bounded while the trial writes it, and read from its end.

A trial that prints without end would fill the file system through its log within its timeout, and
one that printed a GiB would cost autotune that much memory to read its last lines. The parent,
which polls every running trial anyway, keeps each log's disk use under HEAD_BYTES + TAIL_BYTES:
past that it frees the middle of the file (fallocate's FALLOC_FL_PUNCH_HOLE: the head and the last
TAIL_BYTES stay, the writer's offset is untouched, the middle reads as zeros), or, where the file
system cannot punch holes, cuts the file back to its head (the writer then continues past a hole).
Readers take the last bytes only (`tail`); a reason quotes the line that says what went wrong
(`last_words`, protocol's). Standard library otherwise.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

from autotune import protocol

HEAD_BYTES = 1 << 20  # the start of a log: the trial's set-up, the first error
TAIL_BYTES = 4 << 20  # its end: where it failed
BLOCK = 4096
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 0x01, 0x02
TAIL_READ = 64 << 10  # what a reason's tail reads


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def used_bytes(path: Path) -> int:
    """The disk the file takes (its blocks, not its apparent size, which holes do not shrink)."""
    return os.stat(path).st_blocks * 512


def cap(path: Path, head: int = HEAD_BYTES, tail: int = TAIL_BYTES) -> bool:
    """Free the middle of `path` when it takes more than head + tail bytes of disk; True when it
    did."""
    try:
        if used_bytes(path) <= head + tail + BLOCK:
            return False
        size = os.stat(path).st_size
    except FileNotFoundError:
        return False
    start = -(-head // BLOCK) * BLOCK
    end = (size - tail) // BLOCK * BLOCK
    if end <= start:
        return False
    if not _punch(path, start, end - start):
        # no hole punching here: keep the head, the writer goes on past a hole
        os.truncate(path, start)
    return True


def _punch(path: Path, offset: int, length: int) -> bool:
    if _LIBC is None:
        return False
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
        return bool(_LIBC.fallocate(fd, mode, ctypes.c_long(offset), ctypes.c_long(length)) == 0)
    finally:
        os.close(fd)


def tail(path: Path, max_bytes: int = TAIL_READ) -> str:
    """The last max_bytes of a log as text (a freed middle's zeros dropped); '' when there is
    none."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read(max_bytes)
    except OSError:
        return ""
    return data.replace(b"\0", b"").decode(errors="replace")


def last_words(path: Path, limit: int = 300) -> str:
    """The line of a log's end that says what went wrong, without library noise (protocol's)."""
    return protocol.last_words(tail(path), limit)
