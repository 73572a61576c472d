"""workloads/external.py: hf_config and entrypoint models, their FLOPs counted by
torch.utils.flop_counter."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import torch

from autotune.workloads import external

ROOT = Path(__file__).resolve().parent.parent
HF_LLAMA = ROOT / "search_spaces" / "hf" / "tiny-llama.json"
SEQ = 32


def _by_hand_llama(cfg: dict) -> float:
    """Training FLOPs per token of a Llama: 6 x the linears' weights (q, k, v, o, gate, up, down,
    the tied head) plus 12 L d T for the attention scores and values (forward, and backward at
    twice the forward)."""
    d, layers, ffn, vocab = (
        cfg["hidden_size"],
        cfg["num_hidden_layers"],
        cfg["intermediate_size"],
        cfg["vocab_size"],
    )
    kv = d * cfg["num_key_value_heads"] // cfg["num_attention_heads"]
    linears = layers * (2 * d * d + 2 * d * kv + 3 * d * ffn) + d * vocab
    return 6 * linears + 12 * layers * d * SEQ


@pytest.mark.parametrize(
    "attention", ["auto", "eager"]
)  # SDPA (the CPU's flash kernel) and transformers' matmuls
def test_external_hf_llama_flops_counted_as_by_hand(attention: str) -> None:
    pytest.importorskip("transformers")
    knobs = {"micro_batch_size": 2, "attention": attention, "activation_checkpointing": "full"}
    built = external.build_hf(
        str(HF_LLAMA),
        SEQ,
        knobs,
        "cpu",
        1,
        torch.Generator().manual_seed(0),
        contextlib.nullcontext,
    )
    expected = _by_hand_llama(json.loads(HF_LLAMA.read_text()))
    assert built.flops_per_token == pytest.approx(
        expected, rel=0.02
    )  # checkpointing's recompute not counted
    assert built.applied["flops"] == external.COUNTED
    assert all(
        p.grad is None for p in built.model.parameters()
    )  # the count leaves no gradient behind


def test_external_entrypoint_flops_counted_not_taken_from_flop_params() -> None:
    knobs = {"micro_batch_size": 2, "activation_checkpointing": "none"}
    built = external.build_entrypoint(
        "custom_model:build",
        knobs,
        "cpu",
        1,
        str(ROOT / "search_spaces"),
        contextlib.nullcontext,
    )
    vocab, seq, d, layers = (
        1024,
        128,
        96,
        2,
    )  # search_spaces/custom_model.py; a layer: qkv, out, 4d MLP = 12 d^2
    assert built.flops_per_token == pytest.approx(
        6 * (layers * 12 * d * d + d * vocab) + 12 * layers * d * seq, rel=0.02
    )
    assert built.applied["flops"] == external.COUNTED
