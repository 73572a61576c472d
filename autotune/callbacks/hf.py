"""autotune's callback for a transformers.Trainer job (task command): every optimizer step timed
with CUDA events, its real tokens counted, the training stopped once autotune has its steps.

    from autotune.callbacks.hf import AutotuneCallback
    trainer = Trainer(..., callbacks=[AutotuneCallback()])

Outside autotune (no AUTOTUNE_REPORT) it does nothing. Under autotune:

- a step is the time between the ends of two optimizer steps (on_step_end), read from CUDA events
  recorded there: what the GPU did, the data loading and every host stall between steps included,
  and no host synchronisation added inside the steps: each step is written once the device has
  passed its end, a step or two later (callbacks/_clock.py), so autotune sees the steps while the
  job runs;
- its tokens are the real tokens of its micro-batches (attention_mask.sum(), else input_ids.numel():
  a packed batch has no padding), counted on the device by a forward pre-hook of the model, padding
  apart;
- once autotune has its window (its stop file appears) it asks the Trainer to stop
  (control.should_training_stop); a training that ends earlier reports the steps it ran;
- the first Trainer whose training begins anywhere in the job is the one measured
  (reporting.Reporter.claim, a claim file across the job's processes): another Trainer of this
  process stays silent, one that begins training after the first ended by itself (before
  autotune stopped it) fails the trial, and so does one of another process (a calibration step of
  a shell script, a helper child); one that begins after autotune stopped the first is noted
  (hook/unmeasured.py: the trial's reason names it if the job then outlives its stop request); only
  the first rank (state.is_world_process_zero) reports;
- as its training begins it reports the settings the Trainer runs with (job_settings): the batch
  size per device, gradient accumulation, precision (bf16, fp16, TF32 as PyTorch has it), gradient
  checkpointing, torch_compile and its mode, the optimizer and the model's attention
  implementation; the trial compares them with its knobs.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

import torch
from transformers import TrainerCallback

from autotune import reporting
from autotune.callbacks import _clock

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle
    from transformers import TrainerControl, TrainerState, TrainingArguments

_F = TypeVar("_F", bound=Callable[..., object])


def job_settings(
    args: TrainingArguments, model: torch.nn.Module, optimizer: object = None
) -> _clock.Settings:
    """The TrainingArguments, model and optimizer (as the callback is handed it: the one the
    Trainer was given, or made) the job really runs with, in autotune's knob names (and, for the
    optimizer and the attention, the framework's own: a knob of your own of that name is compared
    with them)."""
    settings: _clock.Settings = ({}, {})
    batch = getattr(args, "per_device_train_batch_size", None)
    _clock.setting(settings, "micro_batch_size", batch, "per_device_train_batch_size")
    accumulate = getattr(args, "gradient_accumulation_steps", None)
    _clock.setting(settings, "grad_accum_steps", accumulate, "gradient_accumulation_steps")
    _clock.setting(settings, "precision", *_precision(args, model))
    _clock.setting(settings, "activation_checkpointing", *_checkpointing(args, model))
    compiled = bool(getattr(args, "torch_compile", False))
    mode = getattr(args, "torch_compile_mode", None) or "default"
    _clock.setting(settings, "compile", mode if compiled else False, "torch_compile(_mode)")
    _clock.setting(settings, "optim", *_optim(args, optimizer))
    config = getattr(_unwrapped(model), "config", None)
    attention = getattr(config, "_attn_implementation", None)
    attention = attention if isinstance(attention, str) else None
    _clock.setting(settings, "attn_implementation", attention, "model.config._attn_implementation")
    return settings


def _unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside torch.compile's and DDP's wrappers."""
    for name in ("_orig_mod", "module"):
        inner = getattr(model, name, None)
        if isinstance(inner, torch.nn.Module):
            return _unwrapped(inner)
    return model


def _optim(args: TrainingArguments, optimizer: object) -> tuple[str | None, str]:
    """The optimizer as TrainingArguments.optim names it, and where it was read: the torch AdamW
    it makes says whether it is fused; another optimizer given to the Trainer is the job's own."""
    named = getattr(args, "optim", None)
    named = getattr(named, "value", named)  # an OptimizerNames member: its name
    inner = getattr(optimizer, "optimizer", optimizer)  # inside accelerate's wrapper
    if inner is None or named not in ("adamw_torch", "adamw_torch_fused"):
        return (named if isinstance(named, str) else None), "optim"
    if isinstance(inner, torch.optim.AdamW):
        fused = bool(inner.defaults.get("fused"))
        return ("adamw_torch_fused" if fused else "adamw_torch"), "the optimizer's fused"
    return type(inner).__name__, "the optimizer the Trainer was given"


def _precision(args: TrainingArguments, model: torch.nn.Module) -> tuple[str, str]:
    """The precision the Trainer trains in (autotune's name; a model loaded in bf16 or fp16
    without autocast is Lightning's name for it, bf16-true, which no knob value is), and where it
    was read."""
    if getattr(args, "bf16", False):
        return "bf16", "bf16=True"
    if getattr(args, "fp16", False):
        return "fp16", "fp16=True"
    param = next(model.parameters(), None)
    cuda = param is not None and param.is_cuda
    dtype = param.dtype if param is not None else torch.float32
    if dtype in (torch.bfloat16, torch.float16):
        half = "bf16" if dtype == torch.bfloat16 else "16"
        return f"{half}-true", "the model's dtype, bf16 and fp16 off"
    # args.tf32 is applied to PyTorch as the arguments are made; the script may set it itself
    return _clock.fp32_precision(torch, cuda), "bf16 and fp16 off, PyTorch's TF32 setting"


def _checkpointing(args: TrainingArguments, model: torch.nn.Module) -> tuple[str, str]:
    """Activation checkpointing as the Trainer runs it (transformers 5 calls it
    activation_checkpointing, 4 gradient_checkpointing), and where it was read."""
    for name in ("activation_checkpointing", "gradient_checkpointing"):
        if getattr(args, name, None):
            kwargs = getattr(args, f"{name}_kwargs", None)
            kwargs = kwargs if isinstance(kwargs, dict) else {}
            every = kwargs.get("every_n_layers", 1)
            # every layer: full; every other: autotune's selective (knobs.CHECKPOINT_EVERY)
            ran = {1: "full", 2: "selective"}.get(every, f"every {every} layers")
            return f"{ran}, offloaded" if kwargs.get("offload") else ran, f"{name}=True"
    inner = _unwrapped(model)
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if name in dir(type(inner)):  # a property: the deprecated one warns when read
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                on = bool(getattr(inner, name, False))
            return ("full" if on else "none"), f"model.{name}"
    return "none", "gradient_checkpointing off"


def _disable(fn: _F) -> _F:
    """Keep torch.compile out of the counting hook (it then runs eagerly at the top of the model's
    forward)."""
    dynamo = getattr(torch, "_dynamo", None)
    disabled: _F = dynamo.disable(fn) if dynamo is not None else fn
    return disabled


class AutotuneCallback(TrainerCallback):
    """Report each optimizer step's device time and real tokens to autotune as it ends; stop when it
    says."""

    def __init__(self, reporter: reporting.Reporter | None = None) -> None:
        self.reporter = reporter if reporter is not None else reporting.reporter()
        self.steps: _clock.Steps | None = None
        self.pending: list[_clock.TokenCount] = []  # the micro-batches of the step under way
        self.hook: RemovableHandle | None = None

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: torch.nn.Module | None = None,
        **kwargs: object,
    ) -> None:
        if model is None or not getattr(state, "is_world_process_zero", True):
            return  # the first rank reports (its process index: whatever its launcher set)
        what = f"an HF Trainer ({type(_unwrapped(model)).__name__})"
        if not _clock.claimed(self.reporter, self, what):
            return  # outside autotune, or not the training measured (claim)
        self.reporter.job_settings(*job_settings(args, model, kwargs.get("optimizer")))
        cuda = torch.cuda.is_available() and next(model.parameters()).is_cuda
        self.hook = model.register_forward_pre_hook(_disable(self._count), with_kwargs=True)
        self.steps = _clock.Steps(torch, self.reporter, cuda)

    def _count(
        self, module: torch.nn.Module, args: tuple[object, ...], kwargs: Mapping[str, object]
    ) -> None:
        if not module.training:
            return  # evaluation inside the training is no step's tokens
        ids = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask")
        if not isinstance(ids, torch.Tensor):
            return  # no token ids: a forward of embeddings, nothing to count
        if not isinstance(mask, torch.Tensor):
            mask = None
        real = mask.sum() if mask is not None else ids.numel()
        self.pending.append((real, ids.numel()))

    def on_step_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: object,
    ) -> None:
        if self.steps is None or self.steps.closed:
            return
        self.steps.end(self.pending)
        self.pending = []
        if self.steps.done():
            self._close()
            control.should_training_stop = True

    def on_train_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: object,
    ) -> None:
        if self.steps is not None:
            self._close()  # fewer steps than autotune asked for: it says how many ran

    def _close(self) -> None:
        if self.hook is not None:
            self.hook.remove()
            self.hook = None
        assert self.steps is not None
        self.steps.close()
