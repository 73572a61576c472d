"""One training per trial, across processes (issue 61, item 6): the first training to begin claims
the trial's one training in a claim file beside the report; a training in another process of the
job (a calibration step of a shell script, a child with LOCAL_RANK set) fails the trial in one line
naming both, and so does a second Trainer after a first that ended by itself before autotune had
its window; the ranks of a torchrun job keep reporting as they did (the first alone). Real
processes: the reporter's own loop, and tiny HF Trainers on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import TINY_LM

from autotune import reporting
from autotune.command.report import JobFailed, Report

# a job's loop that reports through autotune.reporting (argv: its steps; LOCAL_RANK=0: the child
# it starts in the middle, as a helper or a rank of its own would be)
LOOP = """
import os, subprocess, sys, time
from autotune import reporting
steps, child = int(sys.argv[1]), sys.argv[2:]
for i in range(steps):
    time.sleep(0.01)
    reporting.step(tokens=10)
    if child and i == 0:
        env = {**os.environ, "LOCAL_RANK": "0"}
        subprocess.run([sys.executable, *child], env=env, check=True)
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(name, None)
    report = str(tmp_path / "steps.jsonl")
    return {**env, reporting.ENV_REPORT: report, reporting.ENV_STEPS: "1,2", **extra}


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_reporter_a_child_that_trains_fails_the_trial_naming_both(tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(LOOP)
    (tmp_path / "helper.py").write_text(LOOP)
    run = [sys.executable, "loop.py", "3", "helper.py", "2"]
    subprocess.run(run, env=_env(tmp_path), cwd=tmp_path, check=True, timeout=120)
    path = tmp_path / "steps.jsonl"
    assert [x["step"] for x in _lines(path) if "step" in x] == [1, 2, 3]  # the parent's alone
    held = json.loads((tmp_path / "steps.claim").read_text().splitlines()[0])
    assert held["program"] == "python loop.py"  # never its arguments: a token may be one
    with pytest.raises(JobFailed) as err:
        Report(path, 0.0, 10).read()
    said = str(err.value)
    assert said.startswith(
        f"two trainings in one job: pid {held['pid']} (python loop.py) trained its own "
        "training loop (reporting.step); then pid "
    )
    assert (
        "(python helper.py) began its own training loop (reporting.step): autotune measures" in said
    )
    assert err.value.status == "crash" and "\n" not in said


def test_reporter_the_ranks_of_one_job_report_as_before(tmp_path: Path) -> None:
    """torchrun's ranks: each sees RANK; the first alone reports and claims, the others are
    silent, and nothing fails."""
    (tmp_path / "loop.py").write_text(LOOP)
    ranks = [
        subprocess.Popen(
            [sys.executable, "loop.py", "3"],
            env=_env(tmp_path, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2"),
            cwd=tmp_path,
        )
        for rank in (0, 1)
    ]
    assert [p.wait(timeout=120) for p in ranks] == [0, 0]
    lines = _lines(tmp_path / "steps.jsonl")
    assert [x["step"] for x in lines if "step" in x] == [1, 2, 3] and "done" in lines[-1]
    assert not any("failed" in x for x in lines)


# An unmodified HF Trainer script (measure: hf): one Trainer a number of its argv, each trained in
# turn for that many optimizer steps.
HF_JOB = (
    """
import sys, torch
from transformers import Trainer, TrainingArguments

"""
    + TINY_LM
    + """
rows = [torch.randint(1, 32, (16,)) for _ in range(256)]
data = [{"input_ids": r, "attention_mask": torch.ones_like(r), "labels": r} for r in rows]
for steps in sys.argv[1:]:
    args = TrainingArguments(output_dir="out", use_cpu=True, report_to="none",
                             max_steps=int(steps), save_strategy="no", disable_tqdm=True)
    Trainer(model=TinyLM(), args=args, train_dataset=data).train()
"""
)
# a calibration step before the real training, each its own Python process
SHELL_JOB = '"$1" calibrate.py 3\n"$1" job.py 200\n'


def _hf_trial(tmp_path: Path, argv: list[str]) -> dict[str, Any]:
    """The record of the one trial of a search of the job (2 warm-up and 4 measured steps, at
    most 60; a window that never settles: its figure is measured at 60 steps, or when the job's
    training ended)."""
    from autotune.job import load_config
    from autotune.search.run import run_search

    (tmp_path / "job.py").write_text(HF_JOB)
    (tmp_path / "calibrate.py").write_text(HF_JOB)
    (tmp_path / "job.sh").write_text(SHELL_JOB)
    command = {"argv": argv, "cwd": str(tmp_path), "measure": "hf"}
    doc = {
        "name": "job",
        "workload": {"task": "command", "warmup_steps": 2, "measure_steps": 4},
        "command": {**command, "half_width_pct": 0.001, "stop_grace_s": 5},
        "space": {},
        "study": {"trials": 1, "seed": 0, "confirm_top": 0, "trial_timeout_min": 2},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc))
    result = run_search(
        load_config(tmp_path / "job.yaml"), out_root=tmp_path / "trials", device="cpu"
    )
    (trial,) = result.history.seen.values()
    return dict(trial.user_attrs)


@pytest.mark.slow
def test_command_measure_hf_shell_script_that_trains_twice_fails_naming_both(
    tmp_path: Path,
) -> None:
    """A shell script's calibration Trainer (3 steps), then the real one in another Python
    process: both are the job's first process to the hook, and both would report."""
    pytest.importorskip("transformers")
    rec = _hf_trial(tmp_path, ["sh", "job.sh", "{python}"])
    assert rec["status"] == "crash", rec["reason"]
    assert rec["reason"].startswith("two trainings in one job: pid ")
    assert (
        "(python calibrate.py) trained an HF Trainer (TinyLM), which ended by itself after 3 of "
        "the 6 steps autotune needs; then pid "
    ) in rec["reason"]
    assert "(python job.py) began an HF Trainer (TinyLM): autotune measures" in rec["reason"]


@pytest.mark.slow
def test_command_measure_hf_second_trainer_after_a_short_first_that_gave_its_steps_fails(
    tmp_path: Path,
) -> None:
    """A first Trainer of 8 steps (more than the 6 the trial needs, fewer than its window's 60)
    ends by itself, then the real training begins: the first is not measured as the job's."""
    pytest.importorskip("transformers")
    rec = _hf_trial(tmp_path, ["{python}", "job.py", "8", "200"])
    assert rec["status"] == "crash", rec["reason"]
    assert rec["reason"].startswith(
        "the job trained a second Trainer after the first training ended by itself after 8 "
        "optimizer steps, before autotune had its window (6 steps at least, up to 60 until its "
        "figure settles) (first an HF Trainer (TinyLM), then an HF Trainer (TinyLM), in pid "
    )
    assert rec["reason"].endswith(
        "let the first train until autotune stops it (its max_steps at least 60), or leave the "
        "other training out of the job autotune runs"
    )
