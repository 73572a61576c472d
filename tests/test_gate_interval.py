"""Issue 62, item 3: check's interval respects unequal noise and its repeated looks. A baseline
recorded on a quiet night no longer narrows a scattering check's interval (Welch's interval,
stats.welch_interval, pinned against scipy); deciding again after each extra repeat spends the
error once (stats.look_level); and a short replay of the gate as check runs it
(benchmarks/check_replay.py: first --repeats, then one more at a time while inconclusive) keeps
the wrong calls on unchanged code within 1% and catches a 3% slowdown at 0.6% noise. A real check
of a job whose speed a file sets: the night the rule before failed is inconclusive."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import yaml
from scipy import stats as sps
from test_regress_gate import _check, _copy, project  # noqa: F401  (the command job's study)

from autotune.check import stats
from autotune.check.stats import decide, look_level, welch_interval

ROOT = Path(__file__).resolve().parents[1]


def _load_replay() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_replay", ROOT / "benchmarks/check_replay.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its NamedTuple's annotations resolve through it
    spec.loader.exec_module(module)
    return module


replay = _load_replay()

TIGHT = [100.0, 100.4, 99.7, 100.2, 99.9]  # a baseline recorded on a quiet night: 0.3% spread
SCATTERED = [93.0, 99.0, 88.0, 97.0, 90.0]  # unchanged code checked on a noisy one: 5%


# --- the interval


def test_gate_interval_a_tight_baseline_does_not_narrow_a_scattered_check() -> None:
    """The issue's night: the pooled spread of both sides (the rule before) put the interval below
    0.98, a regression (exit 1) of unchanged code; the check's own spread leaves it inconclusive,
    at one look and at the first of check's default 11."""
    assert replay.pooled_rule(TIGHT, SCATTERED, 2.0, (1, 1)) == "regression"
    assert stats.default_tolerance(TIGHT)[0] == 2.0
    d = decide(TIGHT, SCATTERED, 2.0)
    assert d.status == "inconclusive" and d.decided_ci[0] < 0.98 and d.decided_ci[1] > 1
    assert d.reason == (
        "the 98% interval 0.859 to 1.01 reaches both below 0.98 and above it: the repeats scatter"
    )
    first = decide(TIGHT, SCATTERED, 2.0, look=(1, 11))
    assert first.status == "inconclusive" and first.reason.startswith(
        "the 99% interval 0.843 to 1.03 (look 1 of at most 11) reaches both below 0.98"
    )


def test_gate_interval_welch_values() -> None:
    """Pinned: the 95% interval (what the views print as "95% CI") and the deciding one."""
    d = decide(TIGHT, SCATTERED, 2.0, look=(2, 11))
    assert d.ci == pytest.approx((0.877286, 0.991653), abs=1e-6)
    assert d.level == pytest.approx(0.999) and d.decided_ci == pytest.approx(
        welch_interval(TIGHT, SCATTERED, 0.999)
    )
    assert d.ci == welch_interval(TIGHT, SCATTERED, stats.SHOWN_LEVEL)


@pytest.mark.parametrize("level", [0.95, 0.99, 0.999])
def test_gate_interval_welch_matches_scipy(level: float) -> None:
    """Welch's t on log tokens/s as scipy.stats.ttest_ind(equal_var=False) has it, for sides of
    unequal size and noise; a baseline of one process takes the check's spread (equal_var=True)."""
    rng = np.random.default_rng(62)
    for nb, nc, sb, sc in [(5, 5, 0.006, 0.05), (3, 7, 0.05, 0.006), (10, 4, 0.02, 0.02)]:
        base = np.exp(rng.normal(0.0, sb, nb))
        check = np.exp(rng.normal(-0.03, sc, nc))
        want = sps.ttest_ind(np.log(check), np.log(base), equal_var=False)
        lo, hi = want.confidence_interval(level)
        assert welch_interval(list(base), list(check), level) == pytest.approx(
            (math.exp(lo), math.exp(hi)), rel=1e-9
        )
    one, check = [100.0], [97.0, 98.5, 96.0, 97.7]
    pooled = sps.ttest_ind(np.log(check), np.log(one), equal_var=True).confidence_interval(level)
    assert welch_interval(one, check, level) == pytest.approx(
        (math.exp(pooled.low), math.exp(pooled.high)), rel=1e-9
    )
    with pytest.raises(ValueError, match="1 check process: its spread is unknown"):
        welch_interval(TIGHT, [99.0], level)


def test_gate_interval_one_baseline_process_says_so() -> None:
    """Against the search's one measurement the check's spread stands for the baseline's."""
    d = decide([100.0], [97.0, 97.2, 96.8, 97.1, 96.9], 2.0, look=(1, 11))
    assert d.status == "regression"
    assert "(look 1 of at most 11; one baseline process: the check's spread taken for it)" in (
        d.reason
    )


def test_gate_interval_a_noisy_baseline_asks_for_more_baseline_processes() -> None:
    """Where the baseline's few processes are most of the interval's variance, more check repeats
    barely narrow it: what would settle it is a baseline of more processes."""
    d = decide([100.0, 112.0, 90.0, 105.0, 95.0], [100.1, 99.9, 100.0, 100.2, 99.8], 2.0)
    assert d.status == "inconclusive" and d.reason.endswith("the repeats scatter")
    assert d.settle == stats.MORE_BASELINE
    assert decide(TIGHT, SCATTERED, 2.0).settle == stats.QUIETER == "on a quieter machine"


def test_gate_interval_the_looks_spend_the_error_once() -> None:
    """However many looks check plans, their levels' errors add up to ALPHA: half at the first,
    the rest shared by the extra ones; one look alone has all of it."""
    for most in (1, 2, 11, 996):
        spent = sum(1 - look_level((k, most)) for k in range(1, most + 1))
        assert spent == pytest.approx(stats.ALPHA)
    assert look_level((1, 1)) == pytest.approx(0.98)
    assert look_level((1, 11)) == pytest.approx(0.99)
    assert look_level((11, 11)) == pytest.approx(0.999)
    with pytest.raises(ValueError, match=r"^look 12 of at most 11: a look is 1 to the most"):
        look_level((12, 11))


# --- a short replay of the gate as check runs it (benchmarks/check_replay.py)

DRAWS = 2000
PLAN = (5, 15)  # check's defaults: --repeats 5, then up to 15


def _draws(baseline_pct: float, check_pct: float, seed: int) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    bases = np.exp(rng.normal(0.0, baseline_pct / 100, (DRAWS, 5))).tolist()
    checks = np.exp(rng.normal(0.0, check_pct / 100, (DRAWS, PLAN[1]))).tolist()
    return bases, checks


@pytest.mark.parametrize("noise", [(0.6, 0.6), (5.0, 5.0), (0.6, 5.0)])
def test_gate_interval_replay_unchanged_code_is_rarely_called_wrong(
    noise: tuple[float, float],
) -> None:
    """Unchanged code, baseline of 5, check's default plan and tolerance: regression at most 1%
    of draws, faster (which --update records) at most 1%, at 0.6% and 5% noise and for a tight
    baseline against a scattering check (mostly inconclusive there: exit 5, never a wrong call)."""
    bases, checks = _draws(*noise, seed=62)
    seen, *_ = replay.replay_row(bases, checks, 0.0, None, PLAN, replay.gate_rule)
    assert seen["regression"] <= 0.01 * DRAWS and seen["faster"] <= 0.01 * DRAWS, seen
    if noise[0] == noise[1]:
        assert seen["pass"] >= 0.8 * DRAWS, seen


def test_gate_interval_replay_the_rule_before_and_no_correction_are_wrong_too_often() -> None:
    """The same draws of a tight baseline against a scattering check: the pooled rule before,
    and Welch's interval decided at one look's level after every repeat, call unchanged code
    slower or faster in more than 2% of draws (about 5% each in the replay)."""
    bases, checks = _draws(0.6, 5.0, seed=62)
    for rule in (replay.pooled_rule, replay.uncorrected_rule):
        seen, *_ = replay.replay_row(bases, checks, 0.0, None, PLAN, rule)
        assert seen["regression"] + seen["faster"] > 0.02 * DRAWS, (rule, seen)


def test_gate_interval_replay_catches_3pct_at_0_6pct_noise_from_5_and_5() -> None:
    """A 3% slowdown, 0.6% noise on both sides, a baseline of 5 and the check's first 5: a
    regression at its first look in at least 99% of draws at a 2% tolerance. At the default
    tolerance, derived from the baseline's spread (which 5 processes put past 2.5% in about a
    tenth of draws, and a 3% slowdown then lies near it), a regression in at least 93%, the rest
    inconclusive: never a pass."""
    bases, checks = _draws(0.6, 0.6, seed=63)
    for tolerance, least, first_look in ((2.0, 0.99, True), (None, 0.93, False)):
        caught = passed = 0
        for base, check in zip(bases[:1000], checks[:1000]):
            status, n, _ = replay.gate(base, [0.97 * x for x in check], tolerance, PLAN)
            caught += status == "regression" and (n == 5 or not first_look)
            passed += status in ("pass", "faster")
        assert caught >= least * 1000 and passed == 0, (tolerance, caught)


# --- a real check: a command job whose steps are sleeps, slowed per process by plan.txt


@pytest.mark.slow
@pytest.mark.serial
def test_gate_interval_a_scattering_night_is_inconclusive_not_a_regression(
    project: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A baseline of 5 quiet processes; then a check whose processes run 10%, 15%, 5% slower, then
    12% and 6% faster (a noisy night of unchanged code). On its first three the pooled rule before
    called a regression (exit 1); now each look is inconclusive and, after the 5 processes
    --max-repeats allows, the check ends inconclusive (exit 5), never a regression."""
    best = _copy(project, tmp_path, "1")
    recorded = _check(best, "--reset-baseline", "--repeats", "5")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    base = yaml.safe_load(best.read_text())["check_baseline"]["tokens_per_s_samples"]
    (best.parents[2] / "plan.txt").write_text("1.111 1.176 1.053 0.893 0.943")
    proc = _check(best, "--repeats", "3", "--max-repeats", "5")
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert proc.stdout.startswith("inconclusive: ") and "the repeats scatter" in proc.stdout
    assert "(look 3 of at most 3)" in proc.stdout
    night = json.loads((best.parent / "history.jsonl").read_text().splitlines()[-1])
    first3 = night["check_samples"][:3]
    tolerance = night["tolerance_pct"]
    assert replay.pooled_rule(base, first3, tolerance, (1, 1)) == "regression", (base, first3)
    assert decide(base, first3, tolerance, look=(1, 3)).status == "inconclusive"
