"""Shared by tests/test_gate_noise_*.py (issue 62): a user's job on the CPU whose speed a file sets,
its study searched once, and a CPU hog.

The job reports steps through autotune.reporting. plan.txt: one factor a process, in turn (a step
takes the factor times as long); busy.txt present: a step is a fixed count of loop iterations (CPU
bound: its time is the cycles it gets), else a sleep of STEP_S (a shared CPU's swings barely move
it)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import built_once, run_cli

JOB = """
import time
from pathlib import Path
from autotune import reporting

here = Path(__file__).parent
plan = (here / "plan.txt").read_text().split() if (here / "plan.txt").exists() else ["1"]
started = here / "started.txt"
n = len(started.read_text().split()) if started.exists() else 0
factor = float(plan[n % len(plan)])
with started.open("a") as f:
    f.write(f"{factor:g}\\n")
busy = (here / "busy.txt").exists()
while True:
    if busy:
        for _ in range(int(400_000 * factor)):
            pass
    else:
        time.sleep(0.03 * factor)
    if reporting.step(tokens=100):
        break
"""


def _build(folder: Path) -> None:
    """The job's study, searched once (one trial, no confirmation)."""
    (folder / "job.py").write_text(JOB)
    doc = {
        "name": "job",
        "workload": {"task": "command", "warmup_steps": 2, "measure_steps": 6},
        "command": {"argv": ["{python}", "job.py"]},
        "space": {},
        "study": {"trials": 1, "seed": 0, "confirm_top": 0, "trial_timeout_min": 2},
    }
    (folder / "job.yaml").write_text(yaml.safe_dump(doc))
    proc = run_cli("search", "job.yaml", "--out", "trials", "--device", "cpu", cwd=folder)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The searched project's folder, built once for the run (conftest.built_once)."""
    return built_once(tmp_path_factory, "gate-noise-job", _build)


def copy(project: Path, tmp_path: Path, plan: str, busy: bool = False) -> Path:
    """The project copied (best.yaml names its folder relative to itself) with this plan; its
    best.yaml."""
    folder = tmp_path / "proj"
    shutil.copytree(project, folder, ignore=shutil.ignore_patterns("started.txt", "checks"))
    set_plan(folder / "trials" / "job" / "best.yaml", plan, busy)
    return folder / "trials" / "job" / "best.yaml"


def set_plan(best: Path, plan: str, busy: bool = False) -> None:
    """The job's plan from its next process on (the plan starts again), CPU bound or sleeping."""
    folder = best.parents[2]
    (folder / "plan.txt").write_text(plan)
    (folder / "started.txt").unlink(missing_ok=True)
    (folder / "busy.txt").unlink(missing_ok=True)
    if busy:
        (folder / "busy.txt").write_text("")


def check(best: Path, *options: str) -> subprocess.CompletedProcess:
    """`autotune check BEST OPTIONS...`, the real command, in the project's folder."""
    return run_cli("check", str(best), *options, cwd=best.parents[2])


def started(best: Path) -> list[str]:
    """The factors of the job's processes started since the plan was set."""
    path = best.parents[2] / "started.txt"
    return path.read_text().split() if path.exists() else []


@contextlib.contextmanager
def hog() -> Iterator[None]:
    """Busy loops, two for each CPU this process may use: a single-threaded job beside them gets
    about a third to a half of a core. Ended (by their own pids) on the way out."""
    cpus = len(os.sched_getaffinity(0))
    loops = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(2 * cpus)
    ]
    try:
        yield
    finally:
        for p in loops:
            p.kill()
        for p in loops:
            p.wait()
