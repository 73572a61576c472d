"""Where a study lives: Optuna storages from a URL, credentials masked, create or resume, --fresh
archiving. Reading a study, never writing it, is study/load.py."""

from __future__ import annotations

import datetime as dt
import random
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
import optuna.storages.journal

from autotune import paths, tasks
from autotune.documents import study_attrs
from autotune.documents.study_attrs import CONFIG_FILE_DIGEST as CONFIG_FILE_DIGEST  # re-exported
from autotune.errors import ConfigError, StudyError, excerpt
from autotune.knobs import Knobs
from autotune.redact import mask_command, remember
from autotune.study.load import mask_url, sqlite_url

if TYPE_CHECKING:
    import sqlite3

    from sqlalchemy.engine import Connection
    from sqlalchemy.pool import ConnectionPoolEntry

    from autotune.config import Config


def _journal_file(url: str) -> Path:
    """journal:PATH's file: an existing regular file, or a new one in a writable folder (not a FIFO
    or a device, which would hang or fail mid-study)."""
    path = Path(url.removeprefix("journal:"))
    if path.exists() and not path.is_file():
        raise ConfigError(f"study.storage: journal:{path} is not a regular file")
    paths.writable_file(path, "study.storage")
    return path


def storage_of(url: str) -> optuna.storages.BaseStorage:
    """An Optuna storage from a URL; journal:PATH is Optuna's JournalStorage on a file (shared file
    systems)."""
    remember(url)
    if url.startswith("journal:"):
        from autotune.search.journal import repair

        path = _journal_file(url)
        path.parent.mkdir(parents=True, exist_ok=True)
        if (repaired := repair(path)) is not None:  # a resume never appends onto a torn record
            print(f"note: {repaired}", file=sys.stderr)
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    sqlite = url.startswith("sqlite")
    for attempt in range(5):  # workers started together race to create the schema of a new database
        try:
            # a server restarted under a pooled connection: pre-ping replaces it instead of failing
            # the query
            storage = optuna.storages.RDBStorage(
                # SQLite's own wait for a lock stays short: past it the retry says so, then waits on
                # (search/retry.py)
                url,
                engine_kwargs={"connect_args": {"timeout": 15}}
                if sqlite
                else {"pool_pre_ping": True},
            )
            if sqlite:
                _serialize_sqlite(storage)
            return _retrying(storage)
        except Exception as err:
            if attempt == 4 or not any(
                w in str(err) for w in ("UNIQUE", "unique", "already exists", "locked")
            ):
                raise
            time.sleep(0.5 + random.random())
    raise AssertionError("unreachable")


def _retrying(storage: optuna.storages.RDBStorage) -> optuna.storages.BaseStorage:
    """Optuna's cache in front of the database (as optuna.storages.get_storage builds it), and a
    transient outage waited out in front of both (search/retry.py)."""
    from optuna.storages._cached_storage import _CachedStorage

    from autotune.search.retry import RetryingStorage

    return RetryingStorage(_CachedStorage(storage))


def _serialize_sqlite(storage: optuna.storages.RDBStorage) -> None:
    """Make every SQLite transaction BEGIN IMMEDIATE (SQLAlchemy's pysqlite recipe).

    pysqlite's deferred transactions let two workers (threads or processes) both read a WAITING
    trial before either writes, so both run it; taking the write lock at BEGIN makes the pop atomic.
    """
    from sqlalchemy import event

    engine = storage.engine

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
        dbapi_connection.isolation_level = None  # let SQLAlchemy, not pysqlite, emit BEGIN

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections opened before the listeners existed


def _archive(
    study_dir: Path, storage: optuna.storages.BaseStorage | None, name: str
) -> Path | None:
    """--fresh: move the old study aside (nothing is deleted); return where it went. storage: the
    study's own (None: the default, study.db, which moves with the folder)."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    target = study_dir.with_name(f"{study_dir.name}.archived-{stamp}")
    if storage is not None:
        try:
            optuna.copy_study(
                from_study_name=name,
                from_storage=storage,
                to_storage=storage,
                to_study_name=f"{name}.archived-{stamp}",
            )
            optuna.delete_study(study_name=name, storage=storage)
        except KeyError:
            pass  # no such study yet
    if study_dir.exists():
        study_dir.rename(target)
        return target
    return None


def open_study(
    cfg: Config, *, out_root: Path, device: str, fresh: bool, baseline: Knobs
) -> tuple[optuna.Study, Path, str]:
    """Create or resume the study; refuse one made from a different command, model, workload,
    space or device.

    baseline: the baseline trial's knobs, stored with the study: report, check and the live view
    find the baseline trial by them (history.History.baseline)."""
    from autotune.documents import identity

    default_storage = cfg.study.storage is None
    if default_storage:
        _check_sqlite_path(out_root / cfg.name / "study.db")
    study_dir = _check_study_dir(out_root, cfg.name, fresh)
    url = cfg.study.storage or sqlite_url(study_dir / "study.db")
    if url.startswith("journal:"):
        _journal_file(url)  # checked before anything is written
    if fresh:
        _refuse_live_fresh(
            cfg.name, url if not default_storage or (study_dir / "study.db").exists() else None, cfg
        )
    if fresh and default_storage:
        _archive(study_dir, None, cfg.name)  # moves study.db aside with the folder
    if default_storage:
        study_dir.mkdir(parents=True, exist_ok=True)
    try:
        storage = storage_of(url)
    except Exception as err:
        raise StudyError(f"study.storage: cannot open {mask_url(url)}: {err}") from None
    if fresh and not default_storage:
        # copies the study aside in its storage
        _archive(study_dir, storage, cfg.name)
    config = cfg.model_dump(mode="json")
    want = {study_attrs.IDENTITY: identity.digest(config), study_attrs.DEVICE: device}
    # task command: the content of its config file, which the stored config names only
    if (content := identity.config_file_digest(config, cfg.base_dir)) is not None:
        want[CONFIG_FILE_DIGEST] = content
    if not fresh:
        _refuse_other_config(
            cfg.name,
            storage,
            url,
            {**want, "config": config},
            study_dir if default_storage else None,
        )
    study_dir.mkdir(parents=True, exist_ok=True)
    study = _create(cfg, storage, url)
    study_attrs.set_identity(study, want)
    study_attrs.keep_baseline(study, baseline)
    study_attrs.set_config(study, _masked(config, url))
    return study, study_dir, url


def _create(cfg: Config, storage: optuna.storages.BaseStorage, url: str) -> optuna.Study:
    """The study created or loaded under its objective's directions; one made under others is
    refused (StudyError naming study.objective)."""
    directions = tasks.objective(cfg.study.objective).directions
    try:
        study = optuna.create_study(
            study_name=cfg.name, storage=storage, directions=directions, load_if_exists=True
        )
    except ValueError as err:  # Optuna refuses to load a study under other directions
        raise StudyError(
            f"study.objective: {cfg.study.objective} does not match the study {cfg.name!r} "
            f"already in {mask_url(url)} ({err}); use --fresh to start over or the objective it "
            "was made with"
        ) from None
    if [d.name.lower() for d in study.directions] != directions:
        raise StudyError(
            f"study.objective: {cfg.study.objective} does not match the study {cfg.name!r} "
            f"already in {mask_url(url)} ({len(study.directions)} objective(s)); use --fresh to "
            "start over or the objective it was made with"
        )
    return study


def _masked(config: dict[str, Any], url: str) -> dict[str, Any]:
    """The config as the study stores it: credentials never stored (storage, command, MLflow)."""
    config["study"]["storage"] = mask_url(url)
    if config.get("command"):
        config["command"] = mask_command(config["command"])
    if (mlflow := config["study"]["tracking"]["mlflow"]) and mlflow["tracking_uri"]:
        mlflow["tracking_uri"] = mask_url(mlflow["tracking_uri"])
    return config


def _refuse_live_fresh(name: str, url: str | None, cfg: Config) -> None:
    """--fresh never archives a study another search is measuring in (its trial's heartbeat is
    recent)."""
    from autotune.search.workers import live_worker

    if url is None:
        return
    try:
        study = optuna.load_study(study_name=name, storage=storage_of(url))
    except KeyError:
        return  # no such study yet
    except Exception as err:
        raise StudyError(f"study.storage: cannot open {mask_url(url)}: {err}") from None
    if (who := live_worker(study, cfg.study.worker_grace_s)) is not None:
        raise StudyError(
            f"--fresh: study {name} is being searched by {who}; stop that search first (or let it "
            "end), then run --fresh again; nothing was archived"
        )


# SQLite's unix VFS: longer database paths cannot be opened (os_unix.c MAX_PATHNAME)
SQLITE_MAX_PATHLEN = 512


def _check_sqlite_path(db: Path) -> None:
    """The study's SQLite file can be opened at this path: checked before any folder is made."""
    length = len(str(db.absolute()).encode())
    if length > SQLITE_MAX_PATHLEN:
        raise ConfigError(
            f"--out: the study's database would be {length} bytes of path "
            f"({excerpt(str(db), 60)}); SQLite opens "
            f"at most {SQLITE_MAX_PATHLEN}: choose a shorter --out or study name (nothing was "
            "created)"
        )


def _check_study_dir(out_root: Path, name: str, fresh: bool) -> Path:
    """OUT/<name>, checked before anything is written: a writable folder that is empty or
    autotune's."""
    paths.writable_dir(out_root, "--out")
    study_dir = out_root / name
    # the names in it too: nothing is made before all of it fits
    paths.writable_dir(study_dir, "--out")
    if study_dir.exists():
        if not paths.is_study_dir(study_dir) and any(study_dir.iterdir()):
            what = "--fresh" if fresh else "--out"
            raise StudyError(
                f"{what}: {study_dir} exists and holds no autotune study (no study.db, best.yaml "
                "or runs/); not touching it: choose another name or --out"
            )
    return paths.no_links(study_dir)


def _refuse_other_config(
    name: str,
    storage: optuna.storages.BaseStorage,
    url: str,
    want: dict[str, Any],
    study_dir: Path | None,
) -> None:
    """A study of this name that measured another command, model, workload, space
    (identity.difference: a field or knob added since at its default is no difference) or device is
    refused. want: the config, device and config file's digest this search would store. study_dir:
    where its study.db is (default storage), named in the remedy: --fresh --warm-start from it keeps
    what it measured (not for another command: its trials measured another job).

    A study made before the config file's content was stored (no CONFIG_FILE_DIGEST) is judged by
    the rest of its command alone, which its stored config holds; the content is stored from then
    on."""
    from autotune.documents import identity

    try:
        old = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return
    except Exception as err:
        raise StudyError(f"study.storage: cannot open {mask_url(url)}: {err}") from None
    trials = old.get_trials(deepcopy=False)
    if not trials:
        return
    stored = study_attrs.config(old)
    differs = (
        identity.difference(stored, want["config"])
        if stored is not None
        else "its config is not stored"
    )
    content = study_attrs.config_file_digest(old)
    if not differs and content is not None and content != want.get(CONFIG_FILE_DIGEST):
        differs = f"command.config_file: {excerpt(want['config']['command']['config_file'], 60)} "
        differs += "has other content"
    if differs and differs.startswith("command"):
        numbers = [t.number for t in trials]
        span = (
            f"trial {numbers[0]}" if len(numbers) == 1 else f"trials {min(numbers)}-{max(numbers)}"
        )
        raise StudyError(
            f"name: the command changed since study {name!r} measured {span} ({differs}); run "
            "with --fresh (the old study is archived, not deleted) or choose another name: its "
            "trials measured the old command, so they are neither resumed nor warm-started"
        )
    if differs:
        source = f" {study_dir}" if study_dir is not None else " DIR"
        raise StudyError(
            f"name: study {name!r} exists with a different model, workload or space ({differs}); "
            f"run with --fresh --warm-start{source} to start anew from its "
            f"{len(trials)} "
            "trials (those in the new space are not measured again; the old study is archived, "
            "not deleted), with --fresh alone, or choose another name"
        )
    have = study_attrs.device(old)
    if have != want[study_attrs.DEVICE]:
        raise StudyError(
            f"name: study {name!r} exists with a different device ({have}); "
            "run with --fresh (the old study is archived, not deleted) or choose another name"
        )
