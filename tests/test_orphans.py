"""Nothing a trial starts outlives it, even a daemon in its own session whose trial killed or
stopped its own supervisor (launch/orphans.py: autotune is the subreaper, and sweeps the strangers
among its children)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import alive

from autotune.job import load_config
from autotune.search.run import run_search

ESCAPE = Path(__file__).parent / "data" / "jobs" / "escape.py"


@pytest.mark.slow
@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux's"
)
@pytest.mark.parametrize("how", ["kill", "stop"])
def test_orphans_a_daemon_whose_trial_escaped_its_supervisor_is_ended(
    tmp_path: Path, how: str
) -> None:
    pidfile = tmp_path / "daemon.pid"
    doc = {
        "name": "escape",
        "workload": {"task": "command", "warmup_steps": 1, "measure_steps": 2},
        "command": {"argv": ["{python}", str(ESCAPE), "--how", how, "--pidfile", str(pidfile)]},
        "space": {},
        "study": {"trials": 1, "confirm_top": 0, "trial_timeout_min": 0.25},
    }
    path = tmp_path / "escape.yaml"
    path.write_text(yaml.safe_dump(doc))
    run_search(load_config(path), out_root=tmp_path / "trials", device="cpu")
    daemon = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while alive(daemon) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(daemon)


def test_orphans_leftover_checks_see_this_tests_processes_only(tmp_path: Path) -> None:
    """conftest.processes_with, what every leftover check looks through: it finds this test's
    orphan in a session of its own (its parent gone, as after a kill -9), and never a process of
    another test (another mark), though both name the same folder."""
    import os
    import signal
    import subprocess

    from conftest import SCOPE, processes_with, wait_until

    needle = str(tmp_path / "sleeper")
    sleep = [sys.executable, "-c", "import time; time.sleep(120)", needle]
    escape = f"import subprocess; subprocess.Popen({sleep!r}, start_new_session=True)"
    subprocess.run([sys.executable, "-c", escape], check=True, timeout=60)  # exits at once
    other = subprocess.Popen(sleep, env={**os.environ, SCOPE: "another test"})
    try:
        (orphan,) = wait_until(lambda: processes_with(needle), 30, "the orphan")
        assert int(orphan) != other.pid
        session = int(Path(f"/proc/{orphan}/stat").read_text().rsplit(")", 1)[1].split()[3])
        assert session == int(orphan) != os.getsid(0)  # a session of its own: not found by ours
        os.kill(int(orphan), signal.SIGKILL)
        wait_until(lambda: not alive(int(orphan)), 30, "the orphan's end")
        assert processes_with(needle) == []  # the other test's sleeper is not this test's
    finally:
        other.kill()
        other.wait()
