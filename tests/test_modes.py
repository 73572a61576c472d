"""task command's measure modes as plug-ins (autotune/modes): a mode registered in MODES alone is
accepted by the schema with its own rules, found by the trial side (where it reads the job's steps,
how it stops it), the hook and the rendering (its Trainer, its knobs' variables) and export (its
fitting forms); the list of modes is the registry's, its messages today's."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from autotune import modes
from autotune.errors import ConfigError
from autotune.modes import Mode


def _rules(section: Mapping[str, Any]) -> None:
    if "NO_FAKE" in (section.get("env") or {}):
        raise ValueError("command.env: measure fake refuses NO_FAKE")


# a mode as a new module would declare it: a DeepSpeed-like job that reports its steps, stopped by
# SIGTERM, whose micro-batch reaches it as a variable, fitted by the Lightning form
FAKE = Mode(
    name="fake",
    help="a job that reports its steps and stops on SIGTERM",
    rules=_rules,
    reads="report",
    stop="signal",
    knob_env={"micro_batch_size": ("FAKE_MICRO_BATCH", None)},
    exports=("lightning",),
)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Mode:
    monkeypatch.setitem(modes.MODES, FAKE.name, FAKE)
    return FAKE


def _section(**fields: Any) -> Any:
    from autotune.config.command import CommandConfig

    return CommandConfig.model_validate({"argv": ["python", "train.py"], **fields})


def test_modes_the_schema_takes_a_registered_mode_with_its_rules(fake: Mode) -> None:
    assert _section(measure="fake").measure == "fake"
    with pytest.raises(ValidationError, match="command.env: measure fake refuses NO_FAKE"):
        _section(measure="fake", env={"NO_FAKE": "1"})
    with pytest.raises(ValidationError, match="'report', 'hf', 'lightning', 'log' or 'fake'"):
        _section(measure="nope")


def _load(tmp_path: Path, measure: object) -> None:
    from autotune.job import load_config

    doc = {
        "name": "job",
        "workload": {"task": "command"},
        "command": {"argv": ["python", "train.py"], "measure": measure},
        "space": {},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc))
    load_config(tmp_path / "job.yaml")


@pytest.mark.parametrize("measure", ["nope", 3, ["hf"]])
def test_modes_an_unknown_mode_is_refused_as_the_literal_refused_it(
    tmp_path: Path, measure: object
) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, measure)
    said = "command.measure: Input should be 'report', 'hf', 'lightning' or 'log'"
    assert f"{said} (got {measure!r})" in str(err.value)


def test_modes_the_log_rules_are_todays(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="command.log_pattern: needed with measure log"):
        _section(measure="log")
    with pytest.raises(ValidationError, match="command.log_pattern: only with measure log"):
        _section(measure="hf", log_pattern="tps: (?P<tokens_per_s>[0-9.]+)")
    assert _section().measure == modes.DEFAULT == "report"


def _trial(tmp_path: Path, measure: str) -> Any:
    """A command trial built in this process (the registered mode is this process's)."""
    from autotune.command.trial import Command
    from autotune.protocol import CommandParams, Rendered

    rendered = Rendered(argv=[sys.executable, "-c", "import time; time.sleep(30)"], cwd=".")
    params = CommandParams(command={"argv": rendered.argv, "measure": measure}, rendered=rendered)
    run = SimpleNamespace(warmup_steps=1, measure_steps=2)
    spec = SimpleNamespace(params=params, run=run, knobs={}, device="cpu")
    trial = Command(None, spec, None, None)  # type: ignore[arg-type]
    trial.run_dir = tmp_path
    trial.build()
    return trial


def test_modes_the_trial_side_finds_the_modes_reader_and_stop(fake: Mode, tmp_path: Path) -> None:
    from autotune.reporting import ENV_MAX_STEPS, ENV_REPORT, ENV_STOP

    trial = _trial(tmp_path, "fake")
    assert trial.mode is fake and not trial.log  # its steps are read from the report
    env = trial._env()
    assert env[ENV_REPORT] == str(tmp_path / "steps.jsonl") and ENV_MAX_STEPS in env
    assert ENV_STOP not in env  # it is stopped by a signal, not the stop file
    proc = subprocess.Popen(trial.real_argv, start_new_session=True)
    try:
        trial._ask_stop(proc)
        assert proc.wait(timeout=10) == -signal.SIGTERM
    finally:
        proc.kill()
    log = _trial(tmp_path, "log")
    assert log.log and ENV_REPORT not in log._env() and ENV_STOP not in log._env()


def test_modes_the_rendering_sets_the_modes_variables_and_no_hook(fake: Mode) -> None:
    from autotune.command.render import render

    command = {"argv": ["python", "train.py"], "measure": "fake", "knobs": {}}
    rendered = render(command, {"micro_batch_size": 8}, None, Path("."))
    assert rendered.env == {"FAKE_MICRO_BATCH": "8"}  # no Trainer: no hook on its path


def test_modes_the_hook_finds_each_trainer_by_its_mode() -> None:
    from autotune.command.hook import launch

    assert launch._trainer("hf") is modes.MODES["hf"].trainer
    assert launch._trainer("report") is None and launch._trainer("nope") is None
    assert modes.MODES["lightning"].trainer is not None
    assert modes.MODES["lightning"].trainer.trains == "fit"


def test_modes_export_offers_the_modes_forms(fake: Mode, tmp_path: Path) -> None:
    from test_export import _command_best

    from autotune.export import export

    best = _command_best(tmp_path)
    doc = yaml.safe_load(best.read_text())
    doc["command"]["measure"] = "fake"
    best.write_text(yaml.safe_dump(doc, sort_keys=False))
    # the mode's form, not the HF form its TrainingArguments flags would give
    assert [f.format for f in export(best)] == ["command", "lightning", "json"]
