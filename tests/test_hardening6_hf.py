"""command.measure hf says where the job trained when autotune measured none of it (issue 63, item
6): a Trainer trained in a child of the job's first process (a multiprocessing spawn child, a
subprocess) is named, with what the hook measures and what to do, instead of "exited 0 without
reporting a step"; a second Trainer that trains after autotune stopped the measured one is named
in the trial's reason instead of "the command ignored the stop request". Real `autotune search`
runs of a tiny HF Trainer script on CPU."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import TINY_LM, run_cli

# An unmodified HF Trainer script (measure: hf). argv: where it trains (here: this process; spawn:
# a multiprocessing spawn child; popen: a subprocess of this script, training here), then the
# optimizer steps of each Trainer, trained in turn.
JOB = (
    """
import multiprocessing, subprocess, sys, torch
from transformers import Trainer, TrainingArguments

"""
    + TINY_LM
    + """
def train(steps):
    rows = [torch.randint(1, 32, (16,)) for _ in range(256)]
    data = [{"input_ids": r, "attention_mask": torch.ones_like(r), "labels": r} for r in rows]
    for n in steps:
        args = TrainingArguments(output_dir="out", use_cpu=True, report_to="none", max_steps=n,
                                 save_strategy="no", disable_tqdm=True)
        Trainer(model=TinyLM(), args=args, train_dataset=data).train()

if __name__ == "__main__":
    how, steps = sys.argv[1], [int(s) for s in sys.argv[2:]]
    if how == "spawn":
        child = multiprocessing.get_context("spawn").Process(target=train, args=(steps,))
        child.start()
        child.join()
        sys.exit(child.exitcode)
    if how == "popen":
        sys.exit(subprocess.Popen([sys.executable, sys.argv[0], "here", *sys.argv[2:]]).wait())
    train(steps)
"""
)
# what the hook measures, in the reason of a job whose Trainer trained in a child
CHILD_SAID = (
    "the hook measures the job's first process and its launcher's ranks; the Trainer trained in a "
    "child"
)


def _search(tmp_path: Path, how: str, *steps: int) -> tuple[int, str, Path]:
    """A real `autotune search` of one trial of the job (2 warm-up and 4 measured steps; its window
    settles at once): its exit code, its stderr and its study folder."""
    (tmp_path / "job.py").write_text(JOB)
    command = {"argv": ["{python}", "job.py", how, *map(str, steps)], "cwd": str(tmp_path)}
    doc = {
        "name": "job",
        "workload": {"task": "command", "warmup_steps": 2, "measure_steps": 4},
        "command": {**command, "measure": "hf", "half_width_pct": 50, "stop_grace_s": 5},
        "space": {},
        "study": {"trials": 1, "seed": 0, "confirm_top": 0, "trial_timeout_min": 3},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc))
    out = run_cli("search", "job.yaml", "--device", "cpu", "--trials", "1", cwd=tmp_path)
    return out.returncode, out.stderr, tmp_path / "trials" / "job"


def _trials(study: Path) -> list[dict[str, Any]]:
    """The trials of the study as `autotune report --format json` gives them."""
    out = run_cli("report", str(study), "--format", "json", "--no-html", cwd=study)
    assert out.returncode == 0, out.stderr[-2000:]
    trials: list[dict[str, Any]] = json.loads(out.stdout)["trials"]
    return trials


@pytest.mark.slow
@pytest.mark.parametrize("how", ["spawn", "popen"])
def test_command_measure_hf_trainer_trained_in_a_child_is_named(tmp_path: Path, how: str) -> None:
    """The Trainer trains in a child the hook does not act in: the search stops at its baseline
    (every trial would measure nothing) with one line that names the child, what the hook measures
    and what to do."""
    pytest.importorskip("transformers")
    code, err, _ = _search(tmp_path, how, 20)
    assert code == 3, err[-3000:]
    said = err.strip().splitlines()[-1]
    assert "without reporting a step" not in said
    assert CHILD_SAID in said, said
    child = "a multiprocessing spawn child" if how == "spawn" else "a child process (python job.py)"
    assert re.search(
        rf"pid \d+, {re.escape(child)} of the job's first process \(pid \d+, python job.py\), "
        r"trained an HF Trainer \(TinyLM\)",
        said,
    ), said
    assert "train in the job's first process" in said and "command.measure: log" in said, said


@pytest.mark.slow
def test_command_measure_hf_second_trainer_after_the_stop_is_named(tmp_path: Path) -> None:
    """The first Trainer gives autotune its window and stops when asked; a second one then trains
    (unmeasured) past stop_grace_s: the trial is measured, and its reason names the second Trainer,
    not a command that ignored the stop."""
    pytest.importorskip("transformers")
    code, err, study = _search(tmp_path, "here", 200, 100000)
    assert code == 0, err[-3000:]
    (trial,) = _trials(study)
    reason = trial["reason"]
    assert trial["state"] == "ok", reason
    assert "ignored the stop request" not in reason, reason
    assert re.search(
        r"^measured; the command trained a second Trainer after the measured one \(an HF Trainer "
        r"\(TinyLM\), \d+ steps\) stopped when asked: pid \d+ \(python job.py\) began an HF "
        r"Trainer \(TinyLM\), which autotune does not measure, and the command had not exited 5 s "
        r"after the stop request, so its process group was ended",
        reason,
    ), reason
    assert "leave the second training out of the command autotune runs" in reason, reason
