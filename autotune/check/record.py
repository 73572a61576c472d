"""What check records as a baseline (--reset-baseline; --update after a pass or faster), and what
it refuses to: a baseline the gate cannot use, its processes spread past what the tolerance allows
or measured beside other work (conditions.disturbances), is never recorded (BaselineRefused, exit
3): a noisy baseline would open the gate, a disturbed one lower its bar."""

from __future__ import annotations

import datetime as dt
import math
import statistics
from pathlib import Path
from typing import Any

from autotune.check import conditions
from autotune.check.bench import load_best
from autotune.check.repeats import (
    OnRepeat,
    Repeater,
    Repeats,
    interrupted,
    interruption,
    unmeasured,
)
from autotune.check.stats import MAX_TOLERANCE_PCT, NOISE_MULTIPLE
from autotune.documents.best_file import Best, record_check_baseline
from autotune.errors import BaselineRefused

QUIET = "record it again on a quiet machine"


def spread_pct(samples: list[float]) -> float:
    """The process-to-process spread, in percent: the standard deviation of log tokens/s, as
    stats.default_tolerance reads it (0 with one sample: unknown, never refused)."""
    return 100 * statistics.stdev(math.log(x) for x in samples) if len(samples) > 1 else 0.0


def usable_spread_pct(tolerance_pct: float | None) -> float:
    """The largest spread of a baseline that a gate of this tolerance can use (None: the default
    tolerance, at most stats.MAX_TOLERANCE_PCT): NOISE_MULTIPLE spreads of log tokens/s between no
    change and the floor 1 - tolerance, the rule the default tolerance follows (11.9% at 30%);
    unbounded at 100%."""
    tol = MAX_TOLERANCE_PCT if tolerance_pct is None else tolerance_pct
    return math.inf if tol >= 100 else -100 * math.log1p(-tol / 100) / NOISE_MULTIPLE


def spread_refusal(samples: list[float], tolerance_pct: float | None, whose: str) -> str:
    """Why these samples cannot be recorded as the baseline ("" when they can): their spread is
    past usable_spread_pct. whose: "baseline's" or "check's"."""
    spread, most = spread_pct(samples), usable_spread_pct(tolerance_pct)
    if spread <= most:
        return ""
    gate = (
        f"a gate at --tolerance {tolerance_pct:g}%"
        if tolerance_pct is not None
        else f"the default tolerance (at most {MAX_TOLERANCE_PCT:g}%)"
    )
    return (
        f"the {whose} processes spread {spread:.1f}%: {QUIET} (nothing recorded: {gate} can use a "
        f"spread of at most {most:.1f}%)"
    )


def reset_baseline(
    best_path: Path,
    *,
    model_yaml: Path | None = None,
    repeats: int = 5,
    tolerance_pct: float | None = None,
    max_load: float = conditions.HOST_LOAD_LIMIT,
    on_repeat: OnRepeat | None = None,
) -> tuple[list[float], list[str]]:
    """Measure and record the samples as best.yaml's check baseline; compare nothing. Returns
    samples, failures.

    Refused, nothing recorded (BaselineRefused, exit 3), as check itself judges the machine: when
    the repeats were disturbed (another process on the GPU; with max_load above 0, the host's load
    per core past it or a repeat's processes waiting for a CPU past
    conditions.CPU_WAIT_LIMIT_PCT: no repeat is started after that), or when the samples spread
    more than a gate at tolerance_pct (None: the default tolerance) can use. UnmeasuredError when
    every repeat failed; CheckInterrupted on Ctrl-C or SIGTERM."""
    best = load_best(best_path)
    run, m = Repeater.of(best_path, best, model_yaml), Repeats()
    try:
        found = _measured(run, m, repeats, max_load, on_repeat)
    except BaseException as err:
        if (by := interruption(err)) is None:
            raise
        outcome = f"nothing recorded ({best_path} is as it was)"
        raise interrupted(by, m, repeats, "while recording the baseline", outcome) from err
    if found:
        raise BaselineRefused(
            f"the baseline was not recorded: measured beside other work ({'; '.join(found)}); "
            f"{QUIET} (--max-load 0 leaves the host's load unjudged)"
        )
    if not m.samples:
        raise unmeasured(m)
    if why := spread_refusal(m.samples, tolerance_pct, "baseline's"):
        raise BaselineRefused(why)
    now = dt.datetime.now(dt.timezone.utc).isoformat()
    record_check_baseline(
        best_path, best.doc, m.samples, now, m.fingerprint, tpots(m.details), reset=True
    )
    return m.samples, m.failures


def _measured(
    run: Repeater, m: Repeats, repeats: int, max_load: float, on_repeat: OnRepeat | None
) -> list[str]:
    """The repeats into m, the conditions sampled before each and after the last, until one is
    disturbed (the rest would be refused too): what disturbed them (empty: nothing)."""
    for i in range(repeats):
        m.conditions.append(run.sample())
        if found := m.disturbed(max_load, ended=False):
            return found
        run.one(m, i, (repeats, repeats), on_repeat)
    m.conditions.append(run.sample())
    return m.disturbed(max_load)


def update(
    best_path: Path, best: Best, m: Repeats, checked_at: str, tolerance_pct: float | None
) -> str:
    """--update after a pass or faster: the check's samples recorded as the new baseline, unless
    they spread more than the gate can use; why not ("" when recorded)."""
    why = spread_refusal(m.samples, tolerance_pct, "check's")
    if not why:
        record_check_baseline(
            best_path, best.doc, m.samples, checked_at, m.fingerprint, tpots(m.details)
        )
    return why


def tpots(details: list[dict[str, Any]]) -> list[float]:
    """The repeats' median times per output token (generate), for the baseline."""
    return [d["tpot_ms_median"] for d in details if d.get("tpot_ms_median")]
