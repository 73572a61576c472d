"""A stand-in for a user's job (tests of task command), no torch: its first run at --flaky_at
sequences prints CUDA's out-of-memory error and exits 1 (a flaky out-of-memory: another process
held the GPU for a moment); every other run, that size's again included, fits and reports steps,
each micro-step 20 ms plus 4 ms a sequence (a larger micro-batch is faster)."""

from __future__ import annotations

import argparse
import os
import time

from autotune import reporting

p = argparse.ArgumentParser()
p.add_argument("--bs", type=int, default=1)
p.add_argument("--accum", type=int, default=1)
p.add_argument("--flaky_at", type=int, required=True)
p.add_argument("--marker", required=True)  # written by the run that ran out of memory
a = p.parse_args()
if a.bs == a.flaky_at and not os.path.exists(a.marker):
    open(a.marker, "w").close()
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", flush=True)
    raise SystemExit(1)
for _ in range(1000):
    time.sleep((0.02 + 0.004 * a.bs) * a.accum)
    if reporting.step(tokens=a.bs * a.accum * 10):
        break
