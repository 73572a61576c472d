"""Issue 61 item 4: an edited command is another study. A study of task command is named by its
command too (documents/identity.py: argv, cwd, env, config file and its content, measure mode, knob
mappings), so a search of the same YAML name with an edited command is refused in one line, exit 2,
before anything runs, the study as it was; --fresh starts anew. Secrets are neither shown nor
compared."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import cli_here, command_job, load_trials

from autotune.documents import identity
from autotune.errors import StudyError
from autotune.job import load_config
from autotune.search.storage import CONFIG_FILE_DIGEST, open_study


def _edit(path: Path, **command: object) -> None:
    doc = yaml.safe_load(path.read_text())
    doc["command"].update(command)
    path.write_text(yaml.safe_dump(doc))


def _measured_once(path: Path, out: Path) -> None:
    """open_study as a search opens it, and one trial recorded in it (what is tested is the
    refusal, before any launch)."""
    study, _, _ = open_study(
        load_config(path), out_root=out, device="cpu", fresh=False, baseline={}
    )
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.FAIL, user_attrs={"status": "crash"}
        )
    )


def _open(path: Path, out: Path) -> None:
    open_study(load_config(path), out_root=out, device="cpu", fresh=False, baseline={})


@pytest.mark.slow
def test_identity_command_edited_argv_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """A flag fixed between two searches of one YAML name: refused in one line, exit 2, the study
    and its runs as they were; --fresh measures the new command."""
    path = command_job(tmp_path, "edit", trials=1)
    out = tmp_path / "out"
    args = ("search", str(path), "--out", str(out), "--device", "cpu")
    assert cli_here(*args, cwd=tmp_path).returncode == 0
    before = [(t.number, t.state, t.user_attrs.get("status")) for t in load_trials(out, "edit")]
    runs = sorted(p.name for p in (out / "edit" / "runs").iterdir())
    _edit(path, argv=["{python}", "job.py", "--tag", "fixed"])
    proc = cli_here(*args, "--trials", "2", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr  # one line
    assert (
        "the command changed since study 'edit' measured trial 0 "
        '(command.argv[2]: nothing there, "--tag" here); run with --fresh'
    ) in proc.stderr, proc.stderr
    after = [(t.number, t.state, t.user_attrs.get("status")) for t in load_trials(out, "edit")]
    assert after == before and sorted(p.name for p in (out / "edit" / "runs").iterdir()) == runs
    fresh = cli_here(*args, "--fresh", cwd=tmp_path)
    assert fresh.returncode == 0, fresh.stderr
    (trial,) = load_trials(out, "edit")
    assert trial.user_attrs["status"] == "ok"
    study = optuna.load_study(study_name="edit", storage=f"sqlite:///{out / 'edit' / 'study.db'}")
    assert study.user_attrs["config"]["command"]["argv"][2:] == ["--tag", "fixed"]


def test_identity_command_names_what_changed_never_an_env_value(tmp_path: Path) -> None:
    """Each part of the command is named as it changed; a variable by its name only, a secret
    rotated is the same command (study.db keeps it masked)."""
    path = command_job(
        tmp_path, "parts", command={"env": {"HF_TOKEN": "hf_" + "a" * 30, "MODE": "plain"}}
    )
    out = tmp_path / "out"
    _measured_once(path, out)
    _edit(path, env={"HF_TOKEN": "hf_" + "b" * 30, "MODE": "plain"})
    _open(path, out)  # a rotated token: the same command
    _edit(path, env={"HF_TOKEN": "hf_" + "b" * 30, "MODE": "s3cr3t-value"})
    with pytest.raises(StudyError, match=r"\(command\.env: MODE changed\)") as err:
        _open(path, out)
    assert "s3cr3t" not in str(err.value) and "plain" not in str(err.value)
    _edit(path, env={"HF_TOKEN": "hf_" + "b" * 30, "MODE": "plain"})
    _edit(path, knobs={"micro_batch_size": {"flag": "--batch"}})
    with pytest.raises(StudyError, match=r"command\.knobs\.micro_batch_size: "):
        _open(path, out)
    _edit(path, knobs={"micro_batch_size": {"flag": "--bs"}}, measure="hf")
    with pytest.raises(StudyError, match=r"command\.measure: report there, hf here"):
        _open(path, out)
    _edit(path, measure="report", cwd="sub")
    (tmp_path / "sub").mkdir()
    with pytest.raises(StudyError, match=r"command\.cwd: default there, sub here"):
        _open(path, out)


def test_identity_command_config_file_content_is_part_of_it(tmp_path: Path) -> None:
    """The config file the command reads, edited under the same name, is another command; a study
    made before its content was stored resumes, and stores it from then on."""
    (tmp_path / "cfg.json").write_text(json.dumps({"lr": 1.0}))
    path = command_job(tmp_path, "cfg")
    _edit(path, argv=["{python}", "job.py", "--config", "{config}"], config_file="cfg.json")
    out = tmp_path / "out"
    _measured_once(path, out)
    storage = f"sqlite:///{out / 'cfg' / 'study.db'}"
    study = optuna.load_study(study_name="cfg", storage=storage)
    assert study.user_attrs[CONFIG_FILE_DIGEST] == identity.config_file_digest(
        load_config(path).model_dump(mode="json"), str(tmp_path)
    )
    (tmp_path / "cfg.json").write_text(json.dumps({"lr": 2.0}))
    with pytest.raises(StudyError, match=r"command\.config_file: 'cfg\.json' has other content"):
        _open(path, out)
    # an older study: no content stored, judged by the rest of its command
    study.set_user_attr(CONFIG_FILE_DIGEST, None)
    _open(path, out)
    study = optuna.load_study(study_name="cfg", storage=storage)
    assert study.user_attrs[CONFIG_FILE_DIGEST] is not None


def test_identity_command_of_an_older_config_is_read_at_its_defaults() -> None:
    """A stored command section from before a field existed (here: no measure, no log_pattern)
    is that field at its default; a mapping's fields at None are no difference."""
    new = {
        "command": {
            "argv": ["python", "t.py"],
            "measure": "report",
            "log_pattern": None,
            "knobs": {"micro_batch_size": {"flag": "--bs", "env": None, "values": None}},
        }
    }
    old = {"command": {"argv": ["python", "t.py"], "knobs": {"micro_batch_size": {"flag": "--bs"}}}}
    assert identity.difference(old, new) is None
    assert identity.digest(old) == identity.digest(new)
    assert identity.difference({}, {"command": None}) is None
