"""Models that are not the built-in transformer: a Hugging Face config, or the user's own entrypoint.

Both give the trial the same thing as the built-in model: a module whose forward(inputs, targets) returns
the mean loss, a few micro-batches made once on the device, and what MFU needs (or None: MFU n/a).

The entrypoint protocol (`model.entrypoint: "package.module:function"`):

    def build(knobs: dict, device: str) -> dict:
        return {
            "model": module,            # torch.nn.Module; forward(inputs, targets) -> scalar loss
            "make_batch": make_batch,   # make_batch(micro_batch_size) -> (inputs, targets) on `device`
            "tokens_per_sample": 1024,  # tokens one sample contributes to tokens/s
            "flop_params": None,        # optional: N of 6N + 12*L*d*T; None makes MFU n/a
            "n_layers": None,           # optional, with d_model: the attention term 12*L*d*T
            "d_model": None,
        }

`knobs` holds every knob of the trial (precision, micro_batch_size, attention, ...); autotune itself
applies precision (autocast, GradScaler), compile, the SDPA backend, the optimizer and the timing.
"""

from __future__ import annotations

import importlib
import json
import sys
from dataclasses import dataclass, field
from typing import Any


class Unsupported(Exception):
    """A knob value this kind of model cannot apply (`knobs`: which)."""

    def __init__(self, message: str, *knobs: str) -> None:
        super().__init__(message)
        self.knobs = knobs


@dataclass
class Built:
    model: Any
    batches: list[tuple[Any, Any]]
    tokens_per_sample: int
    flop_params: int | None
    mfu_dims: dict[str, int] | None
    n_params: int
    applied: dict[str, Any] = field(default_factory=dict)


def _reject(knobs: dict[str, Any], what: str) -> None:
    if knobs.get("pad_vocab_multiple"):
        raise Unsupported(f"pad_vocab_multiple applies to the built-in model only, not to {what}", "pad_vocab_multiple")
    if knobs.get("activation_checkpointing", "none") in ("selective", "selective_op"):
        raise Unsupported(
            f"activation_checkpointing {knobs['activation_checkpointing']} applies to the built-in "
            f"model only, not to {what}",
            "activation_checkpointing",
        )
    if knobs.get("cross_entropy", "standard") != "standard":
        raise Unsupported(f"cross_entropy chunked applies to the built-in model only, not to {what}", "cross_entropy")


def hf_attention(knobs: dict[str, Any]) -> str:
    """transformers' attn_implementation for the attention knob: eager, else sdpa (a forced SDPA backend is the
    trial's context around the forward)."""
    return "eager" if knobs.get("attention", "auto") == "eager" else "sdpa"


def hf_causal_lm(m: dict[str, Any], knobs: dict[str, Any], device: Any) -> tuple[Any, Any]:
    """AutoModelForCausalLM.from_config on the config file, built and initialised on `device` (nothing is made
    on the CPU first; random weights, nothing downloaded); SDPA attention unless the attention knob is eager
    (flash/efficient/cudnn/math: SDPA with that backend forced by the trial). Returns the model and config."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with open(m["hf_config"]) as f:
        data = json.load(f)
    config = AutoConfig.for_model(**data)
    impl = hf_attention(knobs)
    with torch.device(device):
        hf = AutoModelForCausalLM.from_config(config, attn_implementation=impl)
    return hf, config


def build_hf(m: dict[str, Any], knobs: dict[str, Any], device: str, n_batches: int, gen: Any) -> Built:
    """AutoModelForCausalLM.from_config on the config file: random weights, nothing downloaded."""
    import torch
    import torch.nn.functional as F

    _reject(knobs, "hf_config models")
    hf, config = hf_causal_lm(m, knobs, device)
    if knobs.get("activation_checkpointing", "none") == "full":
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    vocab = config.vocab_size

    class Adapter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.hf = hf

        def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return self.head_loss(self.hf(input_ids=inputs).logits, targets)

        def head_loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    seq = m["seq_len"]
    mbs = knobs["micro_batch_size"]
    pool = torch.randint(0, vocab, (n_batches, mbs, seq + 1), device=device, generator=gen)
    n = sum(p.numel() for p in hf.parameters())
    try:  # learned position embeddings are left out of 6N, as for the built-in gpt
        n_pos = hf.get_position_embeddings().weight.numel()
    except Exception:  # RoPE models have none (transformers raises NotImplementedError)
        n_pos = 0
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    d = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None)
    return Built(
        model=Adapter(),
        batches=[(b[:, :-1], b[:, 1:]) for b in pool],
        tokens_per_sample=seq,
        flop_params=n - n_pos,
        mfu_dims={"n_layers": layers, "d_model": d, "seq_len": seq} if layers and d else None,
        n_params=n,
        applied={
            "model": f"transformers {type(hf).__name__} ({config.model_type})",
            "attn_implementation": hf_attention(knobs),
            "vocab": [vocab, vocab],
            "checkpointed_blocks": layers if knobs.get("activation_checkpointing") == "full" else 0,
        },
    )


def build_entrypoint(
    m: dict[str, Any], knobs: dict[str, Any], device: str, n_batches: int, base_dir: str | None
) -> Built:
    """Call the user's function (see the protocol above) and check what it returned."""
    _reject(knobs, "entrypoint models")
    if base_dir and base_dir not in sys.path:
        sys.path.insert(0, base_dir)
    module_name, _, func = m["entrypoint"].partition(":")
    out = getattr(importlib.import_module(module_name), func)(dict(knobs), device)
    missing = [k for k in ("model", "make_batch", "tokens_per_sample") if k not in out]
    if missing:
        raise TypeError(f"entrypoint {m['entrypoint']} returned no {missing[0]!r} (README: Your own model)")
    model = out["model"].to(device)
    if knobs.get("activation_checkpointing", "none") == "full":
        raise Unsupported(
            "activation_checkpointing applies to built-in and hf_config models; do it in your entrypoint",
            "activation_checkpointing",
        )
    batches = [out["make_batch"](knobs["micro_batch_size"]) for _ in range(n_batches)]
    n_params = sum(p.numel() for p in model.parameters())
    layers, d = out.get("n_layers"), out.get("d_model")
    return Built(
        model=model,
        batches=batches,
        tokens_per_sample=int(out["tokens_per_sample"]),
        flop_params=out.get("flop_params"),
        mfu_dims={"n_layers": layers or 0, "d_model": d or 0, "seq_len": int(out["tokens_per_sample"])},
        n_params=n_params,
        applied={
            "model": f"entrypoint {m['entrypoint']} ({type(model).__name__})",
            "checkpointed_blocks": 0,
            "vocab": None,
        },
    )
