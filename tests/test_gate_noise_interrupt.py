"""Issue 62, item 5: `check` interrupted still tells CI. SIGTERM (a CI job's timeout) or Ctrl-C
during a check's repeats writes the JUnit report with an "interrupted" error, prints check's words
(what was measured; nothing decided or recorded), not the search's, leaves nothing of the repeat
running and exits with the signal's code; --reset-baseline interrupted records nothing. The real
command, signalled while a real job (tests/gate_noise_job.py) runs."""

from __future__ import annotations

import signal
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import ends, none_left, processes_with, start_cli, wait_until
from gate_noise_job import copy, searched, started

from autotune.errors import ExitCode

pytestmark = pytest.mark.slow
SLOW = "30"  # a step of 0.9 s: the job runs for several seconds, interrupted while it does
SEARCH_WORDS = "the study is kept"  # the funnel's words for a search (cli/_errors.py)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return searched(tmp_path_factory)


def _interrupted(best: Path, sig: int, *options: str) -> tuple[int, str, str]:
    """The check started with options, sent sig once its first repeat's job runs; its exit code,
    stdout and stderr, once nothing of it is left."""
    proc = start_cli("check", str(best), *options, cwd=best.parents[2])
    wait_until(lambda: started(best), 120, "the first repeat's job")
    wait_until(lambda: processes_with("job.py"), 30, "the job's process")
    proc.send_signal(sig)
    out, err = ends(proc, 120)
    none_left("job.py")
    return proc.returncode, out, err


@pytest.mark.parametrize(
    "sig, code, how",
    [
        (signal.SIGTERM, 143, "terminated (SIGTERM)"),
        (signal.SIGINT, 130, "interrupted (Ctrl-C)"),
    ],
    ids=["sigterm", "ctrl-c"],
)
def test_gate_noise_an_interrupted_check_writes_its_junit(
    project: Path, tmp_path: Path, sig: int, code: int, how: str
) -> None:
    best = copy(project, tmp_path, SLOW)
    report = tmp_path / "perf.xml"
    options = ("--repeats", "3", "--junit", str(report), "--max-load", "0")
    returncode, out, err = _interrupted(best, sig, *options)
    assert returncode == code, out + err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"{how} during the check, 1 of at most 9 repeats started, 0 measured: ")
    assert "nothing decided, nothing recorded" in line and f"{report} says interrupted" in line
    assert SEARCH_WORDS not in err and "error" not in line and out == ""
    suite = ET.parse(report).getroot()
    assert (suite.get("errors"), suite.get("failures")) == ("1", "0")
    error = suite.find("testcase").find("error")
    assert error.get("type") == "interrupted" and error.get("message") == line
    assert not (best.parent / "history.jsonl").exists()  # an interrupted night is no night


def test_gate_noise_an_interrupted_reset_records_nothing(project: Path, tmp_path: Path) -> None:
    best = copy(project, tmp_path, SLOW)
    before = best.read_bytes()
    options = ("--reset-baseline", "--repeats", "2", "--max-load", "0")
    returncode, out, err = _interrupted(best, signal.SIGTERM, *options)
    assert returncode == ExitCode.TERMINATED, out + err
    line = err.strip().splitlines()[-1]
    assert line.startswith("terminated (SIGTERM) while recording the baseline, 1 of at most 2 ")
    assert line.endswith(f"nothing recorded ({best} is as it was)") and SEARCH_WORDS not in err
    assert best.read_bytes() == before


def test_gate_noise_check_interrupted_is_a_keyboard_interrupt() -> None:
    """A caller of the API that catches Ctrl-C still catches check's."""
    from autotune.errors import CheckInterrupted

    stop = CheckInterrupted("interrupted (Ctrl-C) during the check", ExitCode.INTERRUPTED)
    assert isinstance(stop, KeyboardInterrupt) and stop.exit_code == 130
    assert stop.message == str(stop) == "interrupted (Ctrl-C) during the check"
