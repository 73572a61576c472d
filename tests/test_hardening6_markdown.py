"""A study's own text in the Markdown report is text on GitHub, and bidirectional controls are shown
by their code points in every form (issue 63, item 4). One real `task: command` search on the CPU
whose name, knob value and failure reason carry Markdown, GitHub links and bidi controls."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import cli_here, run_cli

# A study name may hold letters, digits, '.', '_' and '-': enough for a www. autolink and strong
NAME = "s__www.example.invalid__"
SHOWN_NAME = "s__www\u200b.example.invalid__"  # as GitHub shows it: www. broken, not linked
# what GitHub reads as its own in a comment: emphasis, strong, strikethrough, math, a table's cell
# border, a URL and a www. autolink, an e-mail autolink, a mention, an issue reference, an emoji
MARKUP = (
    "_em_ __strong__ ~~x~~ $x$ a|b https://example.invalid/u WWW.example.invalid "
    "me@example.invalid @user #1 GH-2 :smile:"
)
# U+202E turns the text after it around ("txt.exe" read as "exe.txt"), U+2066 isolates
BIDI = "\u202e \u2066 \u200f"
TAG = f"V {MARKUP} {BIDI} end"
REASON = f"R {MARKUP}"  # a job's reason is one printable line: no bidi control in it

# The job: --bs 2 fails with REASON, --bs 1 runs; --tag is the user's knob and changes nothing
JOB = f"""
import argparse, time
from autotune import reporting
p = argparse.ArgumentParser()
p.add_argument("--bs", type=int, default=1)
p.add_argument("--tag", default="")
a = p.parse_args()
if a.bs == 2:
    reporting.reporter().fail({REASON!r})
for _ in range(10_000):
    time.sleep(0.002 * a.bs)
    if reporting.step(tokens=100 * a.bs):
        break
"""


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished command study of two trials on the CPU: the baseline ran, the other failed."""
    import yaml

    root = tmp_path_factory.mktemp("md")
    (root / "job.py").write_text(JOB)
    doc = {
        "name": NAME,
        "workload": {"task": "command", "warmup_steps": 2, "measure_steps": 4},
        "command": {
            "argv": ["{python}", "job.py"],
            "knobs": {
                "micro_batch_size": {"flag": "--bs"},
                "tag": {"flag": "--tag", "values": [TAG]},
            },
        },
        "space": {"micro_batch_size": [1, 2]},
        "study": {"trials": 2, "seed": 0, "confirm_top": 0, "trial_timeout_min": 1},
    }
    (root / "job.yaml").write_text(yaml.safe_dump(doc))
    proc = cli_here("search", "job.yaml", "--out", "out", "--device", "cpu", cwd=root)
    assert proc.returncode == 0, proc.stderr
    return root / "out" / NAME


@pytest.fixture(scope="module")
def markdown(study_dir: Path) -> str:
    proc = run_cli("report", str(study_dir), "--format", "markdown", cwd=study_dir.parent)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _visible_bidi(text: str, lt: str = "<", gt: str = ">") -> None:
    """No bidi control reaches the text; each is named by its code point."""
    assert not re.search("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]", text)
    for point in ("202E", "2066", "200F"):
        assert f"{lt}U+{point}{gt}" in text, point


@pytest.mark.slow
def test_hardening6_markdown_escapes_a_studys_markup(markdown: str) -> None:
    for raw, escaped in (
        ("_em_", r"\_em\_"),
        ("__strong__", r"\_\_strong\_\_"),
        ("~~x~~", r"\~\~x\~\~"),
        ("$x$", r"\$x\$"),
        ("a|b", r"a\|b"),
    ):
        assert escaped in markdown and raw not in markdown, raw
    assert r"s__www&#8203;.example.invalid\_\_" in markdown  # intraword '_' is no emphasis
    # GitHub links these after parsing, past any backslash: a zero-width space breaks each
    for shown in (
        "https&#8203;://example.invalid/u",
        "WWW&#8203;.example.invalid",
        "me@&#8203;example.invalid",
        "@&#8203;user",
        "#&#8203;1",
        "GH&#8203;-2",
        ":&#8203;smile:",
    ):
        assert shown in markdown, shown
    assert "www." not in markdown.lower() and not re.search("[a-z]://", markdown)
    for linked in ("@e", "@u", "#1", "GH-2", ":smile:"):
        assert linked not in markdown, linked
    _visible_bidi(markdown, lt="&lt;")


@pytest.mark.slow
def test_hardening6_markdown_keeps_its_own_markup(markdown: str) -> None:
    """Parsed as GitHub does (CommonMark with tables and strikethrough): autotune's header, bold
    and table are markup; nothing of the study's is (no emphasis, strike, link, extra cell)."""
    markdown_it = pytest.importorskip("markdown_it")
    page = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)
    assert page.startswith(f"<h3>autotune: {SHOWN_NAME} (cpu)</h3>")
    assert "<strong>Chosen (best.yaml): your setting" in page
    assert "<em>" not in page and "<s>" not in page and "<a " not in page
    assert "<strong>strong" not in page and page.count("<strong>") == markdown.count("**") // 2
    header, *rows = [r for r in markdown.splitlines() if r.startswith("|")]
    cells = header.count("|")
    assert all(len(re.findall(r"(?<!\\)\|", r)) == cells for r in rows)
    assert page.count("<table>") == 1 and "R _em_ __strong__ ~~x~~ $x$ a|b" in page


@pytest.mark.slow
def test_hardening6_terminal_and_html_show_bidi_controls(study_dir: Path, tmp_path: Path) -> None:
    proc = run_cli("report", str(study_dir), "--html", str(tmp_path / "h"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    _visible_bidi(" ".join(proc.stdout.split()))
    _visible_bidi((tmp_path / "h" / "report.html").read_text(), lt="&lt;", gt="&gt;")
