"""Issue 62, item 1: a noisy baseline cannot open the gate. The tolerance derived from a baseline's
spread is bounded (30%), and a baseline whose processes spread more than the gate can use is not
recorded (exit 3, one line), by --reset-baseline or by --update. Real checks of a command job on
the CPU whose speed a plan file sets per process (tests/gate_noise_job.py)."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from gate_noise_job import check, copy, searched, set_plan, started

from autotune.check import junit
from autotune.check.stats import default_tolerance
from autotune.check.verdict import Verdict

# the issue's baseline: its 3 processes ran 1x, 1.45x and 0.7x as fast; the linear rule made 107%
ISSUE = [100.0, 145.0, 70.0]
NOT_JUDGED = ("--max-load", "0")  # this shared 2-core machine's load is not what these test


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return searched(tmp_path_factory)


def test_gate_noise_derived_tolerance_is_bounded() -> None:
    from autotune.check.stats import MAX_TOLERANCE_PCT

    tol, how = default_tolerance(ISSUE)
    assert MAX_TOLERANCE_PCT == 30.0 and tol == 30.0
    assert how.startswith("30%: bounded; 3 x the baseline's process-to-process spread (36.")
    assert "record the baseline again on a quiet machine" in how
    assert all(default_tolerance([100.0, x])[0] <= 30.0 for x in (50.0, 10.0, 1.0, 1e-6))
    # a quiet baseline is judged as before: the 2% floor, 3 x the spread where it is small
    assert default_tolerance([100.0, 100.2, 99.8, 100.1, 99.9])[0] == 2.0
    assert default_tolerance([100.0, 102.0, 98.0])[0] == pytest.approx(5.9, abs=0.1)
    assert default_tolerance([100.0])[0] == 5.0


def test_gate_noise_what_the_gate_can_use() -> None:
    """3 spreads of log tokens/s fit between no change and the floor 1 - tolerance: 11.9% at the
    30% bound, a third of the tolerance where it is small, anything at 100%."""
    from autotune.check import record

    assert record.usable_spread_pct(None) == pytest.approx(11.89, abs=0.01)
    assert record.usable_spread_pct(2.0) == pytest.approx(0.673, abs=0.001)
    assert record.usable_spread_pct(70.0) == pytest.approx(40.1, abs=0.1)
    assert record.usable_spread_pct(100.0) == math.inf
    assert record.spread_pct(ISSUE) == pytest.approx(36.4, abs=0.1)
    assert record.spread_refusal(ISSUE, None, "baseline's") == (
        "the baseline's processes spread 36.4%: record it again on a quiet machine (nothing "
        "recorded: the default tolerance (at most 30%) can use a spread of at most 11.9%)"
    )
    assert record.spread_refusal(ISSUE, 50.0, "check's").endswith(
        "(nothing recorded: a gate at --tolerance 50% can use a spread of at most 23.1%)"
    )
    assert record.spread_refusal(ISSUE, 70.0, "check's") == ""  # 40.1% at 70%
    assert record.spread_refusal([100.0, 101.0, 99.0], None, "baseline's") == ""
    assert record.spread_refusal([100.0], None, "baseline's") == ""  # one: unknown, never refused


def test_gate_noise_a_refused_update_exits_3_and_tells_junit(tmp_path: Path) -> None:
    from autotune.check import record

    base = [100.0, 101.0, 99.0]
    v = Verdict("pass", 1.0, (0.6, 1.6), 50.0, 100.0, 100.0, base, ISSUE, "check --update")
    assert v.exit_code == 0
    v.update_refused = record.spread_refusal(ISSUE, 50.0, "check's")
    assert v.exit_code == 3
    junit.write_verdict(tmp_path / "j.xml", "job", v, 1.0)
    error = ET.parse(tmp_path / "j.xml").getroot().find("testcase").find("error")
    assert error.get("type") == "update-refused"
    assert "--update: the check's processes spread 36.4%" in error.get("message")


@pytest.mark.slow
def test_gate_noise_a_noisy_baseline_is_not_recorded(project: Path, tmp_path: Path) -> None:
    """The issue's 1x / 1.45x / 0.7x processes: refused, exit 3, one line, best.yaml untouched."""
    best = copy(project, tmp_path, "1 1.45 0.7")
    before = best.read_bytes()
    proc = check(best, "--reset-baseline", "--repeats", "3", *NOT_JUDGED)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert started(best) == ["1", "1.45", "0.7"]
    lines = proc.stderr.strip().splitlines()[3:]  # after the 3 repeats' lines
    assert len(lines) == 1 and lines[0].startswith("error: the baseline's processes spread 3")
    assert "%: record it again on a quiet machine (nothing recorded: " in lines[0]
    assert best.read_bytes() == before and proc.stdout == ""


@pytest.mark.slow
def test_gate_noise_a_noisy_baseline_cannot_pass_2x_slower(project: Path, tmp_path: Path) -> None:
    """A baseline as noisy as the issue's, recorded as an older release did (here with --tolerance
    100, a gate that can use any spread): a check 2x slower is never a pass, its tolerance
    bounded."""
    best = copy(project, tmp_path, "1 1.45 0.7")
    recorded = check(best, "--reset-baseline", "--repeats", "3", "--tolerance", "100", *NOT_JUDGED)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    set_plan(best, "2")
    proc = check(best, "--repeats", "3", "--max-repeats", "0", *NOT_JUDGED)
    assert proc.returncode in (1, 5), proc.stdout + proc.stderr  # 0 before: 107%
    assert "tolerance: 30%: bounded; 3 x the baseline's process-to-process spread (3" in proc.stdout
    assert proc.stdout.startswith(("regression: ", "inconclusive: "))


@pytest.mark.slow
def test_gate_noise_update_of_scattered_processes_is_refused(project: Path, tmp_path: Path) -> None:
    """A check that passes at --tolerance 70 from processes 1x, 2.5x and 0.4x as fast (a spread of
    about 78%, past the 40% such a gate can use): --update records nothing, exit 3, said on stdout
    and in the JUnit report; the night is still a pass in history.jsonl."""
    best = copy(project, tmp_path, "1")
    assert check(best, "--reset-baseline", "--repeats", "3", *NOT_JUDGED).returncode == 0
    baseline = yaml.safe_load(best.read_text())["check_baseline"]
    set_plan(best, "1 2.5 0.4")
    report = tmp_path / "junit.xml"
    options = ("--repeats", "12", "--max-repeats", "0", "--tolerance", "70", "--update")
    proc = check(best, *options, "--junit", str(report), *NOT_JUDGED)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.startswith("pass: "), proc.stdout
    assert "--update: not recorded, the check's processes spread " in proc.stdout
    assert "record it again on a quiet machine" in proc.stdout
    assert yaml.safe_load(best.read_text())["check_baseline"] == baseline
    error = ET.parse(report).getroot().find("testcase").find("error")
    assert error.get("type") == "update-refused"
    night = yaml.safe_load((best.parent / "history.jsonl").read_text().splitlines()[-1])
    assert night["status"] == "pass" and not night["updated"] and night["update_refused"]
