"""Whole-model against per-block torch.compile on the CPU: the compile phase of one trial of a tiny
GPT.

    python3 benchmarks/regional_compile_cpu.py model 8      # then: block 8, model 1, block 1

Each call is one fresh process with empty compile caches of its own (a warm Inductor cache would
hide the compile); prints the trial's compile phase and how many distinct graphs Dynamo compiled.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import torch._dynamo.utils

from autotune.config import ModelConfig
from autotune.launch.runner import model_spec
from autotune.protocol import RunSettings, TrialSpec
from autotune.workloads import trial


def main(scope: str, layers: int) -> None:
    cache = tempfile.mkdtemp(prefix="regional-")
    os.environ.update(TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=f"{cache}/triton")
    model = model_spec(
        ModelConfig(
            family="gpt", n_layers=layers, d_model=32, n_heads=4, vocab_size=128, seq_len=16
        )
    )
    spec = TrialSpec(
        task="train",
        device="cpu",
        model=model,
        run=RunSettings(warmup_steps=1, measure_steps=3),
        knobs={
            "micro_batch_size": 2,
            "grad_accum_steps": 2,
            "compile": True,
            "compile_scope": scope,
        },
    )
    try:
        result = trial.run(spec)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(
        scope,
        layers,
        result.status,
        f"compile {result.phases_s['compile']:.1f} s",
        "unique graphs",
        torch._dynamo.utils.counters["stats"]["unique_graphs"],
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
