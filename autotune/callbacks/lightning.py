"""autotune's callback for a Lightning job (task command): every optimizer step timed with CUDA
events, its real tokens counted, the training stopped once autotune has its steps.

    from autotune.callbacks.lightning import AutotuneCallback
    trainer = Trainer(..., callbacks=[AutotuneCallback()])

Outside autotune (no AUTOTUNE_REPORT) it does nothing. Under autotune (on global rank 0 only):

- an optimizer step ends at the on_train_batch_end whose trainer.global_step has moved: Lightning
  calls that hook after the batch's optimizer.step (and after the step's LR schedulers), and with
  accumulate_grad_batches only every k-th batch (or an epoch's last) moves global_step;
- a step is the time between the ends of two optimizer steps, read from CUDA events recorded there:
  what the GPU did, data loading and host stalls included, no synchronisation inside the steps (each
  step is written once the device has passed its end, a step or two later: callbacks/_clock.py).
  Validation run inside the steps (val_check_interval) counts in the step after it: keep it out of a
  tuning run;
- its tokens are the real tokens of its batches, counted on the device: a dict batch counts
  attention_mask.sum() (else input_ids.numel(): a packed batch has no padding), padded =
  input_ids.numel(); a tensor batch is token ids and counts numel (no padding known); a tuple or
  list counts its first item (the inputs of an (inputs, targets) pair). Another batch: pass
  count_tokens;
- once autotune has its window (its stop file appears) it sets trainer.should_stop; a training that
  ends earlier reports the steps it ran at on_train_end;
- the first Trainer whose training begins anywhere in the job is the one measured
  (reporting.Reporter.claim, a claim file across the job's processes): another Trainer of this
  process stays silent, one that begins training after the first ended by itself (before
  autotune stopped it) fails the trial, and so does one of another process; one that begins after
  autotune stopped the first is noted (hook/unmeasured.py: the trial's reason names it);
- as its training begins it reports the settings the Trainer runs with (job_settings):
  accumulate_grad_batches, precision, the train dataloader's batch_size (when it has one) and
  whether the module was compiled; the trial compares them with its knobs (a precision no knob
  value is, bf16-true, is not compared).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch import Callback

from autotune import reporting
from autotune.callbacks import _clock

if TYPE_CHECKING:
    from lightning.pytorch import LightningModule, Trainer
    from lightning.pytorch.utilities.types import STEP_OUTPUT

TokenCount = _clock.TokenCount
# Lightning's precision names in autotune's (others, e.g. bf16-true, are reported as they are)
PRECISION = {"bf16-mixed": "bf16", "16-mixed": "fp16"}


def count_tokens(batch: object) -> TokenCount:
    """A batch's real and padded tokens (module docstring); the real ones stay on the device (no
    sync here)."""
    if isinstance(batch, torch.Tensor):
        return batch.numel(), batch.numel()
    if isinstance(batch, Mapping):
        return _mapping_tokens(batch)
    if isinstance(batch, (tuple, list)) and batch:
        return count_tokens(batch[0])
    raise TypeError(
        f"AutotuneCallback cannot count the tokens of a {type(batch).__name__} batch: give it a "
        "dict with input_ids/attention_mask, a tensor of token ids or a tuple whose first item is "
        "one, or pass AutotuneCallback(count_tokens=fn), fn(batch) -> (real tokens, padded tokens)"
    )


def _mapping_tokens(batch: Mapping[str, torch.Tensor | None]) -> TokenCount:
    ids = batch.get("input_ids")
    mask = batch.get("attention_mask")
    counted = ids if ids is not None else mask
    if counted is None:
        raise TypeError(
            "AutotuneCallback: a dict batch needs input_ids or attention_mask, got keys "
            f"{sorted(batch)}"
        )
    padded = counted.numel()
    real = mask.sum() if mask is not None else padded
    return real, padded


def job_settings(trainer: Trainer, pl_module: LightningModule) -> _clock.Settings:
    """The Trainer's settings the job really runs with, in autotune's knob names."""
    settings: _clock.Settings = ({}, {})
    accumulate = getattr(trainer, "accumulate_grad_batches", None)
    _clock.setting(
        settings, "micro_batch_size", _batch_size(trainer), "the train dataloader's batch_size"
    )
    _clock.setting(settings, "grad_accum_steps", accumulate, "accumulate_grad_batches")
    name = str(getattr(trainer, "precision", ""))
    cuda = pl_module.device.type == "cuda"
    fp32 = name.startswith("32")
    precision = _clock.fp32_precision(torch, cuda) if fp32 else PRECISION.get(name, name)
    _clock.setting(settings, "precision", precision or None, f"Trainer(precision={name!r})")
    # trainer.fit(torch.compile(module)): Lightning unwraps it and keeps this mark
    compiled = bool(getattr(pl_module, "_compiler_ctx", None))
    _clock.setting(settings, "compile", compiled, "torch.compile(module)")
    return settings


def _batch_size(trainer: Trainer) -> int | None:
    """The train dataloader's batch_size, when it is one DataLoader with one (else None)."""
    try:
        loader = trainer.train_dataloader
    except Exception:  # a property of Lightning's internals: unreadable means unknown
        return None
    size = getattr(loader, "batch_size", None)
    return size if isinstance(size, int) and not isinstance(size, bool) else None


class AutotuneCallback(Callback):
    """Report each optimizer step's device time and real tokens to autotune as it ends; stop when it
    says."""

    def __init__(
        self,
        reporter: reporting.Reporter | None = None,
        count_tokens: Callable[[Any], TokenCount] = count_tokens,
    ) -> None:
        self.reporter = reporter if reporter is not None else reporting.reporter()
        self.count_tokens = count_tokens
        self.steps: _clock.Steps | None = None
        self.pending: list[TokenCount] = []  # the batches of the step under way
        self.global_step = 0

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # Lightning's own launcher sets no RANK (the reporter's check): ask the trainer which rank
        # reports.
        what = f"a Lightning Trainer ({type(pl_module).__name__})"
        if not trainer.is_global_zero or not _clock.claimed(self.reporter, self, what):
            return  # outside autotune, another rank, or not the training measured (claim)
        self.reporter.job_settings(*job_settings(trainer, pl_module))
        self.global_step = trainer.global_step  # a resumed training starts past 0
        self.steps = _clock.Steps(torch, self.reporter, pl_module.device.type == "cuda")

    def on_train_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: STEP_OUTPUT,
        batch: object,
        batch_idx: int,
    ) -> None:
        if self.steps is None or self.steps.closed:
            return
        self.pending.append(self.count_tokens(batch))
        if trainer.global_step == self.global_step:
            return  # accumulating: this batch's gradients wait for the next optimizer step
        self.global_step = trainer.global_step
        self.steps.end(self.pending)
        self.pending = []
        if self.steps.done():
            self.steps.close()
            trainer.should_stop = True

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.steps is not None:
            self.steps.close()  # fewer steps than autotune asked for: it says how many ran
