"""The report of a command study whose job reports no peak memory (every CPU job, every
`measure: log` job), in every format, and the HTML page: it links and loads nothing outside itself
(issue 38). One real `task: command` search on the CPU, made once."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from conftest import cli_here, command_job

from autotune import report
from autotune.report import _plots
from autotune.report._static import plot_data

# A job of the user's: its own knob's values hold a link and a plain URL (text the user wrote)
LINK = '<a href="https://example.invalid/link">click</a>'
PLAIN = "see https://example.invalid/plain"
USER_HOST = "example.invalid"
# plotly.js options that reach plotly's servers: its logo (a link to plotly.com; the watermark
# shows it too), the "Share chart" button (posts the chart to plotlyServerURL), and the older
# "Edit chart" link and Chart Studio button
NETWORK_OPTIONS = (
    "displaylogo",
    "watermark",
    "showSendToCloud",
    "showEditInChartStudio",
    "showLink",
)


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> Path:
    """A finished command study of three trials on the CPU: no trial reports its peak memory."""
    root = tmp_path_factory.mktemp("nomem")
    knobs = {
        "micro_batch_size": {"flag": "--bs"},
        "tag": {"flag": "--tag", "values": [LINK, PLAIN]},
    }
    command_job(root, "nomem", trials=3, command={"knobs": knobs})
    proc = cli_here("search", "job.yaml", "--out", "out", "--device", "cpu", cwd=root)
    assert proc.returncode == 0, proc.stderr
    return root / "out" / "nomem"


def _load(study_dir: Path) -> optuna.Study:
    return optuna.load_study(study_name="nomem", storage=f"sqlite:///{study_dir / 'study.db'}")


@pytest.mark.slow
def test_report_of_a_study_without_peak_memory_in_every_format(
    study_dir: Path, tmp_path: Path
) -> None:
    rich = cli_here("report", str(study_dir), cwd=tmp_path)  # the HTML beside the study, by default
    assert rich.returncode == 0, rich.stderr
    assert "Peak memory not reported." in rich.stdout and "HTML report:" in rich.stdout
    page = (study_dir / "report" / "report.html").read_text()
    assert "<li>Peak memory: not reported</li>" in page
    assert "Throughput against memory: not drawn, no completed trial reported its peak" in page
    assert "the memory front is the fastest trial alone: trial " in page
    html = str(tmp_path / "h")
    as_json = cli_here("report", str(study_dir), "--format", "json", "--html", html, cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["chosen"]["peak_mem_gib"] is None
    assert [r["peak_mem_gib"] for r in data["trials"]] == [None] * len(data["trials"])
    md = cli_here("report", str(study_dir), "--format", "markdown", "--html", html, cwd=tmp_path)
    assert md.returncode == 0, md.stderr
    assert "Peak memory not reported." in md.stdout


@pytest.mark.slow
def test_report_memory_front_leaves_out_a_trial_without_memory(study_dir: Path) -> None:
    """Some trials with a peak memory (a job on a GPU), one without: it is off the memory axis, and
    the front is of the others."""
    source = _load(study_dir)
    mixed = optuna.create_study(direction="maximize", study_name="mixed")
    for key, value in source.user_attrs.items():
        mixed.set_user_attr(key, value)
    trials = sorted(source.get_trials(), key=lambda t: t.number)
    # the measured ones (a repeat is told COMPLETE as the trial it repeats, but measured nothing)
    done = [t for t in trials if t.user_attrs.get("status") == "ok"]
    gib = {t.number: 1.0 + t.number for t in done[1:]}  # the first reports none
    mixed.add_trials([_with_memory(t, gib.get(t.number)) for t in trials])
    data = report.collect(mixed)
    drawn = plot_data(data)
    assert sorted(n for _, _, n in drawn["memory"]) == sorted(gib)
    assert set(drawn["pareto"]) <= set(gib) and drawn["pareto"]
    figure = _plots._front(mixed, data, {"limits": {}}, None)
    assert sorted(figure.data[0].x) == sorted(gib.values())  # the trials that have a memory
    line = report._text.memory_axis_line(data)
    assert line == (
        f"Peak memory not reported by 1 trial(s) ({done[0].number}): left off the memory axis."
    )
    assert report.pareto_front([(None, 30.0, 0), (2.0, 20.0, 1), (1.0, 10.0, 2)]) == [2, 1]
    assert report.pareto_front([(None, 30.0, 0), (None, 20.0, 1)]) == []


def _with_memory(t: optuna.trial.FrozenTrial, gib: float | None) -> optuna.trial.FrozenTrial:
    """The trial as a job that reported `gib` of peak memory would have stored it."""
    attrs = dict(t.user_attrs)
    if "metrics" in attrs:  # a duplicate (not launched) has none
        attrs["metrics"] = {**attrs["metrics"], "peak_mem_gib": gib}
    return optuna.trial.create_trial(
        params=t.params,
        distributions=t.distributions,
        value=t.value,
        state=t.state,
        user_attrs=attrs,
    )


@pytest.mark.slow
def test_report_static_page_of_a_study_without_memory_draws_no_memory_plot(
    study_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "plotly", None)  # as if the report extra were not installed
    study = _load(study_dir)
    page = report.write_html(report.collect(study), tmp_path, study=study).read_text()
    assert "Throughput against memory: not drawn" in page
    assert not (tmp_path / "pareto.png").exists() and (tmp_path / "history.png").exists()


@pytest.mark.slow
def test_report_html_links_and_loads_nothing_outside_the_page(
    study_dir: Path, tmp_path: Path
) -> None:
    """Outside plotly.js itself (inlined, its code's URLs for maps it never draws here), the page
    holds no http(s) address but the user's own, as text; no figure turns on a plotly.js feature
    that links to or posts to plotly's servers (their defaults read from the bundle inlined)."""
    pytest.importorskip("plotly")
    from plotly.offline import get_plotlyjs

    study = _load(study_dir)
    page = report.write_html(report.collect(study), tmp_path, study=study).read_text()
    bundle = get_plotlyjs()
    assert page.count(bundle) == 1
    rest = _unescaped(page.replace(bundle, ""))
    assert "Each knob against throughput (Optuna slice)" in rest and "Plotly.newPlot(" in rest
    hosts = {m.group(1) for m in re.finditer(r"https?://([^/\s\"'<>\\]+)", rest)}
    assert hosts == {USER_HOST}, hosts  # the user's text is there, and nothing else
    tag = r"<[a-zA-Z][^<>]*\s(?:href|src|style|action)\s*=[^<>]*https?:[^<>]*>"
    live = re.findall(tag, rest)
    assert not live, live[:3]  # the user's link is shown as text, never as a tag (slice plot)
    assert not re.search(r"url\(\s*\\?[\"']?\s*https?:", rest) and "@import" not in rest
    defaults = {
        name: flag == "!0"
        for name, flag in re.findall(r'(\w+):\{valType:"boolean",dflt:(!0|!1)\}', bundle)
    }
    assert "displaylogo" in defaults and "showSendToCloud" in defaults  # read from plotly.js
    configs = _configs(rest)
    assert len(configs) >= 3
    for config in configs:
        on = [k for k in NETWORK_OPTIONS if k in defaults and config.get(k, defaults[k])]
        assert not on, f"plotly.js options on: {on}"


def _unescaped(text: str) -> str:
    """The page with JSON's \\uXXXX escapes read (plotly writes `<` and `/` so in its JSON)."""
    return re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)


def _configs(page: str) -> list[dict[str, Any]]:
    """The config (fourth argument) of every Plotly.newPlot call on the page."""
    decoder = json.JSONDecoder(strict=False)  # a newline read back from \\u000a
    out = []
    for call in re.finditer(r"Plotly\.newPlot\(", page):
        at, args = call.end(), []
        for _ in range(4):
            at = re.compile(r"[\s,]*").match(page, at).end()
            value, at = decoder.raw_decode(page, at)
            args.append(value)
        out.append(args[3])
    return out
