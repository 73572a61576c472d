"""Nothing a trial starts outlives it, even a daemon in its own session whose trial killed or stopped its own
supervisor (orphans.py: autotune is the subreaper, and sweeps the strangers among its children)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import yaml

from autotune.config_load import load_config
from autotune.search.loop import run_search
from conftest import alive

ESCAPE = Path(__file__).parent / "data" / "jobs" / "escape.py"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux's")
@pytest.mark.parametrize("how", ["kill", "stop"])
def test_orphans_a_daemon_whose_trial_escaped_its_supervisor_is_ended(tmp_path: Path, how: str) -> None:
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
