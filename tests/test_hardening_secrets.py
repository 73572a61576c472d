"""A command's secrets (issue 38): a token on its command line, in command.env or filled from the
environment (`{env:NAME}`) reaches the job and no file autotune writes (study.db, best.yaml, the
trial's spec and result); `check` runs the command again from the environment, or says in one line
why it cannot; a credential a library put into autotune's environment never reaches a trial."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest
import yaml

from autotune import redact
from autotune.check.regress import check
from autotune.errors import ConfigError
from autotune.job import load_config
from autotune.search.run import run_search

ARG_TOKEN = "hf_ArgumentTokenArgumentToken0001"
ENV_TOKEN = "EnvTokenEnvTokenEnvToken0002"
FILLED = "FilledFromTheEnvironment0003"
SECRETS = (ARG_TOKEN, ENV_TOKEN, FILLED)
JOB = """
import json, os, sys
from autotune import reporting
got = {"argv": sys.argv[1:], "HF_TOKEN": os.environ.get("HF_TOKEN"),
       "MLFLOW": os.environ.get("MLFLOW_TRACKING_URI"),
       "secrets_var": os.environ.get("AUTOTUNE_COMMAND_SECRETS")}
open(os.environ["SEEN_FILE"], "a").write(json.dumps(got) + "\\n")
for _ in range(100):
    if reporting.step(tokens=10):
        break
"""


def _study(tmp_path: Path, argv: list[str], env: dict[str, str]) -> Path:
    (tmp_path / "job.py").write_text(JOB)
    doc = {
        "name": "secret",
        "workload": {"task": "command", "warmup_steps": 1, "measure_steps": 3},
        "command": {"argv": ["{python}", "job.py", *argv], "env": env},
        "space": {},
        "study": {"trials": 1, "seed": 0, "confirm_top": 0, "trial_timeout_min": 1},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _seen(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "seen.jsonl").read_text().splitlines()]


def _written(root: Path) -> str:
    """Every file under the study's folder, as text (SQLite's too, dumped)."""
    texts = []
    for path in sorted(root.rglob("*")):
        if path.suffix == ".db":
            with sqlite3.connect(path) as db:
                texts.append("\n".join(db.iterdump()))
        elif path.is_file():
            texts.append(path.read_text(errors="replace"))
    return "\n".join(texts)


@pytest.fixture()
def searched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.setenv("SEEN_FILE", str(tmp_path / "seen.jsonl"))
    monkeypatch.setenv("MY_SECRET", FILLED)
    argv = ["--hub_token", ARG_TOKEN, "--password={env:MY_SECRET}", "--eos_token", "</s>"]
    path = _study(tmp_path, argv, {"HF_TOKEN": ENV_TOKEN})
    result = run_search(load_config(path), out_root=tmp_path / "trials", device="cpu")
    assert result.history.completed, [
        t.user_attrs.get("reason") for t in result.history.seen.values()
    ]
    return tmp_path, result.best_yaml


@pytest.mark.slow
def test_a_commands_secrets_reach_the_job_and_no_file(searched: tuple[Path, Path]) -> None:
    tmp_path, best = searched
    got = _seen(tmp_path)[0]
    assert got["argv"] == ["--hub_token", ARG_TOKEN, f"--password={FILLED}", "--eos_token", "</s>"]
    # the hand-over stays autotune's
    assert got["HF_TOKEN"] == ENV_TOKEN and got["secrets_var"] is None
    text = _written(best.parent)
    assert not [s for s in SECRETS if s in text]
    doc = yaml.safe_load(best.read_text())
    assert doc["command"]["argv"][2:] == [
        "--hub_token",
        "***",
        "--password={env:MY_SECRET}",
        "--eos_token",
        "</s>",
    ]
    assert doc["command"]["env"] == {"HF_TOKEN": "***"}


@pytest.mark.slow
def test_check_takes_a_masked_variable_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEEN_FILE", str(tmp_path / "seen.jsonl"))
    monkeypatch.setenv("MY_SECRET", FILLED)
    path = _study(tmp_path, ["--password={env:MY_SECRET}"], {"HF_TOKEN": ENV_TOKEN})
    best = run_search(load_config(path), out_root=tmp_path / "trials", device="cpu").best_yaml
    monkeypatch.setenv("HF_TOKEN", "FromTheCheckEnvironment0004")
    check(best, repeats=1, max_load=1e9)
    got = _seen(tmp_path)[-1]
    assert got["HF_TOKEN"] == "FromTheCheckEnvironment0004" and got["argv"] == [
        f"--password={FILLED}"
    ]
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(
        ConfigError, match=r"^command.env.HF_TOKEN: its secret was masked .*export HF_TOKEN"
    ):
        check(best, repeats=1, max_load=1e9)
    monkeypatch.setenv("HF_TOKEN", "x")
    monkeypatch.delenv("MY_SECRET")
    with pytest.raises(
        ConfigError,
        match=r"^command.argv\[2\]: \{env:MY_SECRET\} names a variable that is not set",
    ):
        check(best, repeats=1, max_load=1e9)


@pytest.mark.slow
def test_check_refuses_a_masked_argument_in_one_line(searched: tuple[Path, Path]) -> None:
    _, best = searched
    with pytest.raises(
        ConfigError, match=r"command.argv\[3\]: its secret was masked .* \{env:NAME\}"
    ) as err:
        check(best, repeats=1, max_load=1e9)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("argv", "env", "masked_argv", "masked_env"),
    [
        (["--hub-token", "abcdefgh"], {}, ["--hub-token", "***"], {}),
        (["--api_key=abcdefgh"], {}, ["--api_key=***"], {}),
        (["--db", "postgresql://u:pa55w0rd@h/x"], {}, ["--db", "postgresql://u:***@h/x"], {}),
        (
            ["--use_auth_token", "true", "--eos_token", "</s>", "--max_new_tokens", "8"],
            {},
            ["--use_auth_token", "true", "--eos_token", "</s>", "--max_new_tokens", "8"],
            {},
        ),
        (
            [],
            {"WANDB_API_KEY": "k", "TOKENIZERS_PARALLELISM": "false", "PWD": "/w"},
            [],
            {"WANDB_API_KEY": "***", "TOKENIZERS_PARALLELISM": "false", "PWD": "/w"},
        ),
        (
            ["--note", "sk-abcdefghijklmnopqrstuvwx"],
            {"X": "{env:TOKEN}"},
            ["--note", "***"],
            {"X": "{env:TOKEN}"},
        ),
    ],
)
def test_what_counts_as_a_secret(
    argv: list[str], env: dict, masked_argv: list[str], masked_env: dict
) -> None:
    masked = redact.mask_command({"argv": argv, "env": env})
    assert masked["argv"] == masked_argv and masked["env"] == masked_env


def test_a_credential_a_library_set_never_reaches_a_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.launch.process import inherited_env

    redact.remember("postgresql://u:LibraryPassword5@h/db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://u:x@mlflow")
    monkeypatch.setenv("SOME_LIBRARY_URL", "postgresql://u:LibraryPassword5@h/db")
    monkeypatch.setenv("USER_SET_AFTER_IMPORT", "kept")
    env = inherited_env()
    assert "MLFLOW_TRACKING_URI" not in env and "SOME_LIBRARY_URL" not in env
    assert env["USER_SET_AFTER_IMPORT"] == "kept"
    assert env.get("PATH") == os.environ.get("PATH") and sys.executable


def test_validate_and_search_never_print_a_secret_and_say_where_it_is(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from autotune.cli import app

    path = _study(
        tmp_path, ["--hub_token", "shrt", "--db", "postgresql://u:pw@h/x"], {"HF_TOKEN": "tiny"}
    )
    shown = CliRunner().invoke(app, ["validate", str(path)])
    dry = CliRunner().invoke(app, ["search", str(path), "--dry-run", "--device", "cpu"])
    for run in (shown, dry):
        assert run.exit_code == 0, run.output
        assert "shrt" not in run.output and ":pw@" not in run.output and "tiny" not in run.output
        assert "command.argv[3], command.argv[5] hold secrets: masked" in " ".join(
            run.output.split()
        )


@pytest.mark.slow
def test_the_exported_command_takes_its_secrets_from_the_environment(
    searched: tuple[Path, Path], tmp_path: Path
) -> None:
    import subprocess

    from autotune.export import export

    _, best = searched
    form = next(f for f in export(best, ["command"]) if f.format == "command")
    line = form.text.strip().splitlines()[-1]
    assert "***" not in line and not [s for s in SECRETS if s in form.text]
    assert '"${MY_SECRET}"' in line and "HF_TOKEN=" not in line
    assert (
        "command.argv[3] as $SECRET_ARG_3" in form.text
        and "command.env.HF_TOKEN as $HF_TOKEN" in form.text
    )
    seen = tmp_path / "pasted.jsonl"
    env = {"PATH": os.environ["PATH"], "SEEN_FILE": str(seen), "MY_SECRET": "s1", "HF_TOKEN": "s2"}
    # the export names the interpreter the trial ran (a full path); a bare one is this test's Python
    pasted = f"{sys.executable} {line[len('python ') :]}" if line.startswith("python ") else line
    failed = subprocess.run(
        ["bash", "-c", pasted], cwd=best.parent, env=env, capture_output=True, text=True
    )
    # never runs with a literal ***
    assert failed.returncode != 0 and "SECRET_ARG_3" in failed.stderr
    env["SECRET_ARG_3"] = "s3"
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    ran = subprocess.run(
        ["bash", "-c", pasted], cwd=best.parent, env=env, capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr
    got = json.loads(seen.read_text().splitlines()[0])
    assert (
        got["argv"] == ["--hub_token", "s3", "--password=s1", "--eos_token", "</s>"]
        and got["HF_TOKEN"] == "s2"
    )
