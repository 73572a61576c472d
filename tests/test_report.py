"""autotune report on finished, running and interrupted studies; JSON, Markdown, HTML; speed."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from conftest import cli_here, tiny
from optuna.distributions import CategoricalDistribution

from autotune import report
from autotune.report import pareto_front, write_html


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("report")
    # every point of the list (a grid; no step past its edge): the study keeps its OOM of
    # micro-batch 8 whatever the speeds measured (TPE, led by them, left it out of one CI run)
    study = {"trials": 4, "sampler": "grid", "extend_edges": False}
    (root / "m.yaml").write_text(__import__("yaml").safe_dump(tiny(study=study)))
    proc = cli_here(
        "search",
        "m.yaml",
        "--out",
        "out",
        "--device",
        "cpu",
        cwd=root,
        env={"AUTOTUNE_FAULT": "oom@micro_batch_size>=8"},
    )
    assert proc.returncode == 0, proc.stderr
    return root / "out" / "t"


@pytest.mark.slow
def test_report_finished_study_rich(finished: Path) -> None:
    proc = cli_here("report", str(finished), "--no-html", cwd=finished)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "t on cpu:" in out and "best first" in out
    order = [out.index(h) for h in ("Chosen (best.yaml)", "Left out of the search", "Trials")]
    assert order == sorted(order)
    assert "out of memory" in out and "Remedy: a smaller micro-batch" in out
    assert "Which knobs mattered" in out and "process-minutes in" in out  # a CPU: no GPU-minutes
    assert "Trial processes by phase:" in out and "measure" in out


@pytest.mark.slow
def test_report_json_has_everything(finished: Path) -> None:
    proc = cli_here("report", str(finished), "--format", "json", cwd=finished)
    data = json.loads(proc.stdout)
    assert data["best"]["tokens_per_s_per_gpu"] == max(
        r["tokens_per_s_per_gpu"] for r in data["trials"] if r["state"] == "ok"
    )
    assert data["baseline"]["number"] == 0
    assert data["searched"] == ["micro_batch_size", "precision"]
    assert set(data["effects"]["knobs"]["precision"]["values"]) <= {"fp32", "bf16"}
    assert "oom" in data["failures"] and any(g["kind"] == "oom" for g in data["excluded"])
    ok = [r for r in data["trials"] if r["state"] == "ok"]
    assert [r["tokens_per_s_per_gpu"] for r in ok] == sorted(
        (r["tokens_per_s_per_gpu"] for r in ok), reverse=True
    )
    assert {"start", "build", "compile", "warmup", "measure"} <= set(data["time"]["phases_s"])


@pytest.mark.slow
def test_report_markdown(finished: Path) -> None:
    proc = cli_here("report", str(finished), "--format", "markdown", cwd=finished)
    assert proc.stdout.startswith("### autotune: t (cpu)")
    assert "| # | micro_batch_size | precision | tokens/s/GPU |" in proc.stdout


@pytest.mark.slow
def test_report_html_renders_with_plots(finished: Path, tmp_path: Path) -> None:
    proc = cli_here("report", str(finished), "--html", str(tmp_path / "h"), cwd=finished)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "h" / "report.html").read_text()
    # a trial, or your setting where the confirmation kept it (race.pick: within noise of the best)
    chosen = re.search(
        r"Chosen configuration: (trial \d+|your setting \(trial 0, the baseline\))", page
    )
    assert chosen is not None and "<pre>" not in page
    if report._plots.available():  # Optuna's plots, interactive (the report extra)
        assert page.count("Plotly.newPlot(") >= 5
    else:
        assert page.count('<img alt="') >= 3 and "autotune-llm[report]" in page


@pytest.mark.slow
def test_report_running_and_interrupted_study(finished: Path, tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'copy.db'}"
    optuna.copy_study(
        from_study_name="t", from_storage=f"sqlite:///{finished / 'study.db'}", to_storage=storage
    )
    study = optuna.load_study(study_name="t", storage=storage)
    running = study.ask(
        {"micro_batch_size": CategoricalDistribution([2, 4, 8])}
    )  # a trial in flight
    stopped = study.ask({"micro_batch_size": CategoricalDistribution([2, 4, 8])})
    stopped.set_user_attr("status", "interrupted")
    study.tell(stopped, state=optuna.trial.TrialState.FAIL)
    proc = cli_here(
        "report", "--study", "t", "--storage", storage, "--format", "json", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    states = {r["number"]: r["state"] for r in data["trials"]}
    assert states[running.number] == "running" and states[stopped.number] == "interrupted"
    assert data["counts"]["running"] == 1 and data["failures"]["interrupted"]["count"] == 1


def test_report_bad_inputs(tmp_path: Path) -> None:
    proc = cli_here("report", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2 and "no study.db in" in proc.stderr
    proc = cli_here(
        "report", "--study", "x", "--storage", f"sqlite:///{tmp_path / 'e.db'}", cwd=tmp_path
    )
    assert (
        proc.returncode == 2 and "no such SQLite file" in proc.stderr
    )  # reading never creates a database
    assert not (tmp_path / "e.db").exists()
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    optuna.create_study(study_name="other", storage=empty)
    proc = cli_here("report", "--study", "x", "--storage", empty, cwd=tmp_path)
    assert (
        proc.returncode == 2
        and "'x' is not in" in proc.stderr
        and "studies there: other" in proc.stderr
    )


def test_report_pareto_front() -> None:
    pts = [(10.0, 100.0, 0), (20.0, 150.0, 1), (15.0, 90.0, 2), (30.0, 140.0, 3), (5.0, 50.0, 4)]
    assert pareto_front(pts) == [4, 0, 1]


def _synthetic_study(storage: str, n: int) -> None:
    study = optuna.create_study(study_name="big", storage=storage, direction="maximize")
    dist = {
        "micro_batch_size": CategoricalDistribution([8, 16, 32, 64]),
        "precision": CategoricalDistribution(["fp32", "tf32", "fp16", "bf16"]),
        "compile": CategoricalDistribution([False, True]),
    }
    trials = []
    for i in range(n):
        params = {
            "micro_batch_size": [8, 16, 32, 64][i % 4],
            "precision": ["fp32", "tf32", "fp16", "bf16"][i // 4 % 4],
            "compile": bool(i // 16 % 2),
        }
        value = 1000.0 * (1 + i % 7) * (2 if params["compile"] else 1)
        attrs = {
            "status": "ok",
            "knobs": {**params, "grad_accum_steps": 1, "nccl_algo": "default"},
            "predicted": False,
            "wall_s": 20.0,
            "reason": "",
            "metrics": {
                "tokens_per_s_per_gpu": value,
                "tokens_per_s": value,
                "mfu": 0.3,
                "peak_mem_gib": 1.0 + i % 5,
                "step_time": {"spread_pct": 1.0},
            },
            "phases_s": {"start": 3.0, "build": 5.0, "warmup": 6.0, "compile": 2.0, "measure": 4.0},
            "telemetry": {
                "series": [
                    {
                        "t": float(t),
                        "power_w": 600.0,
                        "sm_clock_mhz": 1900,
                        "temperature_c": 60,
                        "throttle": [],
                    }
                    for t in range(50)
                ]
            },
        }
        trials.append(
            optuna.trial.create_trial(
                params=params, distributions=dist, value=value, user_attrs=attrs
            )
        )
    study.add_trials(trials)


def _statements(work: Callable[[], None]) -> int:
    """How many SQL statements work() sends to a storage (SQLAlchemy's event on every engine)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    sent: list[str] = []

    def count(conn, cursor, statement, *_: Any) -> None:
        sent.append(statement)

    event.listen(Engine, "before_cursor_execute", count)
    try:
        work()
    finally:
        event.remove(Engine, "before_cursor_execute", count)
    return len(sent)


@pytest.mark.slow
def test_report_100_trials_cost_no_more_storage_calls_than_one(tmp_path: Path) -> None:
    """What 100 trials cost the report beyond one trial's: no storage call per trial. The table
    (as `autotune report --study --storage` makes it) and the HTML page of a 100-trial study send
    the storage as many statements as those of a one-trial study."""
    import io

    from rich.console import Console

    sent = {}
    for n in (1, 100):
        storage = f"sqlite:///{tmp_path / f'{n}.db'}"
        _synthetic_study(storage, n)
        shown = io.StringIO()

        def table() -> None:
            study, folder = report.load_study(None, "big", storage)
            report.render_rich(report.collect(study, folder), Console(file=shown, width=200))

        def page() -> None:
            study = optuna.load_study(study_name="big", storage=storage)
            write_html(report.collect(study), tmp_path / f"html{n}", study=study)

        sent[n] = (_statements(table), _statements(page))
        assert f"Trials, best first ({n})" in shown.getvalue()
        assert (tmp_path / f"html{n}" / "report.html").is_file()
    assert min(sent[1]) > 0 and sent[100] == sent[1], sent


@pytest.mark.slow
def test_report_html_a_new_page_never_sits_beside_an_older_reports_plots(
    finished: Path, tmp_path: Path
) -> None:
    """Drawn aside, then put in place at once: an older report's plot that this one lacks is
    removed, and no temporary folder is left behind."""
    from autotune.report import collect, load_study

    out = tmp_path / "html"
    out.mkdir()
    (out / "checks.png").write_bytes(b"an older report's plot")
    data = collect(*load_study(finished, None, None))
    data.check_history = []
    write_html(data, out)
    assert not (out / "checks.png").exists() and (out / "report.html").exists()
    assert [p.name for p in out.iterdir() if p.name.startswith(".report-")] == []


@pytest.mark.slow
def test_report_of_a_locked_study_names_what_was_given(finished: Path, tmp_path: Path) -> None:
    """A study.db another process holds locked: the message says so and names STUDY_DIR, not a
    --storage that was never given."""
    import sqlite3

    conn = sqlite3.connect(finished / "study.db", isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    try:
        proc = cli_here("report", str(finished), "--no-html", cwd=tmp_path)
    finally:
        conn.execute("ROLLBACK")
        conn.close()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        proc.stderr.startswith("error: STUDY_DIR:")
        and "another process holds it locked" in proc.stderr
    )
    assert "--storage" not in proc.stderr


def test_report_mfu_says_how_its_flops_were_obtained() -> None:
    study = optuna.create_study(study_name="f", direction="maximize")
    dist = {"micro_batch_size": CategoricalDistribution([8, 16])}
    for mbs, value in ((8, 100.0), (16, 120.0)):
        attrs = {
            "status": "ok",
            "knobs": {"micro_batch_size": mbs},
            "reason": "",
            "predicted": False,
            "metrics": {"tokens_per_s_per_gpu": value, "tokens_per_s": value, "mfu": 0.3},
            "applied": {"flops": "counted by torch.utils.flop_counter over one forward+backward"},
        }
        study.add_trial(
            optuna.trial.create_trial(
                params={"micro_batch_size": mbs}, distributions=dist, value=value, user_attrs=attrs
            )
        )
    data = report.collect(study)
    assert data.mfu_flops == "counted by torch.utils.flop_counter over one forward+backward"
    assert (
        "MFU 30.0% of the bf16 dense peak (FLOPs: counted by torch.utils.flop_counter over one "
        "forward+backward)" in report.to_markdown(data)
    )


# --- numbers a user can trust at a glance (issue 29): collect on small in-memory studies, no trial
# run ---------


def _trial(
    params: dict, value: float, steps: list[float] | None = None
) -> optuna.trial.FrozenTrial:
    """A completed trial as the search stores it: knobs, status, metrics, raw step times."""
    dist = {
        "micro_batch_size": CategoricalDistribution([2, 4, 8]),
        "compile": CategoricalDistribution([False, True]),
    }
    attrs = {
        "status": "ok",
        "knobs": dict(params),
        "predicted": False,
        "wall_s": 10.0,
        "reason": "",
        "metrics": {
            "tokens_per_s_per_gpu": value,
            "tokens_per_s": value,
            "mfu": None,
            "peak_mem_gib": 1.0,
            "step_time": {"spread_pct": 1.0},
        },
        "raw": {"step_times_s": steps or [1.0, 1.01, 0.99, 1.0]},
    }
    return optuna.trial.create_trial(
        params=params, distributions={k: dist[k] for k in params}, value=value, user_attrs=attrs
    )


def _study(values: list[tuple[dict, float]], base_steps: list[float] | None = None) -> optuna.Study:
    """An in-memory study of these (knobs, tokens/s) trials; the first is the baseline."""
    study = optuna.create_study(direction="maximize")
    study.add_trials(
        [_trial(p, v, base_steps if i == 0 else None) for i, (p, v) in enumerate(values)]
    )
    study.set_user_attr("baseline_knobs", values[0][0])
    return study


def _confirm(study: optuna.Study, samples: dict[int, list[float]], chosen: int) -> None:
    """A stored confirmation of the top trials (as search/confirm.py stores it) that chose
    `chosen`."""
    stats = [
        {
            "trial": n,
            "knobs": {},
            "changed_knobs": [],
            "samples": s,
            "search_value": 1.0,
            "failures": [],
            "median": sorted(s)[len(s) // 2],
            "ci95": [0.0, 1.1e12],
        }
        for n, s in samples.items()
    ]
    study.set_user_attr(
        "confirmation",
        {
            "candidates": list(samples),
            "rounds_done": 3,
            "stats": stats,
            "chosen": chosen,
            "why": "within noise, fewer knobs changed",
        },
    )


MBS = [{"micro_batch_size": m, "compile": c} for c in (False, True) for m in (2, 4, 8)]


def test_report_json_chosen_is_best_yaml_s_choice_not_the_search_best() -> None:
    study = _study([(MBS[0], 100.0), (MBS[1], 180.0), (MBS[2], 200.0)])
    _confirm(study, {2: [190.0, 192.0, 191.0], 1: [188.0, 189.0, 190.0]}, chosen=1)
    data = json.loads(report.to_json(report.collect(study)))
    assert data["best"]["number"] == 2 and data["chosen"]["trial"] == 1
    chosen = data["chosen"]
    assert chosen["knobs"] == MBS[1] and chosen["confirmed"] and chosen["samples"] == 3
    assert (
        chosen["tokens_per_s_per_gpu"] == 189.0 and chosen["search_tokens_per_s_per_gpu"] == 180.0
    )
    assert chosen["ci95"][0] < 189.0 < chosen["ci95"][1] and chosen["speedup_vs_baseline"] == 1.89
    unconfirmed = report.collect(_study([(MBS[0], 100.0), (MBS[1], 180.0)])).chosen
    assert (
        unconfirmed["trial"] == 1 and not unconfirmed["confirmed"] and unconfirmed["ci95"] is None
    )


def test_report_interval_of_too_few_samples_says_so_in_every_format() -> None:
    from rich.console import Console

    study = _study([(MBS[0], 100.0), (MBS[1], 180.0), (MBS[2], 200.0)])
    _confirm(
        study, {2: [1000.0, 30000.0], 1: [188.0, 189.0, 190.0]}, chosen=2
    )  # 2 samples 30x apart
    data = report.collect(study)
    assert data.confirmation is not None
    st = next(s for s in data.confirmation.stats if s.trial == 2)
    ci, why = st.interval()  # recomputed: the stored one bounds nothing
    assert ci is None and why is not None and why.startswith("too few samples (2;")
    assert json.loads(report.to_json(data))["chosen"]["ci95"] is None
    assert "too few samples (2;" in report.to_markdown(data)
    console = Console(file=__import__("io").StringIO(), width=300)
    report.render_rich(data, console)
    shown = console.file.getvalue()
    assert (
        "too few samples" in shown
        and "1,100,000,000,000" not in shown
        and "95% interval 0 to" not in shown
    )


def test_metrics_interval_bounds_only_what_its_samples_bound() -> None:
    from autotune import intervals

    ci, why = intervals.bounded_interval([100.0, 101.0, 99.0])
    assert why is None and 97 < ci[0] < 100 < ci[1] < 103
    assert intervals.bounded_interval([100.0, 110.0]) == (
        None,
        "too few samples (2; an interval needs 3)",
    )
    ci, why = intervals.bounded_interval([100.0, 400.0, 1600.0])  # 3 samples spread 16x: no bound
    assert ci is None and why.startswith("too few samples to bound (3;")


def test_report_unsteady_baseline_flags_every_ratio() -> None:
    from autotune.report._text import chosen_lines

    unsteady = [
        1.0,
        1.0,
        2.2,
        1.0,
        2.4,
        1.0,
        1.1,
        2.3,
    ]  # a CPU swinging between two speeds: (p90-p10)/median
    data = report.collect(_study([(MBS[0], 100.0), (MBS[1], 29300.0)], base_steps=unsteady))
    assert data.baseline_steadiness["unsteady"] and data.baseline_steadiness["limit_pct"] == 50.0
    spread = round(data.baseline_steadiness["spread_pct"])
    flag = f"293.00x (baseline unsteady: spread {spread}%)"
    # every "x baseline" carries the flag; the card's gain is the last word's one sentence, which
    # states no gain from one process a side (study/bound.py)
    assert f"| {flag} |" in report.to_markdown(data)
    assert chosen_lines(data)[1] == data.bound["text"] and "not shown to beat" in data.bound["text"]
    assert data.baseline.speedup_flag is None  # the baseline's own 1.00x carries no flag
    steady = report.collect(_study([(MBS[0], 100.0), (MBS[1], 29300.0)]))
    assert not steady.baseline_steadiness["unsteady"] and "unsteady" not in report.to_markdown(
        steady
    )


def test_report_effects_include_every_knob_and_rank_only_above_noise() -> None:
    # compile +50% paired, micro-batch under 1%: PED-ANOVA could rank either first from five trials
    runs = [
        (MBS[0], 100.0),
        (MBS[3], 150.0),
        (MBS[1], 100.5),
        (MBS[4], 150.4),
        (MBS[2], 100.3),
    ]
    study = _study(runs)
    _confirm(study, {3: [150.2, 150.9, 150.4], 1: [150.0, 151.0, 150.5]}, chosen=3)
    data = report.collect(study)
    eff, noise = data.effects, data.noise
    assert set(eff["knobs"]) == {"micro_batch_size", "compile"}
    assert 0.4 < noise["pct"] < 0.7 and "fresh-process" in noise["how"]
    assert eff["ranked"] == ["compile"]  # micro-batch's 0.3% is within the 0.5% noise
    compile_on = eff["knobs"]["compile"]["values"]["True"]
    assert compile_on["pairs"] == 2 and 49.0 < compile_on["paired_pct"] < 51.0
    assert eff["knobs"]["compile"]["effect_pct"] == compile_on["paired_pct"]
    mbs = eff["knobs"]["micro_batch_size"]  # its best at 8 (100.3, eager only) is confounded
    assert mbs["basis"] == "paired" and mbs["effect_pct"] < 0.5
    text = report.to_markdown(data)
    assert "1. compile (effect 49.8%, paired)" in text and "micro_batch_size (effect" in text
    assert "(within noise or one value)" in text
    one = report.collect(_study([(MBS[0], 100.0), (MBS[3], 150.0)])).effects
    assert one["knobs"]["micro_batch_size"]["effect_pct"] is None  # one value ran: no effect
