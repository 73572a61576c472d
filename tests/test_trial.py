"""The trial process on real tiny models (CPU): the training workload's knobs, precisions, families,
compile, the fault switch. Specs leave knobs out on purpose: the trial takes the catalogue's
defaults."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import tiny

from autotune.job import parse_config
from autotune.launch.runner import model_spec
from autotune.protocol import RunSettings, TrialSpec
from autotune.space import resolve_space
from autotune.workloads import trial as worker
from autotune.workloads.base import InvalidConfig, NonFiniteLoss
from autotune.workloads.faults import fault_for
from autotune.workloads.model import Transformer


def _spec(family: str = "gpt", **knobs) -> TrialSpec:
    model = {
        "family": family,
        "n_layers": 1,
        "d_model": 32,
        "n_heads": 4,
        "vocab_size": 128,
        "seq_len": 16,
    }
    if family == "llama":
        model["n_kv_heads"] = 2
    cfg = parse_config(tiny(model=model, baseline={}))
    return TrialSpec(
        task="train",
        device="cpu",
        knobs={"micro_batch_size": 2, "grad_accum_steps": 2, **knobs},
        model=model_spec(cfg.model),
        run=RunSettings(warmup_steps=1, measure_steps=3),
    )


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_worker_trains_each_precision(precision: str, family: str) -> None:
    result = worker.run(_spec(family, precision=precision))
    assert result.status == "ok"
    assert len(result.step_times_s) == 3 and all(t > 0 for t in result.step_times_s)
    assert all(math.isfinite(x) for x in result.losses)
    assert result.tokens_per_step == 2 * 2 * 16
    assert result.peak_mem_kind == "cpu_max_rss"


def test_worker_loss_goes_down_with_training() -> None:
    spec = _spec(precision="fp32")
    spec.run.measure_steps = 12
    losses = worker.run(spec).losses
    assert losses[-1] < losses[0]  # the optimizer really steps (same few batches, memorised)


@pytest.mark.slow
def test_worker_compile_is_real_and_timed_apart() -> None:
    result = worker.run(_spec(compile=True))
    assert result.status == "ok"
    assert result.phases_s["compile"] > 0  # the first step carried the compilation


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_worker_compile_scope_block_compiles_each_block_in_place(family: str) -> None:
    result = worker.run(_spec(family, compile=True, compile_scope="block"))
    assert result.status == "ok" and all(math.isfinite(x) for x in result.losses)
    assert (
        result.applied["compile_mode"]
        == "default, per block (1 x Block, compiled in place) + head_loss"
    )
    assert result.phases_s["compile"] > 0


def test_worker_compile_scope_block_needs_repeated_blocks() -> None:
    import torch

    from autotune.workloads.compiling import apply_compile
    from autotune.workloads.parallel import repeated_blocks

    flat = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    assert repeated_blocks(torch, flat) == []
    with pytest.raises(
        InvalidConfig, match="compile_scope block: this model has no list of repeated blocks"
    ):
        apply_compile(torch, flat, True, "block")
    # compile off: the scope does nothing
    model, applied = apply_compile(torch, flat, False, "block")
    assert model is flat and applied is None


def test_worker_tf32_on_cpu_is_invalid_config(tmp_path) -> None:
    with pytest.raises(InvalidConfig, match="tf32 needs an NVIDIA GPU"):
        worker.run(_spec(precision="tf32"))


def test_worker_param_counts_match_reference_models() -> None:
    root = __import__("pathlib").Path(__file__).resolve().parents[1] / "search_spaces"
    from autotune.job import load_config

    with torch.device("meta"):
        gpt2 = Transformer(model_spec(load_config(root / "gpt2-small.yaml").model))
        llama = Transformer(model_spec(load_config(root / "llama-1b.yaml").model))
    assert sum(p.numel() for p in gpt2.parameters()) == 124_439_808  # Hugging Face gpt2
    assert gpt2.flop_params() == 124_439_808 - 1024 * 768  # without position embeddings
    assert sum(p.numel() for p in llama.parameters()) == 1_235_814_400  # Llama-3.2-1B


def test_worker_fault_switch_conditions(monkeypatch) -> None:
    knobs = {"micro_batch_size": 8, "precision": "bf16"}
    monkeypatch.setenv("AUTOTUNE_FAULT", "oom@micro_batch_size>=16")
    assert fault_for(knobs) is None
    monkeypatch.setenv("AUTOTUNE_FAULT", "oom@micro_batch_size>=8")
    assert fault_for(knobs) == "oom"
    monkeypatch.setenv("AUTOTUNE_FAULT", "nan@precision=bf16")
    assert fault_for(knobs) == "nan"
    monkeypatch.setenv("AUTOTUNE_FAULT", "nan@precision=fp16")
    assert fault_for(knobs) is None
    monkeypatch.delenv("AUTOTUNE_FAULT")
    assert fault_for(knobs) is None


def test_worker_nan_fault_is_nonfinite(monkeypatch) -> None:
    monkeypatch.setenv("AUTOTUNE_FAULT", "nan")
    with pytest.raises(NonFiniteLoss, match="loss became nan during warm-up"):
        worker.run(_spec())


def test_worker_spec_from_resolved_space() -> None:
    space = resolve_space(parse_config(tiny()))
    knobs = space.knobs({"micro_batch_size": 4, "precision": "bf16"})
    assert knobs["grad_accum_steps"] == 2  # 8 / 4


# --- the Hopper knobs: each one's effect is real and shows in the trial record
# ---------------------


@pytest.mark.parametrize("attention", ["math", "flash", "eager"])
def test_worker_attention_backends_run_on_cpu(attention: str) -> None:
    result = worker.run(_spec(attention=attention))
    assert result.status == "ok"
    assert result.applied["attention"] == attention


@pytest.mark.parametrize("attention", ["efficient", "cudnn"])
def test_worker_unavailable_attention_is_invalid_config(attention: str) -> None:
    with pytest.raises(
        InvalidConfig, match=f"attention {attention}: the SDPA backend is not available here"
    ):
        worker.run(_spec(attention=attention))


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_worker_eager_attention_matches_sdpa(family: str) -> None:
    from autotune.workloads.model import eager_attention

    torch.manual_seed(0)
    q = torch.randn(2, 4, 16, 8, dtype=torch.float64)
    kv_heads = 2 if family == "llama" else 4
    k, v = (
        torch.randn(2, kv_heads, 16, 8, dtype=torch.float64),
        torch.randn(2, kv_heads, 16, 8, dtype=torch.float64),
    )
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=kv_heads != 4
    )
    assert torch.allclose(eager_attention(q, k, v), ref, atol=1e-10)


def test_worker_pad_vocab_same_model_padded_matmul() -> None:
    plain, padded = _spec(), _spec(pad_vocab_multiple=64)
    for spec in (plain, padded):
        spec.model["vocab_size"] = 100
    padded, plain = worker.run(padded), worker.run(plain)
    assert padded.applied["vocab"] == [100, 128] and plain.applied["vocab"] == [100, 100]
    assert padded.flop_params == plain.flop_params  # MFU counts the model, not the padding
    assert padded.n_params == plain.n_params + 28 * 32  # tied: 28 extra embedding rows


def test_worker_pad_vocab_loss_ignores_padded_logits() -> None:
    from autotune.workloads.model import Transformer

    base = {**_spec().model, "vocab_size": 100}
    torch.manual_seed(0)
    model = Transformer({**base, "padded_vocab": 128})
    with torch.no_grad():
        model.head.weight[100:] = 50.0  # padded rows would dominate the softmax if they took part
    tokens = torch.randint(0, 100, (2, 17))
    loss = model(tokens[:, :-1], tokens[:, 1:])
    x = model.tok(tokens[:, :-1]) + model.pos(torch.arange(16))
    for block in model.blocks:
        x = block(x, None)
    logits = model.head(model.norm(x))[..., :100]
    assert torch.allclose(
        loss, torch.nn.functional.cross_entropy(logits.reshape(-1, 100), tokens[:, 1:].reshape(-1))
    )


@pytest.mark.parametrize("mode,blocks", [("full", 2), ("selective", 1)])
def test_worker_activation_checkpointing_same_gradients(mode: str, blocks: int) -> None:
    from autotune.workloads.model import Transformer

    m = {**_spec().model, "n_layers": 2}
    grads = {}
    for every in (0, {"full": 1, "selective": 2}[mode]):
        torch.manual_seed(0)
        model = Transformer({**m, "checkpoint_every": every})
        tokens = torch.randint(
            0, m["vocab_size"], (2, 17), generator=torch.Generator().manual_seed(1)
        )
        model(tokens[:, :-1], tokens[:, 1:]).backward()
        grads[every] = torch.cat([p.grad.flatten() for p in model.parameters()])
        if every:
            assert model.checkpointed_blocks() == blocks
    assert torch.allclose(grads[0], grads[{"full": 1, "selective": 2}[mode]], atol=1e-6)
    spec = _spec(activation_checkpointing=mode)
    spec.model["n_layers"] = 2
    assert worker.run(spec).applied["checkpointed_blocks"] == blocks


def test_worker_fused_optimizer_and_alloc_conf_recorded(monkeypatch) -> None:
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    result = worker.run(_spec(fused_optimizer=True))
    assert result.applied["optimizer"] == "AdamW(fused=True)"
    assert result.applied["alloc_conf"] == "expandable_segments:True"
    assert worker.run(_spec()).applied["optimizer"] == "AdamW(fused=False)"


def test_worker_fp8_on_cpu_is_invalid_config() -> None:
    with pytest.raises(InvalidConfig, match="fp8 needs an NVIDIA GPU of compute capability 8.9"):
        worker.run(_spec(precision="fp8", fp8_recipe="rowwise"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_worker_fp8_on_gpu_converts_linears(recipe: str) -> None:
    pytest.importorskip("torchao")
    spec = _spec(precision="fp8", fp8_recipe=recipe)
    spec.device = "cuda"
    spec.model.update(d_model=64, n_heads=4)
    result = worker.run(spec)
    # qkv, proj, up, down; head kept
    assert result.status == "ok" and result.applied["fp8_linears"] == 4


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("attention", ["flash", "efficient", "cudnn", "math", "eager"])
def test_worker_attention_backends_on_gpu(attention: str) -> None:
    spec = _spec(precision="bf16", attention=attention)
    spec.device = "cuda"
    spec.model.update(d_model=128, n_heads=2, kv_heads=2)
    assert worker.run(spec).applied["attention"] == attention
