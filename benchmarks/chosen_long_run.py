"""Issue 35: the chosen configuration of a command study run as a long job, its own count against
the study.

Reads the study's best.yaml (the chosen trial and its figure: the confirmed median), takes the
command that trial ran (runs/NNNN/spec.json: argv, env and folder as rendered), sets its step limit
to --steps, asks the job for its own count after --after steps (examples/hf_trainer/train.py
--own_count_after), runs it with autotune's callback reporting every step but never stopping it, and
prints one JSON line: the job's own tokens/s, the study's figure, their ratio; the report file and
the log are left in --out for job_truth.py. --trial N runs trial N's command instead (issue 51: the
baseline, trial 0, as its expert would run it), its figure the trial's own measured one. The job's
own count is either train.py's `own:` line or benchmarks/jobs/own_hf_job.py's `own count:` line.

    python benchmarks/chosen_long_run.py trials/STUDY --steps 200 --after 10 --out DIR [--trial 0]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

import yaml
from job_truth import own_of


def command_of(
    study: Path, trial: int, steps: int, after: int
) -> tuple[list[str], dict[str, str], str]:
    rendered = json.loads((study / "runs" / f"{trial:04d}" / "spec.json").read_text())["params"][
        "rendered"
    ]
    argv = list(rendered["argv"])
    argv[argv.index("--max_steps") + 1] = str(steps)
    return [*argv, "--own_count_after", str(after)], rendered["env"], rendered["cwd"]


def measured(study: Path, trial: int) -> tuple[float | None, dict | None]:
    """Trial N's figure and knobs as the study recorded them (None where it measured nothing)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = optuna.load_study(study_name=None, storage=f"sqlite:///{study / 'study.db'}")
    attrs = next((t.user_attrs for t in s.trials if t.number == trial), {})
    return (attrs.get("metrics") or {}).get("tokens_per_s_per_gpu"), attrs.get("knobs")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("study", type=Path)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--after", type=int, default=10)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--trial", type=int, default=None, help="this trial's command, not the chosen")
    a = p.parse_args()
    best = yaml.safe_load((a.study / "best.yaml").read_text())
    trial, figure, knobs = best["chosen"]["trial"], best["metrics"]["tokens_per_s_per_gpu"], None
    if a.trial is not None and a.trial != trial:
        trial, figure, knobs = a.trial, *measured(a.study, a.trial)
    argv, env, cwd = command_of(a.study, trial, a.steps, a.after)
    a.out.mkdir(parents=True, exist_ok=True)
    report, log = a.out / "long-run-steps.jsonl", a.out / "long-run.log"
    report.unlink(missing_ok=True)
    extra = {"AUTOTUNE_REPORT": str(report), "AUTOTUNE_STEPS": "0,1000000"}
    with log.open("w") as f:
        subprocess.run(
            argv, cwd=cwd, env={**os.environ, **env, **extra}, stdout=f, stderr=subprocess.STDOUT
        )
    own = own_of(log.read_text())
    row = {"trial": trial, "knobs": knobs or best["knobs"], "study_figure": figure, "own": own}
    row["study_vs_own"] = figure / own["tokens_per_s"] if figure else None
    print(json.dumps(row))


if __name__ == "__main__":
    main()
