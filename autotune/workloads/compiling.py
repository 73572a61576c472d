"""torch.compile in a training trial: whole-model or per-block compile, a dynamic batch dimension,
Dynamo's DDP graph split, and what the compile cache served (each knob applied by its own `apply_*`
step)."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from autotune.protocol import Knobs
from autotune.workloads.base import InvalidConfig
from autotune.workloads.parallel import repeated_blocks

if TYPE_CHECKING:
    from torch import nn


def apply_ddp_compile(torch: ModuleType, knobs: Knobs) -> str | None:
    """ddp_compile: whether Dynamo's DDPOptimizer splits the compiled graph at DDP's buckets
    (optimize_ddp); what was set, or None where nothing is compiled under DDP."""
    if knobs.get("parallel") != "ddp" or not knobs["compile"] or not knobs.get("ddp_compile"):
        return None
    import torch._dynamo

    split = knobs["ddp_compile"] == "split"
    torch._dynamo.config.optimize_ddp = split
    return "split at the buckets (optimize_ddp true)" if split else "one graph (optimize_ddp false)"


def apply_compile(
    torch: ModuleType, model: nn.Module, mode: Any, scope: str | None = "model"
) -> tuple[Any, str | None]:
    """torch.compile(model, mode) (the loss is inside forward, so it is compiled too), or, with
    scope block, each repeated block compiled in place (regional compilation, as torchtitan does:
    Dynamo compiles the block's code once and reuses it for every layer), and the model's
    `head_loss` (final norm, head and cross-entropy, where the model has one) as one more region,
    so the loss's fp32 logits are fused as whole-model compilation fuses them. Returns the model
    to step and what was applied."""
    if not mode:
        return model, None
    compile_mode = None if mode in (True, "default") else mode
    if scope != "block":
        return torch.compile(model, mode=compile_mode), compile_mode or "default"
    blocks = repeated_blocks(torch, model)
    if not blocks:
        raise InvalidConfig(
            "compile_scope block: this model has no list of repeated blocks (an nn.ModuleList of "
            "one module class) to compile",
            "compile_scope",
        )
    for block in blocks:
        block.compile(mode=compile_mode)
    kind = type(blocks[0]).__name__
    head = ""
    if callable(getattr(model, "head_loss", None)):
        model.head_loss = torch.compile(model.head_loss, mode=compile_mode)
        head = " + head_loss"
    return (
        model,
        f"{compile_mode or 'default'}, per block ({len(blocks)} x {kind}, compiled in place){head}",
    )


def apply_compile_dynamic(torch: ModuleType, batches: list[Any], knobs: Knobs) -> str | None:
    """compile_dynamic batch: every input tensor's first dimension marked dynamic, so one compiled
    program serves every micro-batch size (and the compile cache serves it to the trials of other
    sizes)."""
    if not knobs["compile"] or knobs.get("compile_dynamic") != "batch":
        return None
    tensors = [t for batch in batches for t in _tensors(batch) if t.dim() > 0]
    for t in tensors:
        torch._dynamo.maybe_mark_dynamic(t, 0)
    return f"batch dimension dynamic ({len(tensors)} input tensors)"


def _tensors(batch: Any) -> list[Any]:
    """The tensors of one micro-batch: a tensor, a tuple or list of them, or a dict's values."""
    if isinstance(batch, dict):
        return [v for v in batch.values() if hasattr(v, "dim")]
    if isinstance(batch, (tuple, list)):
        return [v for v in batch if hasattr(v, "dim")]
    return [batch] if hasattr(batch, "dim") else []


def compile_cache_counts(torch: ModuleType) -> dict[str, int]:
    """What the compile cache served this process: Inductor's FX graph and AOTAutograd's cache hits
    and misses (torch._dynamo's counters): a trial whose graphs were all hits compiled nothing."""
    from torch._dynamo.utils import counters

    inductor, aot = counters["inductor"], counters["aot_autograd"]
    return {
        "fxgraph_hit": inductor["fxgraph_cache_hit"],
        "fxgraph_miss": inductor["fxgraph_cache_miss"],
        "autograd_hit": aot["autograd_cache_hit"],
        "autograd_miss": aot["autograd_cache_miss"],
    }
