"""report/_html.py: the page's structure, the chosen trial marked, every study string escaped,
plotly.js inlined once, the static page without plotly; and, in a real headless Chromium, no
console error, plots rendered and hostile strings shown as text."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution

from autotune import report

# Each sets document.title if it ever runs: a page that shows them as text keeps its own title.
HOSTILE_NAME = "<script>document.title='pwned'</script>"
HOSTILE_VALUE = "<img src=x onerror=\"document.title='pwned'\">"
CHOSEN = 4  # the confirmation picks it over trial 5, the search's best single measurement


def _attrs(
    number: int, precision: str, mb: int, value: float, extra: dict[str, Any]
) -> dict[str, Any]:
    step = 1000.0 / value  # seconds a step of 1,000 tokens
    return {
        "status": "ok",
        "knobs": {"precision": precision, "micro_batch_size": mb, "compile": number % 2 == 1},
        "predicted": False,
        "reason": "",
        "wall_s": 30.0 + number,
        "metrics": {
            "tokens_per_s_per_gpu": value,
            "tokens_per_s": value,
            "mfu": value / 10_000,
            "peak_mem_gib": 1.0 + mb / 4,
            "step_time": {"median_s": step, "spread_pct": 2.0},
            **extra,
        },
        "raw": {"step_times_s": [step * f for f in (0.97, 0.99, 1.0, 1.0, 1.01, 1.04)]},
        "phases_s": {
            "start": 3.0,
            "build": 5.0,
            "warmup": 9.0,
            "compile": 4.0 * (number % 2),
            "measure": 8.0,
        },
    }


def _study(storage: str, name: str, task: str = "train") -> optuna.Study:
    """Six measured trials (the baseline first), one OOM, and a confirmation of the top three."""
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize")
    dist = {
        "precision": CategoricalDistribution(["fp32", "bf16", HOSTILE_VALUE]),
        "micro_batch_size": CategoricalDistribution([2, 4, 8]),
    }
    values = [1000.0, 1500.0, 1800.0, 2100.0, 2600.0, 2700.0]
    precisions = ["fp32", "bf16", HOSTILE_VALUE, "bf16", HOSTILE_VALUE, "bf16"]
    trials = []
    for i, (value, precision) in enumerate(zip(values, precisions)):
        mb = [2, 4, 8][i % 3]
        latency = {
            "tpot_ms_p99": 40.0 - 4 * i,
            "tpot_ms_median": 30.0 - 3 * i,
            "roofline_share": 0.1 * i,
        }
        attrs = _attrs(i, precision, mb, value, latency if task == "generate" else {})
        params = {"precision": precision, "micro_batch_size": mb}
        trials.append(
            optuna.trial.create_trial(
                params=params, distributions=dist, value=value, user_attrs=attrs
            )
        )
    oom = {
        "status": "oom",
        "knobs": {"precision": "fp32", "micro_batch_size": 8},
        "reason": HOSTILE_VALUE,
    }
    trials.append(
        optuna.trial.create_trial(
            params={"precision": "fp32", "micro_batch_size": 8},
            distributions=dist,
            user_attrs=oom,
            state=optuna.trial.TrialState.FAIL,
        )
    )
    study.add_trials(trials)
    study.set_user_attr(
        "config",
        {"workload": {"task": task, "world_size": 2}, "study": {"limits": {"p99_tpot_ms": 25.0}}},
    )
    study.set_user_attr("device", "cpu")
    study.set_user_attr("confirmation", _confirmation())
    return study


def _confirmation() -> dict[str, Any]:
    def stats(trial: int, samples: list[float], search: float) -> dict[str, Any]:
        median = sorted(samples)[len(samples) // 2]
        return {
            "trial": trial,
            "median": median,
            "ci95": [median * 0.98, median * 1.02],
            "samples": samples,
            "search_value": search,
            "failures": [],
            "knobs": {},
            "changed_knobs": {},
        }

    return {
        "candidates": [5, 4, 3],
        "rounds_done": 3,
        "chosen": CHOSEN,
        "why": f"highest confirmed median; {HOSTILE_NAME}",
        "stats": [
            stats(5, [2400.0, 2450.0, 2500.0], 2700.0),
            stats(4, [2550.0, 2580.0, 2600.0], 2600.0),
            stats(3, [2050.0, 2080.0], 2100.0),
        ],
    }


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    """The page of a train study and of a generate one, both with hostile strings (drawn once:
    plotly's figures are the slow part)."""
    pytest.importorskip("plotly")
    root = tmp_path_factory.mktemp("html")
    out = {}
    for task in ("train", "generate"):
        study = _study(f"sqlite:///{root / task}.db", HOSTILE_NAME + task, task)
        (root / task).mkdir()
        (root / task / "best.yaml").write_text(f"chosen:\n  trial: {CHOSEN}\n")  # as written
        out[task] = report.write_html(report.collect(study, root / task), root / task, study=study)
    return out


def test_html_opens_with_the_chosen_configuration_not_markdown(pages: dict[str, Path]) -> None:
    page = pages["train"].read_text()
    assert "<pre>" not in page and "###" not in page
    card = page[page.index('<section class="card"') : page.index("</section>")]
    assert f"Chosen configuration: trial {CHOSEN}" in card
    assert (
        "2,580 tokens/s per GPU" in card
        and "median of 3 fresh processes, 95% interval 2,518 to 2,643" in card
    )  # recomputed from the samples
    # the last word, the one gain sentence of every form (study/bound.py)
    assert "Trial 4 beats your setting 2.58x (95% interval" in card and "Gain:" not in card
    assert "MFU: <b>25.8%</b>" in card  # 0.26 scaled by 2580 / 2600
    # the gain's basis: the baseline was not confirmed
    assert "over your setting&#x27;s search measurement" in card
    assert "What it costs to apply" in card and "precision: fp32 &rarr;" in card
    assert "All its knobs: precision=" in card and "micro_batch_size=4" in card
    # 6 trial processes of 30-35 s and 8 confirmation samples, on a CPU: no GPU-minutes
    assert "7.8 process-minutes in 14 processes: 6 trial (195 s), 8 confirmation" in card
    assert "too few samples to bound (2 fresh processes)" in page  # trial 3's confirmation


def test_html_marks_the_chosen_trial_in_tables_and_plots(pages: dict[str, Path]) -> None:
    page = pages["train"].read_text()
    rows = re.findall(r'<tr class="chosen">(.*?)</tr>', page)
    assert len(rows) == 2 and all(
        f">{CHOSEN} \u2605 chosen<" in r for r in rows
    )  # trials and confirmation
    assert "2,550, 2,580, 2,600" in page  # the confirmation's samples
    assert page.count('"name":"chosen (best.yaml)"') >= 4  # spread, history, slice, front
    assert '"barmode":"stack"' in page and f'"{CHOSEN} (chosen)"' in page  # GPU time by phase
    assert '"error_y":{"array":' in page  # the measured spread


def test_html_escapes_every_study_string_and_inlines_plotly_once(pages: dict[str, Path]) -> None:
    from plotly.offline import get_plotlyjs

    page = pages["train"].read_text()
    assert (
        "<script>document" not in page and "<img src=x" not in page
    )  # never as markup, nor in plotly's JSON
    assert (
        "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;" in page
    )  # the name, as text
    assert "&lt;img src=x onerror=" in page  # the knob value and the OOM reason, as text
    assert page.count(get_plotlyjs()[:400]) == 1 and not re.search(
        r"<script[^>]*\bsrc=", page
    )  # offline


def test_html_generate_draws_latency_against_its_limit_without_mfu(pages: dict[str, Path]) -> None:
    page = pages["generate"].read_text()
    assert ">MFU</th>" not in page and ">roofline</th>" in page and "roofline: <b>" in page
    assert '"title":{"text":"p99 time per output token (ms)"}' in page and '"text":"limit"' in page


def test_html_without_plotly_is_static_and_says_how_to_get_the_plots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "plotly", None)  # as if the report extra were not installed
    study = _study(f"sqlite:///{tmp_path / 's.db'}", "static")
    data = report.collect(study)
    # two nights of `autotune check` (documents/nightly.py's fields the plot reads)
    data.check_history = [
        {
            "checked_at": f"2026-11-{day}T03:00:00+00:00",
            "ratio": r,
            "ci": [r - 0.02, r + 0.02],
            "status": "pass",
        }
        for day, r in (("20", 1.0), ("23", 0.99))
    ]
    page = report.write_html(data, tmp_path / "out", study=study).read_text()
    assert "pip install &#x27;autotune-llm[report]&#x27;" in page and "Plotly.newPlot" not in page
    pngs = {p.name for p in (tmp_path / "out").glob("*.png")}
    assert pngs >= {"history.png", "time.png", "knobs.png", "checks.png"}
    assert '<tr class="chosen">' in page


def _chromium() -> str:
    found = (
        shutil.which("chromium")
        or shutil.which("chromium-browser")
        or shutil.which("google-chrome")
    )
    if found is None:
        pytest.skip(
            "no Chromium (apt-get install chromium; .ci/run installs it where it runs as root)"
        )
    return found


def _load(browser: str, page: Path, tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    """The page loaded in headless Chromium: its DOM after the scripts ran (stdout), console lines
    (stderr)."""
    args = [
        browser,
        *flags,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=15000",
        "--dump-dom",
        page.as_uri(),
    ]
    return subprocess.run(args, check=False, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_html_in_chromium_renders_plots_without_console_errors(
    pages: dict[str, Path], tmp_path: Path
) -> None:
    browser = _chromium()
    broken = tmp_path / "broken.html"
    broken.write_text("<html><body><script>undefinedFunction()</script></body></html>")
    assert (
        "CONSOLE" in _load(browser, broken, tmp_path).stderr
    )  # a console error is seen where there is one
    for task, page in pages.items():
        proc = _load(browser, page, tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line]
        assert not console, f"{task}: {console[:5]}"
        dom = proc.stdout
        svgs = dom.count('class="main-svg"')
        assert svgs >= 8, f"{task}: plotly drew {svgs} SVGs"
        title = re.search(r"<title>(.*?)</title>", dom, re.DOTALL).group(1)
        assert title.startswith("autotune report: &lt;script&gt;"), title  # no hostile script ran
        assert "&lt;img src=x onerror=" in dom and '<img src="x"' not in dom


# Run in the page after it loaded: the layout as a reader sees it, written into the DOM that
# --dump-dom prints (a probe, not part of the report)
PROBE = """<script>
window.addEventListener("load", () => {
  const doc = document.documentElement;
  const seen = (el) => { const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= window.innerWidth + 1; };
  const shown = (el) => getComputedStyle(el).display !== "none";
  const reasons = [...document.querySelectorAll("tr.reason td")];
  const cells = [...document.querySelectorAll("table td.text")].filter(shown);
  const out = {scroll: doc.scrollWidth - doc.clientWidth, reasons: reasons.length,
    hidden_reasons: reasons.filter((el) => !seen(el)).map((el) => el.textContent.slice(0, 60)),
    cells: cells.length, hidden_cells: cells.filter((el) => !seen(el)).length,
    card_knobs: seen(document.querySelector(".card .knobs"))};
  const pre = document.createElement("pre"); pre.id = "probe";
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script>"""


@pytest.mark.slow
def test_html_in_chromium_shows_every_column_reason_and_knob_without_scroll(
    pages: dict[str, Path], tmp_path: Path
) -> None:
    import json

    from test_report_layout import _study as many_knobs  # a command job's own knob, exclusions

    browser = _chromium()
    study = many_knobs()
    wide = report.write_html(report.collect(study), tmp_path / "many", study=study)
    for width, page in ((1280, pages["train"]), (800, pages["train"]), (800, wide)):
        probed = tmp_path / f"probed-{width}.html"
        probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
        proc = _load(browser, probed, tmp_path, f"--window-size={width},900")
        found = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.DOTALL)
        assert found, proc.stderr[-2000:]
        out = json.loads(found.group(1).replace("&quot;", '"'))
        assert out["scroll"] <= 0, f"{width}px: {out['scroll']} px of horizontal scroll"
        assert out["reasons"] >= 1 and not out["hidden_reasons"], out
        assert out["cells"] >= 12 and out["hidden_cells"] == 0, out
        assert out["card_knobs"], out
    assert "<svg" in wide.read_text() and "failed the numerics check" in wide.read_text()


def test_report_html_checks_phase_is_the_loss_check_and_its_reference_trial() -> None:
    """The loss check (in the trial) and its reference (a trial process of its own, outside the
    trial's wall time) are the bar's `checks`; warm-up is shown without the compile it contains."""
    from autotune.report._data import Row
    from autotune.report._measured import phases_of

    raw = {
        "start": 1,
        "build": 2,
        "warmup": 5,
        "compile": 3,
        "measure": 4,
        "check": 1.5,
        "reference": 10,
    }
    blank = {f.name: None for f in dataclasses.fields(Row)}
    got = phases_of(Row(**{**blank, "number": 0, "state": "ok", "wall_s": 20.0, "phases_s": raw}))
    assert got["seconds"]["checks"] == 11.5 and got["seconds"]["warmup"] == 2
    assert got["wall_s"] == 30 and got["seconds"]["other"] == 6.5
    assert sum(got["seconds"].values()) == got["wall_s"]
