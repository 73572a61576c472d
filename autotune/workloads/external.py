"""Models that are not the built-in transformer: a Hugging Face config, or the user's own
entrypoint.

Both give the trial the same thing as the built-in model: a module whose forward(inputs, targets)
returns the mean loss, a few micro-batches made once on the device, and what MFU needs (or None:
MFU n/a).

The entrypoint protocol (`model.entrypoint: "package.module:function"`):

    def build(knobs: dict, device: str) -> dict:
        return {
            "model": module,  # torch.nn.Module; forward(inputs, targets) -> scalar loss
            "make_batch": make_batch,  # make_batch(micro_batch_size) -> (inputs, targets) on device
            "tokens_per_sample": 1024,  # tokens one sample contributes to tokens/s
            "flop_params": None,  # optional fallback: N of 6N + 12*L*d*T, if counting fails
            "n_layers": None,  # optional, with d_model: the attention term 12*L*d*T
            "d_model": None,
        }

`knobs` holds every knob of the trial (precision, micro_batch_size, attention, ...); autotune
itself applies precision (autocast, GradScaler), compile, the SDPA backend, the optimizer and the
timing.

MFU's FLOPs are counted, not estimated, for both kinds: torch.utils.flop_counter.FlopCounterMode
over one forward and backward of one sample of the trial's micro-batch (FLOPs grow linearly with
the batch, and one sample keeps the extra memory small), before activation checkpointing and
compile, under the trial's autocast and SDPA backend. What it counts: matmuls, convolutions and
attention; elementwise work (norms, activations, softmax) is left out, as 6N + 12LdT leaves it
out."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from autotune.knobs import int_of
from autotune.protocol import Knobs, TrialSpec
from autotune.workloads.base import InvalidConfig, Work
from autotune.workloads.steps import Batch, Context

if TYPE_CHECKING:
    import torch as torch_types
    from torch import Tensor, nn
    from transformers import PretrainedConfig, PreTrainedModel


class Unsupported(Exception):
    """A knob value this kind of model cannot apply (`knobs`: which)."""

    def __init__(self, message: str, *knobs: str) -> None:
        super().__init__(message)
        self.knobs = knobs


@dataclass
class Built:
    model: nn.Module
    batches: list[Batch]
    tokens_per_sample: int
    flop_params: int | None
    mfu_dims: dict[str, int] | None
    n_params: int
    applied: dict[str, Any] = field(default_factory=dict)
    flops_per_token: float | None = (
        None  # counted (count_flops); None: the formula on flop_params, or MFU n/a
    )


COUNTED = (
    "counted by torch.utils.flop_counter over one forward+backward"  # the record's applied.flops
)


def _attention_formulas(torch: ModuleType) -> dict[object, Callable[..., int]]:
    """SDPA's model FLOPs for FlopCounterMode: the CPU kernel, which torch's table leaves out (it
    would count no attention on the CPU), and each backward at twice its forward, as 6N + 12LdT
    counts a backward (torch's own formula adds the scores a fused kernel recomputes: hardware
    FLOPs, which MFU leaves out, PaLM app. B)."""
    from torch.utils.flop_counter import sdpa_flop_count

    aten = torch.ops.aten

    # the op's other arguments (scale, dropout, ...) and its output's shape do not change the count
    def forward(
        query: Tensor,
        key: Tensor,
        value: Tensor,
        *args: object,
        out_shape: object = None,
        **kwargs: object,
    ) -> int:
        return sdpa_flop_count(query, key, value)

    def backward(
        grad: Tensor,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        *args: object,
        out_shape: object = None,
        **kwargs: object,
    ) -> int:
        return 2 * sdpa_flop_count(query, key, value)

    backwards = (
        aten._scaled_dot_product_flash_attention_for_cpu_backward,
        aten._scaled_dot_product_flash_attention_backward,
        aten._scaled_dot_product_efficient_attention_backward,
        aten._scaled_dot_product_cudnn_attention_backward,
    )
    return {
        aten._scaled_dot_product_flash_attention_for_cpu: forward,
        **{op: backward for op in backwards},
    }


def count_flops(torch: ModuleType, model: nn.Module, sample: Batch, context: Context) -> int:
    """FLOPs of one forward and backward of `model` on one (inputs, targets) sample, counted by
    torch.utils.flop_counter.FlopCounterMode under `context` (the trial's autocast and SDPA
    backend); the gradients it made are dropped."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False, custom_mapping=_attention_formulas(torch))
    with context(), counter:
        model(*sample).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def _counted(
    torch: ModuleType, model: nn.Module, sample: Batch, tokens: int, context: Context
) -> tuple[float | None, str]:
    """FLOPs per token counted (count_flops) and how they were obtained; (None, why) if counting
    failed."""
    try:
        total = count_flops(torch, model, sample, context)
    except torch.OutOfMemoryError:
        raise  # one sample does not fit: neither would the trial
    except (
        Exception
    ) as err:  # an op the counter's dispatch mode cannot run: the formula, or MFU n/a
        return None, f"not counted ({type(err).__name__}: {str(err).strip()[:120]})"
    return (
        (total / tokens, COUNTED) if total else (None, "not counted (no matmul or attention seen)")
    )


def _reject(knobs: Knobs, what: str) -> None:
    if knobs.get("pad_vocab_multiple"):
        raise Unsupported(
            f"pad_vocab_multiple applies to the built-in model only, not to {what}",
            "pad_vocab_multiple",
        )
    if knobs.get("activation_checkpointing", "none") in ("selective", "selective_op"):
        raise Unsupported(
            f"activation_checkpointing {knobs['activation_checkpointing']} applies to the built-in "
            f"model only, not to {what}",
            "activation_checkpointing",
        )
    if knobs.get("cross_entropy", "standard") != "standard":
        raise Unsupported(
            f"cross_entropy chunked applies to the built-in model only, not to {what}",
            "cross_entropy",
        )


def hf_attention(knobs: Knobs) -> str:
    """transformers' attn_implementation for the attention knob: eager, else sdpa (a forced SDPA
    backend is the trial's context around the forward)."""
    return "eager" if knobs.get("attention", "auto") == "eager" else "sdpa"


def hf_causal_lm(
    config_path: str, knobs: Knobs, device: torch_types.device | str
) -> tuple[PreTrainedModel, PretrainedConfig]:
    """AutoModelForCausalLM.from_config on the config file, built and initialised on `device`
    (nothing is made on the CPU first; random weights, nothing downloaded); SDPA attention unless
    the attention knob is eager (flash/efficient/cudnn/math: SDPA with that backend forced by the
    trial). Returns the model and config."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with open(config_path) as f:
        data = json.load(f)
    config = AutoConfig.for_model(**data)
    impl = hf_attention(knobs)
    with torch.device(device):
        hf = AutoModelForCausalLM.from_config(config, attn_implementation=impl)
    return hf, config


def build_hf(
    config_path: str,
    seq_len: int,
    knobs: Knobs,
    device: str,
    n_batches: int,
    gen: torch_types.Generator,
    context: Context,
) -> Built:
    """AutoModelForCausalLM.from_config on the config file: random weights, nothing downloaded.
    context: the trial's autocast and SDPA backend, under which the FLOPs are counted
    (count_flops)."""
    import torch
    import torch.nn.functional as F

    _reject(knobs, "hf_config models")
    hf, config = hf_causal_lm(config_path, knobs, device)
    vocab = config.vocab_size

    class Adapter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.hf = hf

        def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return self.head_loss(self.hf(input_ids=inputs).logits, targets)

        def head_loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    seq = seq_len
    mbs = int_of(knobs, "micro_batch_size")
    pool = torch.randint(0, vocab, (n_batches, mbs, seq + 1), device=device, generator=gen)
    batches = [(b[:, :-1], b[:, 1:]) for b in pool]
    model = Adapter()
    # counted before checkpointing is enabled: its recomputed forward is no model FLOP
    per_token, how = _counted(torch, model, (batches[0][0][:1], batches[0][1][:1]), seq, context)
    if knobs.get("activation_checkpointing", "none") == "full":
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    n = sum(p.numel() for p in hf.parameters())
    try:  # learned position embeddings are left out of 6N, as for the built-in gpt
        positions = hf.get_position_embeddings()
    except Exception:  # RoPE models have none (transformers raises NotImplementedError)
        positions = None
    n_pos = positions.weight.numel() if isinstance(positions, torch.nn.Embedding) else 0
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    d = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None)
    return Built(
        model=model,
        batches=batches,
        tokens_per_sample=seq,
        flop_params=n - n_pos,
        mfu_dims={"n_layers": layers, "d_model": d, "seq_len": seq} if layers and d else None,
        n_params=n,
        applied={
            "model": f"transformers {type(hf).__name__} ({config.model_type})",
            "attn_implementation": hf_attention(knobs),
            "vocab": [vocab, vocab],
            "checkpointed_blocks": layers if knobs.get("activation_checkpointing") == "full" else 0,
            "flops": how if per_token else f"6N + 12LdT, PaLM's formula ({how})",
        },
        flops_per_token=per_token,
    )


def build_entrypoint(
    entrypoint: str,
    knobs: Knobs,
    device: str,
    n_batches: int,
    base_dir: str | None,
    context: Context,
) -> Built:
    """Call the user's function (see the protocol above) and check what it returned; count its FLOPs
    on one sample, make_batch(1), under context (the trial's autocast and SDPA backend)."""
    import torch

    _reject(knobs, "entrypoint models")
    if base_dir and base_dir not in sys.path:
        sys.path.insert(0, base_dir)
    module_name, _, func = entrypoint.partition(":")
    out = getattr(importlib.import_module(module_name), func)(dict(knobs), device)
    missing = [k for k in ("model", "make_batch", "tokens_per_sample") if k not in out]
    if missing:
        raise TypeError(
            f"entrypoint {entrypoint} returned no {missing[0]!r} (docs/yaml.md: Your own model)"
        )
    model = out["model"].to(device)
    if knobs.get("activation_checkpointing", "none") == "full":
        raise Unsupported(
            "activation_checkpointing applies to built-in and hf_config models; do it in your "
            "entrypoint",
            "activation_checkpointing",
        )
    batches = [out["make_batch"](knobs["micro_batch_size"]) for _ in range(n_batches)]
    n_params = sum(p.numel() for p in model.parameters())
    layers, d = out.get("n_layers"), out.get("d_model")
    tokens = int(out["tokens_per_sample"])
    per_token, how = _counted(torch, model, out["make_batch"](1), tokens, context)
    fallback = (
        f"6N + 12LdT on the entrypoint's flop_params ({how})"
        if out.get("flop_params")
        else f"n/a ({how})"
    )
    return Built(
        model=model,
        batches=batches,
        tokens_per_sample=tokens,
        flop_params=out.get("flop_params"),
        mfu_dims={
            "n_layers": layers or 0,
            "d_model": d or 0,
            "seq_len": int(out["tokens_per_sample"]),
        },
        n_params=n_params,
        applied={
            "model": f"entrypoint {entrypoint} ({type(model).__name__})",
            "checkpointed_blocks": 0,
            "vocab": None,
            "flops": how if per_token else fallback,
        },
        flops_per_token=per_token,
    )


def build(
    spec: TrialSpec,
    dev: torch_types.device,
    gen: torch_types.Generator,
    n_batches: int,
    context: Context,
) -> tuple[nn.Module, list[Batch], dict[str, Any], Work]:
    """train.build_model for an hf_config or entrypoint model: the model, its micro-batches, what it
    applied and its Work (FLOPs per token counted); a knob value it cannot apply is
    InvalidConfig."""
    m, knobs, device = spec.model or {}, spec.knobs, str(dev.type)
    try:
        if m.get("hf_config"):
            built = build_hf(m["hf_config"], m["seq_len"], knobs, device, n_batches, gen, context)
        else:
            built = build_entrypoint(
                m["entrypoint"], knobs, device, n_batches, spec.base_dir, context
            )
    except Unsupported as err:
        raise InvalidConfig(str(err), *err.knobs) from None
    work = Work(
        built.tokens_per_sample
        * int_of(knobs, "micro_batch_size")
        * int_of(knobs, "grad_accum_steps"),
        built.n_params,
        built.flop_params,
        built.mfu_dims,
        built.flops_per_token,
    )
    return built.model, built.batches, built.applied, work
