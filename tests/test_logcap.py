"""A trial's log stays bounded on disk while it prints without end, and its last lines are read from
the end (launch/logcap.py), whatever the trial prints."""

from __future__ import annotations

import resource
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.errors import UnmeasuredError
from autotune.job import load_config
from autotune.launch import logcap
from autotune.search.run import run_search


def test_logcap_keeps_head_and_tail_of_a_growing_file(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    with open(log, "wb") as f:
        f.write(b"HEAD\n" + b"x" * (logcap.HEAD_BYTES + 3 * logcap.TAIL_BYTES))
        f.flush()
        assert logcap.cap(log)
        f.write(b"\nthe last line\n")
    assert logcap.used_bytes(log) <= logcap.HEAD_BYTES + logcap.TAIL_BYTES + 4 * logcap.BLOCK
    assert log.read_bytes()[:5] == b"HEAD\n"
    assert logcap.tail(log).endswith("the last line\n")


PRINTER = "import sys\nwhile True:\n    sys.stdout.write('y' * 4095 + '\\n')\n"
BIG_THEN_FAIL = (
    "import sys\nfor _ in range(40_000):\n    sys.stdout.write('z' * 8191 + '\\n')\n"
    "print('the error at the end', flush=True)\nraise SystemExit(3)\n"
)


def _job(tmp_path: Path, code: str, timeout_min: float) -> Path:
    (tmp_path / "job.py").write_text(code)
    doc = {
        "name": "loud",
        "workload": {"task": "command", "warmup_steps": 1, "measure_steps": 2},
        "command": {"argv": ["{python}", "job.py"]},
        "space": {},
        "study": {"trials": 1, "confirm_top": 0, "trial_timeout_min": timeout_min},
    }
    path = tmp_path / "loud.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.slow
def test_logcap_a_trial_that_prints_forever_cannot_fill_the_disk(tmp_path: Path) -> None:
    cfg = load_config(_job(tmp_path, PRINTER, 0.3))
    # its baseline measured nothing by the trial's limit: the search ends there (exit 3)
    with pytest.raises(UnmeasuredError, match="could not be measured"):
        run_search(cfg, out_root=tmp_path / "trials", device="cpu")
    log = next((tmp_path / "trials" / "loud" / "runs").glob("*/worker.log"))
    study = optuna.load_study(
        study_name="loud", storage=f"sqlite:///{tmp_path}/trials/loud/study.db"
    )
    assert study.trials[0].user_attrs["status"] == "timeout"
    assert logcap.used_bytes(log) < 64 << 20  # printed for 18 s at full speed: bounded all the same


@pytest.mark.slow
def test_logcap_a_trial_that_printed_a_lot_then_failed_is_read_from_its_end(tmp_path: Path) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cfg = load_config(_job(tmp_path, BIG_THEN_FAIL, 2))
    result = run_search(cfg, out_root=tmp_path / "trials", device="cpu")
    rec = next(iter(result.history.seen.values())).user_attrs
    assert rec["status"] == "crash"
    assert rec["reason"] == (  # its telling line quoted, not 20 lines of its tail
        "the command exited with code 3 after 0 of 3 steps: the error at the end; its whole "
        f"output: {Path(rec['run_dir']).resolve() / 'worker.log'}"
    )
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 200, grown_mib  # 320 MB printed; autotune read its last 64 KiB
