"""Issue 16, part 2: when would gradient compression (DDP) or a bf16 reduce-scatter (FSDP2) pay? An estimate
from a measured all-reduce table (`autotune nccl`'s JSON) and a measured step, for the measured link and for
slower ones, so users on other fabrics know whether to search those knobs.

    python3 benchmarks/comm_model.py --nccl benchmarks/results/2026-11-29-h200x2-ddp/nccl.json \\
        --params 124e6 --step-s 0.485 --accum 4 --world 2            # GPT-2 small DDP, 2x H200
    python3 benchmarks/comm_model.py --fsdp --params 8.03e9 --step-s 7.2 --accum 4 --world 2 --nccl ...

The model (an upper bound on what compression can save: no overlap with compute assumed; DDP and FSDP2 hide
part of it behind the backward):
- DDP: one all-reduce of the gradients a step (no_sync on the other micro-batches). Bytes: 4 a parameter (fp32),
  2 with fp16/bf16 compression, PowerSGD rank r: r(m + n) floats a weight matrix m x n (a GPT block's four
  matrices, --layers x --width; the other parameters uncompressed).
- FSDP2: per micro-batch the parameters are all-gathered (bf16, twice with reshard_after_forward) and once a
  step (fsdp_grad_sync last) or per micro-batch (every) the gradients reduce-scattered (fp32, or bf16).
- Time of a collective of B bytes at bus bandwidth W (NCCL's busbw, for all-reduce 2(n-1)/n x algbw):
  all-reduce 2(n-1)/n x B / W; all-gather and reduce-scatter (n-1)/n x B / W. W is read from the table at
  the nearest measured size (default algorithm and protocol) or given per link (--links).
Prints a markdown table: per link, the communication time a step, its share of the step, and what each
option saves in % of the step. Written by hand: no library models NCCL's cost from a measured table.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

# Bus bandwidths per GPU of common links, GB/s (nominal, one direction; NCCL reaches 70-90% of these): what a
# user on another fabric may have. Sources: NVIDIA H100/H200 datasheets (NVLink 4: 450 GB/s a direction), PCIe
# Gen5 x16 (64 GB/s), ConnectX-7 400 Gb/s InfiniBand (50 GB/s), 100 Gb/s Ethernet (12.5 GB/s).
LINKS = {"PCIe Gen5 x16": 64.0, "400G InfiniBand": 50.0, "100G Ethernet": 12.5}


def busbw_at(table: dict, nbytes: float) -> float:
    """The measured busbw (GB/s) of default/default at the measured size nearest to nbytes (log scale)."""
    cell = next(c for c in table["cells"] if c["algo"] == "default" and c["proto"] == "default" and c["status"] == "ok")
    row = min(cell["rows"], key=lambda r: abs(math.log(r["bytes"]) - math.log(max(nbytes, 1.0))))
    return float(row["busbw_gbs"])


def ddp_bytes(params: float, rank: int, layers: int, width: int) -> dict[str, float]:
    """Bytes all-reduced a step: fp32, fp16/bf16 compression, PowerSGD (rank r over `layers` blocks of four
    width x 4 width-ish matrices: r (m + n) floats each; other tensors, about 2% of GPT-style models, stay fp32)."""
    matrices = layers * [(3 * width, width), (width, width), (4 * width, width), (width, 4 * width)]
    in_matrices = sum(m * n for m, n in matrices)
    low_rank = sum(rank * (m + n) for m, n in matrices) + max(params - in_matrices, 0)
    return {"none (fp32)": 4 * params, "fp16/bf16_compress": 2 * params, f"powersgd rank {rank}": 4 * low_rank}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nccl", type=Path, required=True, help="autotune nccl's JSON (the measured link)")
    ap.add_argument("--params", type=float, required=True)
    ap.add_argument("--step-s", type=float, required=True, help="a measured optimizer step, seconds")
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--fsdp", action="store_true", help="FSDP2 (all-gathers and reduce-scatters), not DDP")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--rank", type=int, default=4, help="PowerSGD's rank (DDP)")
    a = ap.parse_args()
    table = json.loads(a.nccl.read_text())
    n, f = a.world, (a.world - 1) / a.world
    rows = []
    if a.fsdp:
        gathered = 2 * a.params  # bf16 parameters
        options = {"reshard true, grad sync last, fp32 reduce": (2 * a.accum * gathered, 4 * a.params),
                   "bf16 reduce (fsdp_reduce_dtype)": (2 * a.accum * gathered, 2 * a.params),
                   "reshard false (one all-gather a micro-batch)": (a.accum * gathered, 4 * a.params),
                   "grad sync every (reduce-scatter a micro-batch)": (2 * a.accum * gathered, 4 * a.params * a.accum)}
        volume = {k: f * (g + r) for k, (g, r) in options.items()}
        size = 2 * a.params / (a.layers or 1)  # one block's collective
    else:
        volume = {k: 2 * f * b for k, b in ddp_bytes(a.params, a.rank, a.layers, a.width).items()}
        size = 4 * a.params
    measured = busbw_at(table, size)
    links = {f"measured ({table.get('ranks', n)} GPUs, busbw {measured:.0f} GB/s at {size / 1e6:.0f} MB)": measured,
             **{name: 0.8 * bw for name, bw in LINKS.items()}}  # 80% of nominal, about what NCCL reaches
    base = next(iter(volume))
    for link, bw in links.items():
        t = {k: v / (bw * 1e9) for k, v in volume.items()}
        saves = "; ".join(f"{k}: {100 * (t[base] - t[k]) / a.step_s:+.2f}%" for k in list(volume)[1:])
        rows.append(f"| {link} | {bw:.0f} | {1e3 * t[base]:.1f} | {100 * t[base] / a.step_s:.2f}% | {saves} |")
    print(f"{'FSDP2' if a.fsdp else 'DDP'}, {a.params / 1e9:.3g}B parameters, step {a.step_s} s, accumulation "
          f"{a.accum}, {n} GPUs; no overlap assumed (an upper bound on the saving)\n")
    print("| link | busbw GB/s | comm ms a step (" + base + ") | share of the step | step time saved by |")
    print("|---|---:|---:|---:|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
