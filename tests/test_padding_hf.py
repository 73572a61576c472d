"""The padding share beside the figure (issue 66, item 3): an unmodified HF Trainer job measured by
autotune's callback (command.measure hf) on padded batches counts the real tokens only, and the
search's trial line, the report's trials table and its chosen figure say how much of what the job
computed on was padding. A real `autotune search` of a tiny Trainer script on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import TINY_LM, run_cli

# Every sequence 16 positions, the last 4 padding (attention_mask 0): 25% of what the model
# computes on, whatever the batch size
JOB = (
    """
import torch
from transformers import Trainer, TrainingArguments

"""
    + TINY_LM
    + """
mask = torch.tensor([1] * 12 + [0] * 4)
rows = [torch.randint(1, 32, (16,)) * mask for _ in range(256)]
data = [{"input_ids": r, "attention_mask": mask.clone(), "labels": r} for r in rows]
args = TrainingArguments(output_dir="out", use_cpu=True, report_to="none", max_steps=200,
                         save_strategy="no", disable_tqdm=True)
Trainer(model=TinyLM(), args=args, train_dataset=data).train()
"""
)


@pytest.mark.slow
def test_padding_hf_share_is_shown_beside_the_figure(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    (tmp_path / "job.py").write_text(JOB)
    doc = {
        "name": "padded",
        "workload": {"task": "command", "warmup_steps": 2, "measure_steps": 4},
        "command": {
            "argv": ["{python}", "job.py"],
            "cwd": str(tmp_path),
            "measure": "hf",
            "half_width_pct": 50,
            "stop_grace_s": 5,
        },
        "space": {},
        "study": {"trials": 1, "seed": 0, "confirm_top": 0, "trial_timeout_min": 3},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc))
    out = run_cli("search", "job.yaml", "--device", "cpu", "--trials", "1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    # the live view's line of the trial: its real-token figure, then the padding share
    assert "tok/s (25.0% padding)" in out.stdout, out.stdout[-3000:]
    study = tmp_path / "trials" / "padded"
    shown = run_cli("report", str(study), "--format", "json", "--no-html", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr[-2000:]
    (trial,) = json.loads(shown.stdout)["trials"]
    assert trial["state"] == "ok" and trial["padding_pct"] == 25.0, trial
    text = run_cli(
        "report", str(study), "--no-html", "--wide", cwd=tmp_path, env={"COLUMNS": "200"}
    )
    assert text.returncode == 0, text.stderr[-2000:]
    said = " ".join(text.stdout.split())
    assert "Real tokens only: 25.0% of the tokens computed on were padding." in said, said
    # the trials table's padding column, the trial's row holding the share
    header = next(
        line for line in text.stdout.splitlines() if "tokens/s/GPU" in line and "#" in line
    )
    row = next(line for line in text.stdout.splitlines() if line.lstrip("│ ").startswith("0 "))
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    names = [c.strip() for c in header.strip("┃ ").split("┃")]
    assert cells[names.index("padding")] == "25.0%", text.stdout
