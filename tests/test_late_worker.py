"""A worker stalled past its grace (SIGSTOP) has its trial reaped and measured again by another
worker; on waking it keeps its own measurement as a duplicate of that trial, and tells Optuna
nothing of the reaped trial (search/workers.py late_record, search/drive.py)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import run_cli, start_cli, tiny, wait_until


@pytest.mark.slow
def test_late_worker_keeps_its_measurement_as_a_duplicate(tmp_path: Path) -> None:
    doc = tiny(
        space={"micro_batch_size": [2, 4], "precision": "fp32"},
        study={"trials": 1, "worker_grace_s": 3, "confirm_top": 0},
    )
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    args = ("search", str(path), "--out", str(out), "--device", "cpu")
    # two lock namespaces of this test's own (the stopped worker keeps its device locked)
    first = start_cli(
        *args,
        cwd=tmp_path,
        env={"AUTOTUNE_LOCK_NAMESPACE": f"late-{os.getpid()}-a", "AUTOTUNE_FAULT": "slow:300"},
    )
    wait_until(
        lambda: (out / "t" / "runs" / "0000" / "spec.json").exists(), what="the first trial's start"
    )
    # the worker stalls; its trial process goes on and finishes
    _stop_outside_a_write(first, out / "t" / "study.db")
    time.sleep(5)
    second = run_cli(*args, cwd=tmp_path, env={"AUTOTUNE_LOCK_NAMESPACE": f"late-{os.getpid()}-b"})
    assert second.returncode == 0, second.stderr
    first.send_signal(signal.SIGCONT)
    _, err = first.communicate(timeout=240)
    assert first.returncode == 0, err
    trials = optuna.load_study(
        study_name="t", storage=f"sqlite:///{out / 't' / 'study.db'}"
    ).get_trials()
    attrs = {t.number: t.user_attrs for t in trials}
    assert attrs[0]["status"] == "worker_lost"
    late = [a for a in attrs.values() if a.get("late")]
    assert late and late[0]["status"] == "duplicate" and late[0]["duplicate_of"] == 0
    assert late[0]["late"] == "ok" and late[0]["metrics"]["tokens_per_s_per_gpu"] > 0


def _stop_outside_a_write(proc: subprocess.Popen, db: Path) -> None:
    """SIGSTOP the worker at a moment it holds no lock on the study's database. A worker stopped
    inside a write (its heartbeat) keeps SQLite locked, and every other worker waits on it: that
    is SQLite's, not what this test is about."""
    for _ in range(100):
        proc.send_signal(signal.SIGSTOP)
        time.sleep(0.2)
        if _unlocked(db):
            return
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError("the worker held the study's database at every one of 100 stops")


def _unlocked(db: Path) -> bool:
    """Whether a writer could take the database now (no other connection holds a lock)."""
    con = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        con.execute("BEGIN EXCLUSIVE")
        con.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        con.close()


@pytest.mark.slow
def test_late_worker_fresh_is_refused_while_another_search_measures(tmp_path: Path) -> None:
    doc = tiny(
        space={"micro_batch_size": [2, 4], "precision": "fp32"},
        study={"trials": 1, "confirm_top": 0},
    )
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    args = ("search", str(path), "--out", str(out), "--device", "cpu")
    first = start_cli(*args, cwd=tmp_path, env={"AUTOTUNE_FAULT": "hang"})
    try:
        wait_until(
            lambda: (out / "t" / "runs" / "0000" / "spec.json").exists(),
            what="the first trial's start",
        )
        fresh = run_cli(*args, "--fresh", cwd=tmp_path)
        assert fresh.returncode == 2 and "is being searched by pid" in fresh.stderr, fresh.stderr
        assert not list(out.glob("t.archived-*")) and (out / "t" / "study.db").exists()
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=120)
