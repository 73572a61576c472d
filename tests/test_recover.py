"""A measurement that finished but was never stored (autotune stopped, then killed, after its trial
wrote its result) is recorded on resume from the trial's files, not lost nor measured again
(search/recover.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import processes_with, run_cli, start_cli, tiny, wait_until


@pytest.mark.slow
def test_recover_a_finished_trial_that_was_never_stored(tmp_path: Path) -> None:
    doc = tiny(
        space={"micro_batch_size": [2, 4], "precision": "fp32"},
        study={"trials": 1, "confirm_top": 0},
    )
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    args = ("search", str(path), "--out", str(out), "--device", "cpu")
    first = start_cli(*args, cwd=tmp_path)
    run = out / "t" / "runs" / "0000"
    wait_until(lambda: (run / "spec.json").exists(), what="the trial's start")
    # its process started (forked once the fork server has imported torch): it runs on alone
    wait_until(lambda: processes_with(str(run / "spec.json")), what="the trial's process")
    first.send_signal(signal.SIGSTOP)  # autotune stalls; its trial goes on and writes its result
    wait_until(lambda: (run / "result.json").exists(), what="the trial's result")
    first.send_signal(signal.SIGKILL)  # and autotune dies before storing it
    first.communicate()
    again = run_cli(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    trials = optuna.load_study(
        study_name="t", storage=f"sqlite:///{out / 't' / 'study.db'}"
    ).get_trials()
    recovered = [t for t in trials if t.user_attrs.get("recovered_from") == 0]
    assert len(recovered) == 1 and recovered[0].state.name == "COMPLETE" and recovered[0].value > 0
    assert recovered[0].user_attrs["run_dir"].endswith("runs/0000")
    # not measured again (budget 1)
    assert len([t for t in trials if t.state.name == "COMPLETE"]) == 1
