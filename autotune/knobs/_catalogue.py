"""The catalogue: every knob, declared once (autotune/knobs/__init__.py says what reads it)."""

from __future__ import annotations

from typing import Literal, Optional, Union

from autotune import knob_notes as notes
from autotune.knobs._generate import GENERATE
from autotune.knobs._knob import (
    ALL,
    BOTH,
    CE_CHUNKS,
    POWERSGD_START,
    CompileMode,
    Knob,
    NcclAlgo,
    NcclProto,
    Not,
    Precision,
    TRAIN_AND_COMMAND,
    _channels,
    _env_value,
    _pad,
    _positive,
    _prefetch,
)

CATALOGUE: tuple[Knob, ...] = (
    Knob(
        "micro_batch_size",
        int,
        8,
        ranged=True,
        sizes=True,
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
        help="fp32 (TF32 off), tf32 (TF32 matmuls), bf16 (autocast), fp16 (autocast + GradScaler), "
        "fp8 (torchao float8 training of the linear layers, head in bf16; needs torchao and an sm89+ GPU).",
        effect='fp32: TF32 off; tf32: TF32 matmuls (`fp32_precision="tf32"`); bf16: `torch.autocast` bf16; fp16: '
        "autocast fp16 + `GradScaler` (dynamic loss scaling); fp8: torchao `convert_to_float8_training` on "
        "every linear but the output head, under bf16 autocast (needs torchao, `pip install "
        "'autotune[fp8]'`, and an sm89+ GPU; else the trial ends `invalid_config` saying so)",
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
        values="`false`, `true`/`default`, `max-autotune-no-cudagraphs`, `reduce-overhead`, `max-autotune`",
        effect="`torch.compile(model, mode=...)` (loss included)",
    ),
    Knob(
        "compile_scope",
        Literal["model", "block"],
        "model",
        only_with=("compile", Not(False)),
        screen="block",
        help="What torch.compile compiles: model (the whole model, loss included) or block (each repeated "
        "transformer block, compiled once and reused for all: a cold compile of one block, not of every "
        "layer; plus the model's head_loss, i.e. final norm, head and loss, as one more region; the embedding runs eager).",
        effect="model: `torch.compile(model)`; block: `block.compile()` on every block of the model's list of "
        "repeated blocks (built-in model: `blocks`; others: the largest `ModuleList` of one block class; "
        "none: `invalid_config`), then `model.head_loss = torch.compile(model.head_loss)` where the model has one (the "
        "built-in model and hf_config models)",
    ),
    Knob(
        "compile_dynamic",
        Literal["static", "batch"],
        "static",
        only_with=("compile", Not(False)),
        screen="batch",
        help="static: torch.compile specialises on the micro-batch size (a new size is a new compile); batch: "
        "the batch dimension is compiled dynamic, so trials of every micro-batch size share one compiled program "
        "through the compile cache (a second size loads it in seconds instead of compiling again; dynamic "
        "shapes may cost step time: the search measures it).",
        effect="batch: `torch._dynamo.maybe_mark_dynamic(t, 0)` on every input tensor of the micro-batches "
        "(a micro-batch of 1 stays specialised)",
    ),
    Knob(
        "attention",
        Literal["auto", "flash", "efficient", "cudnn", "math", "eager"],
        "auto",
        note=notes.attention,
        tasks=BOTH,
        help="auto (PyTorch picks the SDPA kernel), an SDPA backend forced with sdpa_kernel "
        "(flash, efficient, cudnn, math), or eager (softmax(QK^T)V materialised, the slow reference).",
        effect="auto: PyTorch's SDPA choice; flash/efficient/cudnn/math: that SDPA backend forced with "
        "`sdpa_kernel` (unavailable here: `invalid_config` with PyTorch's reason); eager: softmax(QK^T)V "
        "materialised",
    ),
    Knob(
        "pad_vocab_multiple",
        Optional[int],
        None,
        check=_pad,
        note=lambda k, d: (
            [
                f"pad embedding and head to a multiple of {k['pad_vocab_multiple']}; cut logits to the "
                "vocab before the loss"
            ]
            if k.get("pad_vocab_multiple")
            else []
        ),
        help="Pad the embedding and head to a multiple of this (null: no padding); the padded "
        "logits are cut off before the loss, so the model is the same.",
        values="`null`, or an integer such as 64, 128",
        effect="embedding and head padded (50257 -> 50304 with 64); the padded logits are cut off before the loss, "
        "so the model is the same; MFU counts the unpadded model",
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
                    else ") on " + ("every block" if k["activation_checkpointing"] == "full" else "every other block")
                )
            ]
        ),
        help="Recompute activations in the backward pass: none, full (every block), selective (every other "
        "block), selective_op (every block, but the outputs of its matmuls, all but every second one, "
        "and of attention are saved: torchtitan's per-op selective checkpointing).",
        effect="`torch.utils.checkpoint` (non-reentrant) on every block, or every other block; selective_op: "
        "every block with `context_fn=create_selective_checkpoint_contexts(policy)`, the policy saving "
        "`aten.mm`/`addmm` outputs (every second one recomputed) and the SDPA kernels' outputs",
        tasks=TRAIN_AND_COMMAND,
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
        help=f"The loss: standard (the whole batch's logits at once) or chunked ({CE_CHUNKS} slices of the "
        "tokens, each recomputed in backward, so one slice's fp32 logits are alive at a time: less memory "
        "for large vocabularies, one more head matmul).",
        effect=f"chunked: head + cross-entropy over {CE_CHUNKS} token slices, each checkpointed; built-in model only",
    ),
    Knob(
        "fused_optimizer",
        bool,
        False,
        note=lambda k, d: ["torch.optim.AdamW(..., fused=True)"] if k.get("fused_optimizer") else [],
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
        help="fp8 with fsdp: all-gather the sharded weights in float8 instead of bf16 (half the bytes); "
        "tensorwise recipe only.",
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
        help="PYTORCH_CUDA_ALLOC_CONF of the trial process, e.g. expandable_segments:True (default sets nothing).",
        values="strings, e.g. `default`, `expandable_segments:True`",
        effect="`PYTORCH_CUDA_ALLOC_CONF` of the trial process (`default` sets nothing)",
    ),
    Knob(
        "nccl_algo",
        NcclAlgo,
        "default",
        multi_rank=True,
        nccl=True,
        env=("NCCL_ALGO",),
        help="NCCL_ALGO of the ranks (default sets nothing); searched only when world_size > 1 on GPUs. "
        "NVLS is never offered unless you list it; autotune never sets NCCL_NVLS_ENABLE.",
        effect="`NCCL_ALGO` of the ranks (`default` sets nothing). NVLS is never offered unless you list it",
        tasks=TRAIN_AND_COMMAND,
    ),
    Knob(
        "parallel",
        Literal["ddp", "fsdp"],
        "ddp",
        multi_rank=True,
        note=notes.parallel,
        help="Data parallelism when world_size > 1: ddp (DistributedDataParallel) or "
        "fsdp (FSDP2 fully_shard of every block and the root; mixed precision follows precision).",
        effect="world_size > 1: `DistributedDataParallel` (`no_sync` on all but the last micro-batch), or FSDP2 "
        "`fully_shard` on every block and the root with `MixedPrecisionPolicy(param_dtype=<precision>, "
        "reduce_dtype=float32)` (`set_requires_gradient_sync` likewise; fp16 with fsdp is "
        "`invalid_config`: no sharded GradScaler)",
    ),
    Knob(
        "bucket_cap_mb",
        int,
        25,
        multi_rank=True,
        only_with=("parallel", "ddp"),
        ranged=True,
        sizes=True,
        check=_positive,
        help="DDP gradient bucket size in MiB (ddp only).",
        values="integers, e.g. 25, 50, 100",
        effect="DDP gradient bucket size (ddp only: `null` in fsdp trials)",
    ),
    Knob(
        "ddp_comm_hook",
        Literal["none", "fp16_compress", "bf16_compress", "powersgd"],
        "none",
        multi_rank=True,
        only_with=("parallel", "ddp"),
        help="DDP gradient compression: none, fp16_compress / bf16_compress (all-reduce in half precision), "
        f"powersgd (low-rank, rank powersgd_rank, from step {POWERSGD_START}). Each is checked against the "
        "uncompressed run's loss (study.loss_check). ddp only.",
        effect="`ddp.register_comm_hook(None, default_hooks.<name>_hook)`, or `PowerSGDState(matrix_approximation_rank"
        f"=powersgd_rank, start_powerSGD_iter={POWERSGD_START})` with `powerSGD_hook`; what the library refuses "
        "(bf16 needs NCCL) ends `invalid_config` with its reason",
    ),
    Knob(
        "powersgd_rank",
        int,
        4,
        multi_rank=True,
        only_with=("ddp_comm_hook", "powersgd"),
        check=_positive,
        help="PowerSGD's matrix approximation rank (ddp_comm_hook powersgd only).",
        values="integers, e.g. 1, 4, 16",
        effect="`PowerSGDState(matrix_approximation_rank=...)`",
    ),
    Knob(
        "ddp_compile",
        Literal["split", "whole"],
        "split",
        multi_rank=True,
        only_with=("parallel", "ddp"),
        help="How torch.compile meets DDP (ddp with compile): split, Dynamo's DDPOptimizer cuts the compiled graph "
        "at the gradient buckets so each bucket's all-reduce overlaps the rest of the backward (PyTorch's "
        "default); whole, one graph (more fusion), every gradient all-reduced after the compiled backward. "
        "Compiling inside DDP (nanoGPT's DDP(torch.compile(model))) splits the same way: only this flag "
        "changes it.",
        values="`split`, `whole`",
        effect="`torch._dynamo.config.optimize_ddp` true (split) or false (whole) in the trial",
    ),
    Knob(
        "gradient_as_bucket_view",
        bool,
        False,
        multi_rank=True,
        only_with=("parallel", "ddp"),
        help="DDP gradient_as_bucket_view (ddp only).",
        effect="DDP option (ddp only)",
    ),
    Knob(
        "static_graph",
        bool,
        False,
        multi_rank=True,
        only_with=("parallel", "ddp"),
        help="DDP static_graph (ddp only).",
        effect="DDP option (ddp only)",
    ),
    Knob(
        "reshard_after_forward",
        bool,
        True,
        multi_rank=True,
        only_with=("parallel", "fsdp"),
        help="FSDP2: free the gathered parameters after forward (fsdp only).",
        effect="FSDP2 option (fsdp only)",
    ),
    Knob(
        "fsdp_reduce_dtype",
        Literal["fp32", "bf16"],
        "fp32",
        multi_rank=True,
        only_with=("parallel", "fsdp"),
        help="FSDP2: the dtype of the gradient reduce-scatter (bf16 halves its bytes and changes the sums; checked "
        "against fp32's loss by study.loss_check). fsdp only.",
        effect="`MixedPrecisionPolicy(reduce_dtype=...)`",
    ),
    Knob(
        "fsdp_forward_prefetch",
        int,
        0,
        multi_rank=True,
        only_with=("parallel", "fsdp"),
        check=_prefetch(0),
        help="FSDP2 forward prefetch: 0, FSDP2's implicit prefetching (the next block's all-gather overlaps the "
        "current block's compute, issued after it); n, each block issues the all-gathers of the next n "
        "blocks before its own forward (set_modules_to_forward_prefetch): earlier on the CPU, at n more "
        "gathered blocks of memory. fsdp only.",
        values="integers from 0 to 8, e.g. 0, 1, 2",
        effect="n > 0: `blocks[i].set_modules_to_forward_prefetch(blocks[i+1:i+1+n])`; 0 sets nothing",
    ),
    Knob(
        "fsdp_backward_prefetch",
        int,
        1,
        multi_rank=True,
        only_with=("parallel", "fsdp"),
        check=_prefetch(1),
        help="FSDP2 backward prefetch: 1, FSDP2's default (the next block in reverse forward order); n > 1, each "
        "block's backward prefetches the all-gathers of the n blocks before it "
        "(set_modules_to_backward_prefetch), at n - 1 more gathered blocks of memory. FSDP2 cannot turn it "
        "off. fsdp only.",
        values="integers from 1 to 8, e.g. 1, 2",
        effect="n > 1: `blocks[i].set_modules_to_backward_prefetch([blocks[i-1], ..., blocks[i-n]])`; 1 sets nothing",
    ),
    Knob(
        "fsdp_grad_sync",
        Literal["last", "every"],
        "last",
        multi_rank=True,
        only_with=("parallel", "fsdp"),
        help="FSDP2 with gradient accumulation: reduce-scatter the gradients on the last micro-batch only "
        "(last: less communication, but every rank keeps the whole model's unsharded fp32 gradients "
        "between micro-batches, 4 bytes a parameter) or after every micro-batch (every: sharded "
        "gradients only, as torchtitan does). fsdp only.",
        effect="last: `model.set_requires_gradient_sync(False)` on all but the last micro-batch; every: never disabled",
    ),
    Knob(
        "nccl_proto",
        NcclProto,
        "default",
        multi_rank=True,
        nccl=True,
        env=("NCCL_PROTO",),
        help="NCCL_PROTO of the ranks (default sets nothing); world_size > 1 on GPUs.",
        effect="`NCCL_PROTO` of the ranks",
        tasks=TRAIN_AND_COMMAND,
    ),
    Knob(
        "nccl_nchannels",
        Union[Literal["default"], int],
        "default",
        multi_rank=True,
        nccl=True,
        env=("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"),
        check=_channels,
        help="Sets NCCL_MIN_NCHANNELS and NCCL_MAX_NCHANNELS of the ranks (default sets nothing); world_size > 1 on "
        "GPUs.",
        values="`default` or 1 to 64",
        effect="`NCCL_MIN_NCHANNELS` and `NCCL_MAX_NCHANNELS` of the ranks",
        tasks=TRAIN_AND_COMMAND,
    ),
    # --- generate (text generation: prefill, then decode with a KV cache) ---
    *GENERATE,
)
