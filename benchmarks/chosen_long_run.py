"""Issue 35: the chosen configuration of a command study run as a long job, its own count against
the study.

Reads the study's best.yaml (the chosen trial and its figure: the confirmed median), takes the
command that trial ran (runs/NNNN/spec.json: argv, env and folder as rendered), sets its step limit
to --steps, asks the job for its own count after --after steps (examples/hf_trainer/train.py
--own_count_after), runs it with autotune's callback reporting every step but never stopping it, and
prints one JSON line: the job's own tokens/s, the study's figure, their ratio; the report file and
the log are left in --out for job_truth.py.

    python benchmarks/chosen_long_run.py trials/STUDY --steps 200 --after 10 --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

import yaml


def command_of(
    study: Path, trial: int, steps: int, after: int
) -> tuple[list[str], dict[str, str], str]:
    rendered = json.loads((study / "runs" / f"{trial:04d}" / "spec.json").read_text())["params"][
        "rendered"
    ]
    argv = list(rendered["argv"])
    argv[argv.index("--max_steps") + 1] = str(steps)
    return [*argv, "--own_count_after", str(after)], rendered["env"], rendered["cwd"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("study", type=Path)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--after", type=int, default=10)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    best = yaml.safe_load((a.study / "best.yaml").read_text())
    trial, figure = best["chosen"]["trial"], best["metrics"]["tokens_per_s_per_gpu"]
    argv, env, cwd = command_of(a.study, trial, a.steps, a.after)
    a.out.mkdir(parents=True, exist_ok=True)
    report, log = a.out / "long-run-steps.jsonl", a.out / "long-run.log"
    report.unlink(missing_ok=True)
    extra = {"AUTOTUNE_REPORT": str(report), "AUTOTUNE_STEPS": "0,1000000"}
    with log.open("w") as f:
        subprocess.run(
            argv, cwd=cwd, env={**os.environ, **env, **extra}, stdout=f, stderr=subprocess.STDOUT
        )
    own = next(
        json.loads(line[4:]) for line in log.read_text().splitlines() if line.startswith("own:")
    )
    row = {"trial": trial, "knobs": best["knobs"], "study_figure": figure, "own": own}
    row["study_vs_own"] = figure / own["tokens_per_s"]
    print(json.dumps(row))


if __name__ == "__main__":
    main()
