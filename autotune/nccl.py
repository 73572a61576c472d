"""`autotune nccl`: all-reduce bus bandwidth on this node for each NCCL algorithm and protocol, 1 MB to 1 GB.

Like nccl-tests' all_reduce_perf, but through PyTorch's process group (what training uses) and once per
NCCL_ALGO x NCCL_PROTO setting, each in a fresh torchrun group (NCCL reads them when a communicator is made).
A setting NCCL refuses is reported with NCCL's own message; NCCL's INFO log says what it actually used.
NVLS is not in the default list, and NCCL_NVLS_ENABLE is never set or cleared here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.runner import nccl_used, omp_env, run_trial
from autotune.workloads.worker import write_json


def message_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Doubling sizes from min to max (both included when max is min x a power of two), multiples of 4."""
    sizes, size = [], max(4, min_bytes - min_bytes % 4)
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def sweep(out_dir: Path, *, device: str, ranks: int, gpus: list[str] | None, algos: list[str], protos: list[str],
          sizes: list[int], warmup: int, iters: int, timeout_s: float,
          on_cell: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run every setting; write out_dir/nccl.json; return it. On the CPU (gloo) there is one setting: gloo."""
    combos = [(a, p) for a in algos for p in protos] if device == "cuda" else [("gloo", "gloo")]
    cells = []
    for i, (algo, proto) in enumerate(combos):
        env = {}
        if algo not in ("default", "gloo"):
            env["NCCL_ALGO"] = algo
        if proto not in ("default", "gloo"):
            env["NCCL_PROTO"] = proto
        if gpus and device == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        env.update(omp_env(ranks))
        spec = {"module": "autotune.workloads.allreduce", "device": device, "workload": {"world_size": ranks},
                "sizes": sizes, "warmup": warmup, "iters": iters}
        outcome = run_trial(spec, out_dir / f"{i:02d}-{algo}-{proto}", timeout_s=timeout_s, env=env)
        report = outcome.raw.get("nccl") or {}
        cell = {"algo": algo, "proto": proto, "status": outcome.status, "reason": outcome.reason,
                "rows": outcome.raw.get("rows") if outcome.status == "ok" else None,
                "nccl_used": nccl_used(report), "nccl_report": report or None, "wall_s": round(outcome.wall_s, 1)}
        cells.append(cell)
        if on_cell:
            on_cell(cell)
    doc = {"device": device, "ranks": ranks, "gpus": gpus, "sizes": sizes, "warmup": warmup, "iters": iters,
           "nvls_enable_env": os.environ.get("NCCL_NVLS_ENABLE"), "cells": cells}
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(str(out_dir / "nccl.json"), doc)
    return doc
