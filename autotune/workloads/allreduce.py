"""All-reduce bandwidth of one rank group, run by torchrun: `python -m autotune.workloads.allreduce SPEC RESULT`.

Needs torch only. Every rank all-reduces float32 tensors of each size in spec["sizes"] (bytes): `warmup`
untimed calls, then `iters` samples, each `inner` back-to-back calls after an untimed barrier (CUDA events on
GPUs, perf_counter on the CPU). The time of a size is the median over the samples of the slowest rank's; bandwidths as nccl-tests reports
them: algbw = bytes / time, busbw = algbw x 2 (n - 1) / n. Rank 0 writes the result; a failing rank writes
result.rankR.json with its reason and exits 1 (as the trial worker does).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from autotune.workloads.worker import Ranks, _die_with_parent, _nccl_refusal, crash_reason, fail_rank, write_json


def run(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    group = Ranks(torch, spec["device"])  # barriers, gathering over gloo: only all-reduces meet NCCL
    cuda, world = group.backend == "nccl", group.world
    dev = torch.device("cuda", group.local_rank) if cuda else torch.device("cpu")
    inner = spec.get("inner", 5)
    rows = []
    for size in spec["sizes"]:
        x = torch.ones(size // 4, dtype=torch.float32, device=dev)
        for _ in range(spec["warmup"]):
            dist.all_reduce(x)
        times = []
        for _ in range(spec["iters"]):
            # Line the ranks up first (untimed), then time `inner` back-to-back calls, as nccl-tests does:
            # one call alone would measure the other rank's launch delay at small sizes.
            if cuda:
                torch.cuda.synchronize()
            group.barrier()
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(inner):
                    dist.all_reduce(x)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1000.0 / inner)
            else:
                t0 = time.perf_counter()
                for _ in range(inner):
                    dist.all_reduce(x)
                times.append((time.perf_counter() - t0) / inner)
        slowest = [max(per_rank) for per_rank in zip(*group.gather(times))]
        t = statistics.median(slowest)
        algbw = size / t / 1e9
        rows.append({"bytes": size, "time_us": t * 1e6, "algbw_gbs": algbw, "busbw_gbs": algbw * 2 * (world - 1) / world,
                     "samples_s": slowest})
        del x
    group.stop()
    return {"status": "ok", "world_size": world, "backend": group.backend, "rows": rows, "nccl_env": group.nccl_env(),
            "env": {"torch": torch.__version__, "cuda": torch.version.cuda,
                    "device_name": torch.cuda.get_device_name(group.local_rank) if cuda else "cpu"}}


def main(argv: list[str]) -> int:
    _die_with_parent()
    spec_path, result_path = argv
    spec = json.loads(Path(spec_path).read_text())
    rank = int(os.environ.get("RANK", "0"))
    try:
        result = run(spec)
    except Exception as err:
        refusal = _nccl_refusal(err)
        fail_rank(result_path, rank, {"status": "invalid_config" if refusal else "crash",
                                      "reason": refusal or crash_reason(err)})
    if rank == 0:
        write_json(result_path, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
