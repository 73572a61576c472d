"""task command, issue 35: the window a trial measures (command/window.py) on series known by
construction, and the user's job measured as it runs: steps streamed, nothing reported thrown away,
recompiling found out, the log read right, an unmodified HF Trainer script measured by autotune's
own callback."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_command import _records, _search, _yaml

from autotune.command import window as windows
from autotune.command.render import render
from autotune.errors import UnmeasuredError

ROOT = Path(__file__).resolve().parent.parent


def _steps(times: list[float], tokens: list[float]) -> list[windows.Step]:
    return list(zip(times, tokens))


def test_window_figure_is_tokens_over_time_not_a_median_of_rates() -> None:
    tokens = [10, 10, 10, 50] * 6
    steps = _steps([0.02 + 0.002 * t for t in tokens], tokens)
    w = windows.window(steps, windows.Rule(2, 8, 60))
    measured = steps[w.start : w.end]
    assert w.tokens_per_s == pytest.approx(
        sum(t for _, t in measured) / sum(s for s, _ in measured)
    )
    assert w.tokens_per_s > 1.2 * sorted(t / s for s, t in measured)[len(measured) // 2]


def test_window_leaves_slow_first_steps_in_the_warm_up() -> None:
    steps = _steps([30.0, 9.0, 5.0] + [1.0] * 20, [100.0] * 23)
    w = windows.window(steps, windows.Rule(1, 8, 60))
    assert w.start == 3 and w.tokens_per_s == pytest.approx(100.0)
    assert w.settled


def test_window_settles_on_steady_steps_and_not_on_noisy_ones() -> None:
    rng = random.Random(0)
    steady = _steps([1.0 + rng.gauss(0, 0.01) for _ in range(11)], [1000.0] * 11)
    assert windows.decide(steady, windows.Rule(3, 8, 60)) is not None
    noisy = _steps([rng.uniform(0.2, 2.0) for _ in range(20)], [1000.0] * 20)
    assert windows.decide(noisy, windows.Rule(3, 8, 60)) is None  # +-3% needs more steps than these
    w = windows.decide(noisy, windows.Rule(3, 8, 20))  # at max_steps: measured, and not settled
    assert (
        w is not None and not w.settled and "not settled" in windows.said(w, windows.Rule(3, 8, 20))
    )


def _grouped(cycles: int, period: int = 12, first_slow: float = 1.1) -> list[windows.Step]:
    """A length-grouped order: each cycle's batches longest first, short batches slower per token;
    the first pass `first_slow` times slower (every shape new)."""
    steps = []
    for c in range(cycles):
        for i in range(period):
            tokens = 60000.0 * (1 - i / period) + 2000
            seconds = (0.2 + tokens / 50000) * (first_slow if c == 0 else 1.0)
            steps.append((seconds, tokens))
    return steps


def test_window_measures_whole_cycles_of_a_length_grouped_order_after_the_first() -> None:
    steps = _grouped(3)
    truth = windows.rate(steps[12:36])  # the steady cycles
    rule = windows.Rule(2, 8, 100)
    early = windows.window(steps[:20], rule)
    assert not early.settled  # tokens per step still falling: the data trend
    w = windows.decide(steps, rule)
    assert w is not None and w.settled and w.cycle == 12
    assert w.start == 14 and w.n == 12  # after the first pass, one whole cycle
    assert w.tokens_per_s == pytest.approx(windows.rate(steps[14:26]))
    assert abs(w.tokens_per_s / truth - 1) < 0.03


def test_window_said_when_only_the_first_pass_of_a_cycle_fits() -> None:
    steps = _grouped(3)[:24]
    rule = windows.Rule(2, 8, 24)
    w = windows.decide(steps, rule)
    assert w is not None and not w.settled and w.cycle == 12
    assert "first pass" in windows.said(w, rule) and "command.max_steps 26" in windows.said(w, rule)


def test_window_packed_steps_need_no_cycle() -> None:
    steps = _steps([0.5] * 11, [65536.0] * 11)
    w = windows.decide(steps, windows.Rule(3, 8, 60))
    assert w is not None and w.settled and w.cycle is None and w.n == 8


@pytest.mark.slow
def test_command_steps_are_seen_as_they_end(tmp_path: Path) -> None:
    """The job reports each step at once: the trial stops it when its window settles, long before
    the most steps it may ask for, and the record says how the window was measured. Steps of 32 ms
    (--bs 8) and a 10% interval: on a loaded machine a wake-up late by milliseconds is a small
    share of a step, so the window settles within the 400 steps (4 ms steps and a 3% interval did
    not, twice, at load average 7); how early the job is stopped is tested, not how tight."""
    command = {"args": ["--bs", "8"], "max_steps": 400, "half_width_pct": 10.0}
    path = _yaml(tmp_path, command)
    rec = _records(_search(path, tmp_path, trials=1))[0]
    assert rec["status"] == "ok", rec["reason"]
    window = rec["metrics"]["window"]
    assert window["settled"] and window["warmup_steps"] + window["measured_steps"] < 400


@pytest.mark.slow
def test_command_trial_at_its_limit_keeps_the_steps_it_reported(tmp_path: Path) -> None:
    from autotune.job import load_config
    from autotune.search.run import run_search

    cfg = load_config(_yaml(tmp_path, {"args": ["--mode", "slow"]}))
    cfg = cfg.model_copy(update={"study": cfg.study.model_copy(update={"trial_timeout_min": 0.45})})
    rec = _records(run_search(cfg, out_root=tmp_path / "trials", device="cpu", trials=1))[
        0
    ]  # 12 s for the job
    assert rec["status"] == "pruned", rec["reason"]
    assert rec["reason"].startswith("timeout after") and "tokens/s" in rec["reason"]
    assert "(study.trial_timeout_min 0.45: raise it to measure more); " in rec["reason"]
    assert " s to its first step (start, model, first compile), " in rec["reason"]
    assert 10 / 1.5 <= rec["metrics"]["tokens_per_s_per_gpu"] <= 50 / 1.5


@pytest.mark.slow
def test_command_job_that_gave_its_steps_and_ignores_the_stop_past_the_limit_is_measured(
    tmp_path: Path,
) -> None:
    from autotune.job import load_config
    from autotune.search.run import run_search

    path = _yaml(tmp_path, {"args": ["--mode", "ignore_stop"], "stop_grace_s": 3600})
    cfg = load_config(path)
    # a limit of 15 s, not 1 min: the job gives its steps in its first second
    cfg = cfg.model_copy(update={"study": cfg.study.model_copy(update={"trial_timeout_min": 0.25})})
    rec = _records(run_search(cfg, out_root=tmp_path / "trials", device="cpu", trials=1))[0]
    assert rec["status"] == "ok", rec["reason"]
    assert "had not exited by the trial's limit, so its process group was ended" in rec["reason"]


@pytest.mark.slow
def test_command_job_that_keeps_recompiling_is_stopped_with_the_remedy(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    path = _yaml(tmp_path, {"args": ["--mode", "recompile"]})
    rec = _records(_search(path, tmp_path, trials=1))[0]
    assert rec["status"] == "pruned", rec["reason"]
    assert rec["reason"].startswith("recompiling") and "pad to a multiple" in rec["reason"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode,pattern,expected",
    [
        (
            "logsci",
            r"tps: (?P<tokens_per_s>[0-9,.]+)",
            2200.0,
        ),  # the README's old pattern: 2.2e+03 read whole
        ("logcount", r"tokens seen: (?P<tokens_total>\d+)", 2000.0),  # a running count, differenced
    ],
)
def test_command_log_reads_exponents_and_running_counts(
    tmp_path: Path, mode: str, pattern: str, expected: float
) -> None:
    command = {"args": ["--mode", mode], "measure": "log", "log_pattern": pattern}
    rec = _records(_search(_yaml(tmp_path, command), tmp_path, trials=1))[0]
    assert rec["status"] == "ok", rec["reason"]
    assert rec["metrics"]["tokens_per_s_per_gpu"] == pytest.approx(expected, rel=0.25)


@pytest.mark.slow
def test_command_log_refuses_an_average_since_the_start(tmp_path: Path) -> None:
    pattern = r"per_second': (?P<tokens_per_s>[0-9.]+)"
    command = {"args": ["--mode", "logavg"], "measure": "log", "log_pattern": pattern}
    # a baseline that measured nothing ends the search at once, its reason the error's
    with pytest.raises(UnmeasuredError, match="average since the start") as err:
        _search(_yaml(tmp_path, command), tmp_path, trials=3)
    assert "measure: hf" in str(err.value) and len(str(err.value).splitlines()) == 1


@pytest.mark.slow
def test_command_log_that_never_matches_fails_fast_quoting_the_closest_lines(
    tmp_path: Path,
) -> None:
    command = {
        "args": ["--mode", "lognone"],
        "measure": "log",
        "first_step_s": 3,
        "log_pattern": r"speed: (?P<tokens_per_s>[0-9.]+) tok/s",
    }
    with pytest.raises(UnmeasuredError) as err:
        _search(_yaml(tmp_path, command), tmp_path, trials=3)
    said = str(err.value)
    assert len(said.splitlines()) == 1
    # ended by first_step_s (3 s), not by the trial's limit (1 min: that would be a timeout)
    assert "could not be measured, so no trial can: no step in 3 s (command.first_step_s" in said
    assert "speed 10" in said


def test_command_measure_lightning_renders_the_trainers_own_variables() -> None:
    command = {"argv": ["python", "fit.py"], "measure": "lightning", "knobs": {}}
    rendered = render(command, {"precision": "bf16", "grad_accum_steps": 4}, None, ROOT)
    assert rendered.env["PL_TRAINER_PRECISION"] == "bf16-mixed"
    assert rendered.env["PL_TRAINER_ACCUMULATE_GRAD_BATCHES"] == "4"
    assert rendered.env["AUTOTUNE_MEASURE"] == "lightning"
    assert rendered.env["PYTHONPATH"].split(":")[0].endswith("_site")


def test_command_measure_lightning_refuses_a_precision_lightning_has_no_name_for(
    tmp_path: Path,
) -> None:
    from autotune.errors import ConfigError
    from autotune.job import load_config

    path = _yaml(
        tmp_path, {"args": [], "measure": "lightning"}, space={"precision": ["bf16", "tf32"]}
    )
    with pytest.raises(ConfigError, match="PL_TRAINER_PRECISION"):
        load_config(path)


@pytest.mark.slow
def test_command_measure_hf_measures_an_unmodified_trainer_script(tmp_path: Path) -> None:
    """The HF example without its callback line (NO_AUTOTUNE_CALLBACK): autotune adds its own. At
    most 8 steps (2 warm-up, 4 measured at least): the callback's steps, not a settled figure."""
    pytest.importorskip("accelerate")
    doc = yaml.safe_load((ROOT / "search_spaces" / "hf-trainer-tiny.yaml").read_text())
    doc["command"].update(cwd=str(ROOT), measure="hf", max_steps=8)
    doc["command"]["env"]["NO_AUTOTUNE_CALLBACK"] = "1"
    doc["space"] = {
        "micro_batch_size": [8],
        "precision": ["fp32"],
        "activation_checkpointing": ["none"],
    }
    doc["command"]["knobs"]["optim"]["values"] = ["adamw_torch"]
    doc["command"]["knobs"]["sampling"]["values"] = ["random"]
    doc["baseline"] = {}
    doc["study"].update(trials=1, confirm_top=0)
    path = tmp_path / "hf.yaml"
    path.write_text(yaml.safe_dump(doc))
    rec = _records(_search(path, tmp_path))[0]
    assert rec["status"] == "ok", rec["reason"]
    assert rec["metrics"]["window"]["measured_steps"] >= 4 and rec["metrics"]["padding_pct"] > 0


@pytest.mark.slow
def test_command_measure_hf_hook_adds_the_callback_once(tmp_path: Path) -> None:
    """The import hook in a fresh process: a Trainer made by the job gets one AutotuneCallback, also
    when the job added its own."""
    pytest.importorskip("transformers")
    code = (
        "from autotune.command.hook import launch; launch.install('hf')\n"
        "from transformers import Trainer, TrainingArguments\n"
        "import torch\n"
        "from autotune.callbacks.hf import AutotuneCallback\n"
        "args = TrainingArguments(output_dir=%r, use_cpu=True, report_to='none')\n"
        "model = torch.nn.Linear(2, 2)\n"
        "for own in ([], [AutotuneCallback()]):\n"
        "    t = Trainer(model=model, args=args, callbacks=own)\n"
        "    print(sum(isinstance(c, AutotuneCallback) for c in t.callback_handler.callbacks))\n"
    ) % str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "1"]


@pytest.mark.slow
def test_command_measure_lightning_hook_adds_the_callback(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    code = (
        "from autotune.command.hook import launch; launch.install('lightning')\n"
        "import lightning.pytorch as pl\n"
        "from autotune.callbacks.lightning import AutotuneCallback\n"
        "t = pl.Trainer(default_root_dir=%r, accelerator='cpu', logger=False,\n"
        "               enable_progress_bar=False)\n"
        "print(sum(isinstance(c, AutotuneCallback) for c in t.callbacks))\n"
    ) % str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "1"


def test_staged_command_search_screens_compile_off() -> None:
    from autotune.job import load_config
    from autotune.search import stages
    from autotune.space import resolve_space

    cfg = load_config(ROOT / "benchmarks" / "spaces" / "hf-padded-llama-1.1b.yaml")
    plan, _ = stages.staging(cfg.study, resolve_space(cfg, "cuda"), 12, "command")
    assert plan.screen == {"compile": False} and plan.costly == {"compile": ["default"]}


def test_reporter_stops_when_the_trial_says_or_at_its_most(tmp_path: Path) -> None:
    from autotune import reporting

    stop = tmp_path / "stop"
    r = reporting.Reporter(
        str(tmp_path / "r.jsonl"), "1,2", sync=lambda: None, stop=str(stop), most=5
    )
    assert [r.step(tokens=10) for _ in range(3)] == [
        False,
        False,
        False,
    ]  # past "needed": the trial decides
    stop.touch()
    assert r.step(tokens=10) is True
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert len(lines) == 5 and '"done": true' in lines[-1]
    capped = reporting.Reporter(
        str(tmp_path / "c.jsonl"), "1,2", sync=lambda: None, stop=str(tmp_path / "x"), most=2
    )
    assert [capped.step(tokens=1) for _ in range(2)] == [False, True]


def test_report_flags_a_command_baseline_by_its_window_not_its_spread() -> None:
    from autotune.report._collect import _unsteady_flag, _window_steadiness

    settled = {
        "settled": True,
        "said": "50 steps after 53 of warm-up (1 cycle(s))",
        "half_width_pct": None,
    }
    assert _unsteady_flag(_window_steadiness(settled)) is None
    loose = {
        "settled": False,
        "said": "57 steps ...: not settled to +-3% within 60 steps",
        "half_width_pct": 5.1,
    }
    assert _unsteady_flag(_window_steadiness(loose)) == f"baseline unsteady: window {loose['said']}"
