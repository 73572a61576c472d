"""Trial processes started ahead (launch/prestart.py): a trial takes the waiting process of its
environment, still one fresh process per trial; anything else starts cold; nothing waits on after
autotune is done (real processes)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from conftest import alive, load_trials, none_left, processes_with, run_cli, tiny, wait_until
from test_trial import _spec

from autotune.launch import prestart
from autotune.launch.runner import run_trial

# every test here runs searches, checks or several processes: `make test-fast` leaves them out
pytestmark = pytest.mark.slow


def _trial(tmp_path: Path, name: str, env: dict[str, str], **knobs):
    return run_trial(
        _spec(**knobs),
        tmp_path / name,
        timeout_s=120,
        env={"TMPDIR": str(tmp_path / "tmp"), **env},
        ahead=True,
    )


def test_prestart_takes_the_process_of_the_same_environment_only(tmp_path: Path) -> None:
    try:
        first = _trial(tmp_path, "a", {"AUTOTUNE_TEST_ENV": "1"})
        same = _trial(tmp_path, "b", {"AUTOTUNE_TEST_ENV": "1"}, micro_batch_size=1)
        other = _trial(tmp_path, "c", {"AUTOTUNE_TEST_ENV": "2"})
        # the slot's processes of the old environment were ended: DEPTH wait (each a supervisor and
        # its trial)
        wait_until(
            lambda: len(processes_with(str(tmp_path / "tmp"))) == 2 * prestart.DEPTH,
            30,
            "the old ones ending",
        )
    finally:
        prestart.dismiss_all()
    assert [o.status for o in (first, same, other)] == ["ok"] * 3, [
        o.reason for o in (first, same, other)
    ]
    assert (first.prestarted, same.prestarted, other.prestarted) == (False, True, False)
    # the process started ahead ran the second trial: its own configuration, its own log and pid
    # micro-batch 2, then 1
    assert (first.result.tokens_per_step, same.result.tokens_per_step) == (64, 32)
    assert (tmp_path / "b" / "worker.log").is_file()
    none_left(str(tmp_path / "tmp"))
    # the waiting processes' logs are removed
    assert not list((tmp_path / "tmp").glob("standby-*.log"))


def test_prestart_dead_standby_falls_back_to_a_cold_start(tmp_path: Path) -> None:
    env = {"AUTOTUNE_TEST_ENV": "dead"}
    try:
        assert _trial(tmp_path, "a", env).status == "ok"
        pids = wait_until(lambda: processes_with(str(tmp_path / "tmp")), 30, "the standby process")
        for pid in pids:
            os.kill(int(pid), signal.SIGKILL)
        # dead, not dying: a killed process's command line is empty before its parent can reap it,
        # and a standby taken in that window is handed the trial and dies under it (the flake of CI
        # stop 43)
        wait_until(
            lambda: not any(alive(int(pid)) for pid in pids), 30, "the killed standbys' exit"
        )
        none_left(str(tmp_path / "tmp"))
        after = _trial(tmp_path, "b", env)
    finally:
        prestart.dismiss_all()
    assert after.status == "ok", after.reason
    assert after.prestarted is False


def test_prestart_standby_ended_before_it_read_its_trial_falls_back_to_a_cold_start(
    tmp_path: Path, monkeypatch
) -> None:
    """A standby alive when taken but ended after it was handed its trial, before it read it (the
    OOM killer at that instant), is not the trial's crash: the trial starts cold and runs. Made
    exact with signals: stopped before the hand-over (alive, not reading), killed after it."""
    real = prestart.Standby.activate

    def ended_unread(self, spec_path, result_path, log_path):
        os.killpg(self.proc.pid, signal.SIGSTOP)
        proc = real(self, spec_path, result_path, log_path)
        os.killpg(self.proc.pid, signal.SIGKILL)
        return proc

    env = {"AUTOTUNE_TEST_ENV": "unread"}
    try:
        assert _trial(tmp_path, "a", env).status == "ok"
        monkeypatch.setattr(prestart.Standby, "activate", ended_unread)
        after = _trial(tmp_path, "b", env)
    finally:
        prestart.dismiss_all()
    assert after.status == "ok", after.reason
    assert after.prestarted is False
    none_left(str(tmp_path / "tmp"))


def test_prestart_search_runs_trials_from_started_processes_and_leaves_none(
    tmp_path: Path, write_yaml
) -> None:
    cfg = tiny(
        space={"micro_batch_size": [2, 4, 8], "precision": ["fp32"]},
        study={"trials": 3, "sampler": "grid", "prestart": True, "confirm_top": 0},
    )
    proc = run_cli("search", str(write_yaml(cfg)), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    records = [t.user_attrs for t in sorted(load_trials(tmp_path / "out"), key=lambda t: t.number)]
    assert [r["status"] for r in records] == ["ok"] * 3
    assert [r["prestarted"] for r in records] == [False, True, True]
    none_left(str(tmp_path / "out"))
    report = run_cli("report", str(tmp_path / "out" / "t"), cwd=tmp_path)
    assert report.returncode == 0 and "2 of 3 started ahead" in report.stdout, report.stdout
    assert "2 of 3 started ahead" in (tmp_path / "out" / "t" / "report" / "report.html").read_text()
    assert not list((tmp_path / "out" / "t" / "tmp").glob("standby-*.log"))


def test_prestart_standby_without_a_trial_exits_on_eof(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "autotune.workloads.trial", prestart.STANDBY_FLAG],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


def test_prestart_kill_9_of_autotune_leaves_no_waiting_process(tmp_path: Path, write_yaml) -> None:
    from conftest import start_cli

    cfg = tiny(
        space={"micro_batch_size": [2, 4, 8], "precision": ["fp32"]},
        study={"trials": 3, "sampler": "grid", "prestart": True, "confirm_top": 0},
        workload={"measure_steps": 200},
    )
    proc = start_cli("search", str(write_yaml(cfg)), "--out", str(tmp_path / "out"), cwd=tmp_path)
    try:
        wait_until(
            lambda: processes_with(f"{tmp_path / 'out'}/t/tmp/standby-"),
            120,
            "a process started ahead",
        )
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    none_left(str(tmp_path / "out"), 15)
