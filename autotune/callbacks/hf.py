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
- the first Trainer whose training begins is the one measured (reporting.Reporter.claim): another
  Trainer's callback stays silent, and one that begins training after the first ended short of
  autotune's steps fails the trial;
- as its training begins it reports the settings the Trainer runs with (job_settings): the batch
  size per device, gradient accumulation, precision, gradient checkpointing and torch_compile.
"""

from __future__ import annotations

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


def job_settings(args: TrainingArguments, model: torch.nn.Module) -> _clock.Settings:
    """The TrainingArguments the job really runs with, in autotune's knob names."""
    settings: _clock.Settings = ({}, {})
    batch = getattr(args, "per_device_train_batch_size", None)
    _clock.setting(settings, "micro_batch_size", batch, "per_device_train_batch_size")
    accumulate = getattr(args, "gradient_accumulation_steps", None)
    _clock.setting(settings, "grad_accum_steps", accumulate, "gradient_accumulation_steps")
    if getattr(args, "bf16", False):
        precision = "bf16"
    elif getattr(args, "fp16", False):
        precision = "fp16"
    else:  # tf32: the argument, else what the script set itself
        tf32 = getattr(args, "tf32", None)
        precision = _clock.fp32_precision(torch) if tf32 is None else "tf32" if tf32 else "fp32"
    _clock.setting(settings, "precision", precision, "bf16/fp16/tf32")
    checkpointing = bool(getattr(args, "gradient_checkpointing", False))
    checkpointing = checkpointing or bool(getattr(model, "is_gradient_checkpointing", False))
    checkpointed = "full" if checkpointing else "none"
    _clock.setting(settings, "activation_checkpointing", checkpointed, "gradient_checkpointing")
    _clock.setting(
        settings, "compile", bool(getattr(args, "torch_compile", False)), "torch_compile"
    )
    return settings


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
        if model is None or not self.reporter.claim(self):
            return  # outside autotune, or not the training measured (claim)
        self.reporter.job_settings(*job_settings(args, model))
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
