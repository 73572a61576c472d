"""history.jsonl (documents/nightly.py): a torn or hand-edited line is skipped and named, a torn end
never glues onto the next night's line, no write follows a planted link; check prints its verdict
and keeps its exit code."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import run_cli

from autotune.documents import nightly

FIXTURES = Path(__file__).parent / "data" / "studies"
NIGHT = {
    "name": "x",
    "status": "pass",
    "ratio": 1.0,
    "ci": [0.99, 1.01],
    "check_median": 100.0,
    "check_samples": [99.0, 101.0],
    "checked_at": "2026-12-01T00:00:00+00:00",
}


def test_nightly_bad_lines_are_skipped_and_named(tmp_path: Path) -> None:
    path = tmp_path / nightly.FILE
    edited = {**NIGHT, "ratio": "fast"}
    path.write_text(
        json.dumps(NIGHT) + "\n" + '{"name": "x", "sta' + "\n" + json.dumps(edited) + "\n[1, 2]\n"
    )
    nights, skipped = nightly.read(path)
    assert [n.doc for n in nights] == [NIGHT]
    # the night typed as the series and the report read it
    assert nights[0] == nightly.Night(
        "pass", 100.0, 1.0, [99.0, 101.0], (0.99, 1.01), NIGHT["checked_at"], name="x"
    )
    assert skipped == [
        "line 2: not JSON (torn or edited)",
        "line 3: ratio is not a positive number",
        "line 4: not a JSON object",
    ]


def test_nightly_inconclusive_night_is_read_but_is_no_level(tmp_path: Path) -> None:
    """An inconclusive check (issue 49) is a night of history.jsonl, but no level of the series: its
    repeats decided nothing; a disturbed night is none either; an unknown status is skipped."""
    path = tmp_path / nightly.FILE
    nights = [
        NIGHT,
        {**NIGHT, "status": "inconclusive"},
        {**NIGHT, "disturbed": ["host load"]},
        {**NIGHT, "status": "maybe"},
    ]
    path.write_text("".join(json.dumps(n) + "\n" for n in nights))
    read, skipped = nightly.read(path)
    assert [(n.status, n.is_level) for n in read] == [
        ("pass", True),
        ("inconclusive", False),
        ("pass", False),
    ]
    assert skipped == [
        "line 4: status 'maybe' is not one of pass, faster, regression, unreliable, inconclusive"
    ]


def test_nightly_append_after_a_torn_line_does_not_glue(tmp_path: Path) -> None:
    path = tmp_path / nightly.FILE
    # the disk filled mid-line
    path.write_text(json.dumps(NIGHT) + "\n" + '{"name": "x", "status": "pa')
    nightly.append(path, NIGHT)
    nights, skipped = nightly.read(path)
    assert [n.doc for n in nights] == [NIGHT, NIGHT] and skipped == [
        "line 2: not JSON (torn or edited)"
    ]


def test_nightly_append_never_follows_a_planted_link(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("precious\n")
    os.symlink(target, tmp_path / nightly.FILE)
    with pytest.raises(OSError):
        nightly.append(tmp_path / nightly.FILE, NIGHT)
    assert target.read_text() == "precious\n"


def _study(tmp_path: Path) -> Path:
    study = tmp_path / "trials" / "fixture-v0"
    study.mkdir(parents=True)
    for f in ("study.db", "best.yaml"):
        shutil.copy(FIXTURES / "fixture-v0" / f, study / f)
    return study


def test_nightly_report_names_bad_lines_instead_of_failing(tmp_path: Path) -> None:
    study = _study(tmp_path)
    (study / nightly.FILE).write_text(
        json.dumps({**NIGHT, "name": "fixture-v0"}) + "\n" + "{torn\n"
    )
    proc = run_cli("report", str(study), "--no-html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "history.jsonl: skipped line 2: not JSON" in proc.stdout


@pytest.mark.slow
def test_nightly_check_with_a_torn_history_prints_its_verdict(tmp_path: Path) -> None:
    study = _study(tmp_path)
    (study / nightly.FILE).write_text(
        '{"name": "fixture-v0", "status": "pass", "ratio": "x"}\n{"torn'
    )
    # fixture-v0 has no digest: a baseline of its own first (issue 52)
    # any spread, the load unjudged: this shared CPU's processes are what they are (issue 62)
    reset = ("--reset-baseline", "--repeats", "2", "--tolerance", "100", "--max-load", "0")
    assert run_cli("check", str(study / "best.yaml"), *reset, cwd=tmp_path).returncode == 0
    proc = run_cli(
        "check",
        str(study / "best.yaml"),
        *("--repeats", "2", "--max-repeats", "0", "--max-load", "0"),
        cwd=tmp_path,
    )
    # a verdict: pass, regression or inconclusive (two repeats on a CPU), never an internal error
    assert proc.returncode in (0, 1, 5), proc.stderr
    assert (
        "ratio" in proc.stdout
        and "history.jsonl: skipped line 1: check_median is not a positive number" in proc.stdout
    )
    nights, skipped = nightly.read(study / nightly.FILE)
    # this night's line stands alone after the torn one
    assert len(nights) == 1 and len(skipped) == 2
