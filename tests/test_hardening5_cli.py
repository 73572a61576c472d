"""Hardening round 5 (issue 52), the CLI's side: every terminal width prints the message, the
report refuses a training run it cannot project, the Markdown report shows a study's text as text,
and a failure's reason ends at its cause. One real `task: command` search on the CPU, made once,
whose knob values a hostile user wrote."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from conftest import built_once, cli_here, command_job, run_cli

from autotune.launch.process import _classify

# The values of the user's own knob: a line break and a table's border, a tag, links
HOSTILE = [
    "a\nb | c",
    "<img src=x onerror=alert(1)>",
    "[x](javascript:alert(1))",
    "<javascript:alert(2)>",
    "![i](https://example.invalid/i.png) `code` **bold**",
]
WIDTHS = ["0", "1", "20", "", "x", "\u00b2", "99999999999999999999"]


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """A finished command study whose knob `tag` holds HOSTILE's values, searched once for the run
    (conftest.built_once): its tests read it; the check, which writes its history, runs on a
    copy."""

    def search(root: Path) -> None:
        command_job(
            root,
            "hostile",
            trials=6,
            command={
                "knobs": {
                    "micro_batch_size": {"flag": "--bs"},
                    "tag": {"flag": "--tag", "values": HOSTILE},
                }
            },
            baseline={"micro_batch_size": 1, "tag": HOSTILE[0]},
        )
        proc = cli_here("search", "job.yaml", "--out", "out", "--device", "cpu", cwd=root)
        assert proc.returncode == 0, proc.stderr

    return built_once(tmp_path_factory, "hostile", search) / "out" / "hostile"


def _width(columns: str) -> dict[str, str]:
    return {"COLUMNS": columns, "LINES": columns}


@pytest.mark.parametrize("columns", WIDTHS)
def test_every_terminal_width_prints_a_bad_yamls_error(tmp_path: Path, columns: str) -> None:
    """COLUMNS=0 made Rich print nothing: validate exited 2 in silence."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("foo: [\n")
    proc = run_cli("validate", str(bad), cwd=tmp_path, env=_width(columns))
    assert proc.returncode == 2
    assert "invalid YAML" in " ".join(proc.stderr.split()), proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("columns", WIDTHS)
def test_every_terminal_width_prints_the_report_and_the_help(
    study: Path, tmp_path: Path, columns: str
) -> None:
    """The report and Typer's help at any width: printed, wrapped or not, never a traceback."""
    proc = run_cli("report", str(study), "--no-html", cwd=tmp_path, env=_width(columns))
    assert proc.returncode == 0, proc.stderr
    assert "Chosen" in proc.stdout and "trial" in proc.stdout
    helped = run_cli("check", "--help", cwd=tmp_path, env=_width(columns))
    assert helped.returncode == 0, helped.stderr
    assert "Usage" in helped.stdout and "Traceback" not in helped.stderr


@pytest.mark.slow
@pytest.mark.parametrize("columns", ["0", "\u00b2"])
def test_every_terminal_width_prints_checks_verdict(
    study: Path, tmp_path: Path, columns: str
) -> None:
    """check at COLUMNS=0 exited 0 with no verdict."""
    shutil.copytree(study.parents[1], tmp_path / "project")  # the check writes its history
    best = str(tmp_path / "project" / "out" / "hostile" / "best.yaml")
    proc = run_cli(
        "check", best, "--repeats", "1", "--max-repeats", "1", cwd=tmp_path, env=_width(columns)
    )
    said = " ".join(proc.stdout.split())
    assert re.search(r"\b(pass|faster|regression|inconclusive|unreliable)\b", said), proc.stderr
    assert "vs baseline" in said


@pytest.mark.slow
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e308", "1e19", "0", "0.5", "-1"])
def test_report_refuses_a_training_run_it_cannot_project(
    study: Path, tmp_path: Path, value: str
) -> None:
    """--train-tokens inf printed 'inf h ... saves nan GPU-hours'; 1e308, 300-digit numbers."""
    before = sorted(p.name for p in study.iterdir())
    proc = run_cli("report", str(study), f"--train-tokens={value}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "--train-tokens" in proc.stderr and "1e+18" in proc.stderr
    assert sorted(p.name for p in study.iterdir()) == before  # no report folder written


@pytest.mark.slow
def test_report_projects_a_training_run_in_range(study: Path, tmp_path: Path) -> None:
    proc = run_cli("report", str(study), "--train-tokens=2e12", "--no-html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "nan" not in proc.stdout and "inf " not in proc.stdout


def _markdown(study: Path, tmp_path: Path) -> str:
    proc = run_cli("report", str(study), "--format", "markdown", "--no-html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _unescaped(line: str, char: str) -> int:
    """How many times char stands in line unescaped (not after a backslash that is itself not
    escaped)."""
    return len(re.findall(rf"(?<!\\)(?:\\\\)*{re.escape(char)}", line))


@pytest.mark.slow
def test_markdown_report_keeps_its_table_whole(study: Path, tmp_path: Path) -> None:
    """A line break or a '|' in a knob's value split the table's row."""
    text = _markdown(study, tmp_path)
    table = [x for x in text.splitlines() if x.startswith("|")]
    assert len(table) >= 4
    borders = {_unescaped(x, "|") for x in table}
    assert len(borders) == 1, table
    assert not any(x.startswith(("b |", "b \\|")) for x in text.splitlines())


@pytest.mark.slow
def test_markdown_report_shows_html_and_links_as_text(study: Path, tmp_path: Path) -> None:
    """Raw HTML and `javascript:` links went through to the pull request's comment."""
    text = _markdown(study, tmp_path)
    assert "<" not in text  # no tag, no autolink: every '<' is the user's, escaped
    assert "&lt;img src=x onerror=alert(1)>" in text
    assert "&lt;javascript:alert(2)>" in text
    assert "\\[x\\](javascript:alert(1))" in text
    # https:// broken by a zero-width space: GitHub autolinks a bare URL past any backslash
    assert "!\\[i\\](https&#8203;://example.invalid/i.png) \\`code\\` \\*\\*bold\\*\\*" in text


def test_a_silent_crash_reason_ends_at_its_cause(tmp_path: Path) -> None:
    """A trial process that died printing nothing: its reason said '...: ' and stopped."""
    log = tmp_path / "worker.log"
    log.write_text("\n  \n")
    outcome = _classify(tmp_path, log, -9, 60.0, False, wall=1.0, telemetry=[])
    assert outcome.reason == "trial process ended without a result (killed by SIGKILL)"
    log.write_text("RuntimeError: boom\n")
    outcome = _classify(tmp_path, log, 1, 60.0, False, wall=1.0, telemetry=[])
    assert (
        outcome.reason == "trial process ended without a result (exit code 1): RuntimeError: boom"
    )
