"""Crash safety and shared studies: kill -9 and resume, lost workers, journal storage, two workers,
credentials."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import interrupt_when_running, load_trials, none_left, run_cli, start_cli, tiny

from autotune.search.storage import storage_of
from autotune.study.load import mask_url

# every test here runs searches, checks or several processes: `make test-fast` leaves them out
pytestmark = pytest.mark.slow


def _launch(
    path: Path, out: Path, cwd: Path, *extra: str, fault: str | None = None
) -> subprocess.Popen:
    return start_cli(
        "search",
        str(path),
        "--out",
        str(out),
        "--device",
        "cpu",
        *extra,
        cwd=cwd,
        env={"AUTOTUNE_FAULT": fault} if fault else None,
    )


def _kill_9_then_resume(
    tmp_path: Path, write_yaml, storage_args: tuple[str, ...], storage: str
) -> None:
    path = write_yaml(
        tiny(space={"micro_batch_size": [2, 4], "precision": "fp32"}, study={"trials": 2})
    )
    out = tmp_path / "out"
    proc = _launch(path, out, tmp_path, *storage_args, fault="hang@micro_batch_size=4")
    hanging = out / "t" / "runs" / "0001" / "spec.json"
    interrupt_when_running(proc, lambda: [hanging] if hanging.exists() else [], sig=signal.SIGKILL)
    none_left(str(hanging))  # the trial died with its parent: nothing keeps the device
    again = run_cli(
        "search", str(path), "--out", str(out), "--device", "cpu", *storage_args, cwd=tmp_path
    )
    assert again.returncode == 0, again.stdout + again.stderr
    trials = optuna.load_study(study_name="t", storage=storage).get_trials()
    assert [t.user_attrs.get("status") for t in trials] == ["ok", "worker_lost", "ok"]
    assert trials[1].state == optuna.trial.TrialState.FAIL
    assert trials[2].params == {"micro_batch_size": 4}  # the lost configuration is measured again


# .ci/run starts a PostgreSQL server on loopback and sets this
PG = os.environ.get("AUTOTUNE_TEST_PG")
needs_pg = pytest.mark.skipif(not PG, reason="no PostgreSQL server (AUTOTUNE_TEST_PG unset)")


def _pg_url(tmp_path: Path) -> str:
    """A fresh database per test on the CI's PostgreSQL server, named for the test and its pytest
    process (two xdist workers number their tmp_path folders alike)."""
    import sqlalchemy

    name = f"t_{os.getpid()}_" + tmp_path.name.replace("-", "_").lower()[-40:]
    engine = sqlalchemy.create_engine(PG, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return PG.rsplit("/", 1)[0] + "/" + name


def test_workers_kill_9_then_resume_sqlite(tmp_path: Path, write_yaml) -> None:
    _kill_9_then_resume(
        tmp_path, write_yaml, (), f"sqlite:///{tmp_path / 'out' / 't' / 'study.db'}"
    )


def test_workers_kill_9_then_resume_journal(tmp_path: Path, write_yaml) -> None:
    journal = f"journal:{tmp_path / 'shared' / 'study.log'}"
    _kill_9_then_resume(tmp_path, write_yaml, ("--storage", journal), storage_of(journal))


@needs_pg
def test_workers_kill_9_then_resume_postgresql(tmp_path: Path, write_yaml) -> None:
    url = _pg_url(tmp_path)
    _kill_9_then_resume(tmp_path, write_yaml, ("--storage", url), url)


@pytest.mark.parametrize("kind", ["sqlite", "journal", pytest.param("postgresql", marks=needs_pg)])
def test_workers_two_processes_share_one_study(tmp_path: Path, write_yaml, kind: str) -> None:
    path = write_yaml(
        tiny(
            space={"micro_batch_size": [1, 2, 4, 8], "precision": ["fp32", "bf16"]},
            baseline={"micro_batch_size": 1},
            # 4 of the 8 points (was 5): both workers draw with the same seed (0), so points they
            # would both measure come early, not only near the end of the space
            study={"trials": 4},
        )
    )
    storage = {
        "sqlite": f"sqlite:///{tmp_path / 'shared.db'}",
        "journal": f"journal:{tmp_path / 'shared.log'}",
        "postgresql": PG and _pg_url(tmp_path),
    }[kind]
    a = _launch(path, tmp_path / "a", tmp_path, "--storage", storage)
    b = _launch(path, tmp_path / "b", tmp_path, "--storage", storage)
    assert a.wait(timeout=300) == 0, a.communicate()[1]
    assert b.wait(timeout=300) == 0, b.communicate()[1]
    trials = optuna.load_study(study_name="t", storage=storage_of(storage)).get_trials()
    measured = [t for t in trials if t.user_attrs.get("status") == "ok"]
    keys = [tuple(sorted(t.params.items())) for t in measured]
    assert len(keys) == len(set(keys))  # no configuration measured twice
    # the budget, at most one over when both launch at the same instant
    assert 4 <= len(measured) <= 5
    # nothing left running
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    hosts = {t.user_attrs["worker"]["pid"] for t in measured}
    assert len(hosts) == 2  # both workers measured


def test_workers_refuse_other_yaml_on_shared_study(tmp_path: Path, write_yaml) -> None:
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    path = write_yaml(
        tiny(space={"micro_batch_size": [2], "precision": "fp32"}, baseline={}, study={"trials": 1})
    )
    assert (
        run_cli(
            "search",
            str(path),
            "--out",
            str(tmp_path / "a"),
            "--device",
            "cpu",
            "--storage",
            storage,
            cwd=tmp_path,
        ).returncode
        == 0
    )
    other = write_yaml(
        tiny(
            space={"micro_batch_size": [4], "precision": "fp32"},
            baseline={"micro_batch_size": 4},
            study={"trials": 1},
        ),
        "other.yaml",
    )
    proc = run_cli(
        "search",
        str(other),
        "--out",
        str(tmp_path / "b"),
        "--device",
        "cpu",
        "--storage",
        storage,
        cwd=tmp_path,
    )
    assert (
        proc.returncode == 2 and "exists with a different model, workload or space" in proc.stderr
    )


def test_workers_credentials_masked_in_errors(tmp_path: Path, write_yaml) -> None:
    assert (
        mask_url("postgresql://tuner:s3cret@db.example/autotune")
        == "postgresql://tuner:***@db.example/autotune"
    )
    assert mask_url("journal:/shared/study.log") == "journal:/shared/study.log"
    path = write_yaml(
        tiny(space={"micro_batch_size": [2], "precision": "fp32"}, baseline={}, study={"trials": 1})
    )
    url = "postgresql+psycopg2://tuner:s3cret@127.0.0.1:1/nodb"  # nothing listens on port 1
    proc = run_cli(
        "search",
        str(path),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        "--storage",
        url,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "tuner:***@127.0.0.1:1/nodb" in proc.stderr and "s3cret" not in proc.stdout + proc.stderr


@needs_pg
def test_workers_credentials_never_shown(tmp_path: Path, write_yaml) -> None:
    # trust auth: the password is not checked
    url = _pg_url(tmp_path).replace("postgres@", "postgres:s3cret@")
    path = write_yaml(
        tiny(space={"micro_batch_size": [2], "precision": "fp32"}, baseline={}, study={"trials": 1})
    )
    proc = run_cli(
        "search",
        str(path),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        "--storage",
        url,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    report = run_cli("report", "--study", "t", "--storage", url, "--format", "json", cwd=tmp_path)
    written = [p.read_text(errors="replace") for p in (tmp_path / "out").rglob("*") if p.is_file()]
    for text in (proc.stdout, proc.stderr, report.stdout, report.stderr, *written):
        assert "s3cret" not in text
    assert (
        "postgres:***@"
        in yaml.safe_load((tmp_path / "out" / "t" / "best.yaml").read_text())["study"]["storage"]
    )
    assert "s3cret" not in str(optuna.load_study(study_name="t", storage=url).user_attrs)


def test_workers_parallel_trials_on_two_cpu_workers(tmp_path: Path, write_yaml) -> None:
    path = write_yaml(
        tiny(
            space={"micro_batch_size": [1, 2, 4, 8], "precision": ["fp32", "bf16"]},
            baseline={"micro_batch_size": 1},
            study={"trials": 4},
        )
    )
    proc = run_cli(
        "search",
        str(path),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        "--gpus",
        "0,1",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = load_trials(tmp_path / "out")
    measured = [t for t in trials if t.user_attrs.get("status") == "ok"]
    assert 4 <= len(measured) <= 5
    assert {t.user_attrs["gpu"] for t in measured} == {"0", "1"}  # both slots used
    assert any(t.user_attrs["overlapped_with"] for t in measured)  # trials really ran side by side
    keys = [tuple(sorted(t.params.items())) for t in measured]
    assert len(keys) == len(set(keys))


def test_workers_parallel_ctrl_c_ends_every_trial(tmp_path: Path, write_yaml) -> None:
    path = write_yaml(
        tiny(
            space={"micro_batch_size": [1, 2, 4, 8], "precision": "fp32"},
            baseline={"micro_batch_size": 1},
            study={"trials": 4},
        )
    )
    out = tmp_path / "out"
    proc = _launch(path, out, tmp_path, "--gpus", "0,1", fault="hang")
    runs = out / "t" / "runs"
    _, err = interrupt_when_running(proc, lambda: sorted(runs.glob("*/spec.json")), count=2)
    assert proc.returncode == 130, err
    none_left(str(runs))  # no trial process left
    trials = load_trials(out)
    launched = [
        t.user_attrs.get("status")
        for t in trials
        if t.user_attrs.get("status") not in (None, "duplicate", "skipped")
    ]
    # both running trials; a sampler repeat may be recorded beside them
    assert launched == ["interrupted", "interrupted"]
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
