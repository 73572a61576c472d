"""What a training trial's step is made of, as types: a micro-batch, the model a step calls and
the contexts it runs under. Standard library only at import (torch for the type check alone)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

# one micro-batch, made once on the device: (inputs, targets), token ids (an entrypoint's
# make_batch gives its own: workloads/external.py)
Batch = tuple["Tensor", "Tensor"]
# what a step calls: the model, compiled or not (torch.compile returns a plain callable);
# forward(inputs, targets) -> the mean loss
StepModel = Callable[..., Any]
# a context the steps run under (autocast, the SDPA backend), made fresh for each use
Context = Callable[[], contextlib.AbstractContextManager[object]]
