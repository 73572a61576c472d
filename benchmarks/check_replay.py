"""Issue 16, part 3: the error rates of `autotune check`'s default decision, from recorded
per-process samples.

    python3 benchmarks/check_replay.py --draws 20000 --slow 1.5 2 2.5 3 \\
        --pool 2026-11-29=benchmarks/results/2026-11-29-h200-gpt2-small-check/history.jsonl \\
        --pool 2026-11-30=benchmarks/results/2026-11-30-h200-refactor/ab-new-history.jsonl \\
                         benchmarks/results/2026-11-30-h200-refactor/ab-old-history.jsonl

A pool is every per-process tokens/s a sitting recorded for one configuration (the `check_samples`
of each line of the history files given after NAME=, same configuration, same lease). Each draw
takes a baseline of --baseline processes and a check of --check processes, distinct samples, and
decides with autotune's own rules (autotune.check.regress.default_tolerance, then decide):
unchanged, and with every check sample slowed by each --slow percent (a multiplicative slowdown:
what AUTOTUNE_FAULT=slow:PCT injects, ideally).
Within a pool: both from the same sitting (what a check against a baseline recorded on that machine
meets); across pools: the baseline from the first, the check from another (a check on another lease:
machine-to-machine differences).
Prints a markdown table: false alarms (unchanged but regression) and misses (slowed but not
regression), each with its 95% Clopper-Pearson interval (scipy.stats.binomtest)."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from autotune.check.regress import decide, default_tolerance  # noqa: E402


def load_pool(spec: list[str]) -> tuple[str, list[float]]:
    """NAME=FILE [FILE ...] -> (NAME, every check_samples value of every line)."""
    name, _, first = spec[0].partition("=")
    files = [first, *spec[1:]] if first else spec[1:]
    samples = [
        x
        for f in files
        for line in Path(f).read_text().splitlines()
        if line.strip()
        for x in json.loads(line)["check_samples"]
    ]
    if not name or len(samples) < 2:
        raise SystemExit(f"--pool {' '.join(spec)}: need NAME=FILE and at least 2 samples")
    return name, samples


def rate(hits: int, n: int) -> str:
    from scipy.stats import binomtest

    ci = binomtest(hits, n).proportion_ci(0.95)
    return f"{hits}/{n} = {100 * hits / n:.2f}% (95% {100 * ci.low:.2f}-{100 * ci.high:.2f}%)"


def replay(
    base_pool: list[float],
    check_pool: list[float] | None,
    *,
    nb: int,
    nc: int,
    slow: list[float],
    draws: int,
    rng: random.Random,
) -> dict[str, object]:
    """False alarms and misses (at each slowdown) over `draws` draws (check_pool None: both from
    base_pool, disjoint)."""
    alarms, misses = 0, dict.fromkeys(slow, 0)
    tolerances = []
    for _ in range(draws):
        if check_pool is None:
            picked = rng.sample(base_pool, nb + nc)
            base, check = picked[:nb], picked[nb:]
        else:
            base, check = rng.sample(base_pool, nb), rng.sample(check_pool, nc)
        tol, _ = default_tolerance(base)
        tolerances.append(tol)
        alarms += decide(base, check, tol)[0] == "regression"
        for pct in slow:
            misses[pct] += (
                decide(base, [(1 - pct / 100) * x for x in check], tol)[0] != "regression"
            )
    return {
        "false_alarms": rate(alarms, draws),
        "misses": {pct: rate(m, draws) for pct, m in misses.items()},
        "tolerance_pct_median": statistics.median(tolerances),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", nargs="+", action="append", required=True, metavar="NAME=FILE [FILE]")
    ap.add_argument(
        "--baseline", type=int, default=5, help="processes in the baseline (check --reset-baseline)"
    )
    ap.add_argument(
        "--check", type=int, nargs="+", default=[3, 5], help="processes in a check (--repeats)"
    )
    ap.add_argument("--slow", type=float, nargs="+", default=[3.0], help="slowdowns in percent")
    ap.add_argument("--draws", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    pools = dict(load_pool(p) for p in a.pool)
    rng = random.Random(a.seed)
    print(
        "| baseline from | check from | baseline / check processes | default tolerance (median) | "
        "unchanged: false alarms | "
        + " | ".join(f"slowed {pct:g}%: misses" for pct in a.slow)
        + " |"
    )
    print("|---|---|---|---:|---|" + "---|" * len(a.slow))
    names = list(pools)
    pairs = [(n, None) for n in names] + [(names[0], n) for n in names[1:]]
    for base_name, check_name in pairs:
        base = pools[base_name]
        check = pools[check_name] if check_name else None
        for nc in a.check:
            if check is None and a.baseline + nc > len(base):
                continue
            r = replay(base, check, nb=a.baseline, nc=nc, slow=a.slow, draws=a.draws, rng=rng)
            within = (
                f"{check_name} (another lease)" if check_name else f"{base_name} (same sitting)"
            )
            print(
                (
                    f"| {base_name} ({len(base)} samples, median {statistics.median(base):,.0f}) "
                    f"| {within} | "
                    f"{a.baseline} / {nc} | {r['tolerance_pct_median']:g}% | {r['false_alarms']} | "
                )
                + " | ".join(r["misses"][pct] for pct in a.slow)
                + " |"
            )


if __name__ == "__main__":
    main()
