"""torch.compile in a training trial: whole-model or per-block compile, a dynamic batch dimension,
Dynamo's DDP graph split, and what the compile cache served (each knob applied by its own `apply_*`
step)."""

from __future__ import annotations

import logging
from types import ModuleType
from typing import TYPE_CHECKING, Any

from autotune.knobs import KnobValue
from autotune.protocol import Knobs
from autotune.workloads.base import InvalidConfig
from autotune.workloads.parallel import repeated_blocks
from autotune.workloads.steps import Batch, StepModel

if TYPE_CHECKING:
    from torch import Tensor, nn


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
    torch: ModuleType, model: nn.Module, mode: KnobValue, scope: str | None = "model"
) -> tuple[StepModel, str | None]:
    """torch.compile(model, mode) (the loss is inside forward, so it is compiled too), or, with
    scope block, each repeated block compiled in place (regional compilation, as torchtitan does:
    Dynamo compiles the block's code once and reuses it for every layer), and the model's
    `head_loss` (final norm, head and cross-entropy, where the model has one) as one more region,
    so the loss's fp32 logits are fused as whole-model compilation fuses them. Returns the model
    to step and what was applied."""
    if not mode:
        return model, None
    watch_cache_bypasses()
    compile_mode = None if mode in (True, "default") else str(mode)
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


def apply_compile_dynamic(
    torch: ModuleType, batches: list[Batch], knobs: Knobs, model: nn.Module | None = None
) -> str | None:
    """compile_dynamic batch: every input tensor's first dimension marked dynamic, so one compiled
    program serves every micro-batch size (and the compile cache serves it to the trials of other
    sizes). A compiled block never sees the input batch, only the hidden state the eager code
    between the blocks computes from it: a model with `dynamic_batch` (the built-in one) marks
    that too, before each compiled region; without it, per-block compiles specialised on the first
    size and every other size compiled cold (issue 50)."""
    if not knobs["compile"] or knobs.get("compile_dynamic") != "batch":
        return None
    tensors = [t for batch in batches for t in _tensors(torch, batch) if t.dim() > 0]
    for t in tensors:
        torch._dynamo.maybe_mark_dynamic(t, 0)
    inside = ""
    if model is not None and hasattr(model, "dynamic_batch"):
        setattr(model, "dynamic_batch", True)  # nn.Module types its attributes as tensors
        inside = " and each compiled region's"
    return f"batch dimension dynamic ({len(tensors)} input tensors{inside})"


def _tensors(torch: ModuleType, batch: object) -> list[Tensor]:
    """The tensors of one micro-batch: a tensor, a tuple or list of them, or a dict's values."""
    if isinstance(batch, dict):
        return [v for v in batch.values() if isinstance(v, torch.Tensor)]
    if isinstance(batch, (tuple, list)):
        return [v for v in batch if isinstance(v, torch.Tensor)]
    return [batch] if isinstance(batch, torch.Tensor) else []


class _Bypasses(logging.Handler):
    """Why AOTAutograd's cache passed graphs by in this process (its log's "Bypassing autograd cache
    due to: ..."), the first few distinct reasons, shortened."""

    KEEP, CHARS = 3, 240

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        log = logging.getLogger(record.name)
        if record.levelno >= logging.WARNING and log.parent is not None:
            log.parent.handle(record)  # what torch would have shown goes on as before
        message = record.getMessage()
        if "Bypassing autograd cache" not in message or len(self.reasons) >= self.KEEP:
            return
        reason = " ".join(message.partition("due to: ")[2].split())[: self.CHARS]
        if reason not in self.reasons:
            self.reasons.append(reason)


_BYPASSES = _Bypasses()


def watch_cache_bypasses() -> None:
    """Record why AOTAutograd's cache is passed by (compile_cache_counts reports it): torchao's
    float8 matmul reaches the graph as a Dynamo trampoline the cache cannot pickle, so a fresh
    process re-traces every float8 program (Inductor's FX graph cache still serves its kernels)."""
    log = logging.getLogger("torch._functorch._aot_autograd.autograd_cache")
    if _BYPASSES not in log.handlers:
        log.addHandler(_BYPASSES)
        log.setLevel(min(log.getEffectiveLevel(), logging.INFO))
        log.propagate = False  # its INFO lines kept here, out of the trial's log


def compile_cache_counts(torch: ModuleType) -> dict[str, Any]:
    """What the compile cache served this process: Inductor's FX graph and AOTAutograd's cache hits,
    misses and bypasses (torch._dynamo's counters), and the process's compile as `warm` (every
    graph served: nothing compiled anew), `cold` (nothing served) or `partly warm`."""
    from torch._dynamo.utils import counters

    inductor, aot = counters["inductor"], counters["aot_autograd"]
    numbers = {
        "fxgraph_hit": inductor["fxgraph_cache_hit"],
        "fxgraph_miss": inductor["fxgraph_cache_miss"],
        "fxgraph_bypass": inductor["fxgraph_cache_bypass"],
        "autograd_hit": aot["autograd_cache_hit"],
        "autograd_miss": aot["autograd_cache_miss"],
        "autograd_bypass": aot["autograd_cache_bypass"],
    }
    counts: dict[str, Any] = {**numbers, "state": compile_state(numbers)}
    if _BYPASSES.reasons:
        counts["bypass_reasons"] = list(_BYPASSES.reasons)
    return counts


def compile_state(counts: dict[str, int]) -> str:
    """warm, cold or partly warm, from the cache counters. AOTAutograd's cache answers first (a hit
    skips the graph's trace and Inductor both); where it answered nothing (turned off), Inductor's
    FX graph cache decides."""
    served, missed = counts["autograd_hit"], counts["autograd_miss"] + counts["autograd_bypass"]
    if not served and not missed:
        served, missed = counts["fxgraph_hit"], counts["fxgraph_miss"] + counts["fxgraph_bypass"]
    if served and not missed:
        return "warm"
    return "partly warm" if served or counts["fxgraph_hit"] else "cold"
