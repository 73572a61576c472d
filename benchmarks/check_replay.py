"""Issues 16 and 62: the error rates of `autotune check`'s gate, replayed as check runs it.

    python3 benchmarks/check_replay.py --draws 10000   # the table in docs/check.md (CPU)
    python3 benchmarks/check_replay.py --draws 200 --check 5 --slow 1.5 3 \\
        --pool 2026-11-29=benchmarks/results/2026-11-29-h200-gpt2-small-check/history.jsonl

Each draw is one check (regress._settle): a baseline of --baseline processes, the tolerance
check would take (autotune.check.stats.default_tolerance, unless --tolerance), then decide after
the first --check repeats and again after each extra repeat while inconclusive, up to
--max-repeats (default regress.max_repeats_of: 3 x --check, at most 20), look k of at most n
(stats.look_level); a baseline that check --reset-baseline would refuse to record
(check/record.py: spread past what the default tolerance can use) is counted as refused, never
checked. Without --pool, every process's tokens/s is lognormal around its side's level:
log tokens/s = log(level) + N(0, noise), the check's level 1 - slowdown; the rows (SCENARIOS)
cover 0.6%, 5% and 10% noise on both sides, a tight baseline against a check scattering 5% or 20%
(issue 62) and the reverse, each unchanged and slowed. The same draws are decided again by two
other rules: Welch's interval at one look's level every time ("Welch, no correction for looks")
and the pooled rule before issue 62 ("pooled 95%, before"). Prints a markdown table of each
outcome's share of the draws, the mean repeats of a check, and the wrong calls with a 95%
Clopper-Pearson interval (scipy.stats.binomtest): on unchanged code a regression or faster; on a
slowdown past the draw's tolerance a pass or faster; within it a regression or faster.

With --pool, the processes are recorded per-process tokens/s instead (each NAME=FILE: every
`check_samples` of the history files, one configuration, one lease): within a pool the baseline
and check are distinct processes of one sitting (the check's extra repeats drawn again from the
rest where the pool runs short); across pools the baseline from the first, the check from another.
Printed as issue 16's table: false alarms (unchanged but regression) and misses (slowed by each
--slow percent but not regression)."""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from autotune import intervals  # noqa: E402
from autotune.check.regress import max_repeats_of  # noqa: E402
from autotune.check.stats import decide, default_tolerance  # noqa: E402

try:  # what check --reset-baseline refuses to record: a baseline spread past what the gate can use
    from autotune.check.record import spread_refusal  # noqa: E402
except ImportError:  # a tree before issue 62's item 1
    spread_refusal = None

# a rule: (baseline, check, tolerance_pct, look) -> status
Rule = Callable[[list[float], list[float], float, tuple[int, int]], str]


def gate_rule(base: list[float], check: list[float], tol: float, look: tuple[int, int]) -> str:
    """The gate: stats.decide at this look's level."""
    return decide(base, check, tol, look=look).status


def uncorrected_rule(
    base: list[float], check: list[float], tol: float, look: tuple[int, int]
) -> str:
    """Welch's interval at one look's level at every look: no correction for deciding again."""
    return decide(base, check, tol).status


def pooled_rule(base: list[float], check: list[float], tol: float, look: tuple[int, int]) -> str:
    """The rule before issue 62 (stats.decide at 0b0b91f): the ratio of medians x exp(+-t s
    sqrt(1/n_c + 1/n_b)), s the pooled spread of both sides' log samples, Student's 97.5% quantile
    at n_c + n_b - 2 degrees of freedom, at every look; a regression only below the floor."""
    from scipy.special import stdtrit

    ratio, df = statistics.median(check) / statistics.median(base), len(check) + len(base) - 2
    if df < 1:
        return "inconclusive"
    ss = sum(float(((np.log(g) - np.log(g).mean()) ** 2).sum()) for g in (check, base))
    half = (
        float(stdtrit(df, 0.975)) * math.sqrt(ss / df) * math.sqrt(1 / len(check) + 1 / len(base))
    )
    lo, hi, floor = ratio * math.exp(-half), ratio * math.exp(half), 1 - tol / 100
    if hi < floor:
        return "regression"
    if lo <= floor or intervals.unbounded(ratio, (lo, hi), len(check) + len(base)):
        return "inconclusive"
    return "faster" if lo > 1 and ratio > 1 + tol / 100 else "pass"


def gate(
    base: list[float],
    check: Sequence[float],
    tolerance_pct: float | None,
    planned: tuple[int, int],
    rule: Rule = gate_rule,
) -> tuple[str, int, float]:
    """One check as regress._settle runs it: decide after planned[0] repeats, then after each extra
    one while inconclusive, up to planned[1]; "refused" (no check at all) for a baseline that check
    --reset-baseline would not record (record.spread_refusal). Returns the status, the repeats it
    took and the tolerance."""
    first, cap = planned
    tol = default_tolerance(base)[0] if tolerance_pct is None else tolerance_pct
    # recorded as the docs' CI job does, `check --reset-baseline` without --tolerance
    if spread_refusal is not None and spread_refusal(base, None, "baseline's"):
        return "refused", 0, tol
    for n in range(first, cap + 1):
        status = rule(base, list(check[:n]), tol, (n - first + 1, cap - first + 1))
        if status != "inconclusive":
            return status, n, tol
    return "inconclusive", cap, tol


def rate(hits: int, n: int) -> str:
    from scipy.stats import binomtest

    ci = binomtest(hits, n).proportion_ci(0.95)
    return f"{hits}/{n} = {100 * hits / n:.2f}% (95% {100 * ci.low:.2f}-{100 * ci.high:.2f}%)"


def wrong(status: str, slow_pct: float, tol: float) -> bool:
    """A wrong call: faster on code no faster; a pass past the tolerance; a regression within it."""
    past = slow_pct > tol
    return (
        status == "faster" or (status == "pass" and past) or (status == "regression" and not past)
    )


class Scenario(NamedTuple):
    """Rows of the replay: both sides' process noise (the standard deviation of log tokens/s, in
    percent), the check's slowdowns, the rules deciding, the tolerance (None: check's default
    from the baseline's noise, unless --tolerance) and the baseline's processes (None:
    --baseline)."""

    baseline_pct: float
    check_pct: float
    slows: tuple[float, ...]
    rules: tuple[str, ...] = ("gate",)
    tolerance_pct: float | None = None
    baseline_n: int | None = None


SCENARIOS = [
    Scenario(0.6, 0.6, (0.0, 3.0, 10.0), ("gate", "pooled")),
    Scenario(0.6, 0.6, (0.0, 3.0), tolerance_pct=2.0),
    Scenario(0.6, 0.6, (0.0, 3.0), baseline_n=10),
    Scenario(5.0, 5.0, (0.0, 3.0, 10.0), ("gate", "uncorrected", "pooled")),
    Scenario(5.0, 5.0, (0.0, 10.0), baseline_n=10),
    Scenario(10.0, 10.0, (0.0, 10.0, 50.0)),
    Scenario(0.6, 5.0, (0.0, 3.0, 10.0), ("gate", "uncorrected", "pooled")),
    Scenario(0.6, 20.0, (0.0, 10.0, 50.0), ("gate", "pooled")),
    Scenario(5.0, 0.6, (0.0, 3.0)),
]
RULES: dict[str, tuple[str, Rule]] = {
    "gate": ("the gate (Welch, looks corrected)", gate_rule),
    "uncorrected": ("Welch, no correction for looks", uncorrected_rule),
    "pooled": ("pooled 95%, before", pooled_rule),
}


def replay_row(
    bases: list[list[float]],
    checks: list[list[float]],
    slow_pct: float,
    tolerance_pct: float | None,
    planned: tuple[int, int],
    rule: Rule,
) -> tuple[Counter[str], int, list[float], int]:
    """Each draw's check through `gate`, its processes slowed by slow_pct: the statuses counted,
    the repeats taken in all, each draw's tolerance, and the wrong calls."""
    seen, repeats, tols, bad = Counter[str](), 0, [], 0
    for base, check in zip(bases, checks):
        slowed = [(1 - slow_pct / 100) * x for x in check]
        status, n, tol = gate(base, slowed, tolerance_pct, planned, rule)
        seen[status] += 1
        repeats, bad = repeats + n, bad + wrong(status, slow_pct, tol)
        tols.append(tol)
    return seen, repeats, tols, bad


def lognormal_table(a: argparse.Namespace) -> None:
    """The replay of lognormal noise: one row per scenario, slowdown and rule."""
    first = a.check[0]
    cap = max_repeats_of(first, a.max_repeats)
    print(f"{a.draws} draws a row; check --repeats {first} --max-repeats {cap}; seed {a.seed}\n")
    print(
        "| baseline noise (processes) | check noise | slowed | rule | tolerance (median) | pass | "
        "faster | regression | inconclusive | baseline refused | check's repeats (mean) | "
        "wrong calls |"
    )
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for i, row in enumerate(SCENARIOS):
        rng = np.random.default_rng([a.seed, i])  # the same draws for each slowdown and rule
        nb = row.baseline_n or a.baseline
        bases = np.exp(rng.normal(0.0, row.baseline_pct / 100, (a.draws, nb))).tolist()
        checks = np.exp(rng.normal(0.0, row.check_pct / 100, (a.draws, cap))).tolist()
        given = row.tolerance_pct if a.tolerance is None else a.tolerance
        for slow in row.slows:
            for name in row.rules:
                label, rule = RULES[name]
                seen, repeats, tols, bad = replay_row(
                    bases, checks, slow, given, (first, cap), rule
                )
                shares = " | ".join(
                    f"{100 * seen[s] / a.draws:.2f}%"
                    for s in ("pass", "faster", "regression", "inconclusive", "refused")
                )
                checked = max(1, a.draws - seen["refused"])
                tol = (
                    f"{given:g}% (given)"
                    if given is not None
                    else f"{statistics.median(tols):.3g}%"
                )
                print(
                    f"| {row.baseline_pct:g}% ({nb}) | {row.check_pct:g}% | {slow:g}% | {label} | "
                    f"{tol} | "
                    f"{shares} | {repeats / checked:.1f} | {rate(bad, a.draws)} |"
                )


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


def draw_pool(
    base_pool: list[float], check_pool: list[float] | None, nb: int, cap: int, rng: random.Random
) -> tuple[list[float], list[float]]:
    """A baseline of nb distinct processes and a check of cap: distinct from the baseline (within
    one pool) and from each other while the pool lasts, then drawn again from the rest."""
    if check_pool is None:
        picked = rng.sample(base_pool, len(base_pool))
        base, rest = picked[:nb], picked[nb:]
    else:
        base, rest = rng.sample(base_pool, nb), rng.sample(check_pool, len(check_pool))
    return base, rest[:cap] + [rng.choice(rest) for _ in range(cap - len(rest))]


def pool_rows(a: argparse.Namespace, pools: dict[str, list[float]]) -> None:
    """Issue 16's table over recorded samples: false alarms and misses at each slowdown."""
    rng = random.Random(a.seed)
    print(
        "| baseline from | check from | baseline / check processes | default tolerance (median) | "
        "unchanged: false alarms | "
        + " | ".join(f"slowed {pct:g}%: misses" for pct in a.slow)
        + " |"
    )
    print("|---|---|---|---:|---|" + "---|" * len(a.slow))
    names = list(pools)
    for base_name, check_name in [(n, None) for n in names] + [(names[0], n) for n in names[1:]]:
        base_pool, check_pool = pools[base_name], pools[check_name] if check_name else None
        for nc in a.check:
            if check_pool is None and a.baseline + nc > len(base_pool):
                continue
            cap = max_repeats_of(nc, a.max_repeats)
            alarms, misses, tols = 0, dict.fromkeys(a.slow, 0), []
            for _ in range(a.draws):
                base, check = draw_pool(base_pool, check_pool, a.baseline, cap, rng)
                status, _, tol = gate(base, check, a.tolerance, (nc, cap))
                alarms, tols = alarms + (status == "regression"), [*tols, tol]
                for pct in a.slow:
                    slowed = [(1 - pct / 100) * x for x in check]
                    misses[pct] += gate(base, slowed, a.tolerance, (nc, cap))[0] != "regression"
            within = (
                f"{check_name} (another lease)" if check_name else f"{base_name} (same sitting)"
            )
            print(
                f"| {base_name} ({len(base_pool)} samples, median "
                f"{statistics.median(base_pool):,.0f}) | {within} | {a.baseline} / {nc} | "
                f"{statistics.median(tols):g}% | "
                f"{rate(alarms, a.draws)} | "
                + " | ".join(rate(misses[pct], a.draws) for pct in a.slow)
                + " |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", nargs="+", action="append", metavar="NAME=FILE [FILE]")
    ap.add_argument(
        "--baseline", type=int, default=5, help="processes in the baseline (check --reset-baseline)"
    )
    ap.add_argument(
        "--check", type=int, nargs="+", default=[5], help="a check's first repeats (--repeats)"
    )
    ap.add_argument("--max-repeats", type=int, default=None, help="as check's (default: its own)")
    ap.add_argument("--tolerance", type=float, default=None, help="as check's (default: derived)")
    ap.add_argument("--slow", type=float, nargs="+", default=[3.0], help="--pool: slowdowns, %%")
    ap.add_argument("--draws", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.pool:
        pool_rows(a, dict(load_pool(p) for p in a.pool))
    else:
        lognormal_table(a)


if __name__ == "__main__":
    main()
