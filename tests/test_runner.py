"""Each trial runs in its own process; how it ended is classified (real subprocesses, CPU)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import processes_with
from test_trial import _spec

from autotune.launch.runner import run_trial


def _run(tmp_path: Path, monkeypatch, fault: str | None, timeout_s: float = 60, **knobs):
    if fault:
        monkeypatch.setenv("AUTOTUNE_FAULT", fault)
    else:
        monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    return run_trial(_spec(**knobs), tmp_path / "run", timeout_s=timeout_s)


def test_runner_ok_writes_spec_result_and_log(tmp_path: Path, monkeypatch) -> None:
    out = _run(tmp_path, monkeypatch, None)
    assert out.status == "ok", out.reason
    assert {p.name for p in (tmp_path / "run").iterdir()} == {
        "spec.json",
        "result.json",
        "worker.log",
    }
    assert out.result.phases_s["start"] > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault,status,reason",
    [
        ("oom", "oom", "simulated out of memory"),
        ("nan", "nonfinite_loss", "loss became nan"),
        ("crash", "crash", r"killed by SIGABRT.*AUTOTUNE_FAULT=crash"),
        ("error", "crash", r"exit code 1.*RuntimeError: AUTOTUNE_FAULT=error"),
    ],
)
def test_runner_classifies_failures(
    tmp_path: Path, monkeypatch, fault: str, status: str, reason: str
) -> None:
    out = _run(tmp_path, monkeypatch, fault)
    assert out.status == status
    assert re.search(reason, out.reason, flags=re.S), out.reason


def test_runner_invalid_config(tmp_path: Path, monkeypatch) -> None:
    out = _run(tmp_path, monkeypatch, None, precision="tf32")
    assert out.status == "invalid_config"
    assert "tf32 needs an NVIDIA GPU" in out.reason


@pytest.mark.slow
def test_runner_timeout_kills_process_group(tmp_path: Path, monkeypatch) -> None:
    out = _run(tmp_path, monkeypatch, "hang", timeout_s=4)
    assert out.status == "timeout"
    timed_out = "no result after 4 s (trial timeout); process group killed"
    assert out.reason.startswith(timed_out), out.reason
    assert processes_with(str(tmp_path / "run" / "spec.json")) == []  # no orphan keeps running
