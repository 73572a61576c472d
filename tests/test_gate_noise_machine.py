"""Issue 62, items 2 and 4: check sees a CPU-bound job's disturbance (a repeat's processes that
waited for a CPU: the kernel's run-queue account, conditions.CpuWatch), and --reset-baseline and
--update judge the machine they measure on as check does, recording nothing beside other work. Real
processes: a job whose speed a file sets, beside a real CPU hog (tests/gate_noise_job.py); the
host's load and the GPU's processes through check's own sampling seam (conditions.sample)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from gate_noise_job import check, copy, hog, searched, set_plan, started

from autotune.check import conditions, regress

# The hog tests judge the CPU account alone: the load average (a 1-minute mean) stays unjudged
# below 50 per core, as a hog's is under 2 (the issue's), and the rest of this shared machine's is
NO_LOAD_LIMIT = ("--max-load", "50")
WAITED = "'s processes waited for a CPU "
# the baseline of a CPU-bound job on this shared machine, whatever its spread or the host's state:
# not what these test
ANY_BASELINE = ("--tolerance", "100", "--max-load", "0")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return searched(tmp_path_factory)


def _account(repeat: int, cpu_s: float, wait_s: float) -> dict:
    wait_pct = round(100 * wait_s / (cpu_s + wait_s), 1)
    return {"repeat": repeat, "pid": 7, "cpu_s": cpu_s, "wait_s": wait_s, "wait_pct": wait_pct}


QUIET = {"load_1min": 1.0, "cpus": 2, "gpu_processes": None}


def test_gate_noise_a_repeat_that_waited_for_a_cpu_is_disturbed() -> None:
    """The rule: past 20% of the time ready to run spent waiting, the worst repeat named; 0
    (--max-load 0) leaves the host unjudged; a repeat unread (None) says nothing."""
    assert conditions.CPU_WAIT_LIMIT_PCT == 20.0
    cpu = [_account(0, 2.0, 0.1), _account(1, 1.0, 1.2), _account(2, 1.0, 0.4), None]
    assert conditions.disturbances([QUIET] * 5, cpu=cpu) == [
        "repeat 2's processes waited for a CPU 54% of the time they were ready to run (1.0 s on a "
        "CPU, 1.2 s waiting; limit 20%): other work took the cores (and 1 other repeat)"
    ]
    assert conditions.disturbances([QUIET] * 5, cpu=cpu[:1] + [None]) == []
    assert conditions.disturbances([QUIET] * 5, max_load=0, cpu=cpu) == []
    assert conditions.disturbances([QUIET] * 5) == []  # callable as before: no accounts


def test_gate_noise_cpu_watch_reads_a_real_process() -> None:
    """CpuWatch on a real busy child found by its command line: its CPU seconds and waits; a
    process that never appears reads as nothing (None)."""
    needle = f"gate-noise-watch-{os.getpid()}-{time.monotonic_ns()}"
    code = "import time, sys\nt = time.monotonic()\nwhile time.monotonic() - t < 1.5: pass"
    with conditions.CpuWatch(needle, 0) as watch:
        child = subprocess.Popen([sys.executable, "-c", code, needle])
        child.wait()
    account = watch.account()
    assert account is not None and account["repeat"] == 0, watch.seen
    assert account["cpu_s"] + account["wait_s"] >= 1.0 and 0 <= account["wait_pct"] < 100
    with conditions.CpuWatch("no process names this", 0) as nothing:
        time.sleep(0.5)
    assert nothing.account() is None


@pytest.mark.slow
def test_gate_noise_a_hog_that_slows_a_cpu_job_is_disturbed(project: Path, tmp_path: Path) -> None:
    """Beside a hog that halves a CPU-bound job's speed the check is unreliable (exit 3), the wait
    named, not a regression; each repeat's wait said on stderr."""
    best = copy(project, tmp_path, "1", busy=True)
    assert check(best, "--reset-baseline", "--repeats", "3", *ANY_BASELINE).returncode == 0
    set_plan(best, "1", busy=True)
    with hog():
        proc = check(best, "--repeats", "3", "--tolerance", "20", *NO_LOAD_LIMIT)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.startswith("unreliable: "), proc.stdout
    assert WAITED in proc.stdout and "host load" not in proc.stdout
    assert "waited for a CPU " in proc.stderr.splitlines()[0]
    night = yaml.safe_load((best.parent / "history.jsonl").read_text().splitlines()[-1])
    assert night["status"] == "unreliable"
    assert any(r["cpu"] and r["cpu"]["wait_pct"] > 20 for r in night["repeats"])


@pytest.mark.slow
def test_gate_noise_a_reset_beside_a_hog_records_nothing(project: Path, tmp_path: Path) -> None:
    """The issue's reset beside a CPU hog recorded a baseline 55% low: now refused at the first
    repeat that waited (no more are started), exit 3, one line, best.yaml untouched."""
    best = copy(project, tmp_path, "1", busy=True)
    before = best.read_bytes()
    with hog():
        proc = check(best, "--reset-baseline", "--repeats", "3", *NO_LOAD_LIMIT)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("error: the baseline was not recorded: measured beside other work (")
    assert WAITED in error and "record it again on a quiet machine" in error
    assert best.read_bytes() == before and proc.stdout == ""
    assert len(started(best)) < 3  # stopped after the first disturbed repeat


@pytest.mark.slow
def test_gate_noise_an_update_beside_a_hog_records_nothing(project: Path, tmp_path: Path) -> None:
    """A check at a tolerance wide enough to pass a job slowed by a hog (90%) no longer records
    its slowed samples as the new baseline: unreliable, exit 3, the baseline as it was."""
    best = copy(project, tmp_path, "1", busy=True)
    assert check(best, "--reset-baseline", "--repeats", "3", *ANY_BASELINE).returncode == 0
    baseline = yaml.safe_load(best.read_text())["check_baseline"]
    set_plan(best, "1", busy=True)
    with hog():
        proc = check(best, "--repeats", "3", "--tolerance", "90", "--update", *NO_LOAD_LIMIT)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.startswith("unreliable: ") and WAITED in proc.stdout
    assert "--update: not recorded, the check was disturbed" in proc.stdout
    assert yaml.safe_load(best.read_text())["check_baseline"] == baseline


def _sampled(monkeypatch: pytest.MonkeyPatch, **seen: object) -> None:
    """check's sampling of the conditions with the host's load average or the GPU's processes as
    given (the seams of conditions.sample; the rest read from this machine)."""
    real = conditions.sample
    loadavg = seen.pop("loadavg", None)

    def sample(device: str) -> dict:
        now = real(device, loadavg=loadavg) if loadavg else real(device)
        return {**now, **seen}

    monkeypatch.setattr(conditions, "sample", sample)


@pytest.mark.slow
@pytest.mark.parametrize(
    "seen, named",
    [
        ({"loadavg": lambda: (50.0, 40.0, 30.0)}, "host load 25.00 per core before repeat 1"),
        ({"gpu_processes": [{"pid": 4242, "name": "python3", "used_mib": 20480}]}, "pid 4242"),
    ],
    ids=["load", "gpu-process"],
)
def test_gate_noise_a_reset_on_a_disturbed_host_records_nothing(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seen: dict, named: str
) -> None:
    """A load past --max-load or another process on the GPU before the first repeat: refused
    before anything is measured (regress.reset_baseline, in this process)."""
    from autotune.errors import BaselineRefused

    best = copy(project, tmp_path, "1")
    before = best.read_bytes()
    _sampled(monkeypatch, **seen)
    with pytest.raises(BaselineRefused, match=r"^the baseline was not recorded: measured beside "):
        regress.reset_baseline(best, repeats=2)
    assert best.read_bytes() == before and started(best) == []
    with pytest.raises(BaselineRefused, match=named):
        regress.reset_baseline(best, repeats=2)
