"""The report's layout and its headline (issue 36): the chosen configuration first with every knob
(a command job's own too), what the search left out with the evidence and remedy, the trials at 80
columns (a snapshot), one cost of every process, and the projection of a full run."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution
from rich.console import Console

from autotune import report

SNAPSHOT = Path(__file__).parent / "snapshots" / "report-80.txt"
DIST = {
    "micro_batch_size": CategoricalDistribution([2, 4, 8]),
    "precision": CategoricalDistribution(["bf16", "fp8"]),
    "lr_warmup": CategoricalDistribution([0, 100]),  # a command job's own knob
}
CANDIDATE = [10.4 - 0.2 * i for i in range(30)]
REFERENCE = [10.4 - 0.3 * i for i in range(30)]


def _attrs(knobs: dict[str, Any], status: str, value: float | None, **extra: Any) -> dict:
    attrs = {"status": status, "knobs": knobs, "predicted": False, "reason": "", **extra}
    if value is not None:
        steps = [1000.0 / value * f for f in (0.99, 1.0, 1.0, 1.01)]
        attrs["metrics"] = {
            "tokens_per_s_per_gpu": value,
            "tokens_per_s": value,
            "mfu": value / 1e5,
            "peak_mem_gib": 10.0 + knobs["micro_batch_size"],
        }
        attrs["raw"] = {"step_times_s": steps}
        attrs.setdefault("wall_s", 60.0)
        phases = {"start": 2.0, "build": 3.0, "warmup": 20.0, "compile": 10.0, "measure": 20.0}
        attrs.setdefault("phases_s", phases)
    return attrs


def _check() -> dict[str, Any]:
    attempt = {"seed": 1, "losses": CANDIDATE, "reference": REFERENCE, "verdict": {"gap_nats": 2.1}}
    return {
        "passed": False,
        "against": "precision bf16",
        "study_floor_nats": 0.01,
        "attempts": [attempt, {**attempt, "seed": 2}],
    }


def _add(study: optuna.Study, params: dict, attrs: dict, value: float | None = None) -> None:
    state = (
        optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.PRUNED
    )
    study.add_trial(
        optuna.trial.create_trial(
            params=params,
            distributions={k: DIST[k] for k in params},
            value=value,
            user_attrs=attrs,
            state=state,
        )
    )


def _study() -> optuna.Study:
    """A baseline, five measured trials, one fp8 trial failing the numerics check, two fp8 points
    predicted from it, a timeout; a confirmation that re-measured the chosen and the baseline."""
    study = optuna.create_study(study_name="layout", direction="maximize")
    base = {"micro_batch_size": 2, "precision": "bf16", "lr_warmup": 0}
    runs = [(2, 0, 1000.0), (4, 0, 1400.0), (8, 0, 1500.0), (4, 100, 1390.0), (8, 100, 1510.0)]
    for mbs, warm, value in runs:
        knobs = {**base, "micro_batch_size": mbs, "lr_warmup": warm}
        _add(study, knobs, _attrs(knobs, "ok", value), value)
    fp8 = {**base, "precision": "fp8", "micro_batch_size": 4}
    reason = "numerics check failed twice: it learned 40% of what the reference learned"
    taught = _attrs(
        fp8,
        "invalid_config",
        None,
        reason=reason,
        cause={"precision": "fp8"},
        loss_check=_check(),
        wall_s=50.0,
        phases_s={"check": 30.0, "reference": 15.0},
    )
    _add(study, fp8, taught)
    for mbs in (2, 8):
        knobs = {**fp8, "micro_batch_size": mbs}
        why = "predicted: precision fp8 failed trial 5's numerics check (trial 5: ...)"
        _add(study, knobs, _attrs(knobs, "invalid_config", None, reason=why, predicted=True))
    slow = {**base, "micro_batch_size": 8, "lr_warmup": 100, "precision": "bf16"}
    timeout = "timeout: the trial's limit of 5 min (study.trial_timeout_min) passed in compile"
    _add(
        study, {"micro_batch_size": 2}, _attrs(slow, "timeout", None, reason=timeout, wall_s=300.0)
    )
    study.set_user_attr("baseline_knobs", base)
    study.set_user_attr("device", "cuda")
    study.set_user_attr("config", {"workload": {"task": "train", "world_size": 1}})
    study.set_user_attr("confirmation", _confirmation())
    return study


def _confirmation() -> dict[str, Any]:
    def stats(trial: int, samples: list[float]) -> dict[str, Any]:
        return {
            "trial": trial,
            "samples": samples,
            "search_value": 1.0,
            "failures": [],
            "median": sorted(samples)[1],
            "knobs": {},
            "changed_knobs": [],
            "walls_s": [61.0, 62.0, 63.0],
        }

    return {
        "candidates": [4, 2],
        "rounds_done": 3,
        "chosen": 2,
        "why": "within noise of trial 4, changes fewer knobs",
        "stats": [stats(4, [1480.0, 1490.0, 1500.0]), stats(2, [1470.0, 1485.0, 1495.0])],
        "baseline": {
            "trial": 0,
            "samples": [990.0, 1000.0, 1005.0],
            "failures": [],
            "walls_s": [50.0, 50.0, 50.0],
        },
    }


def _text(data: dict[str, Any], width: int, wide: bool = False) -> str:
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    report.render_rich(data, console, wide=wide)
    return console.file.getvalue() if wide else console.export_text()


def _written(folder: Path, trial: int = 2) -> Path:
    """The study's folder with the best.yaml a search wrote for the chosen trial (only its choice:
    what the report reads of it)."""
    (folder / "best.yaml").write_text(f"chosen:\n  trial: {trial}\n")
    return folder


def test_report_leads_with_the_chosen_and_every_knob_its_job_s_own_included(
    tmp_path: Path,
) -> None:
    data = report.collect(_study(), _written(tmp_path))
    assert data.searched == ["micro_batch_size", "precision", "lr_warmup"]
    c = data.chosen
    assert c["trial"] == 2 and c["knobs"]["lr_warmup"] == 0
    text = _text(data, 80)
    assert text.index("Chosen (best.yaml): trial 2") < text.index("Left out") < text.index("Trials")
    assert "lr_warmup=0" in text and "micro_batch_size=8" in text


def test_report_names_what_was_left_out_with_the_loss_curves_and_the_remedy() -> None:
    data = report.collect(_study())
    rule = next(g for g in data.excluded if g["kind"] == "numerics")
    assert rule["trials"] == [5, 6, 7] and rule["taught_by"] == 5 and rule["predicted"] == 2
    curves = rule["evidence"]["attempts"]
    assert len(curves) == 2 and curves[0]["candidate"] == CANDIDATE
    assert curves[0]["reference"] == REFERENCE
    text = " ".join(_text(data, 80).split())
    assert "precision=fp8: failed the numerics check (the rule trial 5 taught): 3 trial(s)" in text
    assert "fix its knob in the space" in text and "Loss curves: seed 1: loss 10.40 ->" in text
    assert "raise study.trial_timeout_min" in text
    markdown = report.to_markdown(data)
    assert "**Left out of the search: 4 trial(s)**" in markdown and "noise floor 0.010" in markdown


def test_report_counts_every_process_and_divides_by_the_baseline_s_confirmed_figure() -> None:
    data = report.collect(_study())
    cost = data.cost["by_kind"]
    assert cost["trials"] == {"processes": 7, "seconds": 650.0}  # the timeout's 300 s included
    assert cost["references"] == {"processes": 1, "seconds": 15.0}
    assert cost["confirmation"] == {"processes": 9, "seconds": 2 * 186.0 + 150.0}
    assert data.cost["processes"] == 17 and not data.cost["confirmation_estimated"]
    c = data.chosen
    assert (
        c["speedup_basis"]
        == "confirmed median / the baseline's confirmed median of the same rounds"
    )
    assert c["speedup_vs_baseline"] == c["tokens_per_s_per_gpu"] / 1000.0
    # the gain's 95% interval from both sets of samples (Student t on logs, pooled)
    lo, hi = c["gain"]["ci95"]
    assert 1.4 < lo < c["speedup_vs_baseline"] < hi < 1.6 and not c["gain"]["within_noise"]
    text = " ".join(_text(data, 80).split())
    # one sentence on the gain, the race's interval of the same samples (study/bound.py)
    assert f"Trial 2 beats your setting 1.49x (95% interval {lo:.2f}x to {hi:.2f}x;" in text
    assert "Gain:" not in text and text.count("beats your setting") == 1


def test_report_names_no_best_yaml_before_it_exists(tmp_path: Path) -> None:
    """A study read while its search confirms (or after one killed before it wrote best.yaml): the
    choice is "Leading", never "Chosen (best.yaml)", and the report says what to run; a best.yaml
    of another choice (an earlier search's) does not count."""
    (tmp_path / "other").mkdir()
    for folder in (tmp_path, _written(tmp_path / "other", trial=4)):
        text = " ".join(_text(report.collect(_study(), folder), 80).split())
        assert "Chosen (best.yaml)" not in text and "Leading: trial 2" in text
        assert "run the same search command to write it" in text


def test_report_projects_a_full_run_and_the_search_s_cost_against_its_saving() -> None:
    data = report.collect(_study(), train_tokens=1e9)
    p = data.projection
    base, chosen = 1000.0, data.chosen["tokens_per_s_per_gpu"]
    assert abs(p["hours"]["baseline"] - 1e9 / base / 3600) < 1e-9
    assert abs(p["saved_gpu_hours"] - (1e9 / base - 1e9 / chosen) / 3600) < 1e-9
    assert abs(p["net_gpu_hours"] - (p["saved_gpu_hours"] - data.cost["gpu_min"] / 60)) < 1e-9
    assert "A full run of 1,000,000,000 tokens on 1 GPU(s)" in " ".join(_text(data, 80).split())
    assert report.collect(_study()).projection is None


def test_report_at_80_columns_matches_its_snapshot_and_cuts_nothing(tmp_path: Path) -> None:
    text = _text(report.collect(_study(), _written(tmp_path)), 80)
    lines = text.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines) and "…" not in text
    if os.environ.get("AUTOTUNE_WRITE_SNAPSHOT"):  # a layout change: rewrite, review, commit
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text("\n".join(line.rstrip() for line in lines) + "\n")
    assert "\n".join(line.rstrip() for line in lines) + "\n" == SNAPSHOT.read_text()


def test_report_trials_table_drops_columns_that_never_change_and_wide_shows_all() -> None:
    data = report.collect(_study())
    narrow, wide = _text(data, 80), _text(data, 80, wide=True)
    assert "#4 ok:" in narrow  # one record a trial: the table cannot fit 80 columns
    assert "┃ micro_batch_size ┃" in wide  # the whole table, past 80 columns
    assert max(len(line) for line in wide.splitlines()) > 80
    assert "┏" in _text(data, 250)  # a terminal wide enough gets the table
