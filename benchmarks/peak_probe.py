"""Run a training script in this process and print its CUDA peak (reserved and allocated) and wall
time at its end, out of memory or not: a calibration probe for a GPU proof's space.

    python benchmarks/peak_probe.py benchmarks/jobs/own_hf_job.py --output_dir /tmp/p ...
"""

from __future__ import annotations

import json
import runpy
import sys
import time

import torch


def main() -> None:
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    t0 = time.perf_counter()
    end = "ok"
    try:
        runpy.run_path(script, run_name="__main__")
    except torch.OutOfMemoryError as e:
        end = f"oom: {str(e)[:120]}"
    gib = 2**30
    print(
        "probe: "
        + json.dumps(
            {
                "argv": sys.argv[1:],
                "end": end,
                "wall_s": round(time.perf_counter() - t0, 2),
                "max_reserved_gib": round(torch.cuda.max_memory_reserved() / gib, 2),
                "max_allocated_gib": round(torch.cuda.max_memory_allocated() / gib, 2),
                "card_gib": round(torch.cuda.get_device_properties(0).total_memory / gib, 2),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
