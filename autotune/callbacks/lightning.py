"""autotune's callback for a Lightning job (task command): every optimizer step timed with CUDA events, its
real tokens counted, the training stopped once autotune has its steps.

    from autotune.callbacks.lightning import AutotuneCallback
    trainer = Trainer(..., callbacks=[AutotuneCallback()])

Outside autotune (no AUTOTUNE_REPORT) it does nothing. Under autotune (on global rank 0 only):

- an optimizer step ends at the on_train_batch_end whose trainer.global_step has moved: Lightning calls that
  hook after the batch's optimizer.step (and after the step's LR schedulers), and with accumulate_grad_batches
  only every k-th batch (or an epoch's last) moves global_step;
- a step is the time between the ends of two optimizer steps, read from CUDA events recorded there: what the
  GPU did, data loading and host stalls included, no synchronisation inside the steps (the events are read
  once, when the steps are done). Validation run inside the steps (val_check_interval) counts in the step
  after it: keep it out of a tuning run;
- its tokens are the real tokens of its batches, counted on the device: a dict batch counts
  attention_mask.sum() (else input_ids.numel(): a packed batch has no padding), padded = input_ids.numel(); a
  tensor batch is token ids and counts numel (no padding known); a tuple or list counts its first item (the
  inputs of an (inputs, targets) pair). Another batch: pass count_tokens;
- once warm-up and measured steps are done it sets trainer.should_stop; a training that ends earlier reports
  the steps it ran at on_train_end (autotune then says how many were missing).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from lightning.pytorch import Callback

from autotune import reporting
from autotune.callbacks import _clock

TokenCount = tuple[Any, int]  # (real tokens: an int or a device tensor, padded tokens)


def count_tokens(batch: Any) -> TokenCount:
    """A batch's real and padded tokens (module docstring); the real ones stay on the device (no sync here)."""
    if isinstance(batch, torch.Tensor):
        return batch.numel(), batch.numel()
    if isinstance(batch, Mapping):
        return _mapping_tokens(batch)
    if isinstance(batch, (tuple, list)) and batch:
        return count_tokens(batch[0])
    raise TypeError(
        f"AutotuneCallback cannot count the tokens of a {type(batch).__name__} batch: give it a dict with"
        " input_ids/attention_mask, a tensor of token ids or a tuple whose first item is one, or pass"
        " AutotuneCallback(count_tokens=fn), fn(batch) -> (real tokens, padded tokens)"
    )


def _mapping_tokens(batch: Mapping[str, Any]) -> TokenCount:
    ids = batch.get("input_ids")
    mask = batch.get("attention_mask")
    if ids is None and mask is None:
        raise TypeError(f"AutotuneCallback: a dict batch needs input_ids or attention_mask, got keys {sorted(batch)}")
    padded = (ids if ids is not None else mask).numel()
    real = mask.sum() if mask is not None else padded
    return real, padded


class AutotuneCallback(Callback):
    """Report each optimizer step's device time and real tokens to autotune; stop once it has them."""

    def __init__(
        self,
        reporter: reporting.Reporter | None = None,
        count_tokens: Callable[[Any], TokenCount] = count_tokens,
    ) -> None:
        self.reporter = reporter if reporter is not None else reporting.reporter()
        self.count_tokens = count_tokens
        self.marks: list[Any] = []  # one per step end (the first: the training's start)
        self.steps: list[list[TokenCount]] = []  # per step: (real, padded) of each of its batches
        self.pending: list[TokenCount] = []
        self.global_step = 0
        self.flushed = False
        self.cuda = False

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        # Lightning's own launcher sets no RANK (the reporter's check): ask the trainer which rank reports.
        if not self.reporter.active or not trainer.is_global_zero:
            return
        self.cuda = pl_module.device.type == "cuda"
        self.global_step = trainer.global_step  # a resumed training starts past 0
        self.marks = [self._mark()]

    def _mark(self) -> Any:
        return _clock.mark(torch, self.cuda)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not self.marks or self.flushed:
            return
        self.pending.append(self.count_tokens(batch))
        if trainer.global_step == self.global_step:
            return  # accumulating: this batch's gradients wait for the next optimizer step
        self.global_step = trainer.global_step
        self.marks.append(self._mark())
        self.steps.append(self.pending)
        self.pending = []
        if len(self.steps) >= self.reporter.needed:
            self._flush()
            trainer.should_stop = True

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.marks and not self.flushed:
            self._flush()  # fewer steps than autotune needs: it says how many ran

    def _flush(self) -> None:
        """Read the events and counts (one synchronisation, here) and write the steps."""
        self.flushed = True
        if self.cuda:
            torch.cuda.synchronize()
        for i, batches in enumerate(self.steps):
            seconds = self._seconds(self.marks[i], self.marks[i + 1])
            real = sum(int(r) for r, _ in batches)
            padded = sum(p for _, p in batches)
            self.reporter.record(seconds, real, padded)

    def _seconds(self, start: Any, end: Any) -> float:
        return _clock.seconds(start, end, self.cuda)
