"""Time the trial's model build (meta device, then to_empty and init_weights on the GPU) for three
shapes.

    python3 benchmarks/build_time.py [--old]

Each shape is built in a fresh process through the trial's own code (workloads.train.build_model),
timed from the call to a device synchronisation; --old times the previous build (construct on the
CPU, then .to(device)) for comparison. Prints one JSON line a shape.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

SHAPES = {
    # GPT-2 medium (355M): 24 layers, d_model 1024, 16 heads, vocab 50257, seq 1024
    "gpt2-medium-355M": {
        "family": "gpt",
        "n_layers": 24,
        "d_model": 1024,
        "n_heads": 16,
        "vocab_size": 50257,
        "seq_len": 1024,
        "tie_embeddings": True,
    },
    # Llama-3.2-1B
    "llama-1B": {
        "family": "llama",
        "n_layers": 16,
        "d_model": 2048,
        "n_heads": 32,
        "n_kv_heads": 8,
        "vocab_size": 128256,
        "seq_len": 2048,
        "ffn_hidden": 8192,
        "tie_embeddings": True,
    },
    # Llama-3.1-8B
    "llama-8B": {
        "family": "llama",
        "n_layers": 32,
        "d_model": 4096,
        "n_heads": 32,
        "n_kv_heads": 8,
        "vocab_size": 128256,
        "seq_len": 8192,
        "ffn_hidden": 14336,
        "tie_embeddings": False,
    },
}

CHILD = """
import json, sys, time
t0 = time.time()
import torch
from autotune.protocol import TrialSpec
from autotune.workloads.train import build_model
t_import = time.time()
m, old = json.loads(sys.argv[1]), sys.argv[2] == "old"
m = {**m, "kv_heads": m.get("n_kv_heads") or m["n_heads"], "ffn_hidden": m.get("ffn_hidden") or 4 * m["d_model"],
     "rope_theta": 500000.0, "hf_config": None, "entrypoint": None}
spec = TrialSpec(task="train", device="cuda", knobs={"micro_batch_size": 1, "grad_accum_steps": 1}, model=m)
dev = torch.device("cuda")
torch.cuda.init(); torch.zeros(1, device=dev); torch.cuda.synchronize()
t_ctx = time.time()
torch.manual_seed(0)
gen = torch.Generator(device=dev).manual_seed(0)
t1 = time.perf_counter()
if old:
    from autotune.workloads.model import Transformer
    model = Transformer({**m, "attention": "auto", "padded_vocab": m["vocab_size"], "checkpoint_every": 0}).to(dev)
else:
    model, batches, applied, work = build_model(torch, spec, dev, gen, n_batches=1)
torch.cuda.synchronize()
build = time.perf_counter() - t1
n = sum(p.numel() for p in model.parameters())
print(json.dumps({"params": n, "build_s": round(build, 3), "import_s": round(t_import - t0, 2),
                  "cuda_context_s": round(t_ctx - t_import, 2)}))
"""  # noqa: E501


def main() -> None:
    old = "--old" in sys.argv
    for name, m in SHAPES.items():
        t0 = time.time()
        out = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(m), "old" if old else "new"],
            capture_output=True,
            text=True,
        )
        line = (
            out.stdout.strip().splitlines()[-1]
            if out.stdout.strip()
            else out.stderr.strip().splitlines()[-1]
        )
        print(
            json.dumps(
                {
                    "shape": name,
                    "build": "old" if old else "meta",
                    "process_s": round(time.time() - t0, 1),
                    **(json.loads(line) if line.startswith("{") else {"error": line[:300]}),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
