"""A stand-in for nanoGPT's train.py as its configurator reads the command line (tests of task
command's maps): every argument is `--key=value` of a key it knows, else it exits 1 (nanoGPT reads
`--batch_size` alone as a config file's name and fails; issue 61: `--batch_size 32` crashed). Each
optimizer step is `gradient_accumulation_steps` micro-batches of a fixed 10 ms, so at one global
batch a larger micro-batch is faster. No torch."""

from __future__ import annotations

import json
import sys
import time

from autotune import reporting

config = {"batch_size": 1, "gradient_accumulation_steps": 1}
for arg in sys.argv[1:]:
    key, eq, value = arg.removeprefix("--").partition("=")
    if not arg.startswith("--") or not eq or key not in config:
        raise SystemExit(f"configurator: {arg!r} is not --key=value of {', '.join(config)}")
    config[key] = int(value)
print("config:", json.dumps(config, sort_keys=True), flush=True)
for _ in range(1000):
    time.sleep(0.01 * config["gradient_accumulation_steps"])
    tokens = 16 * config["batch_size"] * config["gradient_accumulation_steps"]
    if reporting.step(tokens=tokens):
        break
