"""Issue 35: a command trial's figure against the job's own long run, from one run of the job.

The job (examples/hf_trainer/train.py --own_count_after N) trains its full length with autotune's
callback reporting every step (AUTOTUNE_REPORT set, no stop file: it never stops) and prints its own
count, `own:` (real tokens over wall time from step N on, from its batches and the host clock; or
benchmarks/jobs/own_hf_job.py's line `own count: ...`, read by `own_of`). Here
the trial's rule (autotune/command/window.py, the code a trial runs) is applied to the steps as
they came, step by step, to where a trial would have stopped: its figure against the job's own,
beside the old figure (the median of the steps' rates, which issue 35 found 1.44x the job's count).

    python benchmarks/job_truth.py REPORT.jsonl JOB.log --warmup 3 --measure 8 --max-steps 60
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

from autotune.command import window as windows

OWN_COUNT = re.compile(
    r"own count: (\d+) steps, (\d+) tokens, ([\d.]+) s, ([\d.]+) tokens/s \(steps (\d+)-(\d+); "
    r"from the start: (\d+) tokens, ([\d.]+) s, ([\d.]+) tokens/s\)"
)


def own_of(log: str) -> dict:
    """The job's own count from its log: examples/hf_trainer/train.py's `own: {json}` line or
    benchmarks/jobs/own_hf_job.py's `own count: ...` line, as one dict (steps [first, last],
    tokens, seconds, tokens_per_s, all_tokens_per_s)."""
    for line in log.splitlines():
        if line.startswith("own:"):
            return json.loads(line[4:])
        if m := OWN_COUNT.match(line):
            g = m.groups()
            return {
                "steps": [int(g[4]), int(g[5])],
                "tokens": int(g[1]),
                "seconds": float(g[2]),
                "tokens_per_s": float(g[3]),
                "all_tokens_per_s": float(g[8]),
            }
    raise ValueError("the log has no own count")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("report")
    p.add_argument("log")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--measure", type=int, default=8)
    p.add_argument("--max-steps", type=int, default=60)
    p.add_argument("--half-width", type=float, default=3.0)
    p.add_argument("--label", default="")
    a = p.parse_args()
    lines = Path(a.report).read_text().splitlines()
    steps = [d for d in map(json.loads, filter(str.strip, lines)) if "s" in d and "tokens" in d]
    own = own_of(Path(a.log).read_text())
    pairs = [(float(s["s"]), float(s["tokens"])) for s in steps]
    rule = windows.Rule(a.warmup, a.measure, a.max_steps, a.half_width)
    chosen = next(
        (w for n in range(1, len(pairs) + 1) if (w := windows.decide(pairs[:n], rule))), None
    )
    timed = pairs[a.warmup : a.warmup + a.measure]
    median_rate = statistics.median(t / s for s, t in timed)
    row = {
        "label": a.label,
        "job_steps": len(pairs),
        "own_tokens_per_s": own["tokens_per_s"],
        "own_steps": own["steps"],
        "own_all_tokens_per_s": own["all_tokens_per_s"],
        "reported_over_same_steps": windows.rate(pairs[own["steps"][0] - 1 : own["steps"][1]]),
        "trial": chosen.summary() if chosen else None,
        "trial_vs_own": chosen.tokens_per_s / own["tokens_per_s"] if chosen else None,
        "old_median_rate": median_rate,
        "old_vs_own": median_rate / own["tokens_per_s"],
        "said": windows.said(chosen, rule) if chosen else "never settled",
    }
    print(json.dumps(row))


if __name__ == "__main__":
    main()
