"""The test-only fault switch, AUTOTUNE_FAULT: makes a trial fail on purpose, so failure paths are
tested for real.

    KIND or KIND@KNOB>=VALUE or KIND@KNOB=VALUE, KIND one of
    oom (raise an out-of-memory error), hang (sleep forever), crash (abort the process),
    nan (make the loss NaN), error (raise a Python exception),
    drift (generate: a quantized trial's weights go through a broken 1-bit quantizer instead of
    torchao's;
    train: the numerics check's candidate has its weights rounded to one bit after every step),
    frozen_layer (train: the numerics check's candidate gets no gradient in its first block),
    small_grads (train: the numerics check's candidate and reference take gradients 2^-16 as large
    as the model's, the loss scaled down before backward, as a model deep in training has them:
    within bf16's and fp32's range, below fp16's without a loss scale),
    no_grad_scaler (train: small_grads, and the check's fp16 candidate runs without its GradScaler),
    reference_spike (train: the numerics check's reference takes one step, at 60% of its steps,
    with its output layer negated and 30 times as large: its loss spikes there and comes back),
    check_oom (train: the numerics check's reference runs out of memory at its first step, after
    the trial's own steps fit),
    slow:PCT (make every measured step PCT percent slower: a host wait of PCT% of the step inside
    the timed region, after a device synchronisation so that CUDA events see it too).

The @ condition limits the fault to trials whose knob matches, e.g. oom@micro_batch_size>=16, or to
one rank of a rank group, e.g. error@rank=1. Never set it outside tests. Nothing here is imported by
the timing code: a workload applies the fault to its own step.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from autotune.protocol import Knobs, parse_fault


def fault_for(knobs: Knobs) -> str | None:
    """The fault kind AUTOTUNE_FAULT asks for in a trial with these knobs, or None
    (protocol.parse_fault)."""
    parsed = parse_fault(os.environ.get("AUTOTUNE_FAULT"))
    if parsed is None:
        return None
    kind, slow, knob, op, want = parsed
    if knob:
        have = knobs.get(knob)
        if op == ">=":
            if have is None or isinstance(have, str) or float(have) < float(want):
                return None
        elif str(have).lower() != want.lower():
            return None
    return f"slow:{slow:g}" if kind == "slow" else kind


class Fault:
    """The fault of this trial process (kind None: no fault)."""

    def __init__(self, knobs: Knobs, rank: int = 0) -> None:
        self.kind = fault_for({**knobs, "rank": rank})

    def at_start(self) -> None:
        """hang, crash and error strike before anything is built."""
        if self.kind == "hang":
            time.sleep(10**6)
        if self.kind == "crash":
            print("AUTOTUNE_FAULT=crash: aborting the trial process", file=sys.stderr, flush=True)
            os.abort()
        if self.kind == "error":
            raise RuntimeError("AUTOTUNE_FAULT=error: a deliberate exception in the trial")

    def in_micro_step(self, torch: ModuleType) -> None:
        if self.kind == "oom":
            raise torch.OutOfMemoryError("AUTOTUNE_FAULT=oom: simulated out of memory")

    def in_check_step(self, torch: ModuleType, candidate: bool) -> None:
        if self.kind == "check_oom" and not candidate:
            raise torch.OutOfMemoryError("AUTOTUNE_FAULT=check_oom: simulated out of memory")

    @property
    def drifts(self) -> bool:
        return self.kind == "drift"

    @property
    def freezes_a_layer(self) -> bool:
        return self.kind == "frozen_layer"

    @property
    def drops_grad_scaler(self) -> bool:
        return self.kind == "no_grad_scaler"

    def spike_step(self, candidate: bool, steps: int) -> int | None:
        """The step (0-based) at which reference_spike makes the check's reference spike, None for
        the candidate or without the fault."""
        return int(0.6 * steps) if self.kind == "reference_spike" and not candidate else None

    @property
    def check_grad_scale(self) -> float:
        """The numerics check's loss multiplier before backward (small_grads, no_grad_scaler:
        2^-16)."""
        return 2.0**-16 if self.kind in ("small_grads", "no_grad_scaler") else 1.0

    @property
    def loss_scale(self) -> float:
        """Multiplies the loss: NaN for the nan fault."""
        return float("nan") if self.kind == "nan" else 1.0

    def slowed(self, step: Callable[[], Any], synchronize: Callable[[], None]) -> Callable[[], Any]:
        """slow:PCT: the step followed by a wait of PCT% of its own time, after a device
        synchronisation (so that CUDA events around the step see it too); any other kind: the step
        itself."""
        if not (self.kind and self.kind.startswith("slow:")):
            return step
        slow = float(self.kind.partition(":")[2]) / 100

        def slow_step() -> Any:
            t0 = time.perf_counter()
            out = step()
            synchronize()
            time.sleep(slow * (time.perf_counter() - t0))
            return out

        return slow_step
