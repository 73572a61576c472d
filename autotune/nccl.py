"""`autotune nccl`: all-reduce bus bandwidth on this node for each NCCL algorithm and protocol, 1 MB
to 1 GB.

Like nccl-tests' all_reduce_perf, but through PyTorch's process group (what training uses) and once
per NCCL_ALGO x NCCL_PROTO setting, each in a fresh torchrun group (NCCL reads them when a
communicator is made) running the all-reduce workload (workloads/allreduce.py). A setting NCCL
refuses is reported with NCCL's own message; NCCL's INFO log says what it actually used. NVLS is not
in the default list, and NCCL_NVLS_ENABLE is never set or cleared here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune import atomic, nccl_log, paths
from autotune import knobs as catalogue
from autotune.documents import strict_json
from autotune.errors import ConfigError
from autotune.launch.process import run_trial
from autotune.launch.runner import omp_env, preflight
from autotune.protocol import RunSettings, TrialSpec

ALGOS = catalogue.BY_NAME["nccl_algo"].choices()
PROTOS = catalogue.BY_NAME["nccl_proto"].choices()


def parse_names(option: str, given: str, allowed: tuple[str, ...]) -> list[str]:
    """A comma-separated list of allowed names, each once (ConfigError naming the option
    otherwise)."""
    names = [n.strip() for n in given.split(",") if n.strip()]
    bad = [n for n in names if n not in allowed]
    if not names or bad:
        raise ConfigError(
            f"{option}: {bad[0] if bad else given!r} is not allowed; allowed: {', '.join(allowed)}"
        )
    return list(dict.fromkeys(names))


def message_sizes(min_mb: float, max_mb: float) -> list[int]:
    """Doubling sizes (bytes, multiples of 4) from min to max; both included when max is min x a
    power of two."""
    if min_mb > max_mb:
        raise ConfigError(f"--min-mb: {min_mb} is above --max-mb {max_mb}; swap them")
    min_bytes, max_bytes = int(min_mb * 1e6), int(max_mb * 1e6)
    sizes, size = [], max(4, min_bytes - min_bytes % 4)
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def sweep(
    out_dir: Path,
    *,
    device: str,
    gpus: list[str],
    algos: list[str],
    protos: list[str],
    sizes: list[int],
    warmup: int,
    iters: int,
    timeout_s: float,
    on_cell: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run every setting; write out_dir/nccl.json; return it. On the CPU (gloo) there is one
    setting: gloo. gpus: the group's GPUs (on the CPU, one gloo rank per entry)."""
    if len(gpus) < 2:
        raise ConfigError(
            f"--gpus: {','.join(gpus) or 'none'} gives {len(gpus)} rank(s); an all-reduce needs "
            "at least 2"
        )
    paths.writable_dir(out_dir, "--out")
    preflight()
    combos = [(a, p) for a in algos for p in protos] if device == "cuda" else [("gloo", "gloo")]
    cells = []
    for i, (algo, proto) in enumerate(combos):
        cells.append(
            _cell(
                out_dir / f"{i:02d}-{algo}-{proto}",
                device,
                gpus,
                algo,
                proto,
                sizes,
                warmup,
                iters,
                timeout_s,
            )
        )
        if on_cell:
            on_cell(cells[-1])
    doc = {
        "device": device,
        "ranks": len(gpus),
        "gpus": gpus if device == "cuda" else None,
        "sizes": sizes,
        "warmup": warmup,
        "iters": iters,
        "nvls_enable_env": os.environ.get("NCCL_NVLS_ENABLE"),
        "cells": cells,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out_dir / "nccl.json", strict_json.dumps(doc, indent=1))
    return doc


def _cell(
    run_dir: Path,
    device: str,
    gpus: list[str],
    algo: str,
    proto: str,
    sizes: list[int],
    warmup: int,
    iters: int,
    timeout_s: float,
) -> dict[str, Any]:
    """One setting in a fresh rank group: its bandwidth rows, or NCCL's reason for refusing it."""
    env = catalogue.env_of({"nccl_algo": algo, "nccl_proto": proto}) if device == "cuda" else {}
    if device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    env.update(omp_env(len(gpus)))
    spec = TrialSpec(
        task="allreduce",
        device=device,
        run=RunSettings(world_size=len(gpus)),
        params={"sizes": sizes, "warmup": warmup, "iters": iters},
    )
    outcome = run_trial(spec, run_dir, timeout_s=timeout_s, env=env)
    result = outcome.result if outcome.status == "ok" else None
    return {
        "algo": algo,
        "proto": proto,
        "status": outcome.status,
        "reason": outcome.reason,
        "rows": result.output.get("rows") if result is not None else None,
        "nccl_used": nccl_log.used(outcome.nccl),
        "nccl_report": outcome.nccl,
        "wall_s": round(outcome.wall_s, 1),
    }
