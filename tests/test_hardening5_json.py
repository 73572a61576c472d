"""Issue 52, weak: every JSON file and output autotune writes is strict JSON (documents.strict_json:
a number that is not finite is null), never the tokens NaN or Infinity: export's json form,
history.jsonl, the report's JSON, nccl.json, a command's rendered config file. history.jsonl's
interval (0, inf), written [0.0, null], is read back as the night it was."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import cli_here, command_job, run_cli

from autotune import export
from autotune.command import render as command_render
from autotune.documents import nightly
from autotune.export import _winner

FIXTURE = Path(__file__).parent / "data" / "studies" / "fixture-v0" / "best.yaml"


def _strict(text: str, where: str) -> Any:
    """text parsed as strict JSON: a NaN, Infinity or -Infinity token fails the test."""

    def refuse(token: str) -> None:
        pytest.fail(f"{where}: {token} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_strict_json_writes_null_for_every_number_that_is_not_finite() -> None:
    from autotune.documents import strict_json

    doc = {"a": math.nan, "b": (math.inf, 1.5, [-math.inf]), "c": {"d": 2, "e": "NaN"}}
    text = strict_json.dumps(doc, indent=1)
    assert _strict(text, "dumps") == {
        "a": None,
        "b": [None, 1.5, [None]],
        "c": {"d": 2, "e": "NaN"},
    }


def test_export_json_of_a_winner_with_nan_metrics_is_strict(tmp_path: Path) -> None:
    """The json form of a winner whose metrics are not finite prints null for them; every other
    form that embeds JSON is strict too."""
    best = tmp_path / "trials" / "fixture-v0" / "best.yaml"
    best.parent.mkdir(parents=True)
    best.write_text(FIXTURE.read_text())
    winner = _winner.read(best)
    odd = {"mfu": math.nan, "step_time_spread_pct": math.inf, "peak_mem_gib": -math.inf}
    edited = dataclasses.replace(winner, metrics={**winner.metrics, **odd})
    metrics = _strict(export.FORMATS["json"](edited).text, "export -f json")["metrics"]
    assert [metrics[k] for k in odd] == [None, None, None]
    for form in export.formats_of(edited):
        assert not re.search(r"\bNaN\b|Infinity", export.FORMATS[form](edited).text), form


def test_export_of_a_best_yaml_with_nan_metrics_is_strict_or_refused(tmp_path: Path) -> None:
    """An edited best.yaml whose metrics hold .nan and .inf: refused in one line (exit 2), or
    exported with null for them; never NaN or Infinity printed."""
    doc = yaml.safe_load(FIXTURE.read_text())
    doc["metrics"].update(mfu=math.nan, step_time_spread_pct=math.inf)
    best = tmp_path / "trials" / "fixture-v0" / "best.yaml"
    best.parent.mkdir(parents=True)
    best.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = cli_here("export", str(best), "-f", "json", cwd=tmp_path)
    assert proc.returncode in (0, 2), proc.stderr
    if proc.returncode == 2:
        assert len(proc.stderr.strip().splitlines()) == 1 and "metrics." in proc.stderr
    else:
        assert _strict(proc.stdout, "export -f json")["metrics"]["mfu"] is None


def test_history_jsonl_keeps_an_unbounded_interval_as_null_and_reads_it_back(
    tmp_path: Path,
) -> None:
    """check's verdict on one sample a side has the interval (0, inf): written [0.0, null], read
    back as a night with that interval (not skipped as 'ci is not two numbers')."""
    path = tmp_path / nightly.FILE
    night = {
        "name": "x",
        "status": "inconclusive",
        "check_median": 100.0,
        "ratio": 1.01,
        "check_samples": [100.0],
        "ci": (0.0, math.inf),
        "checked_at": "2026-12-05T00:00:00",
        "spread": math.nan,
    }
    nightly.append(path, night)
    line = path.read_text()
    assert _strict(line, "history.jsonl")["ci"] == [0.0, None]
    nights, skipped = nightly.read(path)
    assert skipped == [] and nights[0].ci == (0.0, math.inf)


def test_a_rendered_json_config_is_strict() -> None:
    text = command_render.dumps({"training": {"lr": math.nan, "clip": math.inf}}, ".json")
    assert _strict(text, "config.json") == {"training": {"lr": None, "clip": None}}


@pytest.mark.slow
def test_every_json_of_a_real_search_check_export_and_report_is_strict(tmp_path: Path) -> None:
    """A real command study on the CPU, one check of one repeat against the search's one sample
    (inconclusive, its interval (0, inf) appended to history.jsonl), export in every form and the
    report as JSON: every .json and .jsonl file under the study and every JSON printed parses as
    strict JSON."""
    command_job(tmp_path, "strict")
    search = run_cli("search", "job.yaml", "--out", "out", "--device", "cpu", cwd=tmp_path)
    assert search.returncode == 0, search.stderr
    study = tmp_path / "out" / "strict"
    best = study / "best.yaml"
    # --max-load 0: a loaded test machine (its load, its repeats waiting for a CPU) does not make
    # the check unreliable (exit 3)
    once = ("--repeats", "1", "--max-repeats", "0", "--max-load", "0")
    check = run_cli("check", str(best), *once, cwd=tmp_path)
    assert check.returncode == 5, check.stdout + check.stderr  # one sample a side: inconclusive
    history = _strict((study / nightly.FILE).read_text(), "history.jsonl")
    assert history["ci"] == [0.0, None]  # (0, inf): Infinity before
    exported = cli_here("export", str(best), "-f", "json", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    _strict(exported.stdout, "export -f json")
    assert cli_here("export", str(best), "-f", "all", cwd=tmp_path).returncode == 0
    report = cli_here("report", str(study), "--format", "json", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert _strict(report.stdout, "report --format json")["check_history"][0]["ci"] == [0.0, None]
    html = cli_here("report", str(study), "--html", str(tmp_path / "html"), cwd=tmp_path)
    assert html.returncode == 0, html.stderr  # the check history plotted, its null bound too
    files = [p for p in study.rglob("*") if p.suffix in (".json", ".jsonl") and p.is_file()]
    assert any(p.name == nightly.FILE for p in files) and len(files) > 5
    for path in files:
        for line in path.read_text().splitlines() if path.suffix == ".jsonl" else []:
            _strict(line, str(path))
        if path.suffix == ".json":
            _strict(path.read_text(), str(path))
