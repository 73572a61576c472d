"""Does a fresh process compile again what an earlier process compiled? (issue 50, part 1)

    python3 benchmarks/compile_warm.py [--layers 6] [--out FILE] [CASE ...]

Each case is a program of the issue's GPT-style 1.3B width (d_model 2048, 16 heads, GELU MLP 8192,
vocabulary 50,257, sequence 2048) at `--layers` layers, measured as a trial twice in fresh
processes that share one new compile cache folder: the first compiles cold, the second should be
served by the cache. One JSON line a process: the case, cold or warm run, its compile phase, its
wall time and what the cache counters say (hits, misses, bypasses; compile state). The cases:
  fp8-model          fp8 tensorwise, whole model, static
  bf16-model         bf16, whole model, static
  fp8-block          fp8 tensorwise, per block, dynamic batch; warm run at twice the micro-batch
  bf16-block-sac     bf16, per block, dynamic batch, selective checkpointing (the policy's
                     cache_hash); warm run at twice the micro-batch
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune.config import ModelConfig  # noqa: E402
from autotune.launch.process import run_trial  # noqa: E402
from autotune.launch.runner import model_spec  # noqa: E402
from autotune.protocol import RunSettings, TrialSpec  # noqa: E402

BASE = {"micro_batch_size": 4, "grad_accum_steps": 1, "compile": True, "fused_optimizer": True}
FP8 = {"precision": "fp8", "fp8_recipe": "tensorwise"}
STATIC = {"compile_scope": "model", "compile_dynamic": "static"}
PER_BLOCK = {"compile_scope": "block", "compile_dynamic": "batch"}
# name: (knobs, warm run at twice the micro-batch)
CASES: dict[str, tuple[dict[str, Any], bool]] = {
    "fp8-model": ({**BASE, **FP8, **STATIC}, False),
    "bf16-model": ({**BASE, "precision": "bf16", **STATIC}, False),
    "fp8-block": ({**BASE, **FP8, **PER_BLOCK}, True),
    "bf16-block-sac": (
        {**BASE, "precision": "bf16", **PER_BLOCK, "activation_checkpointing": "selective"},
        True,
    ),
}


def spec_of(layers: int, knobs: dict[str, Any]) -> TrialSpec:
    model = ModelConfig(
        family="gpt",
        n_layers=layers,
        d_model=2048,
        n_heads=16,
        ffn_hidden=8192,
        vocab_size=50257,
        seq_len=2048,
        tie_embeddings=False,
    )
    return TrialSpec(
        task="train",
        device="cuda",
        model=model_spec(model),
        run=RunSettings(warmup_steps=2, measure_steps=3),
        knobs=knobs,
    )


def run_case(name: str, layers: int, out: Path) -> None:
    knobs, doubled = CASES[name]
    cache = Path(tempfile.mkdtemp(prefix=f"warm-{name}-"))
    env = {
        "TORCHINDUCTOR_CACHE_DIR": str(cache),
        "TRITON_CACHE_DIR": str(cache / "triton"),
    }
    try:
        for run in ("first", "second"):
            mb = knobs["micro_batch_size"] * (2 if doubled and run == "second" else 1)
            spec = spec_of(layers, {**knobs, "micro_batch_size": mb})
            t0 = time.monotonic()
            outcome = run_trial(spec, cache / run, timeout_s=580, env=env)
            result = outcome.result
            line = {
                "case": name,
                "run": run,
                "layers": layers,
                "micro_batch_size": mb,
                "status": outcome.status,
                "reason": (outcome.reason or "")[:300],
                "wall_s": round(time.monotonic() - t0, 1),
                "compile_s": (result.phases_s or {}).get("compile") if result else None,
                "phases_s": result.phases_s if result else None,
                "compile_cache": (result.applied or {}).get("compile_cache") if result else None,
            }
            print(json.dumps(line), flush=True)
            with out.open("a") as f:
                f.write(json.dumps(line) + "\n")
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", default=list(CASES))
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--out", type=Path, default=Path("compile-warm.jsonl"))
    args = parser.parse_args()
    for name in args.cases:
        run_case(name, args.layers, args.out)


if __name__ == "__main__":
    main()
