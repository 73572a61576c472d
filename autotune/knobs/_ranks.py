"""The knobs of multi-rank training: NCCL's algorithm, protocol and channels, DDP's buckets, hooks
and compile, FSDP2's resharding, prefetch and reduce dtype (they act with world_size > 1; the
catalogue lists them after the one-rank knobs, in this order)."""

from __future__ import annotations

from typing import Literal, Union

from autotune.knobs import _notes as notes
from autotune.knobs._knob import (
    POWERSGD_START,
    TRAIN_AND_COMMAND,
    Knob,
    NcclAlgo,
    NcclProto,
    _channels,
    _positive,
    _prefetch,
)

RANKS: tuple[Knob, ...] = (
    Knob(
        "nccl_algo",
        NcclAlgo,
        "default",
        multi_rank=True,
        nccl=True,
        env=("NCCL_ALGO",),
        help="NCCL_ALGO of the ranks (default sets nothing); searched only when world_size > 1 on "
        "GPUs. NVLS is never offered unless you list it; autotune never sets NCCL_NVLS_ENABLE.",
        effect=(
            "`NCCL_ALGO` of the ranks (`default` sets nothing). NVLS is never offered unless you "
            "list it"
        ),
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
        effect=(
            "world_size > 1: `DistributedDataParallel` (`no_sync` on all but the last "
            "micro-batch), or FSDP2 `fully_shard` on every block and the root with "
            "`MixedPrecisionPolicy(param_dtype=<precision>, reduce_dtype=float32)` "
            "(`set_requires_gradient_sync` likewise; fp16 with fsdp is `invalid_config`: no "
            "sharded GradScaler)"
        ),
    ),
    Knob(
        "bucket_cap_mb",
        int,
        25,
        multi_rank=True,
        only_with=("parallel", "ddp"),
        ranged=True,
        sizes=True,
        edge="double",
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
        help="DDP gradient compression: none, fp16_compress / bf16_compress (all-reduce in half "
        f"precision), powersgd (low-rank, rank powersgd_rank, from step {POWERSGD_START}). "
        "Each is checked against the uncompressed run's loss (study.loss_check). ddp only.",
        effect=(
            "`ddp.register_comm_hook(None, default_hooks.<name>_hook)`, or "
            "`PowerSGDState(matrix_approximation_rank=powersgd_rank, "
            f"start_powerSGD_iter={POWERSGD_START})` with `powerSGD_hook`; what the library "
            "refuses "
            "(bf16 needs NCCL) ends `invalid_config` with its reason"
        ),
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
        help="How torch.compile meets DDP (ddp with compile): split, Dynamo's DDPOptimizer cuts "
        "the compiled graph at the gradient buckets so each bucket's all-reduce overlaps the "
        "rest of the backward (PyTorch's default); whole, one graph (more fusion), every "
        "gradient all-reduced after the compiled backward. Compiling inside DDP (nanoGPT's "
        "DDP(torch.compile(model))) splits the same way: only this flag changes it.",
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
        help="FSDP2: the dtype of the gradient reduce-scatter (bf16 halves its bytes and changes "
        "the sums; checked against fp32's loss by study.loss_check). fsdp only.",
        effect="`MixedPrecisionPolicy(reduce_dtype=...)`",
    ),
    Knob(
        "fsdp_forward_prefetch",
        int,
        0,
        multi_rank=True,
        only_with=("parallel", "fsdp"),
        check=_prefetch(0),
        help=(
            "FSDP2 forward prefetch: 0, FSDP2's implicit prefetching (the next block's all-gather "
            "overlaps the current block's compute, issued after it); n, each block issues the "
            "all-gathers of the next n blocks before its own forward "
            "(set_modules_to_forward_prefetch): earlier on the CPU, at n more gathered blocks of "
            "memory. fsdp only."
        ),
        values="integers from 0 to 8, e.g. 0, 1, 2",
        effect=(
            "n > 0: `blocks[i].set_modules_to_forward_prefetch(blocks[i+1:i+1+n])`; 0 sets nothing"
        ),
    ),
    Knob(
        "fsdp_backward_prefetch",
        int,
        1,
        multi_rank=True,
        only_with=("parallel", "fsdp"),
        check=_prefetch(1),
        help="FSDP2 backward prefetch: 1, FSDP2's default (the next block in reverse forward "
        "order); n > 1, each block's backward prefetches the all-gathers of the n blocks before it "
        "(set_modules_to_backward_prefetch), at n - 1 more gathered blocks of memory. FSDP2 "
        "cannot turn it off. fsdp only.",
        values="integers from 1 to 8, e.g. 1, 2",
        effect=(
            "n > 1: `blocks[i].set_modules_to_backward_prefetch([blocks[i-1], ..., "
            "blocks[i-n]])`; 1 sets nothing"
        ),
    ),
    Knob(
        "fsdp_grad_sync",
        Literal["last", "every"],
        "last",
        multi_rank=True,
        only_with=("parallel", "fsdp"),
        help="FSDP2 with gradient accumulation: reduce-scatter the gradients on the last "
        "micro-batch only (last: less communication, but every rank keeps the whole model's "
        "unsharded fp32 gradients between micro-batches, 4 bytes a parameter) or after every "
        "micro-batch (every: sharded gradients only, as torchtitan does). fsdp only.",
        effect=(
            "last: `model.set_requires_gradient_sync(False)` on all but the last micro-batch; "
            "every: never disabled"
        ),
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
        help="Sets NCCL_MIN_NCHANNELS and NCCL_MAX_NCHANNELS of the ranks (default sets nothing); "
        "world_size > 1 on GPUs.",
        values="`default` or 1 to 64",
        effect="`NCCL_MIN_NCHANNELS` and `NCCL_MAX_NCHANNELS` of the ranks",
        tasks=TRAIN_AND_COMMAND,
    ),
)
