"""A journal-file study with a torn last record (a write cut short by a full disk or a killed
worker) resumes without damage: the torn end is cut off and kept, the completed trials stay readable
(search/journal.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli, tiny

from autotune.errors import StudyError
from autotune.search.journal import repair


def test_journal_torn_end_is_cut_off_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "j.log"
    path.write_bytes(b'{"op_code": 0}\n{"op_code": 1, "stu')
    said = repair(path)
    assert said is not None and "its last record was torn (19 bytes" in said
    assert path.read_bytes() == b'{"op_code": 0}\n'
    kept = next(tmp_path.glob("j.log.torn-*"))
    assert kept.read_bytes() == b'{"op_code": 1, "stu'
    assert repair(path) is None  # intact: nothing to do


def test_journal_damage_before_the_end_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "j.log"
    data = b'{"op_code": 0}\n{garbage\n{"op_code": 1}\n'
    path.write_bytes(data)
    with pytest.raises(StudyError, match=r"line 2 is not a record \(damaged\)"):
        repair(path)
    assert path.read_bytes() == data


@pytest.mark.slow
def test_journal_resume_after_a_torn_record_keeps_every_trial(write_yaml, tmp_path: Path) -> None:
    journal = tmp_path / "study.log"
    path = write_yaml(
        tiny(space={"micro_batch_size": [2, 4, 8], "precision": "fp32"}, study={"trials": 1})
    )
    args = (
        "search",
        str(path),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        "--storage",
        f"journal:{journal}",
    )
    assert run_cli(*args, cwd=tmp_path).returncode == 0
    with open(journal, "ab") as f:
        f.write(b'{"op_code": 5, "worker_id": "x", "trial_id": 0, "us')  # a worker died mid-append
    second = run_cli(*args, "--trials", "2", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "its last record was torn" in second.stderr
    report = run_cli(
        "report",
        "--study",
        "t",
        "--storage",
        f"journal:{journal}",
        "--format",
        "json",
        cwd=tmp_path,
    )
    assert report.returncode == 0, report.stderr
    import json

    trials = json.loads(report.stdout)["counts"]
    assert sum(trials.values()) >= 2, trials


def test_journal_full_disk_is_named_not_an_internal_error() -> None:
    """A full disk behind whatever raised (SQLAlchemy wraps SQLite's, Optuna its storage's) is said
    as such, exit 2."""
    import errno
    import sqlite3

    from autotune.cli._errors import _classify

    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "trials/t/study.db")
        except OSError as inner:
            raise RuntimeError("commit failed") from inner
    except RuntimeError as outer:
        message, code = _classify(outer)
    assert code == 2 and message.startswith("the disk is full (trials/t/study.db): no space left")
    message, code = _classify(sqlite3.OperationalError("database or disk is full"))
    assert code == 2 and "completed trials are stored and kept" in message
