"""Which sampler finds the best configuration in fewest trials: recorded landscapes replayed, no GPU
needed.

    python3 benchmarks/replay_samplers.py [--seeds 100] [--out benchmarks/results/DATE-replay]
    [LANDSCAPE.json ...]

Every sampler runs autotune's own search loop (search/replay.py) over each landscape once per seed,
with the noise of the recorded step times; the budget is the whole space, so every run reaches the
optimum and the trials it took are defined. Prints and writes (replay.md, replay.csv) the trials to
reach 97% and 99% of the optimum: median and 90th percentile over the seeds.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import statistics
import warnings
from collections.abc import Callable
from pathlib import Path

import optuna

from autotune.search.replay import Landscape, replay, trials_to

SAMPLERS: dict[str, Callable[[int, int], optuna.samplers.BaseSampler | None]] = {
    "random": lambda seed, budget: optuna.samplers.RandomSampler(seed=seed),
    "tpe (Optuna's defaults)": lambda seed, budget: optuna.samplers.TPESampler(seed=seed),
    "tpe multivariate, startup 10": lambda seed, budget: optuna.samplers.TPESampler(
        seed=seed, multivariate=True, n_startup_trials=10
    ),
    "tpe multivariate, startup 5": lambda seed, budget: optuna.samplers.TPESampler(
        seed=seed, multivariate=True, n_startup_trials=5
    ),
    "tpe multivariate, startup 3": lambda seed, budget: optuna.samplers.TPESampler(
        seed=seed, multivariate=True, n_startup_trials=3
    ),
    "tpe multivariate group, startup 5": lambda seed, budget: optuna.samplers.TPESampler(
        seed=seed, multivariate=True, group=True, n_startup_trials=5
    ),
    "gp, startup 5": lambda seed, budget: optuna.samplers.GPSampler(seed=seed, n_startup_trials=5),
    "gp, startup 10": lambda seed, budget: optuna.samplers.GPSampler(
        seed=seed, n_startup_trials=10
    ),
    # search/sampler.py make_sampler, as a study gets it
    "autotune default": lambda seed, budget: None,
}


def _quantile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if q < 1 else ordered[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "landscapes", nargs="*", default=["benchmarks/landscapes/gpt2-small-h200.json"]
    )
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--out", default=f"benchmarks/results/{dt.date.today()}-replay")
    parser.add_argument(
        "--samplers", nargs="*", default=list(SAMPLERS), help="a subset of the rows, by name"
    )
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    rows = []
    for path in args.landscapes:
        landscape = Landscape.load(path)
        budget = len(landscape.points)
        for name, factory in ((n, f) for n, f in SAMPLERS.items() if n in args.samplers):
            runs = [
                replay(landscape, factory(seed, budget), seed, budget) for seed in range(args.seeds)
            ]
            row = {
                "landscape": landscape.name,
                "points": budget,
                "sampler": name,
                "seeds": args.seeds,
            }
            for share in (0.97, 0.99):
                taken = [trials_to(r, share * landscape.optimum) or budget + 1 for r in runs]
                row[f"median to {share:.0%}"] = statistics.median(taken)
                row[f"p90 to {share:.0%}"] = _quantile(taken, 0.9)
            # launched trials that failed (the landscape's invalid_config/oom points): one per rule
            # at best, the rest predicted and never launched
            row["failures launched (max)"] = max(sum(v is None for v in r) for r in runs)
            rows.append(row)
            print(" | ".join(str(v) for v in row.values()), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "replay.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| " + " | ".join(rows[0]) + " |", "|---" * len(rows[0]) + "|"]
    lines += ["| " + " | ".join(str(v) for v in r.values()) + " |" for r in rows]
    (out / "replay.md").write_text("\n".join(lines) + "\n")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
