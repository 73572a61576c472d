"""The numerics check's learning-rate schedule on the GPU (issue 49): one fp8 tensorwise trial
(measured steps, then the check) of the Llama-style 1B and the GPT-style 1.3B per schedule variant,
each curve's spikes, the gap and its sign, the check's peak memory. One JSON line a run on stdout
and in $OUT/check-schedule.jsonl.

    python3 benchmarks/check_schedule.py [VARIANT ...]   # VARIANT: warmup_share,decay_to,update
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from test_gpu_numerics import GPT_1B, LLAMA_1B, spec_of  # noqa: E402

from autotune.numerics import spikes  # noqa: E402
from autotune.workloads import numerics_check, trial  # noqa: E402


def run(model: dict, warmup: float, decay: float, update: float) -> dict:
    numerics_check.WARMUP_SHARE, numerics_check.DECAY_TO = warmup, decay
    numerics_check.CHECK_UPDATE = update
    t0 = time.perf_counter()
    result = trial.run(spec_of(model, "fp8", "tensorwise"))
    found = (result.output or {}).get("loss_check") or {}
    row = {
        "model": model["family"],
        "warmup_share": warmup,
        "decay_to": decay,
        "update": update,
        "status": result.status,
        "reason": result.reason,
        "peak_gib": found.get("peak_gib"),
        "why": found.get("why"),
        "s": round(time.perf_counter() - t0, 1),
    }
    for a in found.get("attempts", []):
        row.setdefault("attempts", []).append(
            {
                "verdict": a["verdict"],
                "spikes": {"candidate": spikes(a["losses"]), "reference": spikes(a["reference"])},
                "losses": [round(x, 3) for x in a["losses"]],
                "reference": [round(x, 3) for x in a["reference"]],
            }
        )
    return row


def main() -> None:
    variants = [tuple(float(x) for x in v.split(",")) for v in sys.argv[1:]] or [(0.25, 1.0, 0.25)]
    out = os.path.join(os.environ.get("OUT", "."), "check-schedule.jsonl")
    for model in (LLAMA_1B, GPT_1B):
        for warmup, decay, update in variants:
            row = run(model, warmup, decay, update)
            print(json.dumps(row), flush=True)
            with open(out, "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
