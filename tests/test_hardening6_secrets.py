"""Secrets under common names (issue 63, item 1): a variable or flag whose name holds a secret word
in any segment (PGPASSWORD, REDIS_PASS, WANDB_KEY, HTTP_AUTHORIZATION, --passphrase, --auth), and a
value after `Bearer `/`Basic `, reach the job and nothing autotune writes or prints: validate's
resolved config, the search's console, study.db, best.yaml, the trials' spec and result files,
export's command line. A word inside another (MONKEY, KEYBOARD, TOKENS_PER_STEP) is no secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import run_cli

from autotune import redact

WANDB = "0123456789abcdef0123456789abcdef01234567"  # W&B's API keys: 40 hex characters
ENV = {
    "PGPASSWORD": "PgPasswordValue0001",
    "REDIS_PASS": "RedisPassValue0002",
    "WANDB_KEY": WANDB,
    "HTTP_AUTHORIZATION": "Bearer BearerTokenValue0003",
    "EXTRA_HEADER": "Authorization: Basic QmFzaWNWYWx1ZTAwMDQ=",
    "KEYBOARD": "dvorak-layout",
    "TOKENS_PER_STEP": "4096",
}
ARGV = ["--passphrase", "PassphraseValue0005", "--auth", "AuthValue0006", "--auth-mode", "oauth"]
SECRETS = (
    "PgPasswordValue0001",
    "RedisPassValue0002",
    WANDB,
    "BearerTokenValue0003",
    "QmFzaWNWYWx1ZTAwMDQ=",
    "PassphraseValue0005",
    "AuthValue0006",
)
JOB = """
import json, os, sys
from autotune import reporting
names = %r
got = {"argv": sys.argv[1:], "env": {n: os.environ.get(n) for n in names}}
open(os.environ["SEEN_FILE"], "a").write(json.dumps(got) + "\\n")
for _ in range(100):
    if reporting.step(tokens=10):
        break
""" % (sorted(ENV),)


def _study(tmp_path: Path, job: str = JOB) -> Path:
    (tmp_path / "job.py").write_text(job)
    doc = {
        "name": "common",
        "workload": {"task": "command", "warmup_steps": 1, "measure_steps": 3},
        "command": {"argv": ["{python}", "job.py", *ARGV], "env": ENV},
        "space": {},
        "study": {"trials": 1, "seed": 0, "confirm_top": 0, "trial_timeout_min": 1},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _written(root: Path) -> str:
    """Every file under the study's folder as text, SQLite's raw bytes too (a dump would decode
    what the bytes hold the same)."""
    return "\n".join(
        p.read_bytes().decode(errors="replace") for p in root.rglob("*") if p.is_file()
    )


def _leaked(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


@pytest.mark.slow
def test_secrets_under_common_names_reach_the_job_and_nothing_autotune_writes_or_prints(
    tmp_path: Path,
) -> None:
    path = _study(tmp_path)
    env = {"SEEN_FILE": str(tmp_path / "seen.jsonl")}
    shown = run_cli("validate", str(path), cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    assert not _leaked(shown.stdout + shown.stderr), shown.stdout
    searched = run_cli("search", str(path), "--device", "cpu", cwd=tmp_path, env=env)
    assert searched.returncode == 0, searched.stderr
    assert not _leaked(searched.stdout + searched.stderr)
    got = json.loads((tmp_path / "seen.jsonl").read_text().splitlines()[0])
    assert got == {"argv": ARGV, "env": ENV}  # the job receives every value as written
    best = tmp_path / "trials" / "common" / "best.yaml"
    assert (tmp_path / "trials" / "common" / "study.db").exists()
    assert list(best.parent.rglob("spec.json")) and list(best.parent.rglob("result.json"))
    assert not _leaked(_written(best.parent))
    doc = yaml.safe_load(best.read_text())
    assert doc["command"]["argv"][2:] == [
        *("--passphrase", "***", "--auth", "***", "--auth-mode", "oauth"),
    ]
    assert doc["command"]["env"] == {
        **ENV,
        **dict.fromkeys(("PGPASSWORD", "REDIS_PASS", "WANDB_KEY", "HTTP_AUTHORIZATION"), "***"),
        "EXTRA_HEADER": "Authorization: Basic ***",
    }
    exported = run_cli("export", str(best), "--format", "command", cwd=tmp_path, env=env)
    assert exported.returncode == 0, exported.stderr
    assert not _leaked(exported.stdout + exported.stderr)
    assert "$SECRET_ARG_3" in exported.stdout and "$SECRET_ARG_5" in exported.stdout


@pytest.mark.slow
def test_a_job_that_prints_its_secrets_leaves_none_in_its_result_or_the_study(
    tmp_path: Path,
) -> None:
    job = "import os, sys\nraise SystemExit(f'refused: {sys.argv[2]} {os.environ}')\n"
    path = _study(tmp_path, job)
    searched = run_cli("search", str(path), "--device", "cpu", cwd=tmp_path)
    assert not _leaked(searched.stdout + searched.stderr)
    study = tmp_path / "trials" / "common"
    result = (study / "runs" / "0000" / "result.json").read_text()
    assert "refused: ***" in result and not _leaked(result)
    assert not _leaked((study / "runs" / "0000" / "spec.json").read_text())
    assert not _leaked((study / "study.db").read_bytes().decode(errors="replace"))


@pytest.mark.parametrize(
    "name",
    [
        *("PGPASSWORD", "REDIS_PASS", "MYSQL_PWD", "WANDB_KEY", "HTTP_AUTHORIZATION"),
        *("passphrase", "auth", "client-secret", "DB_PASSWORD_FILE", "hubToken", "OpenAIAPIKey"),
        *(
            "GOOGLE_APPLICATION_CREDENTIALS",
            "NGROK_AUTHTOKEN",
            "TOKEN_FOR_HUB",
            "aws_session_token",
        ),
        *("KEY", "SESSION_COOKIE", "AWS_ACCESS_KEY_ID", "hub_token", "KEY_FOR_API"),
    ],
)
def test_a_secret_word_in_any_segment_names_a_secret(name: str) -> None:
    assert redact.secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        *("KEYBOARD", "MONKEY", "TOKENS_PER_STEP", "max_new_tokens", "TOKENIZERS_PARALLELISM"),
        *("eos_token", "pad_token_id", "auth-mode", "auth_type", "key_size", "token-limit"),
        *("PWD", "OLDPWD", "BYPASS", "PGPASSFILE", "AUTHOR", "num_passes", "ssl_key_file"),
        *("NCCL_PROTO", "PYTORCH_CUDA_ALLOC_CONF", "keys", "monkeyPatch", "passthrough"),
    ],
)
def test_a_word_inside_another_or_a_descriptor_names_no_secret(name: str) -> None:
    assert not redact.secret_name(name)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("Bearer abc.def-ghi", "Bearer ***"),
        ("bearer abcdefgh", "bearer ***"),
        ("Basic dTpw", "Basic ***"),
        ("Authorization: Basic dTpwYXNz", "Authorization: Basic ***"),
        ("Authorization: Token abcdef123", "Authorization: Token ***"),
        ("authorization=rawtoken123", "authorization=***"),
        ("-HAuthorization: Bearer x1", "-HAuthorization: Bearer ***"),
        ("Bearer {env:TOKEN}", "Bearer {env:TOKEN}"),
        ("a Basic run", "a Basic run"),
        ("Basic", "Basic"),
    ],
)
def test_a_value_after_an_authorization_scheme_is_masked(value: str, shown: str) -> None:
    assert redact.mask_argv(["--header", value]) == ["--header", shown]
    assert redact.mask_env({"H": value}) == {"H": shown}


def test_the_secret_inside_a_masked_value_is_masked_in_any_later_text() -> None:
    redact.keep_command(["--header", "Bearer LaterTextToken0007"], {"X": "--pw=x"})
    assert redact.mask("the job said LaterTextToken0007") == "the job said ***"


def test_a_secret_argument_is_masked_and_handed_back_to_the_trial() -> None:
    from autotune.protocol import unhide

    argv = ["job.py", "--auth", "AuthValue0006", "--auth-mode", "oauth"]
    env = {"REDIS_PASS": "r3d1s-pass", "KEYBOARD": "us"}
    shown, masked = redact.mask_argv(argv), redact.mask_env(env)
    assert shown == ["job.py", "--auth", "***", "--auth-mode", "oauth"]
    assert masked == {"REDIS_PASS": "***", "KEYBOARD": "us"}
    hidden = json.dumps({"argv": {"2": "AuthValue0006"}, "env": {"REDIS_PASS": "r3d1s-pass"}})
    assert unhide(shown, masked, hidden) == (argv, env)
