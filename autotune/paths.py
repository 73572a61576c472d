"""Paths the user gives, checked before anything runs: a folder to write into, a file to write, a study folder.

A command that would fail on its last line (a --junit that is a folder, an --out that is a file or
read-only) fails on its first instead, with one line and exit 2, having written nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from autotune.errors import ConfigError, excerpt


def _existing_ancestor(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def writable_dir(path: Path, option: str) -> Path:
    """A folder autotune may create (if missing) and write into; checked, not created."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option}: {excerpt(str(path))} is a file; give a folder")
    base = _existing_ancestor(path)
    if not base.is_dir():
        raise ConfigError(f"{option}: {excerpt(str(path))} cannot be a folder: {excerpt(str(base))} is a file")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ConfigError(f"{option}: {excerpt(str(base))} is not writable; give a folder you can write to")
    return path


def writable_file(path: Path, option: str) -> Path:
    """A file autotune may create or replace; its folder is checked as writable_dir."""
    if path.is_dir():
        raise ConfigError(f"{option}: {excerpt(str(path))} is a folder; give a file name")
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"{option}: {excerpt(str(path))} is not writable")
    writable_dir(path.parent, option)
    return path


def is_study_dir(path: Path) -> bool:
    """A folder autotune made for a study: its study.db, best.yaml or runs/ (only such a folder is archived)."""
    return path.is_dir() and any((path / name).exists() for name in ("study.db", "best.yaml", "runs"))
