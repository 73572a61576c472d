"""Real tokens/s of task command trials from their raw samples (result.json: each measured step's
seconds as the job reported them and its real tokens), three ways: the median of the steps' own
rates (what autotune reports since issue 26's GPU run), the mean tokens over the median step (what
that run's trials recorded), and all tokens over all time.

    python3 benchmarks/command_rates.py trials/hf-trainer-llama-1b trials/hf-trainer-defaults
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def rates(result: dict) -> dict:
    out = result["output"]
    steps = out.get("step_s_as_reported") or result["step_times_s"]
    tokens = out["tokens"]
    return {
        "median_step_rate": statistics.median(t / s for t, s in zip(tokens, steps)),
        "mean_tokens_over_median_step": statistics.mean(tokens) / statistics.median(steps),
        "total_tokens_over_total_time": sum(tokens) / sum(steps),
        "padding_pct": out.get("padding_pct"),
        "slowest_step_over_median": max(steps) / statistics.median(steps),
    }


def main(folders: list[str]) -> None:
    for folder in folders:
        for path in sorted(Path(folder).glob("runs/*/result.json")):
            result = json.loads(path.read_text())
            row = {"study": Path(folder).name, "run": path.parent.name, "status": result["status"]}
            if result["status"] == "ok":
                row.update(
                    {
                        k: round(v, 3) if isinstance(v, float) else v
                        for k, v in rates(result).items()
                    }
                )
            print(json.dumps(row))


if __name__ == "__main__":
    main(sys.argv[1:])
