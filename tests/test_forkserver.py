"""The fork server (workloads/zygote.py, launch/forkserver.py): each trial's process forked from one
that imported torch once, as alone as a process started from scratch. Real processes, real torch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import load_trials, none_left, run_cli, tiny

from autotune.launch import forkserver

TESTS = str(Path(__file__).parent)
pytestmark = pytest.mark.slow  # each server imports torch (seconds)


def _env(**more: str) -> dict[str, str]:
    path = os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, **more}


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("forks")
    yield folder
    forkserver.close_all()


def _fork(logs: Path, what: str, **env: str) -> tuple[forkserver.Forked, Path]:
    out = logs / f"{what}-{time.monotonic_ns()}.json"
    forked = forkserver.fork(
        "fake_fork_job", [what, str(out)], _env(**env), out.with_suffix(".log"), logs
    )
    assert isinstance(forked, forkserver.Forked), forked
    return forked, out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def test_forkserver_a_fork_starts_in_its_own_session_with_torch_imported(logs: Path) -> None:
    forked, out = _fork(logs, "ok", FAKE_FORK_VAR="mine", CUDA_VISIBLE_DEVICES="3")
    assert forked.wait(timeout=120) == 0
    seen = json.loads(out.read_text())
    assert seen["torch_imported"]  # imported by the server, not by the job
    assert seen["ppid"] == forked.pid  # the trial runs under its own supervisor
    assert seen["sid"] == seen["pgid"] == forked.pid  # whose session is the trial's alone
    assert (seen["env"], seen["cuda"]) == ("mine", "3")  # the job's environment, read at fork time
    assert seen["cwd"] == os.getcwd()


def test_forkserver_a_job_leaves_nothing_to_the_next(logs: Path) -> None:
    first, out1 = _fork(logs, "leak", FAKE_FORK_VAR="first")
    assert first.wait(timeout=120) == 0
    second, out2 = _fork(logs, "ok")
    assert second.wait(timeout=60) == 0
    seen = json.loads(out2.read_text())
    assert seen["seen"] == ["ok"]  # module state of its own, not the leak's
    assert seen["env"] is None and seen["cuda"] is None  # nor the variables the first one changed
    server = forkserver.server(_env(), logs)
    rss_kib = int(Path(f"/proc/{server.proc.pid}/status").read_text().split("VmRSS:")[1].split()[0])
    assert rss_kib < 2 * 2**20  # the 256 MiB the job held stayed in its process


def test_forkserver_exits_and_crashes_read_as_a_fresh_process_would(logs: Path) -> None:
    codes = {}
    for what in ("exit3", "crash", "raise"):
        forked, _ = _fork(logs, what)
        codes[what] = forked.wait(timeout=120)
    assert codes == {"exit3": 3, "crash": -signal.SIGABRT, "raise": 1}
    after, _ = _fork(logs, "ok")  # the server forks on after its trials crashed
    assert after.wait(timeout=60) == 0
    raised = next(p for p in logs.glob("raise-*.log"))
    assert "RuntimeError: the job raised" in raised.read_text()


def test_forkserver_a_hung_trial_and_its_daemon_end_with_its_group(logs: Path) -> None:
    forked, out = _fork(logs, "daemon")
    deadline = time.monotonic() + 120
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    seen = json.loads(out.read_text())
    with pytest.raises(subprocess.TimeoutExpired):
        forked.wait(timeout=0.5)
    os.killpg(forked.pid, signal.SIGTERM)  # what run_trial does at the trial's time limit
    assert forked.wait(timeout=30) == 128 + signal.SIGTERM  # the supervisor ended all, then left
    assert _gone(seen["pid"]) and _gone(seen["daemon"])  # the trial and what it left


def test_forkserver_a_killed_server_ends_its_trials_and_is_replaced(logs: Path) -> None:
    forked, out = _fork(logs, "hang")
    deadline = time.monotonic() + 120
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    trial = json.loads(out.read_text())["pid"]
    server = forkserver.server(_env(), logs)
    os.kill(server.proc.pid, signal.SIGKILL)
    assert forked.wait(timeout=30) < 0  # read as killed
    assert _gone(forked.pid) and _gone(trial)  # its supervisor's death signal ended the trial
    again, _ = _fork(logs, "ok")  # a new server takes the next trial
    assert again.wait(timeout=120) == 0
    assert forkserver.server(_env(), logs).proc.pid != server.proc.pid


def test_forkserver_dies_with_autotune_and_so_do_its_trials(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import json, os, sys, time
        from pathlib import Path
        from autotune.launch import forkserver
        path = {TESTS!r} + os.pathsep + os.environ.get("PYTHONPATH", "")
        env = {{**os.environ, "PYTHONPATH": path}}
        out = Path({str(tmp_path)!r}) / "seen.json"
        log = out.with_suffix(".log")
        forked = forkserver.fork("fake_fork_job", ["hang", str(out)], env, log, out.parent)
        while not out.exists():
            time.sleep(0.05)
        server = forkserver.server(env, out.parent)
        trial = json.loads(out.read_text())["pid"]
        print(json.dumps([server.proc.pid, forked.pid, trial]), flush=True)
        os.kill(os.getpid(), 9)  # autotune killed without a chance to clean up
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180
    )
    pids = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(_gone(pid) for pid in pids), pids  # server, supervisor and trial


def test_forkserver_keys_servers_by_the_environment_torch_reads_at_import(logs: Path) -> None:
    base = _env()
    same = forkserver.import_key({**base, "CUDA_VISIBLE_DEVICES": "1", "NCCL_ALGO": "Ring"})
    assert same == forkserver.import_key(base)  # read once a trial runs: one server for both
    assert forkserver.import_key({**base, "TORCHINDUCTOR_CACHE_DIR": "/elsewhere"}) != same


def test_zygote_refuses_to_fork_beside_another_thread() -> None:
    script = textwrap.dedent(
        """
        import threading
        from autotune.workloads import zygote
        print(repr(zygote.unsafe()))
        stop = threading.Event()
        threading.Thread(target=stop.wait).start()
        print(repr(zygote.unsafe()))
        stop.set()
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    alone, beside = proc.stdout.splitlines()
    assert alone == "''" and "runs 2 threads" in beside, proc.stdout + proc.stderr


def test_forkserver_a_search_and_its_confirmation_fork_their_processes(
    tmp_path: Path, write_yaml
) -> None:
    cfg = tiny(
        space={"micro_batch_size": [2, 4], "precision": ["fp32"]},
        study={
            "trials": 2,
            "sampler": "grid",
            "confirm_top": 1,
            "confirm_rounds": 2,
            "fork_server": True,
        },
    )
    proc = run_cli("search", str(write_yaml(cfg)), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    trials = sorted(load_trials(tmp_path / "out"), key=lambda t: t.number)
    records = [t.user_attrs for t in trials]
    assert [r["forked"] for r in records] == [True, True]
    # the first waited for the server's imports; the next paid none of its own
    assert records[1]["phases_s"]["start"] < 1.0, records[1]["phases_s"]
    assert all(r["metrics"]["first_step_s"] > 0 for r in records)
    none_left(str(tmp_path / "out"))  # no server outlives the search
    study = tmp_path / "out" / "t"
    report = run_cli("report", str(study), cwd=tmp_path)
    assert report.returncode == 0 and "forked from the fork server" in report.stdout
    check = run_cli(
        "check", str(study / "best.yaml"), "--repeats", "2", "--max-repeats", "0", cwd=tmp_path
    )
    assert check.returncode in (0, 1, 5), check.stdout + check.stderr
    # check's repeats start cold while the fork server is opt-in (study.fork_server)
    assert list(study.glob("checks/*/*/result.json"))
    none_left(str(study))
