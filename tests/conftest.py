"""Shared fixtures and helpers: a tiny model YAML, the real CLI in a subprocess, polling with a deadline."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

# Device locks of this test session apart from any other autotune process on the machine (locks.py): a test
# never waits on a real search, and a search never waits on the tests. setdefault: a session may choose its own.
os.environ.setdefault("AUTOTUNE_LOCK_NAMESPACE", f"tests-{os.getpid()}")

TINY: dict[str, Any] = {
    "name": "t",
    "model": {"family": "gpt", "n_layers": 1, "d_model": 32, "n_heads": 2, "vocab_size": 128, "seq_len": 16},
    "workload": {"task": "train", "global_batch_size": 8, "world_size": 1, "warmup_steps": 1, "measure_steps": 2},
    "space": {"micro_batch_size": [2, 4, 8], "precision": ["fp32", "bf16"], "grad_accum_steps": "auto",
              "compile": False},
    "study": {"trials": 3, "timeout_min": 5, "sampler": "tpe", "seed": 0, "trial_timeout_min": 2, "confirm_rounds": 0},
    "baseline": {"micro_batch_size": 2, "precision": "fp32"},
}


def tiny(**overrides: Any) -> dict[str, Any]:
    """The tiny config with sections merged from overrides (section=dict) or top-level keys replaced."""
    data = copy.deepcopy(TINY)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


@pytest.fixture
def write_yaml(tmp_path: Path):
    def write(data: Any, name: str = "model.yaml") -> Path:
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
        return path

    return write


def _env(env: dict[str, str] | None) -> dict[str, str]:
    """The test's environment for a child: AUTOTUNE_FAULT only when the test sets it."""
    full = {**os.environ, "COLUMNS": "200"}
    full.pop("AUTOTUNE_FAULT", None)
    return {**full, **(env or {})}


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """The real `autotune` command in a subprocess (exit codes, signals and files are real)."""
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=cwd, env=_env(env),
                          capture_output=True, text=True, timeout=timeout)


def start_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The real `autotune` command, started in the background (to be interrupted or killed)."""
    return subprocess.Popen([sys.executable, "-m", "autotune.cli", *args], cwd=cwd, env=_env(env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_until(condition: Callable[[], Any], seconds: float = 120, what: str = "the condition") -> Any:
    """Poll until condition() is true (returns its value); fail the test after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {seconds} s")
        time.sleep(0.2)


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def processes_with(needle: str) -> list[str]:
    """Pids of processes whose command line contains needle (found through /proc)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if needle in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode():
                found.append(pid)
        except OSError:
            pass
    return found


def none_left(needle: str, seconds: float = 15) -> None:
    """Assert that no process naming needle is left (they may take a moment to exit)."""
    wait_until(lambda: not processes_with(needle), seconds, f"the end of every process naming {needle}")


def interrupt_when_running(proc: subprocess.Popen, spec_files: Callable[[], list[Path]], count: int = 1,
                           sig: int = signal.SIGINT) -> tuple[str, str]:
    """Send `sig` once `count` trial processes have started training (their spec files exist and the trial
    process has got past its start), then wait for the command to end; returns its output."""
    specs = wait_until(lambda: (lambda found: found if len(found) >= count else None)(spec_files()),
                       what=f"{count} trial(s) starting")
    wait_until(lambda: all(processes_with(str(s)) for s in specs), 30, "the trial processes")
    proc.send_signal(sig)
    return proc.communicate(timeout=60)


def load_trials(out: Path, name: str = "t") -> list[Any]:
    """The trials of study `name` in OUT/<name>/study.db."""
    import optuna

    return optuna.load_study(study_name=name, storage=f"sqlite:///{out / name / 'study.db'}").get_trials()
