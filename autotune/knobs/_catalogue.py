"""The catalogue: every knob, declared once (autotune/knobs/__init__.py says what reads it)."""

from __future__ import annotations

from typing import Literal, Optional

from autotune.knobs import _notes as notes
from autotune.knobs._generate import GENERATE
from autotune.knobs._knob import (
    ALL,
    BOTH,
    CE_CHUNKS,
    TRAIN_AND_COMMAND,
    CompileMode,
    Knob,
    Not,
    Precision,
    _env_value,
    _pad,
    _positive,
)
from autotune.knobs._ranks import RANKS

CATALOGUE: tuple[Knob, ...] = (
    Knob(
        "micro_batch_size",
        int,
        8,
        ranged=True,
        sizes=True,
        edge="divisor",
        check=_positive,
        help="Sequences per forward/backward pass: a list, one value, or {multiple_of, min, max}.",
        values="list, one value, or `{multiple_of, min, max}`",
        effect="sequences per forward/backward",
        tasks=TRAIN_AND_COMMAND,
    ),
    Knob(
        "precision",
        Precision,
        "fp32",
        note={"train": notes.precision, "generate": notes.generate_precision},
        tasks=ALL,
        # fp32 and tf32 keep every activation in 4 bytes; bf16 and fp16 autocast keeps the fp32
        # weights, gradients and optimizer state as fp32 does and many activations in 2 (fp8:
        # torchao's own layout, not compared); TF32 changes the matmuls' arithmetic, not what is
        # stored, and fp16 stores what bf16 does: each tier's values need the same memory
        memory_order=(("fp32", "tf32"), ("bf16", "fp16")),
        memory_alike=True,
        help=(
            "fp32 (TF32 off), tf32 (TF32 matmuls), bf16 (autocast), fp16 (autocast + GradScaler), "
            "fp8 (torchao float8 training of the linear layers, head in bf16; needs torchao and "
            "an sm89+ GPU)."
        ),
        effect=(
            'fp32: TF32 off; tf32: TF32 matmuls (`fp32_precision="tf32"`); bf16: `torch.autocast` '
            "bf16; fp16: "
            "autocast fp16 + `GradScaler` (dynamic loss scaling); fp8: torchao "
            "`convert_to_float8_training` on every linear but the output head, under bf16 "
            "autocast (needs torchao, `pip install 'autotune-llm[fp8]'`, and an sm89+ GPU; else "
            "the trial ends `invalid_config` saying so)"
        ),
    ),
    Knob(
        "grad_accum_steps",
        int,
        1,
        derived=True,
        sizes=True,
        check=_positive,
        help="auto: global_batch_size / (micro_batch_size x world_size). "
        "A list (or one value) only when global_batch_size is absent; default then 1.",
        values="`auto` or a list",
        effect="micro-steps per optimizer step",
        tasks=TRAIN_AND_COMMAND,
    ),
    Knob(
        "compile",
        CompileMode,
        False,
        note={"train": notes.compile_train, "generate": notes.compile_generate},
        tasks=ALL,
        help="torch.compile: false, true (= default), or a mode: max-autotune-no-cudagraphs, "
        "reduce-overhead, max-autotune.",
        values=(
            "`false`, `true`/`default`, `max-autotune-no-cudagraphs`, `reduce-overhead`, "
            "`max-autotune`"
        ),
        effect="`torch.compile(model, mode=...)` (loss included)",
    ),
    Knob(
        "compile_scope",
        Literal["model", "block"],
        "model",
        only_with=("compile", Not(False)),
        screen="block",
        help=(
            "What torch.compile compiles: model (the whole model, loss included) or block (each "
            "repeated transformer block, compiled once and reused for all: a cold compile of one "
            "block, not of every layer; plus the model's head_loss, i.e. final norm, head and "
            "loss, as one more region; the embedding runs eager)."
        ),
        effect=(
            "model: `torch.compile(model)`; block: `block.compile()` on every block of the "
            "model's list of repeated blocks (built-in model: `blocks`; others: the largest "
            "`ModuleList` of one block class; none: `invalid_config`), then `model.head_loss = "
            "torch.compile(model.head_loss)` where the model has one (the built-in model and "
            "hf_config models)"
        ),
    ),
    Knob(
        "compile_dynamic",
        Literal["static", "batch"],
        "static",
        only_with=("compile", Not(False)),
        screen="batch",
        help=(
            "static: torch.compile specialises on the micro-batch size (a new size is a new "
            "compile); batch: the batch dimension is compiled dynamic, so trials of every "
            "micro-batch size share one compiled program through the compile cache (a second size "
            "loads it in seconds instead of compiling again; dynamic shapes may cost step time: "
            "the search measures it)."
        ),
        effect="batch: `torch._dynamo.maybe_mark_dynamic(t, 0)` on every input tensor of the "
        "micro-batches (a micro-batch of 1 stays specialised)",
    ),
    Knob(
        "attention",
        Literal["auto", "flash", "efficient", "cudnn", "math", "eager"],
        "auto",
        note=notes.attention,
        tasks=BOTH,
        # eager and SDPA's math backend hold the sequence-by-sequence attention matrix; the fused
        # kernels (and auto, which picks one where it can, else math) never more
        memory_order=(("eager", "math"), ("auto", "flash", "efficient", "cudnn")),
        help=(
            "auto (PyTorch picks the SDPA kernel), an SDPA backend forced with sdpa_kernel "
            "(flash, efficient, cudnn, math), or eager (softmax(QK^T)V materialised, the slow "
            "reference)."
        ),
        effect="auto: PyTorch's SDPA choice; flash/efficient/cudnn/math: that SDPA backend forced "
        "with `sdpa_kernel` (unavailable here: `invalid_config` with PyTorch's reason); "
        "eager: softmax(QK^T)V materialised",
    ),
    Knob(
        "pad_vocab_multiple",
        Optional[int],
        None,
        edge="double",
        check=_pad,
        note=lambda k, d: (
            [
                f"pad embedding and head to a multiple of {k['pad_vocab_multiple']}; cut logits "
                "to the vocab before the loss"
            ]
            if k.get("pad_vocab_multiple")
            else []
        ),
        help="Pad the embedding and head to a multiple of this (null: no padding); the padded "
        "logits are cut off before the loss, so the model is the same.",
        values="`null`, or an integer such as 64, 128",
        effect="embedding and head padded (50257 -> 50304 with 64); the padded logits are cut off "
        "before the loss, so the model is the same; MFU counts the unpadded model",
    ),
    Knob(
        "activation_checkpointing",
        Literal["none", "full", "selective", "selective_op"],
        "none",
        note=lambda k, d: (
            []
            if k.get("activation_checkpointing", "none") == "none"
            else [
                "torch.utils.checkpoint.checkpoint(block, ..., use_reentrant=False"
                + (
                    ", context_fn=<torchtitan's op policy>) on every block"
                    if k["activation_checkpointing"] == "selective_op"
                    else ") on "
                    + (
                        "every block"
                        if k["activation_checkpointing"] == "full"
                        else "every other block"
                    )
                )
            ]
        ),
        help=(
            "Recompute activations in the backward pass: none, full (every block), selective "
            "(every other block), selective_op (every block, but the outputs of its matmuls, all "
            "but every second one, and of attention are saved: torchtitan's per-op selective "
            "checkpointing)."
        ),
        effect=(
            "`torch.utils.checkpoint` (non-reentrant) on every block, or every other block; "
            "selective_op: every block with "
            "`context_fn=create_selective_checkpoint_contexts(policy)`, the policy saving "
            "`aten.mm`/`addmm` outputs (every second one recomputed) and the SDPA kernels' outputs"
        ),
        tasks=TRAIN_AND_COMMAND,
        # none keeps every block's activations for the backward; each checkpointing choice keeps
        # fewer of them, and recomputes one block's at a time
        memory_order=(("none",), ("full", "selective", "selective_op")),
    ),
    Knob(
        "cross_entropy",
        Literal["standard", "chunked"],
        "standard",
        note=lambda k, d: (
            []
            if k.get("cross_entropy", "standard") == "standard"
            else [
                f"the tokens in {CE_CHUNKS} slices, each slice's head and cross-entropy under "
                "torch.utils.checkpoint (logits recomputed in backward)"
            ]
        ),
        help=f"The loss: standard (the whole batch's logits at once) or chunked ({CE_CHUNKS} "
        "slices of the tokens, each recomputed in backward, so one slice's fp32 logits are "
        "alive at a time: less memory for large vocabularies, one more head matmul).",
        effect=(
            f"chunked: head + cross-entropy over {CE_CHUNKS} token slices, each checkpointed; "
            "built-in model only"
        ),
    ),
    Knob(
        "fused_optimizer",
        bool,
        False,
        note=lambda k, d: (
            ["torch.optim.AdamW(..., fused=True)"] if k.get("fused_optimizer") else []
        ),
        help="AdamW(fused=True) instead of foreach.",
        effect="`AdamW(fused=True)` instead of the foreach implementation",
    ),
    Knob(
        "fp8_recipe",
        Literal["tensorwise", "rowwise"],
        "tensorwise",
        only_with=("precision", "fp8"),
        help="torchao float8 scaling recipe; searched only when precision fp8 is in the space.",
        effect="torchao's float8 scaling recipe; searched only when `fp8` is in `precision`",
    ),
    Knob(
        "fp8_all_gather",
        bool,
        False,
        only_with=("precision", "fp8"),
        multi_rank=True,
        note=lambda k, d: (
            [
                "Float8LinearConfig(enable_fsdp_float8_all_gather=True); after each optimizer step "
                "torchao.float8.precompute_float8_dynamic_scale_for_fsdp(model)"
            ]
            if k.get("fp8_all_gather")
            else []
        ),
        help="fp8 with fsdp: all-gather the sharded weights in float8 instead of bf16 (half the "
        "bytes); tensorwise recipe only.",
        effect="`Float8LinearConfig(enable_fsdp_float8_all_gather=True)` and "
        "`precompute_float8_dynamic_scale_for_fsdp` after each optimizer step (fsdp, tensorwise); "
        "otherwise `invalid_config`",
    ),
    Knob(
        "cuda_alloc_conf",
        str,
        "default",
        env=("PYTORCH_CUDA_ALLOC_CONF",),
        check=_env_value,
        tasks=ALL,
        help=(
            "PYTORCH_CUDA_ALLOC_CONF of the trial process, e.g. expandable_segments:True (default "
            "sets nothing)."
        ),
        values="strings, e.g. `default`, `expandable_segments:True`",
        effect="`PYTORCH_CUDA_ALLOC_CONF` of the trial process (`default` sets nothing)",
    ),
    # --- multi-rank training (NCCL, DDP, FSDP2) ---
    *RANKS,
    # --- generate (text generation: prefill, then decode with a KV cache) ---
    *GENERATE,
)
