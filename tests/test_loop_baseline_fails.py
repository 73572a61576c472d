"""Issue 61 item 5: a baseline that fails ends the search. A failure of the job rather than of its
configuration (a crash with an exit code, a bad flag, a refusal naming no knob: search/loop.py
failure_of) that the next trial repeats, the same status and reason but for the trial's own folder,
stops the search after those two trials with that reason, exit 3. Memory failures, a crash by a
signal and a refusal caused by knob values do not: the search goes on to other configurations."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import cli_here, command_job, load_trials, tiny
from fake_measure import FakeMeasure

from autotune.documents.record import TrialRecord
from autotune.errors import UnmeasuredError
from autotune.job import parse_config
from autotune.search.loop import failure_of
from autotune.search.run import run_search

# a training script whose data is missing: it fails at its start, whatever its flags
MISSING_DATA = """
import argparse
p = argparse.ArgumentParser()
p.add_argument("--bs", type=int, default=1)
p.parse_args()
open("/nonexistent/autotune-test/train.bin")
"""


@pytest.mark.slow
def test_loop_baseline_failure_the_next_trial_repeats_stops_the_search(tmp_path: Path) -> None:
    """A script that exits 1 the same way every time: 2 trials of a budget of 8, then exit 3 in one
    line naming the reason."""
    path = command_job(
        tmp_path,
        "broken",
        trials=8,
        space={"micro_batch_size": [1, 2, 4, 8]},
        baseline={"micro_batch_size": 2},
    )
    (tmp_path / "job.py").write_text(MISSING_DATA)
    out = tmp_path / "out"
    proc = cli_here("search", str(path), "--out", str(out), "--device", "cpu", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "the baseline (trial 0) and the next trial (1) failed the same way (crash)" in (
        proc.stderr
    )
    assert "FileNotFoundError" in proc.stderr and "/nonexistent/autotune-test" in proc.stderr
    trials = load_trials(out, "broken")
    assert [t.user_attrs.get("status") for t in trials] == ["crash", "crash"]


def _fake(tmp_path: Path, monkeypatch, fault: str, trials: int = 4):
    monkeypatch.setenv("AUTOTUNE_FAULT", fault)
    doc = tiny(study={"trials": trials, "confirm_top": 0, "seed": 0})
    return run_search(parse_config(doc), out_root=tmp_path, device="cpu", measure_fn=FakeMeasure())


def test_loop_baseline_error_repeated_stops_after_two_trials(tmp_path: Path, monkeypatch) -> None:
    """Every trial ends with exit code 1 (the fake's `error`): the search stops at the second."""
    with pytest.raises(
        UnmeasuredError, match=r"^the baseline \(trial 0\) and the next trial \(1\)"
    ):
        _fake(tmp_path, monkeypatch, "error")
    assert len(load_trials(tmp_path)) == 2


@pytest.mark.parametrize("fault", ["oom", "crash"])
def test_loop_baseline_oom_or_signal_repeated_goes_on(
    tmp_path: Path, monkeypatch, fault: str
) -> None:
    """Out of memory (the search goes to smaller sizes) and a crash by a signal (SIGABRT: a native
    library's, or SIGKILL: host memory) may depend on the configuration: every point is tried."""
    result = _fake(tmp_path, monkeypatch, fault, trials=2)
    assert result.history.launched > 2 or result.stop_reason == "space exhausted"
    assert not result.history.completed


def _record(number: int, status: str, reason: str, **fields: object) -> TrialRecord:
    return TrialRecord(number, {}, status, reason, **fields)  # type: ignore[arg-type]


def test_loop_failure_of_is_the_same_but_for_the_trials_own_folder() -> None:
    """What 'the same failure' is: the status and the reason, the trial's folder aside; none for a
    failure of memory, numerics or time, a signal, or a refusal caused by knob values."""
    said = "the command exited with code 1 after 0 of 6 steps: ValueError: no such dataset"
    a = _record(0, "crash", f"{said}; its whole output: /o/t/runs/0000/worker.log")
    b = _record(1, "crash", f"{said}; its whole output: /o/t/runs/0001/worker.log")
    assert failure_of(a) == failure_of(b) is not None
    assert failure_of(_record(2, "crash", said.replace("dataset", "file"))) != failure_of(a)
    assert failure_of(_record(3, "invalid_config", said)) != failure_of(a)
    for status, reason in (
        ("oom", "out of memory; lower it with a smaller micro_batch_size (now 8)"),
        ("nonfinite_loss", "loss became nan"),
        ("timeout", "no result within the trial's limit"),
        ("crash", "trial process ended without a result (killed by SIGKILL)"),
        ("crash", "the command exited with code 1 after 0 of 6 steps: MemoryError"),
    ):
        assert failure_of(_record(4, status, reason)) is None, reason
    caused = _record(5, "invalid_config", "NCCL refused this setting", cause={"nccl_algo": "Tree"})
    assert failure_of(caused) is None


def test_loop_failure_of_a_resumed_study_decides_only_at_its_two_trials(
    tmp_path: Path, monkeypatch
) -> None:
    """A study whose baseline and next trial failed the same way (an older autotune went on), its
    script since fixed, resumes and measures: the two are not judged again at a later trial."""
    with pytest.raises(UnmeasuredError):
        _fake(tmp_path, monkeypatch, "error")
    monkeypatch.delenv("AUTOTUNE_FAULT")
    doc = tiny(study={"trials": 2, "confirm_top": 0, "seed": 0})
    result = run_search(
        parse_config(doc), out_root=tmp_path, device="cpu", measure_fn=FakeMeasure()
    )
    assert len(result.history.completed) == 2, result.stop_reason
    assert yaml.safe_load((tmp_path / "t" / "best.yaml").read_text())
