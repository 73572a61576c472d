"""Issue 49: `autotune check` fails closed. decide passes only on evidence (each branch, its words
pinned), inconclusive has exit 5, more repeats are measured while it is inconclusive
(--max-repeats), the generate gate and JUnit follow (a disturbed check: test_regress.py). Real
checks of a command job on the CPU whose steps are sleeps, slowed per process by a plan file: 1x,
8x, 30x, or a failure."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from conftest import run_cli

from autotune import tasks
from autotune.check import junit, regress, views
from autotune.check.stats import decide
from autotune.check.verdict import Verdict
from autotune.errors import ConfigError, ExitCode

BASE = [100.0, 101.0, 99.0]
# the night: three repeats 1x, 8x and 30x slower than the baseline, passed with exit 0
SCATTERED = [100.0, 100.0 / 8, 100.0 / 30]

# --- decide: each branch, its reason and what would settle it


def test_regress_gate_decide_scattered_repeats_are_inconclusive_never_pass() -> None:
    d = decide(BASE, SCATTERED, 2.0)
    assert d.status == "inconclusive" and d.ratio == pytest.approx(0.125)
    assert d.reason == (
        "the 98% interval 0.000163 to 159 reaches both below 0.98 and above it: the repeats scatter"
    )
    assert d.settle == "on a quieter machine"
    # at any tolerance short of 100%: never a pass, never a regression
    assert {decide(BASE, SCATTERED, tol).status for tol in (2, 5, 20, 50, 90)} == {"inconclusive"}


def test_regress_gate_decide_8x_slower_is_a_regression() -> None:
    d = decide(BASE, [12.6, 12.5, 12.4], 2.0)
    assert d.status == "regression" and d.ci[1] < 0.98 and d.settle == ""
    assert d.reason == (
        "the 98% interval 0.121 to 0.129 lies below 0.98: slower than the tolerance allows, beyond "
        "the noise"
    )


def test_regress_gate_decide_a_slowdown_near_the_tolerance_is_inconclusive() -> None:
    """1.8% slower at a 2% tolerance, 0.3% noise: the interval straddles 0.98 and lies below 1.
    (2.1% slower is a regression: slower beyond the noise, its centre past the tolerance.)"""
    d = decide([100.0, 100.3, 99.7], [98.2, 98.5, 97.9], 2.0)
    assert d.status == "inconclusive" and d.decided_ci[0] < 0.98 < d.decided_ci[1] < 1
    assert decide([100.0, 100.3, 99.7], [97.9, 98.2, 97.6], 2.0).status == "regression"
    assert d.reason.endswith(
        "reaches both below 0.98 and above it: the slowdown lies near the tolerance"
    )
    assert d.settle == "with a --tolerance past the slowdown you accept"


def test_regress_gate_decide_an_interval_that_bounds_nothing_is_no_pass() -> None:
    """Above 1 - tolerance (90%) but wider than 1/2 to 2x the ratio: intervals.unbounded."""
    d = decide([100.0, 101.0], [150.0, 100.0, 250.0], 90.0)
    assert d.decided_ci[0] > 0.1 and d.ci[1] / d.ratio > 2 and d.status == "inconclusive"
    assert "lies above 0.1 but bounds nothing: too few samples to bound (5; " in d.reason


def test_regress_gate_decide_one_check_against_several_baseline_samples() -> None:
    """One check repeat against three: the night's noise is unknown, and a quiet baseline's says
    nothing of it (issue 62): inconclusive, however near or far, until a second repeat."""
    for one in ([100.5], [50.0]):
        d = decide(BASE, one, 5.0)
        assert d.status == "inconclusive" and d.ci == (0.0, float("inf"))
        assert d.reason.startswith("one check process (against 3 baseline): its noise is unknown")
        assert d.settle == "with --repeats 3 or more"


# --- the verdict: exit codes, what it says


def _verdict(status: str, **kw) -> Verdict:
    return Verdict(status, 0.125, (0.008, 1.95), 2.0, 100.0, 12.5, BASE, SCATTERED, "check", **kw)


def test_regress_gate_exit_codes_of_each_status() -> None:
    assert ExitCode.INCONCLUSIVE == 5
    codes = {s: _verdict(s).exit_code for s in ("pass", "faster", "regression", "unreliable")}
    assert codes == {"pass": 0, "faster": 0, "regression": 1, "unreliable": 3}
    assert _verdict("inconclusive").exit_code == 5
    with pytest.raises(KeyError):  # no default that reads as pass
        _ = _verdict("maybe").exit_code


def test_regress_gate_inconclusive_at_the_cap_says_what_would_settle_it() -> None:
    v = _verdict(
        "inconclusive",
        reason=decide(BASE, SCATTERED, 2.0).reason,
        settle="on a quieter machine",
        repeats_run=9,
        max_repeats=9,
        stopped="max",
    )
    assert v.summary().endswith(
        "the repeats scatter; inconclusive after 9 of at most 9 repeats: run check with "
        "--max-repeats 20, or on a quieter machine"
    )
    lines = views.verdict_lines(v, Path("best.yaml"), 3, update=True)
    assert lines[0].style == "yellow" and str(lines[1]).endswith(
        "check: 3 of 9 repeats measured (--repeats 3, at most 9)"
    )
    assert lines[-1] == "--update: not recorded, the check was inconclusive"


def test_regress_gate_max_repeats_default_and_bounds() -> None:
    assert [regress.max_repeats_of(r, None) for r in (1, 3, 5, 10, 30)] == [3, 9, 15, 20, 30]
    assert regress.max_repeats_of(5, 0) == 5 and regress.max_repeats_of(5, 5) == 5
    assert regress.max_repeats_of(5, 12) == 12
    for bad in (3, 1001):
        with pytest.raises(
            ConfigError,
            match=rf"^--max-repeats: {bad} is not allowed with --repeats 5; use 0 \(no extra "
            r"repeats\) or a number from 5 to 1000$",
        ):
            regress.max_repeats_of(5, bad)


def test_regress_gate_max_repeats_below_repeats_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "best.yaml").write_text("")
    proc = run_cli("check", "best.yaml", "--repeats", "5", "--max-repeats", "3", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: --max-repeats: 3 is not allowed with --repeats 5; use 0 (no extra repeats) or a "
        "number from 5 to 1000"
    ]
    assert not (tmp_path / "checks").exists()


# --- the generate gate and JUnit


def _tpot(base_ms: list[float], check_ms: list[float], tol: float) -> dict | None:
    best = {
        "metrics": {"tpot_ms_median": base_ms[0]},
        "check_baseline": {"tpot_ms_samples": base_ms},
    }
    details = [{"tpot_ms_median": x} for x in check_ms]
    return tasks.task("generate").check_gate(best, details, tol, decide)


def test_regress_gate_generate_inconclusive_decode_makes_the_check_inconclusive() -> None:
    """Pass needs both gates to pass; a regression of either fails; an inconclusive time per output
    token makes a tokens/s pass inconclusive, not a tokens/s regression."""
    steady = [4.75, 4.751, 4.749]
    scattered = _tpot(steady, [4.75, 8 * 4.75, 30 * 4.75], 2.0)
    slower, same = _tpot(steady, [5.5, 5.51, 5.49], 2.0), _tpot(steady, [4.75, 4.752, 4.748], 2.0)
    assert scattered["status"] == "inconclusive" and "the repeats scatter" in scattered["reason"]
    passed, slow = decide(BASE, [100.5, 99.5, 100.0], 5.0), decide(BASE, [50.0, 50.5, 49.5], 2.0)
    status, reason, settle = regress.both_gates(passed, scattered)
    assert status == "inconclusive" and reason.startswith("time per output token: the 98% interval")
    assert settle == "on a quieter machine"
    assert regress.both_gates(slow, scattered)[0] == "regression"
    assert regress.both_gates(decide(BASE, SCATTERED, 2.0), slower)[0] == "regression"
    assert regress.both_gates(passed, same)[0] == "pass"
    assert regress.both_gates(passed, None) == (passed.status, passed.reason, passed.settle)


@pytest.mark.parametrize(
    "status, failures, errors",
    [("inconclusive", "0", "1"), ("pass", "0", "0"), ("maybe", "0", "1")],
)
def test_regress_gate_junit_inconclusive_is_an_error(
    tmp_path: Path, status: str, failures: str, errors: str
) -> None:
    report = tmp_path / "junit.xml"
    junit.write_verdict(report, "c", _verdict(status, reason="the repeats scatter"), 1.0)
    suite = ET.parse(report).getroot()
    assert (suite.get("failures"), suite.get("errors")) == (failures, errors)
    case = suite.find("testcase")
    if status == "pass":
        assert case.find("error") is None and case.find("failure") is None
    else:
        assert case.find("error").get("type") == status
        assert "the repeats scatter" in case.find("error").get("message")


# --- real checks: a command job whose steps are sleeps (20 ms, times the plan's factor), so a
# shared CPU's swings barely move it; plan.txt: one factor a process, in turn (or "fail")

JOB = """
import sys, time
from pathlib import Path
from autotune import reporting

here = Path(__file__).parent
plan = (here / "plan.txt").read_text().split() if (here / "plan.txt").exists() else ["1"]
started = here / "started.txt"
n = len(started.read_text().split()) if started.exists() else 0
factor = plan[n % len(plan)]
with started.open("a") as f:
    f.write(factor + "\\n")
if factor == "fail":
    sys.exit(3)
while not reporting.step(tokens=100):
    time.sleep(0.02 * float(factor))
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A command study searched once (one trial, no confirmation: a baseline of one process)."""
    folder = tmp_path_factory.mktemp("gate") / "proj"
    folder.mkdir()
    (folder / "job.py").write_text(JOB)
    doc = {
        "name": "job",
        "workload": {"task": "command", "warmup_steps": 2, "measure_steps": 4},
        "command": {"argv": ["{python}", "job.py"]},
        "space": {},
        "study": {"trials": 1, "seed": 0, "confirm_top": 0, "trial_timeout_min": 1},
    }
    (folder / "job.yaml").write_text(yaml.safe_dump(doc))
    proc = run_cli("search", "job.yaml", "--out", "trials", "--device", "cpu", cwd=folder)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return folder


def _copy(project: Path, tmp_path: Path, plan: str) -> Path:
    """The study copied (its best.yaml names its folder relative to itself), with this plan; its
    best.yaml."""
    folder = tmp_path / "proj"
    shutil.copytree(project, folder, ignore=shutil.ignore_patterns("started.txt", "checks"))
    (folder / "plan.txt").write_text(plan)
    return folder / "trials" / "job" / "best.yaml"


def _check(best: Path, *options: str):
    (best.parents[2] / "started.txt").unlink(missing_ok=True)  # the plan starts again
    return run_cli("check", str(best), "--max-load", "0", *options, cwd=best.parents[2])


def _ratio(stdout: str) -> float:
    return float(stdout.split("ratio ")[1].split()[0])


@pytest.mark.slow
@pytest.mark.serial
def test_regress_gate_job_at_its_own_speed_passes_and_8x_slower_fails(
    project: Path, tmp_path: Path
) -> None:
    best = _copy(project, tmp_path, "1")
    assert _check(best, "--reset-baseline", "--repeats", "3").returncode == 0
    same = _check(best, "--repeats", "3", "--tolerance", "20", "--update")
    assert same.returncode == 0 and same.stdout.startswith("pass: "), same.stdout + same.stderr
    assert (
        "lies above 0.8: no slowdown past the tolerance; decided after 3 of at most 9"
        in same.stdout
    )
    assert "--update: recorded 3 samples" in same.stdout
    (best.parents[2] / "plan.txt").write_text("8")
    slow = _check(best, "--repeats", "3", "--tolerance", "20")
    assert slow.returncode == 1 and slow.stdout.startswith("regression: "), slow.stdout
    assert 0.09 < _ratio(slow.stdout) < 0.16 and "lies below 0.8" in slow.stdout


@pytest.mark.slow
def test_regress_gate_scattered_repeats_are_inconclusive_up_to_the_cap(
    project: Path, tmp_path: Path
) -> None:
    """Repeats 1x, 8x, 30x, then 1x: inconclusive after the 4 repeats --max-repeats allows, exit
    5, never pass; JUnit an error; --update records nothing; the night is no level of the series."""
    best = _copy(project, tmp_path, "1 1 1")
    assert _check(best, "--reset-baseline", "--repeats", "3").returncode == 0
    baseline = yaml.safe_load(best.read_text())["check_baseline"]
    (best.parents[2] / "plan.txt").write_text("1 8 30")
    report = tmp_path / "junit.xml"
    proc = _check(
        best,
        *("--repeats", "3", "--max-repeats", "4", "--tolerance", "20"),
        "--update",
        "--junit",
        str(report),
    )
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert proc.stdout.startswith("inconclusive: ") and "the repeats scatter" in proc.stdout
    assert (
        "inconclusive after 4 of at most 4 repeats: run check with --max-repeats 10, or on a "
        "quieter machine" in proc.stdout
    )
    assert (best.parents[2] / "started.txt").read_text().split() == ["1", "8", "30", "1"]
    assert "repeat 4 of at most 4 (inconclusive so far): " in proc.stderr
    assert "--update: not recorded, the check was inconclusive" in proc.stdout
    assert yaml.safe_load(best.read_text())["check_baseline"] == baseline
    assert ET.parse(report).getroot().find("testcase").find("error").get("type") == "inconclusive"
    night = json.loads((best.parent / "history.jsonl").read_text().splitlines()[-1])
    assert night["status"] == "inconclusive" and night["repeats_run"] == 4


@pytest.mark.slow
@pytest.mark.serial
def test_regress_gate_more_repeats_settle_a_check(project: Path, tmp_path: Path) -> None:
    """Against the search's one process, one repeat is inconclusive by construction (one sample a
    side); a second (or third) bounds the ratio and the check passes."""
    best = _copy(project, tmp_path, "1")
    proc = _check(best, "--repeats", "1", "--tolerance", "50")
    assert proc.returncode == 0 and proc.stdout.startswith("pass: "), proc.stdout + proc.stderr
    assert "decided after 2 of at most 3" in proc.stdout or "decided after 3 of at most 3" in (
        proc.stdout
    )
    assert "repeat 2 of at most 3 (inconclusive so far): " in proc.stderr


@pytest.mark.slow
def test_regress_gate_failed_repeats_count_toward_the_cap(project: Path, tmp_path: Path) -> None:
    best = _copy(project, tmp_path, "1 fail fail fail")
    proc = _check(best, "--repeats", "1", "--max-repeats", "3", "--tolerance", "50")
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert (best.parents[2] / "started.txt").read_text().split() == ["1", "fail", "fail"]
    assert (
        "inconclusive after 3 of at most 3 repeats (2 failed): run check with --max-repeats 10, or "
        "with a baseline of several processes (check --reset-baseline --repeats 5)" in proc.stdout
    )
