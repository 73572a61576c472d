"""autotune's callback for a transformers.Trainer job (task command): every optimizer step timed with CUDA
events, its real tokens counted, the training stopped once autotune has its steps.

    from autotune.callbacks.hf import AutotuneCallback
    trainer = Trainer(..., callbacks=[AutotuneCallback()])

Outside autotune (no AUTOTUNE_REPORT) it does nothing. Under autotune:

- a step is the time between the ends of two optimizer steps (on_step_end), read from CUDA events recorded
  there: what the GPU did, the data loading and every host stall between steps included, and no host
  synchronisation added inside the steps (the events are read once, when the steps are done);
- its tokens are the real tokens of its micro-batches (attention_mask.sum(), else input_ids.numel(): a
  packed batch has no padding), counted on the device by a forward pre-hook of the model, padding apart;
- once warm-up and measured steps are done it asks the Trainer to stop (control.should_training_stop); a
  training that ends earlier reports the steps it ran (autotune then says how many were missing).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from transformers import TrainerCallback

from autotune import reporting
from autotune.callbacks import _clock


def _disable(fn: Any) -> Any:
    """Keep torch.compile out of the counting hook (it then runs eagerly at the top of the model's forward)."""
    dynamo = getattr(torch, "_dynamo", None)
    return dynamo.disable(fn) if dynamo is not None else fn


class AutotuneCallback(TrainerCallback):
    """Report each optimizer step's device time and real tokens to autotune; stop once it has them."""

    def __init__(self, reporter: reporting.Reporter | None = None) -> None:
        self.reporter = reporter if reporter is not None else reporting.reporter()
        self.marks: list[Any] = []  # one per step end (the first: the training's start)
        self.at: list[float] = []  # the host's clock at each step end (the measured window, for telemetry)
        self.steps: list[list[tuple[Any, int]]] = []  # per step: (real tokens on the device, padded) a micro-batch
        self.pending: list[tuple[Any, int]] = []
        self.hook: Any = None
        self.flushed = False
        self.cuda = False

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if not self.reporter.active or model is None:
            return
        self.cuda = torch.cuda.is_available() and next(model.parameters()).is_cuda
        self.hook = model.register_forward_pre_hook(_disable(self._count), with_kwargs=True)
        self.marks = [self._mark()]

    def _mark(self) -> Any:
        return _clock.mark(torch, self.cuda)

    def _count(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask")
        if ids is None:
            return
        real = mask.sum() if mask is not None else ids.numel()
        self.pending.append((real, ids.numel()))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self.marks or self.flushed:
            return
        self.marks.append(self._mark())
        self.at.append(time.time())
        self.steps.append(self.pending)
        self.pending = []
        if len(self.steps) >= self.reporter.needed:
            self._flush()
            control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.marks and not self.flushed:
            self._flush()  # fewer steps than autotune needs: it says how many ran

    def _flush(self) -> None:
        """Read the events and counts (one synchronisation, here) and write the steps."""
        self.flushed = True
        if self.hook is not None:
            self.hook.remove()
        if self.cuda:
            torch.cuda.synchronize()
        for i, micro in enumerate(self.steps):
            seconds = self._seconds(self.marks[i], self.marks[i + 1])
            real = sum(int(r) for r, _ in micro)
            padded = sum(p for _, p in micro)
            self.reporter.record(seconds, real, padded, at=self.at[i])

    def _seconds(self, start: Any, end: Any) -> float:
        return _clock.seconds(start, end, self.cuda)
