"""The estimate itself: the built-in model's shapes, each part of a step's memory, and the peak
(memory/__init__.py says what is counted and how it was checked)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from autotune import knobs as catalogue
from autotune.memory._activations import (
    activation_bytes,
    checkpointed_blocks,
    compute_bytes,
    loss_bytes,
)
from autotune.memory._shape import Shape, block_params, n_params, root_params, shape
from autotune.protocol import Knobs

GIB = 2**30
# The CUDA context (about 0.5 GiB), NCCL's buffers and the allocator's free blocks: what nvidia-smi
# shows beyond max_memory_allocated. A rough allowance for a capacity check, not a measurement.
RESERVED_OVERHEAD_BYTES = 2 * GIB
# The per-parameter state torch.optim.AdamW keeps (its `step` is one scalar a tensor, left out),
# each tensor the parameter's shape and dtype: read from a real AdamW by tests/test_memory.py, so a
# change in torch shows.
ADAMW_STATE = ("exp_avg", "exp_avg_sq")


@dataclass(frozen=True)
class Estimate:
    """Bytes per rank of one training trial. The six parts are each at its own largest; `total` is
    the peak, the larger of `backward` and `step` (module docstring), since the parts are not all
    alive at once."""

    params: int  # fp32 master parameters this rank holds (1/world_size of them with FSDP)
    grads: int  # fp32 gradients this rank holds after backward (same sharding)
    optimizer: int  # AdamW's exp_avg and exp_avg_sq, fp32 (same sharding)
    # weight copies: autocast's bf16 casts, FSDP's unsharded blocks and root, DDP's buckets
    gathered: int
    # what the blocks, final norm and head save for backward (+ one block recomputed)
    activations: int
    # the loss's peak for one micro-batch: head output, cross-entropy's fp32 tensors, head gradient
    logits: int
    # outside the allocator's tensors (0: the estimate is of max_memory_allocated)
    overhead: int = 0
    # alive at the peak of backward: the loss's backward, or a block's (0: not computed)
    backward: int = 0
    # alive at the optimizer step (or the end of backward): parameters, gradients, moments,
    # temporaries
    step: int = 0
    # of activations + logits, what autograd holds at the end of forward (no recompute, no
    saved: int = 0
    # transients of the loss): the number a real forward's saved tensors are checked against

    @property
    def total(self) -> int:
        """The estimated peak of max_memory_allocated, plus overhead (every part at once for an
        Estimate whose backward and step were not computed)."""
        if not (self.backward or self.step):
            return (
                self.params
                + self.grads
                + self.optimizer
                + self.gathered
                + self.activations
                + self.logits
                + self.overhead
            )
        return max(self.backward, self.step) + self.overhead

    @property
    def static(self) -> int:
        """The part of the peak that does not scale with the micro-batch: total less activations and
        logits."""
        return self.total - self.activations - self.logits

    @property
    def phase(self) -> str:
        """Where the peak is: 'backward' or 'optimizer step'."""
        return "backward" if self.backward >= self.step else "optimizer step"

    def as_dict(self) -> dict[str, int]:
        """Every field, and the total, in bytes (for a trial's record)."""
        return {**asdict(self), "total": self.total}


def _knobs(knobs: Knobs, world_size: int) -> Knobs:
    """The trial's knobs, absent (or null) ones at the catalogue's default; parallel None on one
    rank."""
    k = {**catalogue.defaults("train"), **{key: v for key, v in knobs.items() if v is not None}}
    k["parallel"] = (knobs.get("parallel") or "ddp") if world_size > 1 else None
    if not isinstance(k.get("grad_accum_steps"), int):  # "auto" before the space is resolved
        k["grad_accum_steps"] = 1
    return k


def weight_bytes(s: Shape, k: Knobs, world: int) -> dict[str, int]:
    """What the weights cost this rank: params, grads, optimizer; weight copies alive during the
    loss's backward (copies, before a block is recomputed) and during a block's (block_copies, the
    block being run); autocast's bf16 casts (cast_block, a block's; cast_head), cached for the whole
    forward but kept after it only where a linear saved them (checkpointed blocks' are made again in
    their recompute); gradients that exist before backward starts (first_grads) and during the
    blocks' backward (block_grads); a block's gradients as its backward makes them (grad_block);
    step_extra (module docstring)."""
    blocks, roots, n = block_params(s), root_params(s), s.n_layers
    total, vd = n_params(s), s.padded_vocab * s.d_model
    fsdp, c, accum = (
        k["parallel"] == "fsdp",
        compute_bytes(str(k["precision"])),
        catalogue.int_of(k, "grad_accum_steps"),
    )
    mine = (
        n * sum(p.shard(world) for p in blocks) + sum(p.shard(world) for p in roots)
        if fsdp
        else total
    )
    # foreach AdamW's sqrt(exp_avg_sq) temporary
    extra = 0 if k.get("fused_optimizer") else 4 * mine
    state = 4 * len(ADAMW_STATE) * mine  # each state tensor of a parameter, in its (fp32) dtype
    out = {
        "params": 4 * mine,
        "grads": 4 * mine,
        "optimizer": state,
        "cast_block": 0,
        "cast_head": 0,
    }
    if fsdp:
        return {**out, **_fsdp_weights(s, k, world, extra)}
    if c == 2:  # linear weights only: biases' casts are cached too but no linear saves them
        # torchao's float8 linears cast their own weights and save the fp32 ones
        fp8 = k["precision"] == "fp8"
        out.update(
            cast_block=0 if fp8 else 2 * sum(p.numel for p in blocks if p.linear and p.cols > 1),
            cast_head=2 * vd,
        )  # the head stays a bf16 linear (tied too: the embedding's cast)
    ddp = k["parallel"] == "ddp"
    buckets = 4 * total if ddp and not k.get("gradient_as_bucket_view") else 0
    first = 4 * total if accum > 1 or (ddp and k.get("gradient_as_bucket_view")) else 0
    # a tied embedding's dense gradient and its sum with the head's, at the end
    end = 8 * vd if s.tied else 0
    return {
        **out,
        "copies": buckets,
        "block_copies": buckets,
        "first_grads": first,
        "block_grads": max(first, 4 * vd),
        "grad_block": 0 if first else 4 * sum(p.numel for p in blocks),
        "step_extra": max(extra, end) + buckets,
    }


def _fsdp_weights(s: Shape, k: Knobs, world: int, extra: int) -> dict[str, int]:
    """weight_bytes' copies and gradients under FSDP2 (MixedPrecisionPolicy(param_dtype=bf16) under
    autocast:
    c bytes a gathered parameter)."""
    blocks, roots, n = block_params(s), root_params(s), s.n_layers
    total, vd = n_params(s), s.padded_vocab * s.d_model
    c, accum = compute_bytes(str(k["precision"])), catalogue.int_of(k, "grad_accum_steps")
    mine = n * sum(p.shard(world) for p in blocks) + sum(p.shard(world) for p in roots)
    fp8 = k["precision"] == "fp8" and bool(k.get("fp8_all_gather"))
    block = sum(p.numel * (1 if fp8 and p.linear and p.cols > 1 else c) for p in blocks)
    root, numel = sum(p.numel for p in roots), sum(p.numel for p in blocks)
    # the root (embedding, final norm, head) is never resharded after forward; of the blocks, the
    # last is gathered again as backward starts, or all stay gathered (reshard_after_forward false);
    # a block's backward adds its unsharded gradients (param dtype) and their fp32 reduce-scatter
    # input
    reshard = k.get("reshard_after_forward", True)
    gathered = root * c + (block if reshard else n * block)
    # explicit prefetching holds that many more gathered blocks (fsdp_forward_prefetch n: n in
    # forward; fsdp_backward_prefetch n: n - 1 beyond FSDP2's default one); without resharding all
    # are gathered anyway
    ahead_fwd = int(k.get("fsdp_forward_prefetch") or 0) * block if reshard else 0
    ahead_bwd = (int(k.get("fsdp_backward_prefetch") or 1) - 1) * block if reshard else 0
    # no_sync accumulation keeps unsharded fp32 gradients (FSDP2's to_accumulated_grad_if_needed);
    # fsdp_grad_sync every reduce-scatters each micro-batch: from the second micro-batch on, the
    # sharded gradients exist through forward and backward (measured on 2x H200: without them the
    # estimate of an 8B trial was 13% low, 80.5 against 92.6 GiB)
    last_only = k.get("fsdp_grad_sync", "last") == "last"
    first = (4 * total if last_only else 4 * mine) if accum > 1 else 0
    # the end of backward: the root still gathered, its unsharded gradients and their fp32
    # reduce-scatter input
    end = root * (2 * c + 4) + (c * vd if s.tied else 0)
    return {
        "copies": gathered,
        "block_copies": gathered + ahead_bwd + numel * (c + 4),
        "ahead": ahead_fwd,
        "first_grads": first,
        "block_grads": max(first, c * vd),
        "grad_block": 4 * sum(p.shard(world) for p in blocks),
        "step_extra": max(extra, end),
    }


def _moments(
    s: Shape, k: Knobs, w: dict[str, int], saved: int, recompute: int, loss: dict[str, int]
) -> tuple[int, int, int]:
    """(gathered, backward's peak, the step's peak). Backward's peak is the largest of: the end of
    forward (autocast's cache still holds every cast; the loss's forward), the loss's backward
    (every activation, the loss's peak, gradients only where they already exist), the last block's
    and the first block's backward (the head's gradient, FSDP's gathered block and gradient buffers,
    the block being recomputed with its casts; by the first block the others' activations and casts
    are freed and their gradients made)."""
    n, checkpointed = s.n_layers, checkpointed_blocks(s, k)
    kept = (n - checkpointed) * w["cast_block"] + w["cast_head"]  # casts a linear saved
    held = w["params"] + w["optimizer"] + saved + loss["head"]
    forward = (
        held
        + w["copies"]
        + w.get("ahead", 0)
        + n * w["cast_block"]
        + w["cast_head"]
        + w["first_grads"]
        + loss["saved"]
        + loss["forward"]
    )
    at_loss = held + w["copies"] + kept + w["first_grads"] + loss["peak"]
    copies = w["block_copies"] + kept + (w["cast_block"] if checkpointed else 0)
    last = held + copies + w["block_grads"] + recompute
    # a block's activations and saved casts
    freed = saved // n + w["cast_block"] * (n - checkpointed) // n
    first = last + (n - 1) * (w["grad_block"] - freed)
    gathered = max(w["copies"] + w.get("ahead", 0) + n * w["cast_block"] + w["cast_head"], copies)
    return (
        gathered,
        max(forward, at_loss, last, first),
        w["params"] + w["grads"] + w["optimizer"] + w["step_extra"],
    )


def estimate(
    model: dict[str, Any], knobs: Knobs, world_size: int = 1, device: str = "cuda"
) -> Estimate | None:
    """Per-rank bytes of a training trial of the built-in model with these knob values (absent knobs
    at their defaults), before it is launched; None for hf_config and entrypoint models, whose
    layers are not known here. model: the YAML model section as a dict
    (Config.model.model_dump(mode="json"), or runner.model_spec's); device: "cuda" or "cpu", whose
    autocast the loss follows (loss_bytes)."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1 but got {world_size}")
    k = _knobs(knobs, world_size)
    s = shape(model, k)
    if s is None:
        return None
    w = weight_bytes(s, k, world_size)
    saved, recompute = activation_bytes(s, k)
    loss = loss_bytes(s, k, device)
    gathered, backward, step = _moments(s, k, w, saved, recompute, loss)
    return Estimate(
        w["params"],
        w["grads"],
        w["optimizer"],
        gathered,
        saved + loss["head"] + recompute,
        loss["peak"],
        backward=backward,
        step=step,
        saved=saved + loss["head"] + loss["saved"],
    )
