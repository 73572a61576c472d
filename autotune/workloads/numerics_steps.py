"""One run of the numerics check's optimizer steps (workloads/numerics_check.py): a model trained
from given weights over given batches at the check's learning rate and schedule, its gradients
clipped, the losses and gradient norms kept on the device; the test-only faults that break it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from autotune.workloads.parallel import Sync, repeated_blocks
from autotune.workloads.steps import Batch, Context, StepModel

if TYPE_CHECKING:
    import torch as torch_types
    from torch import Tensor, nn
    from torch.amp import GradScaler
    from torch.optim import Optimizer
    from torch.optim.lr_scheduler import LambdaLR

    from autotune.protocol import TrialSpec
    from autotune.workloads.faults import Fault
    from autotune.workloads.ranks import Ranks

# The check's learning rate: Adam's first steps move every weight by about lr in the sign of its
# gradient, which changes a linear's output by about lr * sqrt(fan_in) / init_std of its scale (the
# update is coherent over the fan-in). At 3e-4 that is 1.8 for Llama-3-8B's MLP (fan-in 14,336; std
# 0.02) and the 8B check's bf16 reference itself jumped between 2 and 23 nats on the H200
# (2026-12-01), so no precision could be compared with it; capped at CHECK_UPDATE, 0.25 (what 3e-4
# gives a fan-in of 256; CPU curves of 256- to 2048-wide models at 0.16 to 0.45 fall smoothly), with
# the schedule below. The same reasoning as muP's 1/width learning rate for Adam (Yang et al. 2021,
# Tensor Programs V).
CHECK_UPDATE, INIT_STD = 0.25, 0.02
# Real training clips the global gradient norm (GPT-3, Llama, nanoGPT, torchtitan: at 1.0); without
# it, a 1.3B GPT's 30-step check jumped from 1.3 to 15.4 nats at one step and back, on both curves,
# and one such step in a mean had flipped the gap's sign (issue 49)
CLIP_NORM = 1.0
# The check's schedule: a linear warm-up over WARMUP_SHARE of its steps, then linear decay to
# DECAY_TO of the peak (a quarter's warm-up, no decay: a 1B Llama bumped 1.2 nats at steps 5-11;
# docs/BENCHMARKS.md 2026-12-05, benchmarks/check_schedule.py)
WARMUP_SHARE, DECAY_TO = 0.5, 0.1
# the test-only spike (fault reference_spike): the output layer negated, 30 times as large
SPIKE_FACTOR = -30.0


class Trainer(Protocol):
    """What the check uses of a built training workload (train.Train): the trial's own, the
    candidate, and its reference twin."""

    torch: ModuleType
    spec: TrialSpec
    fault: Fault
    ranks: Ranks | None
    dev: torch_types.device
    amp_dtype: torch_types.dtype | None
    attention: Context
    batches: list[Batch]
    model: nn.Module
    step_model: StepModel
    sync: Sync | None
    optimizer: Optimizer | None
    fp8_scales: Callable[[], None] | None

    def new_optimizer(self) -> Optimizer: ...

    def reference_twin(self, rows: int) -> Trainer: ...


def check_lr(torch: ModuleType, model: nn.Module) -> float:
    """The loss check's peak learning rate: 3e-4, lowered for wide layers (CHECK_UPDATE above)."""
    fan_in = max(
        (m.in_features for m in model.modules() if isinstance(m, torch.nn.Linear)), default=1
    )
    return min(3e-4, CHECK_UPDATE * INIT_STD / fan_in**0.5)


def base_of(model: nn.Module) -> nn.Module:
    inner: nn.Module = getattr(model, "module", model)  # DDP wraps; FSDP2, per-block compile don't
    return inner


def _local(grad: Tensor) -> Tensor:
    return grad.to_local() if hasattr(grad, "to_local") else grad  # FSDP2: this rank's shard


class Run:
    """One run of the check's steps: the losses and the per-step gradient norms, still on the
    device."""

    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        self.losses: list[Tensor] = []
        self.norms: list[Tensor] = []

    def add(self, loss: Tensor, params: list[nn.Parameter]) -> None:
        torch = self.torch
        zero = torch.zeros((), device=loss.device)
        norms = [
            torch.linalg.vector_norm(_local(p.grad)).float() if p.grad is not None else zero
            for p in params
        ]
        self.losses.append(loss.detach().float())
        self.norms.append(torch.stack(norms) if norms else zero.reshape(1))

    def read(self) -> tuple[list[float], Tensor]:
        """(losses, median gradient norm of each parameter over the finite steps): one
        synchronisation."""
        torch = self.torch
        losses = torch.stack(self.losses).cpu().tolist()
        norms = torch.stack(self.norms).cpu()
        norms = torch.where(
            torch.isfinite(norms), norms, torch.nan
        )  # fp16: steps the scaler skipped
        return losses, torch.nanmedian(norms, dim=0).values


def _optimizer(w: Trainer, steps: int) -> tuple[Optimizer, LambdaLR]:
    """The check's AdamW (the trial's settings) at check_lr's peak, on lr_share's schedule."""
    torch = w.torch
    opt = w.new_optimizer()
    for group in opt.param_groups:
        group["lr"] = check_lr(torch, w.model)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_share(i, steps))


def lr_share(step: int, steps: int) -> float:
    """The share of the peak learning rate at this step (0-based) of the check's `steps`: the
    linear warm-up over WARMUP_SHARE of them, then the linear decay to DECAY_TO by the last."""
    warmup = max(1, round(steps * WARMUP_SHARE))
    if step < warmup:
        return (step + 1) / warmup
    done = (step + 1 - warmup) / max(1, steps - warmup)
    return 1.0 - (1.0 - DECAY_TO) * min(1.0, done)


def run_steps(
    w: Trainer,
    batches: list[Batch],
    *,
    amp: torch_types.dtype | None,
    candidate: bool,
    split: int = 1,
) -> Run:
    """The check's optimizer steps of one model over the batches. fp16 keeps its GradScaler (unless
    the fault takes it away); only the candidate meets the fault's drift or frozen layer; both meet
    its small gradients, only the reference its spike. split: micro-batches a step (another
    reduction order)."""
    torch, fault = w.torch, w.fault
    params = list(w.model.parameters())
    frozen = _first_block(w) if candidate and fault.freezes_a_layer else []
    opt, schedule = _optimizer(w, len(batches))
    fp16 = amp is torch.float16 and not (candidate and fault.drops_grad_scaler)
    scaler = torch.amp.GradScaler(w.spec.device) if fp16 else None
    run = Run(torch)
    spike = fault.spike_step(candidate, len(batches))
    try:
        for i, (inputs, targets) in enumerate(batches):
            fault.in_check_step(torch, candidate)
            with _spiked(w, i == spike):
                loss = _forward_backward(w, inputs, targets, amp, scaler, split)
            if scaler:
                scaler.unscale_(opt)
            for p in frozen:  # the test-only frozen layer: its gradients never arrive
                p.grad = None
            run.add(loss, params)  # the gradients as they came, before the clip
            clip_gradients(torch, params)
            _optimizer_step(opt, scaler)
            if candidate and w.fp8_scales:
                w.fp8_scales()
            opt.zero_grad(set_to_none=True)
            schedule.step()
            if candidate and fault.drifts:
                _round_to_one_bit(torch, params)
    finally:  # its moments freed now, not at the next collection (two models share the memory)
        opt.zero_grad(set_to_none=True)
        opt.state.clear()
    return run


@contextlib.contextmanager
def _spiked(w: Trainer, spike: bool) -> Iterator[None]:
    """The test-only spike (fault reference_spike): this step's output layer turned round and 30
    times as large (its logits confidently wrong, as in an unstable step), then as it was; the
    step's gradient is taken there."""
    head = getattr(base_of(w.model), "head", None) if spike else None
    if head is None:
        yield
        return
    with w.torch.no_grad():
        head.weight.mul_(SPIKE_FACTOR)
    try:
        yield
    finally:
        with w.torch.no_grad():
            head.weight.div_(SPIKE_FACTOR)


def clip_gradients(torch: ModuleType, params: list[nn.Parameter]) -> None:
    """The global gradient norm clipped to CLIP_NORM, as torchtitan's dist_utils.clip_grad_norm_
    does it: the total norm of every gradient (an FSDP2 shard's DTensor made whole first), then
    each gradient scaled by torch's own clip_grads_with_norm_. Non-finite norms (fp16's skipped
    steps) are left to the GradScaler."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    total = torch.nn.utils.get_total_norm(grads)
    if hasattr(total, "full_tensor"):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, CLIP_NORM, total)


def _optimizer_step(opt: Optimizer, scaler: GradScaler | None) -> None:
    if scaler is None:
        opt.step()
        return
    scaler.step(opt)
    scaler.update()


def _first_block(w: Trainer) -> list[nn.Parameter]:
    """The parameters of the model's first repeated block (the frozen-layer fault's)."""
    blocks = repeated_blocks(w.torch, base_of(w.model))
    return list(blocks[0].parameters()) if blocks else []


def _round_to_one_bit(torch: ModuleType, params: list[nn.Parameter]) -> None:
    """The test-only broken precision (fault drift): every weight rounded to one bit after each
    step."""
    with torch.no_grad():
        for p in params:
            p.copy_(p.sign() * p.abs().mean())


def _forward_backward(
    w: Trainer,
    inputs: Tensor,
    targets: Tensor,
    amp: torch_types.dtype | None,
    scaler: GradScaler | None,
    split: int,
) -> Tensor:
    """One step's forward and backward in `split` micro-batches; its loss (unscaled)."""
    torch = w.torch
    total = torch.zeros((), device=inputs.device)
    scale = w.fault.check_grad_scale
    parts = list(zip(inputs.chunk(split), targets.chunk(split)))
    for i, (x, y) in enumerate(parts):
        autocast = (
            torch.autocast(device_type=w.spec.device, dtype=amp)
            if amp
            else contextlib.nullcontext()
        )
        sync = w.sync(i == len(parts) - 1) if w.sync else contextlib.nullcontext()
        with sync, autocast, w.attention():
            loss = w.step_model(x, y) / len(parts)
        scaled = loss * scale
        (scaler.scale(scaled) if scaler else scaled).backward()
        total += loss.detach()
    return total
