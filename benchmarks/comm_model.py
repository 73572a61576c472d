"""Issue 16, part 2: when would gradient compression (DDP) or a bf16 reduce-scatter (FSDP2) pay? An
estimate from a measured all-reduce table (`autotune nccl`'s JSON) and a measured step, for the
measured link and for slower ones, so users on other fabrics know whether to search those knobs.

    python3 benchmarks/comm_model.py --nccl benchmarks/results/2026-11-29-h200x2-ddp/nccl.json \\
        --yaml search_spaces/gpt2-small-ddp.yaml --step-s 0.486 --accum 4 --world 2   # GPT-2 small
        DDP, 2x H200
    python3 benchmarks/comm_model.py --fsdp --yaml search_spaces/llama3-8b-fsdp.yaml --step-s 7.22
    --accum 4 ...

The model (an upper bound on what compression can save: no overlap with compute assumed; DDP and
FSDP2 hide part of it behind the backward):
- DDP: one all-reduce of the gradients a step (no_sync on the other micro-batches), in buckets of
  --bucket-mb. Bytes: 4 a parameter (fp32), 2 with fp16/bf16 compression, PowerSGD rank r: r(m + n)
  floats a matrix m x n (every 2-D gradient, embeddings too, as torch's powerSGD_hook compresses
  them; vectors stay fp32).
  The parameters are the model of --yaml, built on the meta device with autotune's model.
- FSDP2: per micro-batch the parameters are all-gathered (bf16, twice with reshard_after_forward)
  and once a step (fsdp_grad_sync last) or per micro-batch (every) the gradients reduce-scattered
  (fp32, or bf16).
- Time of a collective of B bytes at bus bandwidth W (NCCL's busbw, for all-reduce 2(n-1)/n x
  algbw):
  all-reduce 2(n-1)/n x B / W; all-gather and reduce-scatter (n-1)/n x B / W. W is read from the
  table at
  the measured size nearest to one collective (DDP: a bucket; FSDP2: a block's bf16 parameters),
  default
  algorithm and protocol; for the other links, 80% of their nominal bandwidth.
Prints a markdown table: per link, the communication time a step, its share of the step, and what
each option saves in % of the step. Written by hand: no library models NCCL's cost from a measured
table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Bus bandwidths per GPU of common links, GB/s (nominal, one direction; NCCL reaches 70-90% of
# these): what a user on another fabric may have. Sources: NVIDIA H100/H200 datasheets (NVLink 4:
# 450 GB/s a direction), PCIe Gen5 x16 (64 GB/s), ConnectX-7 400 Gb/s InfiniBand (50 GB/s), 100 Gb/s
# Ethernet (12.5 GB/s).
LINKS = {"PCIe Gen5 x16": 64.0, "400G InfiniBand": 50.0, "100G Ethernet": 12.5}


def busbw_at(table: dict, nbytes: float) -> float:
    """The measured busbw (GB/s) of default/default at the measured size nearest to nbytes (log
    scale)."""
    cell = next(
        c
        for c in table["cells"]
        if c["algo"] == "default" and c["proto"] == "default" and c["status"] == "ok"
    )
    row = min(cell["rows"], key=lambda r: abs(math.log(r["bytes"]) - math.log(max(nbytes, 1.0))))
    return float(row["busbw_gbs"])


def shapes(yaml_path: Path) -> list[tuple[int, ...]]:
    """The parameter shapes of the YAML's built-in model (autotune's Transformer on the meta
    device)."""
    import torch
    import yaml

    from autotune.config import ModelConfig
    from autotune.workloads.model import Transformer

    cfg = ModelConfig.model_validate(yaml.safe_load(yaml_path.read_text())["model"])
    m = {**cfg.model_dump(), "kv_heads": cfg.kv_heads, "ffn_hidden": cfg.ffn, "attention": "auto"}
    with torch.device("meta"):
        model = Transformer(m)
    return [tuple(p.shape) for p in model.parameters()]


def ddp_bytes(sizes: list[tuple[int, ...]], rank: int) -> dict[str, float]:
    """Bytes all-reduced a step: fp32, fp16/bf16 compression, PowerSGD (r (m + n) floats a
    matrix)."""
    params = sum(math.prod(s) for s in sizes)
    low_rank = sum(rank * (s[0] + s[1]) if len(s) == 2 else math.prod(s) for s in sizes)
    return {
        "none (fp32)": 4 * params,
        "fp16/bf16_compress": 2 * params,
        f"powersgd rank {rank}": 4 * low_rank,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--nccl", type=Path, required=True, help="autotune nccl's JSON (the measured link)"
    )
    ap.add_argument(
        "--yaml", type=Path, required=True, help="a search space YAML: its model section is used"
    )
    ap.add_argument(
        "--step-s", type=float, required=True, help="a measured optimizer step, seconds"
    )
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument(
        "--fsdp", action="store_true", help="FSDP2 (all-gathers and reduce-scatters), not DDP"
    )
    ap.add_argument("--bucket-mb", type=float, default=25, help="DDP's bucket_cap_mb")
    ap.add_argument("--rank", type=int, default=4, help="PowerSGD's rank (DDP)")
    a = ap.parse_args()
    table = json.loads(a.nccl.read_text())
    sizes = shapes(a.yaml)
    a.params = float(sum(math.prod(s) for s in sizes))
    layers = max(1, sum(1 for s in sizes if len(s) == 2) // 4)  # about four matrices a block
    n, f = a.world, (a.world - 1) / a.world
    rows = []
    if a.fsdp:
        gathered = 2 * a.params  # bf16 parameters
        options = {
            "reshard true, grad sync last, fp32 reduce": (2 * a.accum * gathered, 4 * a.params),
            "bf16 reduce (fsdp_reduce_dtype)": (2 * a.accum * gathered, 2 * a.params),
            "reshard false (one all-gather a micro-batch)": (a.accum * gathered, 4 * a.params),
            "grad sync every (reduce-scatter a micro-batch)": (
                2 * a.accum * gathered,
                4 * a.params * a.accum,
            ),
        }
        volume = {k: f * (g + r) for k, (g, r) in options.items()}
        size = 2 * a.params / layers  # one block's collective
    else:
        volume = {k: 2 * f * b for k, b in ddp_bytes(sizes, a.rank).items()}
        size = a.bucket_mb * 2**20  # one bucket
    measured = busbw_at(table, size)
    links = {
        (
            f"measured ({table.get('ranks', n)} GPUs, busbw {measured:.0f} GB/s at "
            f"{size / 1e6:.0f} MB)"
        ): measured,
        # 80% of nominal, about what NCCL reaches
        **{name: 0.8 * bw for name, bw in LINKS.items()},
    }
    base = next(iter(volume))
    for link, bw in links.items():
        t = {k: v / (bw * 1e9) for k, v in volume.items()}
        saves = "; ".join(
            f"{k}: {100 * (t[base] - t[k]) / a.step_s:+.2f}%" for k in list(volume)[1:]
        )
        rows.append(
            f"| {link} | {bw:.0f} | {1e3 * t[base]:.1f} | {100 * t[base] / a.step_s:.2f}% | "
            f"{saves} |"
        )
    print(
        f"{'FSDP2' if a.fsdp else 'DDP'}, {a.params / 1e9:.3g}B parameters, step {a.step_s} s, "
        f"accumulation {a.accum}, {n} GPUs; no overlap assumed (an upper bound on the saving)\n"
    )
    print(
        "| link | busbw GB/s | comm ms a step ("
        + base
        + ") | share of the step | step time saved by |"
    )
    print("|---|---:|---:|---:|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
