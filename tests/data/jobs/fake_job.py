"""A stand-in for a user's training job (tests of task command): no torch, each way a job can
behave.

--mode normal: reports steps and stops when told; ignore_stop: reports, then keeps running; silent:
exits 0 having reported nothing; early: exits 0 after 2 steps; oom: prints CUDA's out-of-memory
error and exits 1; hang: reports one step, then sleeps; vary: steps of 10 tokens and every fourth of
50, each 4 ms a token; fixed: the same tokens, each step 20 ms plus 2 ms a token (its delivered rate
known by construction); slow: steps of 1.5 s and 10 or 50 tokens (never settled); recompile: a
torch.compile'd function (backend eager) called at a new shape every step; log: prints
torchtitan-like throughput lines instead of reporting; logsci: the same in scientific notation;
logavg: prints the HF Trainer's average since the start; logcount: prints a running count of tokens;
lognone: prints lines that never match.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from autotune import reporting

p = argparse.ArgumentParser()
p.add_argument("--mode", default="normal")
p.add_argument("--bs", type=int, default=1)
p.add_argument("--accum", type=int, default=1)
p.add_argument("--optim", default="adamw")
p.add_argument("--config", default=None)
p.add_argument("--pidfile", default=None)
p.add_argument("--oom_at", type=int, default=0)  # runs out of memory at this micro-batch or more
a = p.parse_args()
cfg = json.load(open(a.config)) if a.config else {}
seen = {**vars(a), "config": cfg, "env_lr": os.environ.get("MY_LR")}
print("config:", json.dumps(seen, sort_keys=True), flush=True)
if a.pidfile:
    open(a.pidfile, "w").write(str(os.getpid()))
if a.mode == "oom" or a.oom_at and a.bs >= a.oom_at:
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", flush=True)
    raise SystemExit(1)
if a.mode == "silent":
    raise SystemExit(0)
speed = 2.0 if a.optim == "sgd" else 1.0
if a.mode == "recompile":
    import torch

    twice = torch.compile(lambda x: x * 2, backend="eager", dynamic=False)
for i in range(1000):
    if a.mode == "recompile":
        twice(torch.ones(i + 1))
        if reporting.step(tokens=10):
            break
        continue
    if a.mode in ("fixed", "slow"):
        n = 50 if (i % 4 == 3 if a.mode == "fixed" else (i * 7919) % 3 == 0) else 10
        time.sleep(1.5 if a.mode == "slow" else 0.02 + 0.002 * n)
        if reporting.step(tokens=n):
            break
        continue
    if a.mode.startswith("log") and a.mode != "log":
        time.sleep(0.05)
        text = {
            "logsci": f"step {i} | tps: {2.2e3:.1e}",
            "logavg": f"{{'loss': 1.0, 'train_samples_per_second': {23.3 + i}}}",
            "logcount": f"step {i} | tokens seen: {(i + 1) * 100}",
            "lognone": f"step {i} | loss 1.0 | speed {1000 + i} it/s",
        }[a.mode]
        print(text, flush=True)
        continue
    if a.mode == "vary":
        n = 50 if i % 4 == 3 else 10
        time.sleep(0.004 * n)
        if reporting.step(tokens=n):
            break
        continue
    time.sleep(0.004 * a.bs * a.accum / speed)
    if a.mode == "log":
        print(f"step {i} | loss 1.0 | tps: {1000 * speed:,.0f}", flush=True)
        continue
    if a.mode == "early" and i == 2:
        raise SystemExit(0)
    stop = reporting.step(tokens=a.bs * a.accum * 10, padded_tokens=a.bs * a.accum * 12)
    if a.mode == "hang":
        time.sleep(3600)
    if stop and a.mode != "ignore_stop":
        break
if a.mode == "ignore_stop":
    time.sleep(3600)
