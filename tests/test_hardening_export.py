"""An export is pasted: nothing a knob's value or a committed best.yaml holds runs as code in the
pasted form (shell, Python, TOML), and a name that is not a variable name is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_export import _command_best, _form

from autotune.errors import ConfigError
from autotune.export import export

EVIL = "x\ntouch PWNED\nimport os; os.system('touch PWNED')\n[evil]\nkey = 1"


def _with(best: Path, edit) -> Path:
    doc = yaml.safe_load(best.read_text())
    edit(doc)
    best.write_text(yaml.safe_dump(doc, sort_keys=False))
    return best


def _evil_knob(doc: dict) -> None:
    """A value of the user's own knob with a newline: one of its values (export refuses another,
    as check does)."""
    doc["command"]["knobs"]["my_lr"]["values"].append(EVIL)
    doc["knobs"]["my_lr"] = EVIL
    doc["apply"]["knobs"]["my_lr"] = EVIL


@pytest.mark.parametrize("fmt", ["torchrun", "command"])
def test_a_newline_in_a_knob_value_never_runs_in_the_shell_forms(tmp_path: Path, fmt: str) -> None:
    best = _with(_command_best(tmp_path), _evil_knob)
    text = _form(export(best, ["all"]), fmt).text
    assert "touch PWNED" in text
    assert all("touch PWNED" not in line or line.startswith("#") for line in text.splitlines())


@pytest.mark.parametrize("fmt", ["hf", "lightning"])
def test_a_newline_in_a_knob_value_never_runs_in_the_python_forms(tmp_path: Path, fmt: str) -> None:
    best = _with(_command_best(tmp_path), _evil_knob)
    text = _form(export(best, ["all"]), fmt).text
    assert "os.system" in text
    for line in text.splitlines():
        assert "os.system" not in line or line.lstrip().startswith("#"), line


def test_a_newline_in_a_knob_value_adds_no_toml_table(tmp_path: Path) -> None:
    best = _with(_command_best(tmp_path), _evil_knob)
    text = _form(export(best, ["all"]), "torchtitan").text
    assert "[evil]" in text
    assert "[evil]" not in [line.strip() for line in text.splitlines()]


@pytest.mark.parametrize("name", ["A;touch PWNED", "MY VAR", "", "A=B"])
def test_an_edited_apply_env_name_is_refused(tmp_path: Path, name: str) -> None:
    best = _with(_command_best(tmp_path), lambda doc: doc["apply"]["env"].update({name: "1"}))
    with pytest.raises(ConfigError, match=r"apply\.env: .* is not an environment variable name"):
        export(best, ["command"])


@pytest.mark.parametrize("name", ["A;touch PWNED", "MY VAR", "A=B"])
def test_a_command_env_name_is_refused(tmp_path: Path, name: str) -> None:
    best = _with(_command_best(tmp_path), lambda doc: doc["command"]["env"].update({name: "1"}))
    with pytest.raises(ConfigError, match="command.env: .* is not an environment variable name"):
        export(best, ["command"])


def test_env_values_are_quoted_in_the_command_form(tmp_path: Path) -> None:
    value = "$(touch PWNED)`touch PWNED`"
    best = _with(_command_best(tmp_path), lambda doc: doc["command"]["env"].update({"FOO": value}))
    line = [x for x in _form(export(best, ["command"]), "command").text.splitlines() if "&&" in x][
        0
    ]
    assert "FOO=" + "'" + value + "'" in line


@pytest.mark.parametrize("name", ["A=B", "", "MY VAR"])
def test_command_env_names_in_the_yaml_are_checked(name: str) -> None:
    from pydantic import ValidationError

    from autotune.config.command import CommandConfig

    with pytest.raises(ValidationError, match="is not an environment variable name"):
        CommandConfig.model_validate({"argv": ["python", "train.py"], "env": {name: "1"}})


def test_a_placeholder_in_a_knob_value_is_inserted_as_it_is(tmp_path: Path) -> None:
    from autotune.command.render import render

    command = {
        "argv": ["python", "train.py", "--out", "{run_dir}/log"],
        "env": {"OUT": "{run_dir}"},
        "knobs": {"tag": {"flag": "--tag"}, "name": {"env": "RUN_NAME"}},
    }
    knobs = {"tag": "{run_dir}{python}", "name": "{config}"}
    done = render(command, knobs, tmp_path, tmp_path)
    assert done.argv[3] == f"{tmp_path}/log" and done.argv[-1] == "{run_dir}{python}"
    assert done.env["OUT"] == str(tmp_path) and done.env["RUN_NAME"] == "{config}"


def _config_file_yaml(tmp_path: Path) -> Path:
    from test_command import _yaml

    command = {
        "args": ["--config", "{config}"],
        "config_file": "cfg.json",
        "knobs": {"lr": {"key": "train.lr", "values": [0.1]}},
    }
    return _yaml(tmp_path, command)


def test_a_config_file_that_is_a_fifo_is_refused_without_opening_it(tmp_path: Path) -> None:
    import os

    from autotune.job import load_config

    os.mkfifo(tmp_path / "cfg.json")  # opening it for reading would wait for a writer forever
    with pytest.raises(ConfigError, match="cfg.json.* not a regular file"):
        load_config(_config_file_yaml(tmp_path))


def test_a_huge_config_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    from autotune.config.command import MAX_CONFIG_BYTES
    from autotune.job import load_config

    with open(tmp_path / "cfg.json", "wb") as handle:
        handle.truncate(MAX_CONFIG_BYTES + 1)
    with pytest.raises(ConfigError, match="cfg.json.* bytes; at most"):
        load_config(_config_file_yaml(tmp_path))
