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

from autotune.workloads.worker import NCCL_ENV, _die_with_parent, _nccl_refusal, crash_reason, fail_rank, write_json


def run(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    local, world = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = spec["device"] == "cuda"
    if cuda:
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        dev = torch.device("cuda", local)
    else:
        dist.init_process_group("gloo")
        dev = torch.device("cpu")
    # Barriers and the gathering of timings go over gloo, so that only all-reduces meet NCCL_ALGO/NCCL_PROTO.
    side = dist.new_group(backend="gloo") if cuda else None
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
            dist.barrier(group=side)
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
        every: list[Any] = [None] * world
        dist.all_gather_object(every, times, group=side)
        slowest = [max(per_rank) for per_rank in zip(*every)]
        t = statistics.median(slowest)
        algbw = size / t / 1e9
        rows.append({"bytes": size, "time_us": t * 1e6, "algbw_gbs": algbw, "busbw_gbs": algbw * 2 * (world - 1) / world,
                     "samples_s": slowest})
        del x
    dist.destroy_process_group()
    return {"status": "ok", "world_size": world, "backend": "nccl" if cuda else "gloo", "rows": rows,
            "nccl_env": {k: os.environ.get(k) for k in NCCL_ENV} if cuda
            else "not applicable to gloo",
            "env": {"torch": torch.__version__, "cuda": torch.version.cuda,
                    "device_name": torch.cuda.get_device_name(local) if cuda else "cpu"}}


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
