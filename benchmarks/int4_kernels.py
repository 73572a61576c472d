"""One decode step's linear layers at batch 1, kernel by kernel: bf16 against int4 (torch's tinygemm
through torchao, gemlite's Triton kernels through torchao), each as a share of the H200's memory
bandwidth (issue 24 part 1:
why int4 does or does not reach 1.8x bf16 per output token).

    python3 benchmarks/int4_kernels.py [--group 128] [--out FILE]

Shapes: Llama-3.1-8B's (qkv 4096->6144, proj 4096->4096, gate|up 4096->28672, down 14336->4096, head
4096->128256). Each is timed over several copies of its weights (at least 256 MB of them, more than
the 60 MB L2 holds, so every call reads its weights from HBM), the calls captured in one CUDA graph
and replayed (triton.testing.do_bench_cudagraph: median of the replays); bytes are the weights as
stored (int4:
half a byte a weight plus a bf16 scale and zero point per group), the activation being negligible at
batch 1.
Prints one JSON line per kernel and shape, then a table; the bandwidth ceiling is measured first (a
device-to-device copy).
"""

from __future__ import annotations

import argparse
import json
import math

import torch
from triton.testing import do_bench_cudagraph

SHAPES = {
    "qkv": (4096, 6144),
    "proj": (4096, 4096),
    "gate_up": (4096, 28672),
    "down": (14336, 4096),
    "head": (4096, 128256),
}
# how many a decode step runs
PER_LAYER = {"qkv": 32, "proj": 32, "gate_up": 32, "down": 32, "head": 1}
MIN_BYTES = 256 * 2**20


def copy_bandwidth() -> float:
    """Bytes a second of a large device-to-device copy (bytes read plus written): the ceiling
    used."""
    src = torch.empty(2**31, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = do_bench_cudagraph(lambda: dst.copy_(src), rep=200, return_mode="median")
    return 2 * src.numel() / (ms / 1e3)


def quantized(linear: torch.nn.Linear, kernel: str, group: int) -> torch.nn.Module:
    """The linear quantized as the generate trial quantizes it (workloads/generate.py)."""
    from torchao.quantization import Int4WeightOnlyConfig, quantize_

    if kernel == "tinygemm":
        quantize_(
            linear, Int4WeightOnlyConfig(group_size=group, int4_packing_format="tile_packed_to_4d")
        )
    elif kernel == "gemlite":
        import gemlite  # noqa: F401
        from torchao.prototype.quantization.quant_api import UIntxWeightOnlyConfig

        quantize_(linear, UIntxWeightOnlyConfig(group_size=group, bit_width=4))
    return linear


def stored_bytes(k: int, n: int, kernel: str, group: int) -> int:
    """Bytes one call must read: the weights as stored and their scales."""
    if kernel == "bf16":
        return 2 * k * n
    return k * n // 2 + n * (k // group) * 4


def time_kernel(name: str, kernel: str, group: int) -> dict:
    """Median microseconds of one call of this shape with this kernel, its weights read from HBM."""
    k, n = SHAPES[name]
    per_call = stored_bytes(k, n, kernel, group)
    copies = max(1, math.ceil(MIN_BYTES / per_call))
    layers = []
    for _ in range(copies):
        linear = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
        layers.append(linear if kernel == "bf16" else quantized(linear, kernel, group))
    x = torch.randn(1, 1, k, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        ref = torch.nn.functional.linear(x, layers[0].weight) if kernel == "bf16" else None
        for linear in layers:  # warm-up: gemlite autotunes its launch on the first call of a shape
            linear(x)
        ms = do_bench_cudagraph(
            lambda: [linear(x) for linear in layers], rep=300, return_mode="median"
        )
    us = 1e3 * ms / copies
    del ref
    return {
        "shape": name,
        "k": k,
        "n": n,
        "kernel": kernel,
        "group": group,
        "copies": copies,
        "us": us,
        "bytes": per_call,
        "gb_s": per_call / (us / 1e6) / 1e9,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--group", type=int, default=128)
    p.add_argument("--kernels", nargs="+", default=["bf16", "tinygemm", "gemlite"])
    p.add_argument("--out", default="int4-kernels.jsonl")
    args = p.parse_args()
    ceiling = copy_bandwidth()
    print(
        json.dumps(
            {
                "copy_bandwidth_gb_s": ceiling / 1e9,
                "gpu": torch.cuda.get_device_name(),
                "torch": torch.__version__,
            }
        ),
        flush=True,
    )
    rows = []
    with open(args.out, "w") as f:
        f.write(json.dumps({"copy_bandwidth_gb_s": ceiling / 1e9}) + "\n")
        for kernel in args.kernels:
            for name in SHAPES:
                try:
                    row = time_kernel(name, kernel, args.group)
                except Exception as err:  # a kernel that cannot run here: say so and go on
                    row = {
                        "shape": name,
                        "kernel": kernel,
                        "error": f"{type(err).__name__}: {str(err)[:300]}",
                    }
                row["share_of_copy"] = row.get("gb_s", 0) * 1e9 / ceiling
                f.write(json.dumps(row) + "\n")
                f.flush()
                rows.append(row)
                print(json.dumps(row), flush=True)
                torch.cuda.empty_cache()
    print(f"\n{'kernel':9} {'shape':8} {'us':>8} {'GB/s':>7} {'of copy':>8}")
    for kernel in args.kernels:
        step = 0.0
        for r in (r for r in rows if r["kernel"] == kernel):
            if "error" in r:
                print(f"{kernel:9} {r['shape']:8} {r['error']}")
                continue
            step += r["us"] * PER_LAYER[r["shape"]]
            print(
                f"{kernel:9} {r['shape']:8} {r['us']:8.1f} {r['gb_s']:7.0f} "
                f"{100 * r['share_of_copy']:7.1f}%"
            )
        print(f"{kernel:9} {'a step':8} {step:8.1f} us of linear layers (32 layers and the head)")


if __name__ == "__main__":
    main()
