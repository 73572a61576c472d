"""task command, a new user's first day (issue 51): a batch size the script hard-codes declared in
space, Lightning's PL_TRAINER_* variables exported as the trial set them, the interpreter by the
path the trial ran, a running-average log pattern refused by validation and a baseline that
measured nothing ending the search, and the flags that exist only for the measurement marked."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import cli_here

from autotune.command import render as command_render
from autotune.command.task import unmeasured
from autotune.documents.record import TrialRecord
from autotune.errors import ConfigError, ExitCode, UnmeasuredError
from autotune.export import export
from autotune.job import load_config
from autotune.search.run import run_search
from autotune.space import resolve_space


def _yaml(tmp_path: Path, space: dict[str, Any], **command: Any) -> Path:
    doc = {
        "name": "job",
        "workload": {"task": "command", "warmup_steps": 2, "measure_steps": 4},
        "command": {"argv": ["{python}", "train.py"], **command},
        "space": space,
        "study": {"trials": 3, "seed": 0, "confirm_top": 0, "trial_timeout_min": 1},
    }
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


# --- 1. a value the script sets itself ---------------------------------------------------------


def test_command_one_unmapped_value_is_what_the_script_sets(tmp_path: Path) -> None:
    cfg = load_config(_yaml(tmp_path, {"micro_batch_size": [20], "precision": "bf16"}))
    space = resolve_space(cfg, "cpu")
    knobs = space.knobs(space.baseline)
    # recorded in every trial's knobs (tokens, memory and the report read them) ...
    assert knobs["micro_batch_size"] == 20 and knobs["precision"] == "bf16"
    # ... never rendered into the command
    command = cfg.command.model_dump(mode="json")
    rendered = command_render.render(command, knobs, None, tmp_path, launcher=False)
    assert rendered.argv == [sys.executable, "train.py"] and "20" not in str(rendered.env)


@pytest.mark.parametrize("given", [[20, 24], {"min": 16, "max": 32, "multiple_of": 8}])
def test_command_two_unmapped_values_still_need_a_mapping(tmp_path: Path, given: Any) -> None:
    with pytest.raises(ConfigError, match=r"space.micro_batch_size: \[.*\] set, but") as err:
        load_config(_yaml(tmp_path, {"micro_batch_size": given}))
    assert len(str(err.value).splitlines()) == 1
    assert "one value without a mapping declares what your script sets itself" in str(err.value)


# --- best.yaml of a command study, as write_best records it --------------------------------------


def _best(tmp_path: Path, chosen: dict[str, Any], trial: int = 3, **command: Any) -> Path:
    cmd = {"argv": ["{python}", "train.py"], "knobs": {}, **command}
    doc = {
        "name": "job",
        "chosen": {"trial": trial, "why": "fastest"},
        "knobs": {
            "micro_batch_size": 8,
            "precision": "fp32",
            "grad_accum_steps": 1,
            "compile": False,
            "activation_checkpointing": "none",
            "cuda_alloc_conf": "default",
            **chosen,
        },
        "metrics": {"tokens_per_s_per_gpu": 1000.0},
        "command": cmd,
        "base_dir": "../..",
        "workload": {"task": "command", "warmup_steps": 2, "measure_steps": 4},
    }
    path = tmp_path / "trials" / "job" / "best.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _text(best: Path, fmt: str) -> str:
    return export(best, [fmt])[0].text


def _cd(text: str) -> list[str]:
    return shlex.split(next(x for x in text.splitlines() if x.startswith("cd ")))


def test_export_names_a_declared_knob_as_set_by_your_script(tmp_path: Path) -> None:
    best = _best(tmp_path, {"micro_batch_size": 20})
    for fmt in ("command", "hf", "lightning"):
        form = export(best, [fmt])[0]
        said = "# set by your script (declared in space:, not rendered here): micro_batch_size=20"
        assert said in form.text.splitlines(), fmt
        assert "not mapped" not in form.text and form.missing == [], fmt
    assert "20" not in _cd(_text(best, "command"))
    assert json.loads(_text(best, "json"))["set_by_your_script"] == {"micro_batch_size": 20}


# --- 2. Lightning's variables ----------------------------------------------------------------


def test_export_lightning_renders_the_trainer_variables_the_trial_set(tmp_path: Path) -> None:
    best = _best(tmp_path, {"precision": "bf16", "grad_accum_steps": 4}, measure="lightning")
    text = _text(best, "command")
    words = _cd(text)
    assert "PL_TRAINER_PRECISION=bf16-mixed" in words
    assert "PL_TRAINER_ACCUMULATE_GRAD_BATCHES=4" in words
    assert "not mapped" not in text and "no equivalent" not in text
    said = next(x for x in text.splitlines() if x.startswith("# Lightning's PL_TRAINER_*"))
    assert "precision=bf16 as PL_TRAINER_PRECISION=bf16-mixed" in said
    assert "grad_accum_steps=4 as PL_TRAINER_ACCUMULATE_GRAD_BATCHES=4" in said
    lightning = _text(best, "lightning")
    assert "export PL_TRAINER_PRECISION=bf16-mixed" in lightning
    assert 'precision="bf16-mixed"' in lightning
    # the same study without measure lightning: no such variable, precision is the script's
    plain = _best(tmp_path / "plain", {"precision": "bf16"})
    assert "PL_TRAINER" not in _text(plain, "command")


# --- 3. the interpreter ------------------------------------------------------------------------


def test_export_names_the_interpreter_the_trial_recorded(tmp_path: Path) -> None:
    best = _best(tmp_path, {}, argv=["python", "train.py"])
    ran = str(tmp_path / "venv" / "bin" / "python")
    run = best.parent / "runs" / "0003"
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps({"applied": {"command": [ran, "train.py"]}}))
    text = _text(best, "command")
    assert _cd(text)[3:] == [ran, "train.py"]
    assert f"# {ran}: the program the trial ran (trial 3's record)" in text


def test_export_resolves_the_interpreter_as_the_trial_would(tmp_path: Path) -> None:
    found = shutil.which("python")
    text = _text(_best(tmp_path, {}, argv=["python", "train.py"]), "command")
    assert _cd(text)[3] == (found or "python")
    assert _cd(_text(_best(tmp_path / "p", {}), "command"))[3] == sys.executable
    assert _cd(_text(_best(tmp_path / "q", {}, argv=["./run.sh"]), "command"))[3:] == ["./run.sh"]


# --- 4. a running average, and a baseline that measured nothing ----------------------------------

AVERAGES = [
    r"'train_samples_per_second': (?P<tokens_per_s>[0-9.]+)",
    r"avg tps: (?P<tokens_per_s>[0-9.]+)",
    r"tokens/s \(mean\): (?P<tokens_per_s>[0-9.]+)",
    r"throughput since start (?P<tokens_per_s>[0-9.]+)",
    r"running tps=(?P<tokens_per_s>[0-9.]+)",
    r"cumulative_tps=(?P<tokens_per_s>[0-9.]+)",
    r"tps (?P<tokens_per_s>[0-9.]+) \(avg\)",
    r"(?P<avg_tokens_per_s>[0-9.]+) tok/s(?P<tokens_per_s>)",
    r"overall step time (?P<step_time_s>[0-9.]+) tokens (?P<tokens>[0-9]+)",
]
PER_STEP = [
    r"tps: (?P<tokens_per_s>[0-9][0-9,.]*)",
    r"step (?P<step>\d+) loss (?P<mean_loss>\S+) \| tps: (?P<tokens_per_s>[0-9,]+)",
    r"Running step (?P<step>\d+): tps (?P<tokens_per_s>[0-9.]+)",
    r"cumulative tokens (?P<tokens_total>[0-9]+)",  # a running count is allowed
]


@pytest.mark.parametrize("pattern", AVERAGES)
def test_config_refuses_a_running_average_log_pattern(tmp_path: Path, pattern: str) -> None:
    with pytest.raises(ConfigError, match=r"command.log_pattern: .* reads an average") as err:
        load_config(_yaml(tmp_path, {}, measure="log", log_pattern=pattern))
    message = str(err.value)
    assert len(message.splitlines()) == 1 and "allowed: a figure per step" in message


@pytest.mark.parametrize("pattern", PER_STEP)
def test_config_takes_a_per_step_log_pattern(tmp_path: Path, pattern: str) -> None:
    assert load_config(_yaml(tmp_path, {}, measure="log", log_pattern=pattern)).command


def test_validate_refuses_a_running_average_before_any_trial(tmp_path: Path) -> None:
    path = _yaml(tmp_path, {}, measure="log", log_pattern=AVERAGES[1])
    proc = cli_here("validate", str(path), cwd=tmp_path)
    assert proc.returncode == ExitCode.BAD_INPUT
    assert "command.log_pattern" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


AVERAGE_SAID = "command.log_pattern matched an average since the start, not a step's figure: 'x'"
NO_STEP = "the command exited 0 without reporting a step; expected steps in AUTOTUNE_REPORT"


def _fake_search(tmp_path: Path, fails: dict[int, tuple[str, str]]) -> list[int]:
    """A search of a command study whose trials end as `fails` says by number (else crashed, as a
    knob may make a job crash); returns the numbers launched."""
    seen: list[int] = []
    cfg = load_config(
        _yaml(tmp_path, {"precision": ["fp32", "bf16"]}, knobs={"precision": {"flag": "--p"}})
    )

    def measure(bench: Any, knobs: dict[str, Any], run_dir: Path, *, number: int = 0, **_: Any):
        seen.append(number)
        status, reason = fails.get(number, ("crash", "exited with code 1: ValueError: bad"))
        return TrialRecord(number, knobs, status, reason, wall_s=1.0)

    run_search(cfg, out_root=tmp_path / "trials", device="cpu", measure_fn=measure)
    return seen


@pytest.mark.parametrize(
    "failed", [("invalid_config", AVERAGE_SAID), ("crash", NO_STEP)], ids=["average", "no_step"]
)
def test_search_stops_at_a_baseline_that_measured_nothing(
    tmp_path: Path, failed: tuple[str, str]
) -> None:
    with pytest.raises(UnmeasuredError, match=r"^the baseline \(trial 0\) could not be measured"):
        _fake_search(tmp_path, {0: failed})
    assert UnmeasuredError.exit_code == ExitCode.UNMEASURED == 3


def test_search_goes_on_after_a_baseline_that_failed_for_its_knobs(tmp_path: Path) -> None:
    # a crash of the job itself, or a later trial that reports no step: the knobs may be the cause
    assert _fake_search(tmp_path / "a", {0: ("crash", "exited with code 1: ValueError")}) == [0, 1]
    assert _fake_search(tmp_path / "b", {1: ("crash", NO_STEP)}) == [0, 1]


def test_unmeasured_reasons_are_the_trials_own() -> None:
    assert unmeasured("timeout", "the command reported 0 of 6 steps by the trial's limit")
    assert not unmeasured("oom", NO_STEP) and not unmeasured("ok", AVERAGE_SAID)


# --- 5. flags for the measurement only ---------------------------------------------------------

HF_ARGV = [
    "{python}",
    "train.py",
    "--output_dir",
    "out",
    "--max_steps",
    "1000",
    "--logging_steps",
    "1",
    "--save_strategy",
    "no",
    "--report_to",
    "none",
    "--disable_tqdm",
    "true",
    "--warmup_ratio",
    "0.1",
    "--my_eval_every",
    "5",
]


def test_export_marks_the_flags_for_the_measurement_only(tmp_path: Path) -> None:
    # the HF Trainer script the command runs, read for its arguments class (never run)
    (tmp_path / "train.py").write_text(
        "from transformers import HfArgumentParser, Trainer, TrainingArguments\n"
        "(args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()\n"
    )
    best = _best(
        tmp_path,
        {"micro_batch_size": 4},
        argv=HF_ARGV,
        knobs={"micro_batch_size": {"flag": "--per_device_train_batch_size"}},
        measure_only=["--my_eval_every"],
    )
    command = _text(best, "command")
    marked = next(x for x in command.splitlines() if "for the measurement only" in x)
    for flag in ("--max_steps 1000", "--logging_steps 1", "--save_strategy no", "--report_to none"):
        assert flag in marked
    assert "--disable_tqdm true" in marked and "--my_eval_every 5" in marked
    assert "--warmup_ratio" not in marked and "--per_device_train_batch_size" not in marked
    assert "remove them (or set your own) for your real run" in marked
    hf = _text(best, "hf")
    mark = "# for the measurement only: remove for your real run"
    assert f"    max_steps=1000,  {mark}" in hf.splitlines()
    assert "    per_device_train_batch_size=4," in hf.splitlines()


def test_measure_only_flags_are_lightning_and_torchtitan_too(tmp_path: Path) -> None:
    argv = ["python", "-m", "train", "--trainer.max_steps", "50", "--training.steps", "9"]
    text = _text(_best(tmp_path, {}, argv=argv, measure="lightning"), "command")
    marked = next(x for x in text.splitlines() if "for the measurement only" in x)
    assert "--trainer.max_steps 50" in marked and "--training.steps 9" in marked


def test_config_measure_only_takes_flags(tmp_path: Path) -> None:
    cfg = load_config(_yaml(tmp_path, {}, measure_only=["--max_steps"]))
    assert cfg.command.measure_only == ["--max_steps"]
    with pytest.raises(ConfigError, match=r"command.measure_only: 'max_steps' is not a flag"):
        load_config(_yaml(tmp_path, {}, measure_only=["max_steps"]))


def test_config_command_section_takes_yaml_as_every_section_does() -> None:
    """The command section's base is config.study._Section (config/command.py): unknown keys
    refused, strict types, finite floats, frozen."""
    from autotune.config.command import _Section as CommandSection
    from autotune.config.study import _Section

    assert CommandSection is _Section
