"""GPU-minutes a search spends to reach 99% of a recorded landscape's best: replayed through the
real loop.

python3 benchmarks/replay_costs.py [--seeds 50] [--budget 20] [--out DIR] [LANDSCAPE.json ...]

Each run is one search of `--budget` trials (the study's default patience: it may stop sooner) over
a recorded H200 landscape (search/replay.py: the real loop, each measurement a draw from the point's
recorded step times), and each launched trial costs what its point's trial cost on the GPU (the
landscape's cost_s: that trial's wall time; a point the recording predicted without a launch costs
the median of the launched points of its status). Per landscape: over the seeds, the median and 90th
percentile of the GPU-minutes spent until a point within 99% (and 97%) of the optimum was measured,
the share of searches that got there, and the median GPU-minutes and trials of a whole search.

It replays whatever autotune is on the path: run it again with PYTHONPATH at another checkout (a git
worktree of an older commit) to replay that code's loop on the same landscapes, as
docs/BENCHMARKS.md compares today's loop with the one before."""

from __future__ import annotations

import argparse
import inspect
import json
import random
import statistics
import warnings
from pathlib import Path
from typing import Any

from autotune.documents.record import Metric, TrialRecord
from autotune.search import replay as replay_module
from autotune.search.replay import Landscape

ROOT = Path(__file__).resolve().parents[1]


def _costs(landscape: Landscape) -> dict[str, float]:
    """The median recorded cost of each status (for the points recorded without a launch)."""
    by_status: dict[str, list[float]] = {}
    for p in landscape.points.values():
        if "cost_s" in p:
            by_status.setdefault(p["status"], []).append(p["cost_s"])
    every = [c for costs in by_status.values() for c in costs]
    return {**{s: statistics.median(c) for s, c in by_status.items()}, "": statistics.median(every)}


def _measure(landscape: Landscape, rng: random.Random, spent: list[float]) -> Any:
    """The replay's measurement, as search/replay.py's, with each launch's recorded cost appended
    to spent. Written out here, not imported, so that an older checkout's loop is replayed with the
    same costs."""
    fallback = _costs(landscape)

    def measure(
        bench: Any, knobs: dict[str, Any], run_dir: Path, *, number: int = 0, **_: Any
    ) -> TrialRecord:
        p = landscape.point(knobs)
        cost = p.get("cost_s", fallback.get(p["status"], fallback[""]))
        spent.append(cost)
        record = TrialRecord(number, knobs, p["status"], p.get("reason", ""), wall_s=cost)
        record.cause = p.get("cause")
        if p["status"] == "ok":
            steps = p["step_times_s"]
            drawn = statistics.median(rng.choice(steps) for _ in steps)
            record.metrics = {Metric.TOKENS_PER_GPU: landscape.tokens_per_step / drawn}
        return record

    return measure


def one_search(
    landscape: Landscape, seed: int, budget: int, patience: int | None = None
) -> tuple[list[float | None], list[float]]:
    """(true values, costs) of the trials one search launched, in order. patience: study.patience
    (None: the study's default), where the code replayed has it."""
    spent: list[float] = []
    replay_module._replayed_measure = lambda ls, rng: _measure(ls, rng, spent)
    kwargs = (
        {"patience": patience}
        if "patience" in inspect.signature(replay_module.replay).parameters
        else {}
    )
    values = replay_module.replay(landscape, None, seed, budget, root=ROOT, **kwargs)
    return values, spent


def minutes_to(values: list[float | None], costs: list[float], target: float) -> float | None:
    """GPU-minutes until the first point of true value >= target was measured (None: never)."""
    for i, v in enumerate(values):
        if v is not None and v >= target:
            return sum(costs[: i + 1]) / 60
    return None


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def row(landscape: Landscape, seeds: int, budget: int, patience: int | None) -> dict[str, Any]:
    runs = [one_search(landscape, seed, budget, patience) for seed in range(seeds)]
    out: dict[str, Any] = {
        "landscape": landscape.name,
        "points": len(landscape.points),
        "budget": budget,
    }
    for share in (0.99, 0.97):
        reached = [
            m for v, c in runs if (m := minutes_to(v, c, share * landscape.optimum)) is not None
        ]
        out[f"reached {share:.0%}"] = f"{len(reached)}/{seeds}"
        out[f"GPU-min to {share:.0%}, median"] = (
            round(statistics.median(reached), 2) if reached else None
        )
        out[f"GPU-min to {share:.0%}, p90"] = round(_quantile(reached, 0.9), 2) if reached else None
    out["search GPU-min, median"] = round(statistics.median(sum(c) / 60 for _, c in runs), 2)
    out["trials, median"] = statistics.median(len(v) for v, _ in runs)
    out["best found / optimum, median"] = round(
        statistics.median(max(x for x in v if x is not None) / landscape.optimum for v, _ in runs),
        4,
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "landscapes",
        nargs="*",
        default=sorted(str(p) for p in (ROOT / "benchmarks/landscapes").glob("*.json")),
    )
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--budget", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None, help="a folder for replay-costs.json and .md")
    ap.add_argument("--label", default="this tree", help="the code replayed, for the table")
    ap.add_argument(
        "--patience", type=int, default=None, help="study.patience (default: the study's)"
    )
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    rows = [
        {"code": a.label, **row(Landscape.load(p), a.seeds, a.budget, a.patience)}
        for p in a.landscapes
    ]
    lines = ["| " + " | ".join(rows[0]) + " |", "|---" * len(rows[0]) + "|"]
    lines += ["| " + " | ".join(str(v) for v in r.values()) + " |" for r in rows]
    print("\n".join(lines))
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        tag = a.label.replace(" ", "-")
        (a.out / f"replay-costs-{tag}.json").write_text(json.dumps(rows, indent=1))
        (a.out / f"replay-costs-{tag}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
