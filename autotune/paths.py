"""Paths the user gives, checked before anything runs: a folder to write into, a file to write, a
study folder; the study's own folders, made and verified as real folders of it (study_folder,
no_links: a symbolic link planted in a shared study is refused, never written through).

A command that would fail on its last line (a --junit that is a folder, an --out that is a file,
read-only, a looping link or a name too long for the file system) fails on its first instead, with
one line and exit 2, having written nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
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
# Folders autotune writes into besides: report's HTML, the W&B runs (tracking.wandb)
WRITTEN_FOLDERS = (*STUDY_FOLDERS, "report", "wandb")
# Folders whose entries are autotune's own folders (a trial's, a check's): each checked too
FOLDERS_OF_FOLDERS = ("runs", "checks")
_REAL_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def study_folder(home: Path, folder: Path) -> Path:
    """folder (home/runs/0001, home/report), each part of it below the study folder home a real
    folder of the study: made with os.mkdir where missing, then opened from the part above it with
    O_NOFOLLOW | O_DIRECTORY (openat), so a symbolic link or a file at any part is refused
    (ConfigError, exit 2), never followed, even one planted between the mkdir and the open. home
    itself may be a link the user made (trials/ on a scratch disk). A folder outside home is the
    user's own (study.compile_cache, --html): made as given."""
    parts = _below(home, folder)
    if parts is None:
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for depth, name in enumerate(parts):
        fd = _enter(fd, name, home.joinpath(*parts[: depth + 1]), make=True)
    os.close(fd)
    return folder


def no_links(home: Path) -> Path:
    """The study folder home, refused (ConfigError, one line) when an entry autotune writes there is
    a symbolic link: its files (STUDY_FILES), its folders (WRITTEN_FOLDERS) and every entry of runs/
    and checks/ (a trial's or a check's folder, one not made yet included). Run before a command
    writes anything; study_folder keeps the rule for each folder it makes after."""
    if not home.is_dir():
        return home
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in (*STUDY_FILES, *WRITTEN_FOLDERS):
            _no_link(fd, name, home / name)
        for name in FOLDERS_OF_FOLDERS:
            _no_links_in(fd, name, home / name)
    finally:
        os.close(fd)
    return home


def _below(home: Path, folder: Path) -> tuple[str, ...] | None:
    """folder's parts below home; None when it is not below. The outermost of folder's folders
    that is home (links resolved: home given resolved, or through the user's link) ends the part
    above: every part after it is checked, a link among them included."""
    real, parts = os.path.realpath(home), Path(os.path.abspath(folder)).parts
    top = next(
        (i for i in range(1, len(parts) + 1) if os.path.realpath(Path(*parts[:i])) == real), None
    )
    return None if top is None else parts[top:]


def _enter(fd: int, name: str, shown: Path, make: bool = False) -> int:
    """The real folder `name` of folder fd (made first where missing, with make), opened; fd is
    closed. A link or a file there is refused."""
    try:
        if make:
            with contextlib.suppress(FileExistsError):  # so does a link: refused below
                os.mkdir(name, dir_fd=fd)
        return os.open(name, _REAL_DIR, dir_fd=fd)
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        raise _not_real(fd, name, shown) from None
    finally:
        os.close(fd)


def _no_link(fd: int, name: str, shown: Path) -> None:
    """Entry `name` of folder fd is no symbolic link (or is missing)."""
    try:
        mode = os.lstat(name, dir_fd=fd).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise _not_real(fd, name, shown)


def _no_links_in(fd: int, name: str, shown: Path) -> None:
    """No entry of folder `name` (of folder fd), where it exists, is a symbolic link."""
    try:
        os.lstat(name, dir_fd=fd)
    except FileNotFoundError:
        return
    inner = _enter(os.dup(fd), name, shown)
    try:
        with os.scandir(inner) as entries:
            found = next((e.name for e in entries if e.is_symlink()), None)
        if found is not None:
            raise _not_real(inner, found, shown / found)
    finally:
        os.close(inner)


def _not_real(fd: int, name: str, shown: Path) -> ConfigError:
    """The one line refusing entry `name` of folder fd, a link or not a folder."""
    if not stat.S_ISLNK(os.lstat(name, dir_fd=fd).st_mode):
        return ConfigError(f"{excerpt(str(shown))} is a file; autotune keeps a folder there")
    return ConfigError(
        f"{excerpt(str(shown))} is a symbolic link (to {excerpt(os.readlink(name, dir_fd=fd))}) "
        "inside the study folder; autotune never writes through one (it would write outside the "
        "study). Remove it; the study folder itself may be a link"
    )


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
