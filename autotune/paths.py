"""Paths the user gives, checked before anything runs: a folder to write into, a file to write, a study folder.

A command that would fail on its last line (a --junit that is a folder, an --out that is a file, read-only,
a looping link or a name too long for the file system) fails on its first instead, with one line and exit
2, having written nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from autotune.errors import ConfigError, excerpt

NAME_MAX = 255  # bytes of one path component (Linux file systems)
PATH_MAX = 4096


def _names(path: Path, option: str) -> None:
    too_long = next((p for p in path.parts if len(os.fsencode(p)) > NAME_MAX), None)
    if too_long is not None:
        raise ConfigError(
            f"{option}: a name in {excerpt(str(path))} has {len(os.fsencode(too_long))} bytes; "
            f"file systems allow {NAME_MAX}"
        )
    if len(os.fsencode(str(path.absolute()))) > PATH_MAX:
        raise ConfigError(f"{option}: {excerpt(str(path))} is longer than the {PATH_MAX} bytes a path may have")


def _existing_ancestor(path: Path, option: str) -> Path:
    """The nearest part of path that exists; a looping or broken link on the way is refused."""
    p = path.absolute()
    while True:
        if os.path.lexists(p) and not os.path.exists(p):
            raise ConfigError(f"{option}: {excerpt(str(p))} is a broken or looping symbolic link")
        if os.path.exists(p) or p == p.parent:
            return p
        p = p.parent


def writable_dir(path: Path, option: str) -> Path:
    """A folder autotune may create (if missing) and write into; checked, not created."""
    _names(path, option)
    base = _existing_ancestor(path, option)
    if base == path.absolute() and not base.is_dir():
        raise ConfigError(f"{option}: {excerpt(str(path))} is a file; give a folder")
    if not base.is_dir():
        raise ConfigError(f"{option}: {excerpt(str(path))} cannot be a folder: {excerpt(str(base))} is a file")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ConfigError(f"{option}: {excerpt(str(base))} is not writable; give a folder you can write to")
    return path


def writable_file(path: Path, option: str) -> Path:
    """A regular file autotune may create or replace (not a folder, a FIFO or a device); its folder is
    checked as writable_dir."""
    _names(path, option)
    _existing_ancestor(path, option)
    if path.is_dir():
        raise ConfigError(f"{option}: {excerpt(str(path))} is a folder; give a file name")
    if path.exists() and not path.is_file():
        raise ConfigError(f"{option}: {excerpt(str(path))} is not a regular file")
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"{option}: {excerpt(str(path))} is not writable")
    writable_dir(path.parent, option)
    return path


def is_study_dir(path: Path) -> bool:
    """A folder autotune made for a study: its study.db, best.yaml or runs/ (only such a folder is archived)."""
    return path.is_dir() and any((path / name).exists() for name in ("study.db", "best.yaml", "runs"))


# What autotune keeps in a study's folder: an output the user names must never be one of them.
STUDY_FILES = ("study.db", "study.db-journal", "study.db-wal", "study.db-shm", "best.yaml", "history.jsonl")
STUDY_FOLDERS = ("runs", "checks", "inductor-cache", "tmp", "loss-reference")


def not_a_study_file(path: Path, study_dir: Path, option: str) -> Path:
    """An output path (--junit) that is not one of the study's own files (it would be overwritten after the
    measurement): ConfigError before anything runs."""
    target, home = path.resolve(), study_dir.resolve()
    inside = target.parent == home and target.name in STUDY_FILES
    below = any(home / folder in target.parents or target == home / folder for folder in STUDY_FOLDERS)
    if inside or below or (target.parent == home and target.suffix == ".yaml" and target.name.startswith("best")):
        raise ConfigError(
            f"{option}: {excerpt(str(path))} is one of the study's own files ({target.name} in {home}); "
            "write it elsewhere, e.g. --junit results.xml"
        )
    return path
