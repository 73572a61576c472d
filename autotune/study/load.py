"""A stored study opened to read, never written: the one of trials/<name> (its study.db) or of
--study NAME --storage URL, credentials masked in every message. The report and a warm start read
through it; the search creates and resumes studies in search/storage.py."""

from __future__ import annotations

import contextlib
from pathlib import Path
from urllib.parse import quote

import optuna
import optuna.storages.journal

from autotune.errors import ConfigError
from autotune.redact import mask, remember


def mask_url(url: str) -> str:
    """A storage URL with its password hidden (postgresql://user:***@host/db), in any form
    (redact.mask)."""
    return mask(url)


def sqlite_url(path: Path) -> str:
    """The SQLAlchemy URL of a SQLite file at any path: '%', '?', '#' and spaces in it are quoted,
    or SQLAlchemy would read them as escapes, a query or a fragment and put the database
    elsewhere."""
    return "sqlite:///" + quote(str(path.resolve()), safe="/")


def load_study(
    path: Path | None, study_name: str | None, storage: str | None
) -> tuple[optuna.Study, Path | None]:
    """An existing study to read: the one of trials/<name> (its study.db), or --study NAME --storage
    URL.

    Reading never writes: a SQLite file is opened read-only and must already hold Optuna's tables (a
    new path or a foreign database is refused, not created or extended); a journal file must exist.
    A damaged or unreachable storage is a one-line ConfigError."""
    # the option the user gave, never another
    what = "--storage" if storage is not None else "STUDY_DIR"
    if storage is None:
        if path is None:
            raise ConfigError("STUDY_DIR: give trials/<name>, or --study NAME --storage URL")
        db = path / "study.db"
        if not db.is_file():
            raise ConfigError(
                f"STUDY_DIR: no study.db in {path}; give trials/<name> or --storage URL"
            )
        storage = sqlite_url(db)
    remember(storage)
    try:
        opened = _reader(storage, what)
        names = [
            s.study_name for s in optuna.get_all_study_summaries(opened, include_best_trial=False)
        ]
    except ConfigError:
        raise
    except Exception as err:  # SQLAlchemy, a damaged file, a server that refuses
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        locked = (
            "; another process holds it locked (a search writing to it?): try again"
            if "locked" in first
            else ""
        )
        raise ConfigError(
            f"{what}: cannot read a study from {mask_url(storage)}: {first[:300]}{locked}"
        ) from None
    name = study_name or (path.name if path is not None and path.name in names else None)
    if name is None and len(names) == 1:
        name = names[0]
    if name not in names:
        raise ConfigError(
            f"--study: {name!r} is not in {mask_url(storage)}; studies there: "
            f"{', '.join(names) or 'none'}"
        )
    return optuna.load_study(study_name=name, storage=opened), path


def _reader(url: str, what: str = "--storage") -> optuna.storages.BaseStorage:
    """A storage opened to read only (what: the option that named it, for the messages)."""
    if url.startswith("journal:"):
        path = Path(url.removeprefix("journal:"))
        if not path.is_file():
            raise ConfigError(f"{what}: no such journal file: {path}")
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    # sqlite://, sqlite+pysqlite://, ...: a file to open read-only
    if parsed.get_backend_name() == "sqlite":
        path = Path(parsed.database or "")
        if not parsed.database or not path.is_file():
            raise ConfigError(f"{what}: no such SQLite file: {parsed.database or '(none)'}")
        _check_optuna_sqlite(path, what)
        # SQLite itself refuses any write (mode=ro); the path is quoted for SQLite's URI, then for
        # SQLAlchemy
        url = f"{parsed.drivername}:///file:{quote(quote(str(path.resolve()), safe='/'), safe='/')}?mode=ro&uri=true"  # noqa: E501
    return optuna.storages.RDBStorage(url, skip_table_creation=True)


def _check_optuna_sqlite(path: Path, what: str = "--storage") -> None:
    """A SQLite file holding Optuna's tables (read-only look; ConfigError otherwise)."""
    import sqlite3

    try:
        with contextlib.closing(
            sqlite3.connect(f"file:{quote(str(path.resolve()), safe='/')}?mode=ro", uri=True)
        ) as conn:
            tables = {
                row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
    except sqlite3.DatabaseError as err:
        locked = (
            "; another process holds it locked (a search writing to it?): try again"
            if "locked" in str(err)
            else ""
        )
        raise ConfigError(
            f"{what}: {path} is not a readable SQLite database: {err}{locked}"
        ) from None
    if not {"studies", "trials", "version_info"} <= tables:
        raise ConfigError(
            f"{what}: {path} holds no Optuna study (no studies/trials tables); nothing was changed"
        )
