"""The report's data (report/_data.py): a Row a trial and one Report a study, typed, built once by
collect; the plain dict the JSON form writes, pinned key for key, and read back."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import optuna
from test_report_honest import _trial

from autotune import report
from autotune.report._data import Report, Row

STUDIES = Path(__file__).parent / "data" / "studies"
# `autotune report --format json --train-tokens 2e12` of tests/data/studies/fixture-v3, as written
# before the report's data was typed; a change to the JSON is a change to this file, said in its
# commit (regenerate: write report.to_json of the collect below)
PINNED = Path(__file__).parent / "data" / "report" / "fixture-v3.json"


def _study() -> optuna.Study:
    """An in-memory study of two completed trials; the first is the baseline."""
    study = optuna.create_study(direction="maximize")
    for mbs, value in ((2, 100.0), (4, 140.0)):
        study.add_trial(_trial({"micro_batch_size": mbs}, value))
    study.set_user_attr("baseline_knobs", {"micro_batch_size": 2})
    return study


def test_report_data_sections_and_rows_are_typed() -> None:
    data = report.collect(_study())
    assert isinstance(data, Report)
    assert all(isinstance(r, Row) for r in data.trials)
    assert data.baseline is not None and data.best is not None
    assert data.baseline.number == 0 and data.best.number == 1
    # the baseline and the best are rows of the table, not copies
    assert data.baseline in data.trials and data.best is data.trials[0]
    assert data.chosen is not None and data.chosen["trial"] == 1
    assert [r.number for r in data.trials] == [1, 0]
    assert data.best.speedup is not None and abs(data.best.speedup - 1.4) < 1e-9


def test_report_data_to_dict_is_the_json_its_fields_in_order() -> None:
    data = report.collect(_study())
    plain = data.to_dict()
    assert type(plain) is dict
    assert list(plain) == [f.name for f in dataclasses.fields(Report)]
    assert list(plain["trials"][0]) == [f.name for f in dataclasses.fields(Row)]
    assert json.loads(report.to_json(data)) == json.loads(report.to_json(plain))
    assert Report.of(plain) == data and Report.of(data) is data


def test_report_data_json_of_a_study_is_pinned(tmp_path: Path) -> None:
    """The whole JSON of a small finished study (three trials, a repeat, best.yaml beside it), byte
    for byte: the typed data writes what the dict it replaced wrote."""
    shutil.copytree(STUDIES / "fixture-v3", tmp_path / "fixture-v3")
    study, folder = report.load_study(tmp_path / "fixture-v3", None, None)
    written = report.to_json(report.collect(study, folder, train_tokens=2e12))
    assert written == PINNED.read_text()


def test_report_data_renders_from_its_json_read_back(tmp_path: Path) -> None:
    """to_markdown and write_html take collect's Report or the plain dict of its JSON alike."""
    data = report.collect(_study())
    back = json.loads(report.to_json(data))
    assert report.to_markdown(back) == report.to_markdown(data)
    page = report.write_html(back, tmp_path / "back").read_text()
    assert page == report.write_html(data, tmp_path / "data").read_text()
