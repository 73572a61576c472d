"""The report's data (report/_data.py): one typed attribute a top-level section, the same value as
its key, and the plain dict the JSON form writes."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
from test_report_honest import _trial

from autotune import report
from autotune.report._data import Report


def _study() -> optuna.Study:
    """An in-memory study of two completed trials; the first is the baseline."""
    study = optuna.create_study(direction="maximize")
    for mbs, value in ((2, 100.0), (4, 140.0)):
        study.add_trial(_trial({"micro_batch_size": mbs}, value))
    study.set_user_attr("baseline_knobs", {"micro_batch_size": 2})
    return study


def test_report_data_attributes_are_its_sections() -> None:
    data = report.collect(_study())
    assert isinstance(data, Report)
    sections = [name for name, member in vars(Report).items() if isinstance(member, property)]
    # every section collect gathers is typed, and every typed section is gathered
    assert sorted(sections) == sorted(data)
    for name in sections:
        assert getattr(data, name) is data[name], name
    assert data.chosen is not None and data.chosen["trial"] == 1
    assert data.baseline is not None and data.baseline["number"] == 0
    assert [r["number"] for r in data.trials] == [1, 0]


def test_report_data_to_dict_is_the_json() -> None:
    data = report.collect(_study())
    plain = data.to_dict()
    assert type(plain) is dict and plain == data
    assert json.loads(report.to_json(data)) == json.loads(report.to_json(plain))


def test_report_data_renders_from_its_json_read_back(tmp_path: Path) -> None:
    """to_markdown and write_html take collect's Report or the plain dict of its JSON alike."""
    data = report.collect(_study())
    back = json.loads(report.to_json(data))
    assert report.to_markdown(back) == report.to_markdown(data)
    page = report.write_html(back, tmp_path / "back").read_text()
    assert page == report.write_html(data, tmp_path / "data").read_text()
