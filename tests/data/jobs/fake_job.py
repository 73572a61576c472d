"""A stand-in for a user's training job (tests of task command): no torch, each way a job can behave.

--mode normal: reports steps and stops when told; ignore_stop: reports, then keeps running; silent: exits 0
having reported nothing; early: exits 0 after 2 steps; oom: prints CUDA's out-of-memory error and exits 1;
hang: reports one step, then sleeps; vary: steps of 10 tokens and every fourth of 50, each 4 ms a token; log: prints torchtitan-like throughput lines instead of reporting.
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
a = p.parse_args()
cfg = json.load(open(a.config)) if a.config else {}
seen = {**vars(a), "config": cfg, "env_lr": os.environ.get("MY_LR")}
print("config:", json.dumps(seen, sort_keys=True), flush=True)
if a.pidfile:
    open(a.pidfile, "w").write(str(os.getpid()))
if a.mode == "oom":
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", flush=True)
    raise SystemExit(1)
if a.mode == "silent":
    raise SystemExit(0)
speed = 2.0 if a.optim == "sgd" else 1.0
for i in range(1000):
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
