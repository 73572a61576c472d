"""Data parallelism of a training trial over its rank group: DDP or FSDP2, and the check that DDP
synchronised."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from autotune.knobs import POWERSGD_START, int_of
from autotune.protocol import Knobs
from autotune.workloads.base import InvalidConfig
from autotune.workloads.ranks import Ranks

if TYPE_CHECKING:
    import torch as torch_types
    from torch import nn
    from torch.distributed.fsdp import FSDPModule
    from torch.nn.parallel import DistributedDataParallel

# sync(last_micro_step) -> context: gradients cross ranks on the last micro-step only
Sync = Callable[[bool], contextlib.AbstractContextManager[object]]


def parallelize(
    torch: ModuleType,
    model: nn.Module,
    knobs: Knobs,
    amp_dtype: torch_types.dtype | None,
    ranks: Ranks,
) -> tuple[nn.Module, dict[str, Any], Sync]:
    """Wrap the model for knobs["parallel"]; return it, what was applied, and the gradient-sync
    context."""
    applied: dict[str, Any] = {
        "world_size": ranks.world,
        "backend": ranks.backend,
        "nccl_env": ranks.nccl_env(),
    }
    if knobs["parallel"] == "fsdp":
        model, how, sync = apply_fsdp(torch, model, knobs, amp_dtype)
    else:
        model, how, sync = apply_ddp(torch, model, knobs, ranks)
    return model, {**applied, "parallel": how}, sync


def apply_ddp(
    torch: ModuleType, model: nn.Module, knobs: Knobs, ranks: Ranks
) -> tuple[nn.Module, dict[str, Any], Sync]:
    """DistributedDataParallel with the ddp knobs; no_sync() on all but the last micro-batch of a
    step."""
    from torch.nn.parallel import DistributedDataParallel

    cap = int_of(knobs, "bucket_cap_mb")
    as_view, static = bool(knobs["gradient_as_bucket_view"]), bool(knobs["static_graph"])
    opts = {"bucket_cap_mb": cap, "gradient_as_bucket_view": as_view, "static_graph": static}
    if static and int_of(knobs, "grad_accum_steps") > 1:
        # PyTorch's static_graph with no_sync() (gradient accumulation) asserts, or silently stops
        # reducing gradients after the first step (pytorch/pytorch, huggingface/accelerate#3679):
        # a fast number that trains nothing must never win.
        raise InvalidConfig(
            "DDP static_graph with gradient accumulation (no_sync) is broken in PyTorch: "
            "gradients stop being synchronised; use static_graph false or grad_accum_steps 1",
            "static_graph",
            "grad_accum_steps",
        )
    ddp = DistributedDataParallel(
        model,
        device_ids=[ranks.local_rank] if ranks.device == "cuda" else None,
        bucket_cap_mb=cap,
        gradient_as_bucket_view=as_view,
        static_graph=static,
    )
    hook = apply_comm_hook(ddp, knobs)
    return (
        ddp,
        {"strategy": "ddp", **opts, "comm_hook": hook},
        lambda last: contextlib.nullcontext() if last else ddp.no_sync(),
    )


def apply_comm_hook(ddp: DistributedDataParallel, knobs: Knobs) -> str | None:
    """ddp_comm_hook: torch's gradient compression hooks; what torch refuses here ends
    invalid_config."""
    hook = knobs.get("ddp_comm_hook") or "none"
    if hook == "none":
        return None
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    try:
        if hook == "powersgd":
            state = powerSGD_hook.PowerSGDState(
                process_group=None,
                matrix_approximation_rank=knobs["powersgd_rank"],
                start_powerSGD_iter=POWERSGD_START,
            )
            ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
            return f"powerSGD_hook(rank {knobs['powersgd_rank']}, from step {POWERSGD_START})"
        ddp.register_comm_hook(None, getattr(default_hooks, f"{hook}_hook"))
        return f"default_hooks.{hook}_hook"
    except (TypeError, RuntimeError, ValueError) as err:
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise InvalidConfig(
            f"ddp_comm_hook {hook}: {type(err).__name__}: {first}", "ddp_comm_hook"
        ) from None


def apply_fsdp(
    torch: ModuleType, model: nn.Module, knobs: Knobs, amp_dtype: torch_types.dtype | None
) -> tuple[nn.Module, dict[str, Any], Sync]:
    """FSDP2 fully_shard on every block, then the root; mixed precision follows the precision
    knob."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if knobs["precision"] == "fp16":
        raise InvalidConfig(
            "fsdp with fp16 needs a sharded gradient scaler, which autotune does not run; use "
            "bf16 with fsdp",
            "parallel",
            "precision",
        )
    reshard = bool(knobs["reshard_after_forward"])
    reduce = torch.bfloat16 if knobs.get("fsdp_reduce_dtype") == "bf16" else torch.float32
    policy = (
        MixedPrecisionPolicy(param_dtype=amp_dtype, reduce_dtype=reduce)
        if amp_dtype
        else MixedPrecisionPolicy(reduce_dtype=reduce if reduce == torch.bfloat16 else None)
    )
    blocks = repeated_blocks(torch, model)
    # the blocks keep their inputs' dtypes (torchtitan's RoPE tables stay fp32 the same way, as
    # complex numbers): FSDP2 casts a module's inputs in its forward but not when a checkpointed
    # block is recomputed in backward, so with the cast the recomputed fp32 RoPE tables met the
    # saved bf16 ones and every checkpointed FSDP trial on the H200 (torch 2.11) ended in a
    # CheckpointError; the residual stream is already bf16 from the embedding
    block_policy = dataclasses.replace(policy, cast_forward_inputs=False)
    sharded = [
        fully_shard(block, mp_policy=block_policy, reshard_after_forward=reshard)
        for block in blocks
    ]
    root = fully_shard(model, mp_policy=policy, reshard_after_forward=reshard)
    every = knobs.get("fsdp_grad_sync") == "every"
    how = {
        "strategy": "fsdp",
        "reshard_after_forward": reshard,
        "sharded_blocks": len(blocks),
        "param_dtype": str(amp_dtype or torch.float32).replace("torch.", ""),
        "reduce_dtype": str(reduce).replace("torch.", ""),
        "grad_sync": "every micro-batch" if every else "last micro-batch",
        "prefetch": apply_fsdp_prefetch(sharded, knobs),
    }

    @contextlib.contextmanager
    def sync(last: bool) -> Iterator[None]:
        root.set_requires_gradient_sync(last or every)
        yield

    return model, how, sync


def apply_fsdp_prefetch(blocks: Sequence[FSDPModule], knobs: Knobs) -> dict[str, str]:
    """fsdp_forward_prefetch / fsdp_backward_prefetch: explicit all-gather prefetching of the next
    blocks (pytorch/examples' FSDP2 example); FSDP2's own prefetching where they are at their
    defaults (0 and 1)."""
    fwd, bwd = (
        int(knobs.get("fsdp_forward_prefetch") or 0),
        int(knobs.get("fsdp_backward_prefetch") or 1),
    )
    blocks = list(blocks)
    if fwd:
        for i, block in enumerate(blocks[:-1]):
            block.set_modules_to_forward_prefetch(blocks[i + 1 : i + 1 + fwd])
    if bwd > 1:
        for i, block in enumerate(blocks[1:], start=1):
            # nearest first
            block.set_modules_to_backward_prefetch(blocks[max(0, i - bwd) : i][::-1])
    return {
        "forward": f"explicit, {fwd} block(s) ahead" if fwd else "FSDP2's implicit",
        "backward": f"explicit, {bwd} blocks ahead"
        if bwd > 1
        else "FSDP2's default (one block ahead)",
    }


def repeated_blocks(torch: ModuleType, model: nn.Module) -> list[nn.Module]:
    """The model's transformer blocks, found one way for FSDP2's sharding and per-block compile: the
    largest nn.ModuleList whose modules are all of one class (the built-in model's `blocks`, a
    Hugging Face model's `layers`), through DDP/FSDP wrappers."""
    lists: list[nn.ModuleList] = [
        m
        for m in model.modules()
        if isinstance(m, torch.nn.ModuleList) and len(m) >= 1 and len({type(b) for b in m}) == 1
    ]
    sizes = [len(m) for m in lists]
    return list(lists[sizes.index(max(sizes))]) if lists else []  # the first of the largest


def check_replicas_in_sync(torch: ModuleType, model: nn.Module, ranks: Ranks) -> None:
    """DDP keeps every rank's weights identical; if they differ after the measured steps, gradients
    were not synchronised and the throughput is not that of data-parallel training: fail the
    trial."""
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return  # FSDP: each rank holds its own shard
    with torch.no_grad():
        local = sum(float(p.detach().float().abs().sum()) for p in model.parameters())
    sums = ranks.gather(local)
    if max(sums) - min(sums) > 1e-6 * max(abs(x) for x in sums):
        raise InvalidConfig(
            f"ranks' weights differ after the measured steps (|w| sums {sums}): gradients "
            "were not synchronised, so this is not data-parallel training"
        )
