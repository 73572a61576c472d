"""The memory estimate against the measured peak of every completed trial of a study (issue 15's 10%
target):
the raw estimate (autotune.memory.estimate, as `autotune validate` prints it) and the estimate
calibrated on the trials measured before it (memory.calibrate, what the search's OOM prediction
uses), from each trial's spec.json and result.json under STUDY/runs/.

    python3 benchmarks/memory_vs_peaks.py trials/llama3-8b-fsdp
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from autotune import memory  # noqa: E402


def main(study: Path) -> None:
    rows, seen = [], []
    for run in sorted(p for p in (study / "runs").iterdir() if p.name.isdigit()):
        try:
            spec = json.loads((run / "spec.json").read_text())
            result = json.loads(next(run.glob("result*.json")).read_text())
        except (OSError, StopIteration, ValueError):
            continue
        knobs = {k: v for k, v in spec["knobs"].items() if v is not None}
        est = memory.estimate(spec["model"], knobs, spec["run"].get("world_size", 1))
        peak = result.get("peak_mem_bytes")
        if result.get("status") != "ok" or est is None or not peak:
            continue
        calibrated = memory.calibrate(seen).peak(est)
        rows.append((run.name, knobs, peak, est.total, calibrated, len(seen)))
        seen.append((est, float(peak)))
    g = memory.GIB
    print(
        "| trial | mbs | precision | compile | checkpointing | loss | reshard | grad sync | peak "
        "GiB | estimate GiB | error | calibrated on earlier trials | error |"
    )
    print("|---|---:|---|---|---|---|---|---|---:|---:|---:|---:|---:|")
    for name, k, peak, raw, cal, n in rows:
        compiled = f"{k.get('compile')} ({k.get('compile_scope')})" if k.get("compile") else "false"
        print(
            f"| {name} | {k.get('micro_batch_size')} | {k.get('precision')} | {compiled} | "
            f"{k.get('activation_checkpointing')} | "
            f"{k.get('cross_entropy')} | {k.get('reshard_after_forward')} | "
            f"{k.get('fsdp_grad_sync')} | "
            f"{peak / g:.2f} | {raw / g:.2f} | {100 * (raw / peak - 1):+.1f}% | {cal / g:.2f} "
            f"(n={n}) | "
            f"{100 * (cal / peak - 1):+.1f}% |"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
