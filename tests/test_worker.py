"""The trial worker on real tiny models (CPU): precisions, families, compile, the fault switch."""

from __future__ import annotations

import math

import pytest
import torch

from autotune.config import parse_config
from autotune.space import resolve_space
from autotune.runner import model_spec
from autotune.workloads import worker
from autotune.workloads.model import Transformer
from conftest import tiny


def _spec(family: str = "gpt", **knobs) -> dict:
    model = {"family": family, "n_layers": 1, "d_model": 32, "n_heads": 4, "vocab_size": 128, "seq_len": 16}
    if family == "llama":
        model["n_kv_heads"] = 2
    cfg = parse_config(tiny(model=model, baseline={}))
    base = {"micro_batch_size": 2, "precision": "fp32", "grad_accum_steps": 2, "compile": False, "nccl_algo": "default"}
    return {"knobs": {**base, **knobs}, "model": model_spec(cfg.model), "device": "cpu",
            "workload": {"warmup_steps": 1, "measure_steps": 3, "seed": 0, "world_size": 1}}


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_worker_trains_each_precision(precision: str, family: str) -> None:
    result = worker.run(_spec(family, precision=precision))
    assert result["status"] == "ok"
    assert len(result["step_times_s"]) == 3 and all(t > 0 for t in result["step_times_s"])
    assert all(math.isfinite(x) for x in result["losses"])
    assert result["tokens_per_step"] == 2 * 2 * 16
    assert result["peak_mem_kind"] == "cpu_max_rss"


def test_worker_loss_goes_down_with_training() -> None:
    spec = _spec(precision="fp32")
    spec["workload"]["measure_steps"] = 12
    losses = worker.run(spec)["losses"]
    assert losses[-1] < losses[0]  # the optimizer really steps (same few batches, memorised)


def test_worker_compile_is_real_and_timed_apart() -> None:
    result = worker.run(_spec(compile=True))
    assert result["status"] == "ok"
    assert result["phases_s"]["compile"] > 0  # the first step carried the compilation


def test_worker_tf32_on_cpu_is_invalid_config(tmp_path) -> None:
    with pytest.raises(worker.InvalidConfig, match="tf32 needs an NVIDIA GPU"):
        worker.run(_spec(precision="tf32"))


def test_worker_param_counts_match_reference_models() -> None:
    root = __import__("pathlib").Path(__file__).resolve().parents[1] / "search_spaces"
    from autotune.config import load_config

    with torch.device("meta"):
        gpt2 = Transformer(model_spec(load_config(root / "gpt2-small.yaml").model))
        llama = Transformer(model_spec(load_config(root / "llama-1b.yaml").model))
    assert sum(p.numel() for p in gpt2.parameters()) == 124_439_808  # Hugging Face gpt2
    assert gpt2.flop_params() == 124_439_808 - 1024 * 768  # without position embeddings
    assert sum(p.numel() for p in llama.parameters()) == 1_235_814_400  # Llama-3.2-1B


def test_worker_fault_switch_conditions(monkeypatch) -> None:
    knobs = {"micro_batch_size": 8, "precision": "bf16"}
    monkeypatch.setenv("AUTOTUNE_FAULT", "oom@micro_batch_size>=16")
    assert worker.fault_for(knobs) is None
    monkeypatch.setenv("AUTOTUNE_FAULT", "oom@micro_batch_size>=8")
    assert worker.fault_for(knobs) == "oom"
    monkeypatch.setenv("AUTOTUNE_FAULT", "nan@precision=bf16")
    assert worker.fault_for(knobs) == "nan"
    monkeypatch.setenv("AUTOTUNE_FAULT", "nan@precision=fp16")
    assert worker.fault_for(knobs) is None
    monkeypatch.delenv("AUTOTUNE_FAULT")
    assert worker.fault_for(knobs) is None


def test_worker_nan_fault_is_nonfinite(monkeypatch) -> None:
    monkeypatch.setenv("AUTOTUNE_FAULT", "nan")
    with pytest.raises(worker.NonFiniteLoss, match="loss became nan during warm-up"):
        worker.run(_spec())


def test_worker_spec_from_resolved_space() -> None:
    space = resolve_space(parse_config(tiny()))
    knobs = space.knobs({"micro_batch_size": 4, "precision": "bf16"})
    assert knobs["grad_accum_steps"] == 2  # 8 / 4
