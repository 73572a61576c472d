"""What the job really ran, checked (issue 61, item 3): every setting the callbacks read (precision,
gradient checkpointing, compile, the optimizer, the attention implementation, besides the batch and
accumulation) is compared with the trial's knobs; a job whose own defaults override its flags (TRL's
SFTConfig turns bf16 and gradient checkpointing on) ends invalid_config naming what ran and the
remedy, and a value no knob value is (bf16-true, flash_attention_2) is not compared. Real tiny HF
Trainer and Lightning trainings on CPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune import reporting
from autotune.command.report import JobFailed, Report
from autotune.command.said import settings_said
from autotune.knobs import defaults

KNOBS = defaults("command")  # what a trial of a YAML that leaves the knobs alone sets


def test_settings_said_names_each_setting_the_job_overrode_and_the_flag_to_map() -> None:
    ran = {"micro_batch_size": 8, "precision": "bf16", "activation_checkpointing": "full"}
    read_from = {
        "precision": "bf16=True",
        "activation_checkpointing": "gradient_checkpointing=True",
    }
    assert settings_said(ran, read_from, KNOBS) == (
        "the job ran precision bf16 (bf16=True) but the trial set fp32: map the knob "
        "(command.knobs.precision: {flag: ...}) or declare the value the script fixes "
        "(space.precision: [bf16]); it also ran activation_checkpointing full "
        "(gradient_checkpointing=True) where the trial set none (space.activation_checkpointing: "
        "[full]); a value mapped to nothing leaves the script's own default (TRL's SFTConfig turns "
        "bf16 and gradient checkpointing on): render it, e.g. fp32: [--bf16, 'false'], none: "
        "[--gradient_checkpointing, 'false']"
    )
    assert (
        settings_said(
            ran, read_from, {**KNOBS, "precision": "bf16", "activation_checkpointing": "full"}
        )
        == ""
    )


@pytest.mark.parametrize(
    ("ran", "knobs"),
    [
        ({"precision": "bf16-true"}, {}),  # a bf16 model without autocast: no knob value
        ({"precision": "bf16"}, {"precision": "fp8"}),  # fp8 trains under bf16 autocast
        ({"compile": True}, {"compile": "max-autotune"}),  # Lightning: compiled, mode unknown
        ({"compile": "default"}, {"compile": True}),  # true is the default mode
        ({"activation_checkpointing": "every 3 layers"}, {}),
        ({"attn_implementation": "sdpa"}, {"attention": "flash"}),  # an SDPA backend
        ({"attn_implementation": "flash_attention_2"}, {"attention": "eager"}),
        ({"optim": "adafactor"}, {"fused_optimizer": True}),
        ({"optim": "adamw_torch_fused"}, {"optim": "adamw"}),  # a knob of your own, with a map
    ],
)
def test_settings_said_compares_only_what_maps_onto_a_knob_value(
    ran: dict[str, Any], knobs: dict[str, Any]
) -> None:
    mappings = {
        "optim": {"flag": "--optim", "values": ["adamw"], "map": {"adamw": ["--optim", "x"]}}
    }
    assert settings_said(ran, {}, {**KNOBS, **knobs}, mappings) == ""


def test_settings_said_compares_the_frameworks_names_with_their_knobs() -> None:
    said = settings_said({"attn_implementation": "sdpa"}, {}, {"attention": "eager"})
    assert said.startswith("the job ran attention sdpa (as the job reported it) but the trial set")
    assert said.endswith("(space.attention: [auto])")
    assert "fused_optimizer" in settings_said(
        {"optim": "adamw_torch"}, {}, {"fused_optimizer": True}
    )
    # a knob of your own named as the Trainer's setting, its values passed as they are
    own = {"optim": {"flag": "--optim", "values": ["adamw_torch_fused", "adamw_torch"]}}
    said = settings_said(
        {"optim": "adamw_torch_fused"}, {"optim": "optim"}, {"optim": "adamw_torch"}, own
    )
    assert said == (
        "the job ran optim adamw_torch_fused (optim) but the trial set adamw_torch: "
        "command.knobs.optim does not reach the job's optim; pass it where the script reads it, "
        "or take the knob out (the script fixes it)"
    )
    # a knob the trial does not have is not compared
    assert settings_said({"optim": "sgd"}, {}, {"micro_batch_size": 8}) == ""


@pytest.mark.slow
def test_callback_hf_reads_what_its_arguments_do_not_say() -> None:
    """The optimizer the Trainer was given, a model loaded in bf16 without autocast, TF32 as
    PyTorch has it (set through its new API, where reading allow_tf32 raises; none on the CPU)."""
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    import torch

    from autotune.callbacks import _clock, hf

    args = SimpleNamespace(optim="adamw_torch_fused", bf16=False, fp16=False)
    layer = torch.nn.Linear(2, 2)
    assert hf._optim(args, torch.optim.SGD(layer.parameters()))[0] == "SGD"
    assert hf._optim(args, torch.optim.AdamW(layer.parameters()))[0] == "adamw_torch"
    assert hf._optim(args, None)[0] == "adamw_torch_fused"
    assert hf._precision(args, layer.to(torch.bfloat16))[0] == "bf16-true"
    before = torch.backends.cuda.matmul.fp32_precision
    try:
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        assert (_clock.fp32_precision(torch, True), _clock.fp32_precision(torch, False)) == (
            "tf32",
            "fp32",
        )
    finally:
        torch.backends.cuda.matmul.fp32_precision = before


@pytest.mark.slow
def test_callback_lightning_precision_the_script_passes_fails_a_trial_of_another() -> None:
    """A Lightning script that passes precision='bf16-mixed' itself (it wins over the trial's
    PL_TRAINER_PRECISION): a trial of fp32 ends invalid_config naming it."""
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader

    from autotune.callbacks.lightning import AutotuneCallback

    class TinyLM(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.head = torch.nn.Embedding(32, 8), torch.nn.Linear(8, 32)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            logits = self.head(self.embed(batch))
            return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.flatten())

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "steps.jsonl"
        reporter = reporting.Reporter(str(path), "1,2", sync=lambda: None)
        trainer = pl.Trainer(
            accelerator="cpu",
            precision="bf16-mixed",
            max_steps=3,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[AutotuneCallback(reporter)],
        )
        trainer.fit(TinyLM(), DataLoader(torch.randint(0, 32, (12, 8)), batch_size=4))
        knobs = {**KNOBS, "micro_batch_size": 4}
        with pytest.raises(JobFailed) as err:
            Report(path, 0.0, 10, knobs).read()
        assert err.value.status == "invalid_config"
        assert str(err.value).startswith(
            "the job ran precision bf16 (Trainer(precision='bf16-mixed')) but the trial set fp32: "
        )
        agreed = Report(path, 0.0, 10, {**knobs, "precision": "bf16"})
        agreed.read()
        assert agreed.settings is not None and agreed.settings["precision"] == "bf16"


# An HF Trainer script whose arguments default to what TRL's SFTConfig turns on: bf16 and gradient
# checkpointing, whatever the YAML left alone; a tiny Llama (gradient checkpointing needs a
# PreTrainedModel), made from its config.
SFT_LIKE_JOB = """
import dataclasses, torch
from transformers import HfArgumentParser, LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

@dataclasses.dataclass
class SFTLikeConfig(TrainingArguments):
    bf16: bool = True
    gradient_checkpointing: bool = True

(args,) = HfArgumentParser(SFTLikeConfig).parse_args_into_dataclasses()
config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16)
rows = [torch.randint(1, 32, (16,)) for _ in range(256)]
data = [{"input_ids": r, "attention_mask": torch.ones_like(r), "labels": r} for r in rows]
Trainer(model=LlamaForCausalLM(config), args=args, train_dataset=data).train()
"""


def _sft_like_trial(tmp_path: Path, knobs: dict[str, Any]) -> dict[str, Any]:
    """The record of the one trial (the baseline) of a search of SFT_LIKE_JOB (measure: hf)."""
    from autotune.job import load_config
    from autotune.search.run import run_search

    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "job.py").write_text(SFT_LIKE_JOB)
    flags = ["--output_dir", "out", "--use_cpu", "true", "--report_to", "none"]
    flags += ["--max_steps", "200", "--save_strategy", "no", "--disable_tqdm", "true"]
    doc = {
        "name": "job",
        "workload": {"task": "command", "warmup_steps": 2, "measure_steps": 4},
        "command": {
            "argv": ["{python}", "job.py", *flags],
            "cwd": str(tmp_path),
            "measure": "hf",
            "max_steps": 12,
            "knobs": knobs,
        },
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
def test_command_measure_hf_job_whose_defaults_override_its_flags_fails_naming_them(
    tmp_path: Path,
) -> None:
    """A naive YAML of an SFT-like job: the trial sets fp32 and no checkpointing, the job ran bf16
    and checkpointed; the trial ends invalid_config naming both and the flags to map. Mapped to
    the flags' off values, the same job runs what the trial set and is measured."""
    pytest.importorskip("transformers")
    rec = _sft_like_trial(tmp_path / "naive", {})
    assert rec["status"] == "invalid_config", rec["reason"]
    assert rec["reason"].startswith(
        "the job ran precision bf16 (bf16=True) but the trial set fp32: map the knob "
        "(command.knobs.precision: {flag: ...}) or declare the value the script fixes "
        "(space.precision: [bf16]); it also ran activation_checkpointing full ("
    )
    assert rec["reason"].endswith(
        "e.g. fp32: [--bf16, 'false'], none: [--gradient_checkpointing, 'false']"
    )
    mapped = {
        "precision": {"flag": "--bf16", "map": {"fp32": ["--bf16", "false"]}},
        "activation_checkpointing": {
            "flag": "--gradient_checkpointing",
            "map": {"none": ["--gradient_checkpointing", "false"]},
        },
    }
    rec = _sft_like_trial(tmp_path / "mapped", mapped)
    assert rec["status"] == "ok", rec["reason"]
    report = (Path(rec["run_dir"]) / "steps.jsonl").read_text().splitlines()
    ran = next(line["job_settings"] for line in map(json.loads, report) if "job_settings" in line)
    assert ran["precision"] == "fp32" and ran["activation_checkpointing"] == "none"
    assert ran["attn_implementation"] == "sdpa" and ran["optim"] == "adamw_torch_fused"
