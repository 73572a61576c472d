"""autotune.callbacks.lightning: a real tiny Lightning training on CPU reports its optimizer steps
(two batches each: accumulate_grad_batches=2) with their real tokens, stops once autotune has them,
and does nothing outside autotune."""

from __future__ import annotations

import json
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from autotune import reporting
from autotune.callbacks.lightning import AutotuneCallback, count_tokens

VOCAB, BATCH, SEQ = 32, 4, 16
ACCUMULATE = 2


class TinyLM(pl.LightningModule):
    """Embedding then linear head: next-token loss on the unpadded positions."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 8)
        self.head = nn.Linear(8, VOCAB)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self.head(self.embed(batch["input_ids"]))
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        return nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _batches(n: int) -> list[dict[str, torch.Tensor]]:
    """n dict batches of random tokens, each row right-padded to SEQ after a random length
    (1..SEQ)."""
    gen = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(n):
        lengths = torch.randint(1, SEQ + 1, (BATCH, 1), generator=gen)
        mask = (torch.arange(SEQ) < lengths).long()
        ids = torch.randint(1, VOCAB, (BATCH, SEQ), generator=gen) * mask
        batches.append({"input_ids": ids, "attention_mask": mask})
    return batches


def _fit(
    callback: AutotuneCallback, batches: list[dict[str, torch.Tensor]], max_steps: int
) -> pl.Trainer:
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=max_steps,
        accumulate_grad_batches=ACCUMULATE,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    # batch_size=None: each item is one batch
    trainer.fit(TinyLM(), DataLoader(batches, batch_size=None))
    return trainer


def _reporter(monkeypatch: pytest.MonkeyPatch, path: Path) -> reporting.Reporter:
    monkeypatch.setenv(reporting.ENV_REPORT, str(path))
    monkeypatch.setenv(reporting.ENV_STEPS, "2,3")
    monkeypatch.delenv("RANK", raising=False)
    return reporting.Reporter()


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _expected(batches: list[dict[str, torch.Tensor]], steps: int) -> list[tuple[int, int]]:
    """Each optimizer step's (real, padded) tokens: the sums over its ACCUMULATE batches."""
    pairs = [(int(b["attention_mask"].sum()), b["input_ids"].numel()) for b in batches]
    groups = [pairs[i * ACCUMULATE : (i + 1) * ACCUMULATE] for i in range(steps)]
    return [(sum(r for r, _ in g), sum(p for _, p in g)) for g in groups]


def test_callback_lightning_reports_optimizer_steps_and_stops(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "report.jsonl"
    reporter = _reporter(monkeypatch, path)
    batches = _batches(100)
    trainer = _fit(AutotuneCallback(reporter), batches, max_steps=50)
    assert trainer.global_step == 5
    lines = _lines(path)
    steps = [line for line in lines if "step" in line]
    assert [(s["tokens"], s["padded"]) for s in steps] == _expected(batches, 5)
    # the batches have padding, and it is left out
    assert all(s["tokens"] < s["padded"] for s in steps)
    assert all(s["s"] > 0 for s in steps)
    assert lines[-1]["done"] is True and len(lines) == 7
    # first: the settings the Trainer ran with (its batches are whole: no batch_size to read)
    assert lines[0]["job_settings"] == {
        "grad_accum_steps": 2,
        "precision": "fp32",
        "compile": False,
    }


@pytest.mark.slow
def test_callback_lightning_does_nothing_outside_autotune(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(reporting.ENV_REPORT, raising=False)
    monkeypatch.setenv(reporting.ENV_STEPS, "2,3")
    monkeypatch.chdir(tmp_path)
    callback = AutotuneCallback(reporting.Reporter())
    trainer = _fit(callback, _batches(100), max_steps=50)
    assert trainer.global_step == 50
    assert callback.steps is None and callback.pending == []  # no event recorded, no batch counted
    assert list(tmp_path.iterdir()) == []


def test_callback_lightning_reports_the_steps_of_a_short_training(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "report.jsonl"
    batches = _batches(20)
    trainer = _fit(AutotuneCallback(_reporter(monkeypatch, path)), batches, max_steps=3)
    assert trainer.global_step == 3
    lines = _lines(path)
    assert [(s["tokens"], s["padded"]) for s in lines[1:-1]] == _expected(batches, 3)
    assert lines[-1]["done"] is True  # the training ended: its closing line follows its steps


def test_callback_lightning_count_tokens_of_each_batch_kind() -> None:
    ids = torch.ones(2, 8, dtype=torch.long)
    mask = torch.tensor([[1] * 5 + [0] * 3, [1] * 8])
    assert count_tokens(ids) == (16, 16)  # token ids alone: no padding known
    assert count_tokens((ids, ids)) == (16, 16)  # (inputs, targets): the inputs
    assert count_tokens({"input_ids": ids}) == (16, 16)  # packed: no mask, no padding
    real, padded = count_tokens({"input_ids": ids, "attention_mask": mask})
    assert (int(real), padded) == (13, 16)
    with pytest.raises(TypeError, match="cannot count the tokens of a str batch"):
        count_tokens("text")
    with pytest.raises(TypeError, match=r"needs input_ids or attention_mask, got keys \['x'\]"):
        count_tokens({"x": ids})


def test_callback_lightning_measures_one_trainer_and_reads_its_batch_size(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two Trainers trained in turn on one reporter: the first (2 of the 5 steps needed) is the one
    measured, with its dataloader's batch size; the second's steps are never counted and its start
    fails the trial."""
    path = tmp_path / "report.jsonl"
    reporter = _reporter(monkeypatch, path)
    rows = [{k: v[0] for k, v in b.items()} for b in _batches(40)]  # single rows, batched by 4
    for max_steps in (2, 3):
        trainer = pl.Trainer(
            accelerator="cpu",
            max_steps=max_steps,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[AutotuneCallback(reporter)],
        )
        trainer.fit(TinyLM(), DataLoader(rows, batch_size=BATCH))
    lines = _lines(path)
    assert lines[0]["job_settings"] == {
        "micro_batch_size": BATCH,
        "grad_accum_steps": 1,
        "precision": "fp32",
        "compile": False,
    }
    assert [x["step"] for x in lines if "step" in x] == [1, 2]
    assert lines[-1]["failed"].startswith("the job trained a second Trainer after the first")
