"""Issue 62, item 7: one coherent last word. Real searches on the CPU (`autotune search` in a
subprocess, real trial processes): the end of the search, the report in a terminal, Markdown, the
HTML card and JSON say one sentence on the gain (study/bound.py), and none of the phrases that
contradicted it; the cost is in process-minutes on a CPU; no compile is said where none was
searched; with the confirmation off the noise between processes is unknown."""

from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import command_job, run_cli, tiny

from autotune.report import collect, render_rich, to_json, to_markdown
from autotune.report._card import card_html, chosen
from autotune.study.load import load_study

pytestmark = pytest.mark.slow

# what the old cards said beside, or against, their last word (issue 62)
CONTRADICTIONS = (
    "Gain:",
    "Within noise: the interval holds 1x",
    "within noise: the interval holds 1x",
    "compiles in 0 s instead of 0 s",
    "GPU-minutes",
    "GPU-min",
)


def _forms(study_dir: Path) -> dict[str, Any]:
    """The study's report in every form, and its data."""
    from rich.console import Console

    study = load_study(study_dir, None, None)[0]
    data = collect(study, study_dir)
    out = io.StringIO()
    render_rich(data, Console(file=out, width=2000, color_system=None))
    return {
        "data": data,
        "terminal": out.getvalue(),
        # the Markdown form escapes the study's text, never the sentence's words
        "markdown": to_markdown(data).replace("\\", ""),
        "html": html.unescape(card_html(data, chosen(data))),
        "json": json.loads(to_json(data)),
    }


@pytest.fixture(scope="module")
def confirmed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A tiny training search as `make demo` runs it: micro-batch and precision, no compile, the
    top 2 and your setting raced in 2 rounds of fresh processes."""
    root = tmp_path_factory.mktemp("demo")
    study = {"trials": 3, "confirm_top": 2, "confirm_rounds": 2, "prune_below": 0.0}
    (root / "tiny.yaml").write_text(yaml.safe_dump(tiny(name="demo", study=study)))
    done = run_cli("search", "tiny.yaml", "--out", "trials", "--device", "cpu", cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    return {"end": done.stdout, **_forms(root / "trials" / "demo")}


@pytest.fixture(scope="module")
def unconfirmed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Your own job whose two configurations run at one speed (2 ms a sample per step at every
    micro-batch), the confirmation off: each trial's window is tight, the noise between processes
    never measured."""
    root = tmp_path_factory.mktemp("equal")
    job = command_job(root, "equal", trials=2, study={"confirm_top": 0})
    done = run_cli("search", str(job), "--out", "trials", "--device", "cpu", cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    return {"end": done.stdout, **_forms(root / "trials" / "equal")}


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_last_word_search_every_form_says_the_one_sentence(confirmed: dict[str, Any]) -> None:
    said = confirmed["data"].bound
    assert said is not None and said["text"] == confirmed["json"]["bound"]["text"]
    sentence = said["text"]
    for form in ("end", "terminal", "markdown", "html"):
        assert _flat(confirmed[form]).count(sentence) == 1, (form, sentence, confirmed[form])


def test_last_word_search_names_the_chosen_and_nothing_contradicts_it(
    confirmed: dict[str, Any],
) -> None:
    """`make demo` ended on "chosen: trial 0: ... changes fewer knobs" then "trial 3 beats your
    setting 1.22x": the last word speaks of the chosen configuration, and no form carries a second
    gain sentence beside it."""
    data = confirmed["data"]
    chosen_trial = data.chosen["trial"]
    sentence = data.bound["text"]
    named = re.match(r"Trial (\d+) ", sentence)
    assert named is None or int(named.group(1)) == chosen_trial, sentence
    if chosen_trial == data.baseline.number:
        assert data.bound["kind"] in ("bound", "too_noisy", "noise_unknown")
    for form in ("end", "terminal", "markdown", "html"):
        text = _flat(confirmed[form])
        for phrase in CONTRADICTIONS:
            assert phrase not in text, (form, phrase)
        assert len(re.findall(r"beats your setting \d", text)) <= 1, form
    gain = confirmed["json"]["chosen"]["gain"]
    if gain is not None:  # the JSON's figures are the sentence's
        assert gain["kind"] == data.bound["kind"] and gain["ratio"] == data.bound["ratio"]


def test_last_word_search_cost_on_a_cpu_is_process_minutes(confirmed: dict[str, Any]) -> None:
    cost = confirmed["json"]["cost"]
    assert cost["unit"] == "process-minutes" and cost["gpu_min"] is None
    line = (
        f"The search cost {cost['minutes']:,.1f} process-minutes in {cost['processes']} processes"
    )
    for form in ("terminal", "markdown", "html"):
        assert line in _flat(confirmed[form]), form


def test_last_word_search_says_no_compile_where_none_was_searched(
    confirmed: dict[str, Any],
) -> None:
    for form in ("end", "terminal", "markdown", "html"):
        assert "compiles" not in confirmed[form], form


def test_last_word_search_with_the_confirmation_off_the_noise_is_unknown(
    unconfirmed: dict[str, Any],
) -> None:
    said = unconfirmed["data"].bound
    assert said is not None and said["kind"] == "noise_unknown", said
    assert "the noise between processes is unknown" in said["text"]
    for form in ("end", "terminal", "markdown", "html"):
        text = _flat(unconfirmed[form])
        assert said["text"] in text, form
        assert "beats your setting" not in text and "95% interval" not in text, form
    assert unconfirmed["json"]["bound"]["ci95"] is None
