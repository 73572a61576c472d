"""Training's numerics guardrail (study.loss_check, search/loss_guard.py) on tiny models on the CPU:
fp16 and a DDP compression hook train like their references; a broken precision is caught; the check
runs eager at a capped micro-batch, so trials of other micro-batch sizes share one reference,
measured eager; the gap's rule and the check's learning rate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from autotune import knobs as knob_catalogue
from autotune.protocol import RunSettings, TrialSpec
from autotune.workloads import trial
from autotune.workloads.model import Transformer
from conftest import tiny

LLAMA = {
    "family": "llama",
    "n_layers": 2,
    "d_model": 64,
    "n_heads": 4,
    "n_kv_heads": 2,
    "ffn_hidden": 128,
    "vocab_size": 256,
    "seq_len": 32,
    "rope_theta": 10000.0,
    "tie_embeddings": False,
}


def _guard_search(tmp_path: Path, write_yaml: Any, env: dict[str, str] | None = None) -> Any:
    from conftest import load_trials, run_cli

    tmp_path.mkdir(parents=True)
    path = write_yaml(
        tiny(
            model=LLAMA,
            workload={"global_batch_size": 4, "warmup_steps": 1, "measure_steps": 2},
            space={"micro_batch_size": [4], "precision": ["fp16"]},
            baseline={"micro_batch_size": 4, "precision": "fp16"},
            study={"trials": 1, "confirm_rounds": 0, "loss_check": {"steps": 20, "max_gap": 0.05}},
        )
    )
    proc = run_cli(
        "search",
        str(path),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        cwd=tmp_path,
        env=env,
    )
    (trial,) = [
        t
        for t in load_trials(tmp_path / "out")
        if t.user_attrs.get("status") not in ("duplicate", "skipped")
    ]
    return proc, trial


@pytest.mark.slow
def test_loss_check_passes_fp16_and_catches_a_broken_precision(
    tmp_path: Path, write_yaml: Any
) -> None:
    """fp16 trains like bf16 from the same weights (the reference measured once, in its own trial,
    then cached); a precision that breaks the weights (AUTOTUNE_FAULT=drift) ends invalid_config:
    loss drifts."""
    proc, trial = _guard_search(tmp_path / "good", write_yaml)
    check = trial.user_attrs["loss_check"]
    assert trial.user_attrs["status"] == "ok", proc.stdout + proc.stderr
    assert (
        check["checked"]
        and check["gap"] <= 0.05
        and len(check["losses"]) == len(check["reference"]) == 20
    )
    assert (
        check["reference"][-1] < 0.9 * check["reference"][0]
    )  # the stream is learnable: the loss falls
    assert list((tmp_path / "good" / "out").glob("*/loss-reference/*.json"))

    proc, trial = _guard_search(tmp_path / "bad", write_yaml, env={"AUTOTUNE_FAULT": "drift"})
    assert trial.user_attrs["status"] == "invalid_config", proc.stdout + proc.stderr
    assert trial.user_attrs["reason"].startswith(
        "loss drifts: precision fp16 against precision bf16"
    )
    assert trial.user_attrs["cause"] == {"precision": "fp16"}


@pytest.mark.slow
def test_ddp_compression_hooks_are_checked_against_the_exact_all_reduce(
    tmp_path: Path, write_yaml: Any
) -> None:
    """gloo, 2 ranks: fp16_compress trains like the exact all-reduce (its loss check passes against
    a reference trial without the hook); bf16_compress is refused by torch without NCCL:
    invalid_config with torch's reason."""
    from conftest import load_trials, run_cli

    path = write_yaml(
        tiny(
            model=LLAMA,
            workload={
                "global_batch_size": 8,
                "world_size": 2,
                "warmup_steps": 2,
                "measure_steps": 2,
            },
            space={
                "micro_batch_size": [2],
                "precision": "fp32",
                "parallel": "ddp",
                "ddp_comm_hook": ["fp16_compress", "bf16_compress"],
            },
            baseline={"micro_batch_size": 2, "precision": "fp32", "ddp_comm_hook": "fp16_compress"},
            study={
                "trials": 2,
                "sampler": "grid",
                "confirm_rounds": 0,
                "loss_check": {"steps": 12},
            },
        )
    )
    proc = run_cli(
        "search", str(path), "--out", str(tmp_path / "out"), "--device", "cpu", cwd=tmp_path
    )
    trials = {
        t.user_attrs["knobs"]["ddp_comm_hook"]: t
        for t in load_trials(tmp_path / "out")
        if t.user_attrs.get("status") not in ("duplicate", "skipped")
    }
    fp16, bf16 = trials["fp16_compress"].user_attrs, trials["bf16_compress"].user_attrs
    assert fp16["status"] == "ok", proc.stdout + proc.stderr
    assert fp16["applied"]["parallel"]["comm_hook"] == "default_hooks.fp16_compress_hook"
    assert fp16["loss_check"]["checked"] and fp16["loss_check"]["gap"] <= 0.05
    assert bf16["status"] == "invalid_config" and "NCCL" in bf16["reason"]
    assert bf16["cause"] == {"ddp_comm_hook": "bf16_compress"}


def test_loss_gap_is_relative_but_not_to_a_loss_near_zero() -> None:
    from autotune.search.loss_guard import gap

    reference = [12.0, 6.0, 1.0, 0.5, 0.02, 0.01]
    assert gap([12.0, 9.0, 1.0, 0.5, 0.02, 0.01], reference) == 0  # the first half is not judged
    assert (
        gap([12.0, 6.0, 1.0, 0.5, 0.03, 0.02], reference) < 0.01
    )  # 0.02 against 0.01: measured on 1.2 nats
    assert gap([12.0, 6.0, 1.0, 0.8, 0.02, 0.01], reference) == pytest.approx(
        0.25
    )  # 0.3 nats over a 1.2 floor
    assert gap([12.0, 6.0, 1.0, 0.5, 3.0, 2.0], reference) > 1  # a curve that stopped learning


def test_loss_check_learning_rate_follows_the_widest_fan_in() -> None:
    from autotune.workloads.train import check_lr

    assert (
        check_lr(torch, Transformer({**LLAMA, "kv_heads": 2})) == 3e-4
    )  # fan-in 128: nanoGPT's rate
    with torch.device(
        "meta"
    ):  # Llama-3.1-8B's shape: its MLP's down projection has a fan-in of 14,336
        big = Transformer(
            {
                **LLAMA,
                "n_layers": 1,
                "d_model": 4096,
                "n_heads": 32,
                "kv_heads": 8,
                "ffn_hidden": 14336,
                "vocab_size": 1024,
            }
        )
    assert check_lr(torch, big) == pytest.approx(0.25 * 0.02 / 14336**0.5)  # 4.2e-5


@pytest.mark.slow
def test_micro_batch_sizes_share_one_eager_reference(tmp_path: Path, write_yaml: Any) -> None:
    """fp16 at micro-batch 4 and 8 (check capped at 4 sequences): one reference trial, eager at 4
    sequences and one micro-step, its seconds the first trial's `reference` phase; the second reads
    it from the cache."""
    from conftest import load_trials, run_cli

    path = write_yaml(
        tiny(
            model=LLAMA,
            workload={"global_batch_size": 8, "warmup_steps": 1, "measure_steps": 2},
            space={"micro_batch_size": [4, 8], "precision": ["fp16"]},
            baseline={"micro_batch_size": 4, "precision": "fp16"},
            study={"trials": 2, "sampler": "grid", "confirm_rounds": 0, "loss_check": {"steps": 8}},
        )
    )
    proc = run_cli(
        "search", str(path), "--out", str(tmp_path / "out"), "--device", "cpu", cwd=tmp_path
    )
    done = [
        t.user_attrs for t in load_trials(tmp_path / "out") if t.user_attrs.get("status") == "ok"
    ]
    assert len(done) == 2, proc.stdout + proc.stderr
    (ref_file,) = (tmp_path / "out").glob("*/loss-reference/*.json")
    ref_knobs = __import__("json").loads(ref_file.read_text())["knobs"]
    assert (ref_knobs["precision"], ref_knobs["compile"], ref_knobs["micro_batch_size"]) == (
        "bf16",
        False,
        4,
    )
    assert ref_knobs["grad_accum_steps"] == 1
    assert all(t["loss_check"]["checked"] and t["phases_s"]["check"] > 0 for t in done)
    measured, cached = sorted(done, key=lambda t: "reference" not in t["phases_s"])
    assert measured["phases_s"]["reference"] > 0 and "reference" not in cached["phases_s"]
    assert cached["loss_check"]["source"].startswith(f"reference {ref_file.name}")


@pytest.mark.slow
def test_loss_check_of_a_compiled_trial_compiles_nothing_more() -> None:
    """A compiled fp16 trial at micro-batch 8: its loss check (4 sequences, another shape) runs
    eager, so torch.compile traces no graph beyond the trial's own (a new shape would be a second
    compile)."""
    from torch._dynamo.utils import counters

    knobs = {
        **knob_catalogue.defaults("train"),
        "precision": "fp16",
        "compile": True,
        "micro_batch_size": 8,
        "grad_accum_steps": 1,
    }
    model = {**LLAMA, "n_layers": 1, "kv_heads": 2}
    spec = TrialSpec(
        task="train",
        device="cpu",
        knobs=knobs,
        model=model,
        run=RunSettings(warmup_steps=1, measure_steps=1),
        params={"loss_check": {"steps": 4}},
    )
    counters.clear()
    result = trial.run(spec)
    assert result.status == "ok" and len(result.output["loss_check"]) == 4
    assert counters["stats"]["unique_graphs"] == 1
    cache = result.applied["compile_cache"]
    assert (
        cache["fxgraph_miss"] + cache["fxgraph_hit"] == 2
    )  # forward and backward, compiled (or loaded) once
    assert result.phases_s["check"] > 0
