"""Paths the user gives, checked before anything runs: a folder to write into, a file to write, a
study folder.

A command that would fail on its last line (a --junit that is a folder, an --out that is a file,
read-only, a looping link or a name too long for the file system) fails on its first instead, with
one line and exit 2, having written nothing.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import unquote

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
        raise ConfigError(
            f"{option}: {excerpt(str(path))} is longer than the {PATH_MAX} bytes a path may have"
        )


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
        raise ConfigError(
            f"{option}: {excerpt(str(path))} cannot be a folder: {excerpt(str(base))} is a file"
        )
    if not os.access(base, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{option}: {excerpt(str(base))} is not writable; give a folder you can write to"
        )
    return path


def writable_file(path: Path, option: str) -> Path:
    """A regular file autotune may create or replace (not a folder, a FIFO or a device); its folder
    is checked as writable_dir."""
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
    """A folder autotune made for a study: its study.db, best.yaml or runs/ (only such a folder is
    archived)."""
    return path.is_dir() and any(
        (path / name).exists() for name in ("study.db", "best.yaml", "runs")
    )


# What autotune keeps in a study's folder: an output the user names must never be one of them.
STUDY_FILES = (
    "study.db",
    "study.db-journal",
    "study.db-wal",
    "study.db-shm",
    "best.yaml",
    "history.jsonl",
)
STUDY_FOLDERS = ("runs", "checks", "inductor-cache", "tmp", "loss-reference")


def not_a_study_file(path: Path, study_dir: Path, option: str) -> Path:
    """An output path (--junit) that is not one of the study's own files (it would be overwritten
    after the measurement): ConfigError before anything runs."""
    target, home = path.resolve(), study_dir.resolve()
    inside = target.parent == home and target.name in STUDY_FILES
    below = any(
        home / folder in target.parents or target == home / folder for folder in STUDY_FOLDERS
    )
    if (
        inside
        or below
        or (target.parent == home and target.suffix == ".yaml" and target.name.startswith("best"))
    ):
        raise ConfigError(
            f"{option}: {excerpt(str(path))} is one of the study's own files ({target.name} in "
            f"{home}); "
            "write it elsewhere, e.g. --junit results.xml"
        )
    return path


def beside(best_yaml: Path, folder: str | None) -> str | None:
    """A folder best.yaml names (base_dir), absolute: relative to best.yaml's folder as write_best
    stores it (a study checked out elsewhere names its own code), or absolute as older files have
    it."""
    if folder is None or os.path.isabs(folder):
        return folder
    return str((best_yaml.resolve().parent / folder).resolve())


def relative_to(folder: str | None, home: Path) -> str | None:
    """folder as best.yaml stores it: relative to best.yaml's folder `home` (beside reads it)."""
    return None if folder is None else os.path.relpath(Path(folder).resolve(), home.resolve())


# Beside a storage's file: SQLite's rollback journal and write-ahead log; the journal's lock.
SQLITE_SIDECARS = ("-journal", "-wal", "-shm")
JOURNAL_SIDECARS = (".lock",)
_SQLITE_URL = re.compile(r"^sqlite(\+\w+)?:///(?P<path>[^?]+)")


def storage_files(url: object) -> list[Path]:
    """The files of a journal:PATH or sqlite:///PATH storage (none for a database server or
    :memory:); a relative PATH is the working directory's, as the search opened it."""
    if not isinstance(url, str):
        return []
    if url.startswith("journal:"):
        path = Path(url.removeprefix("journal:"))
        return [path, *(Path(f"{path}{s}") for s in JOURNAL_SIDECARS)]
    found = _SQLITE_URL.match(url)
    if found is None or found["path"] == ":memory:":
        return []
    path = Path(unquote(found["path"]))  # sqlite_url quotes '%', '?', '#' and spaces
    return [path, *(Path(f"{path}{s}") for s in SQLITE_SIDECARS)]


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file: one inode when both exist (links, hard links), else one
    path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def not_owned(path: Path, owned: dict[Path, str], option: str) -> Path:
    """An output path that is none of the files autotune reads or keeps (owned: each file, what it
    is): ConfigError before anything runs, since the output would replace it."""
    what = next((what for other, what in owned.items() if _same_file(path, other)), None)
    if what is not None:
        raise ConfigError(
            f"{option}: {excerpt(str(path))} is {what}; writing there would replace it. "
            "Write it elsewhere, e.g. --junit results.xml"
        )
    return path


JUNIT_ROOTS = ("testsuite", "testsuites")  # a JUnit XML report's root element (Ant's, its wrapper)
# A report's first element follows at most an XML declaration, a stylesheet line and comments.
SNIFF_BYTES = 64 * 1024
SNIFF_CHUNK = 4096  # fed piece by piece: the parser stops at the first element, not at the end
SQLITE_MAGIC = b"SQLite format 3\x00"  # every SQLite database's first 16 bytes (its file format)


def replaceable_report(path: Path, option: str) -> Path:
    """A JUnit output that is new, empty or a JUnit XML report already. Any other existing file is
    refused: it is something someone keeps (a study's journal or database, a best.yaml, a YAML, any
    data), which the report would replace whole; a previous night's report is replaced."""
    if not path.is_file() or path.stat().st_size == 0:
        return path
    kind = _not_a_report(path)
    if kind is not None:
        raise ConfigError(
            f"{option}: {excerpt(str(path))} exists and is {kind}, not a JUnit XML report "
            "(<testsuite> or <testsuites>), which alone is replaced. Remove it or name a new file"
        )
    return path


def _not_a_report(path: Path) -> str | None:
    """What the file is when it is not a JUnit XML report (None when it is one)."""
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError as err:
        return f"unreadable ({err.strerror})"
    if head.startswith(SQLITE_MAGIC):
        return "an SQLite database"
    root = _first_element(head)
    if root in JUNIT_ROOTS:
        return None
    if root is not None:
        return f"an XML document whose root is {excerpt(root, 40)}"
    if b'"op_code"' in head[:200]:  # an Optuna journal: a JSON operation a line, op_code first
        return "an Optuna journal"
    return "a best.yaml" if _is_best_yaml(path) else "not XML"


def _first_element(head: bytes) -> str | None:
    """The name of the first element of an XML document (no namespace); None when it is not XML."""
    parser: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("start",))
    try:
        for at in range(0, len(head), SNIFF_CHUNK):
            parser.feed(head[at : at + SNIFF_CHUNK])
            for event in parser.read_events():
                element = event[-1]
                assert isinstance(element, ET.Element)  # the only events asked: start
                return element.tag.rpartition("}")[2]
    except ET.ParseError:
        return None
    return None


def _is_best_yaml(path: Path) -> bool:
    """A best.yaml written by autotune search, told by its content (whatever its name)."""
    from autotune import yamlio

    try:
        doc = yamlio.read(path, "--junit")
    except ConfigError:
        return False
    return isinstance(doc, dict) and "knobs" in doc and "fingerprint" in doc
