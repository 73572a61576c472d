"""autotune export of a command study: the command form is what the chosen trial ran, the HF form
is its flags as TrainingArguments (transformers' real parser), paths relative and no exporter's
Python, and only the forms that fit the study unless asked."""

from __future__ import annotations

import ast
import enum
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_export import _command_best, _form, _train_best
from typer.testing import CliRunner

from autotune import knobs as catalogue
from autotune.cli import app
from autotune.command import render as command_render
from autotune.errors import ConfigError
from autotune.export import Form, export
from autotune.export._hf_command import NO_TRANSFORMERS, field_of, flag_groups, training_fields
from autotune.job import load_config
from autotune.search.run import run_search

ROOT = Path(__file__).resolve().parent.parent
HF_PADDED = ROOT / "benchmarks" / "spaces" / "hf-padded-llama-1.1b.yaml"
HF_SCRIPT = ROOT / "examples" / "hf_trainer" / "train.py"
JOB = ROOT / "tests" / "data" / "jobs" / "fake_job.py"
ALL = ["command", "torchrun", "hf", "lightning", "torchtitan", "json"]


def _hf_best(tmp_path: Path, **knobs: Any) -> tuple[Path, dict[str, Any], Path]:
    """best.yaml of the HF Trainer benchmark (its own command, mappings and precision map, as
    write_best records them: command section, base_dir) with its baseline's knobs and these, in a
    study folder of a copy of the repository's files it names (trials/<name>/ as `autotune search`
    run at the root writes it); returns (best.yaml, the knobs, the YAML's base_dir)."""
    yaml_copy = tmp_path / HF_PADDED.relative_to(ROOT)
    script_copy = tmp_path / HF_SCRIPT.relative_to(ROOT)
    for source, copy in ((HF_PADDED, yaml_copy), (HF_SCRIPT, script_copy)):
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, copy)
    cfg = load_config(yaml_copy)
    chosen = {**cfg.baseline, "grad_accum_steps": 2, **knobs}
    doc = {
        "name": cfg.name,
        "chosen": {"trial": 3, "why": "fastest"},
        "knobs": chosen,
        "metrics": {"tokens_per_s_per_gpu": 1000.0},
        "apply": {"env": catalogue.env_of(chosen), "knobs": chosen},
        "command": cfg.command.model_dump(mode="json"),
        "base_dir": cfg.base_dir,
        "workload": cfg.workload.model_dump(mode="json"),
    }
    path = tmp_path / "trials" / cfg.name / "best.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path, chosen, Path(str(cfg.base_dir))


def _line(form: Form, start: str) -> str:
    return next(x for x in form.text.splitlines() if x.startswith(start))


def _measured_argv(best: Path, knobs: dict[str, Any], base_dir: Path) -> list[str]:
    """The trial's argv as command_render renders it for these knobs (the launcher excluded), its
    `{python}` the Python that ran autotune, as the trial ran it."""
    command = yaml.safe_load(best.read_text())["command"]
    return command_render.render(command, knobs, None, base_dir, launcher=False).argv


def test_export_hf_job_command_form_is_the_measured_command(tmp_path: Path) -> None:
    best, knobs, base_dir = _hf_best(tmp_path)
    forms = export(best)
    assert [f.format for f in forms] == ["command", "hf", "json"]
    words = shlex.split(_line(_form(forms, "command"), "cd "))
    assert words[:3] == ["cd", "../..", "&&"]
    assert (best.parent / "../..").resolve() == tmp_path.resolve()
    start = words.index(sys.executable)  # {python}: the interpreter the trial ran, by its path
    assert words[start:] == _measured_argv(best, knobs, base_dir)
    assert dict(w.split("=", 1) for w in words[3:start]) == {
        "TOKENIZERS_PARALLELISM": "false",
        "NO_AUTOTUNE_CALLBACK": "1",
    }
    assert words[start + 1] == "examples/hf_trainer/train.py"  # the script as the YAML wrote it
    for form in forms[:2]:  # the study's precision map and its own knobs, in both forms
        assert "--bf16 true --tf32 true" in form.text and "--optim adamw_torch_fused" in form.text
        assert "no equivalent" not in form.text and form.missing == []


def _script_arguments() -> type:
    """examples/hf_trainer/train.py's own dataclass (the script the benchmark runs)."""
    spec = importlib.util.spec_from_file_location("hf_trainer_example", HF_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve its annotations through it
    spec.loader.exec_module(module)
    return module.ScriptArguments


def _kwargs(text: str) -> dict[str, Any]:
    lines = text.splitlines()
    start = lines.index("TrainingArguments(")
    source = "\n".join(lines[start : lines.index(")", start) + 1])
    return {k.arg: ast.literal_eval(k.value) for k in ast.parse(source).body[0].value.keywords}


def _after(text: str, comment: str) -> str:
    """The line after the form's first line that starts with this comment."""
    lines = text.splitlines()
    return lines[next(i for i, x in enumerate(lines) if x.startswith(comment)) + 1]


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def test_export_hf_form_parses_as_the_measured_flags(tmp_path: Path) -> None:
    """The HF form's flags (TrainingArguments' and the script's own) through the script's own
    HfArgumentParser give what the measured command's flags give, field for field; its keyword
    arguments are those values."""
    from transformers import HfArgumentParser, TrainingArguments

    best, knobs, base_dir = _hf_best(tmp_path, micro_batch_size=8, activation_checkpointing="full")
    text = export(best, ["hf"])[0].text
    ours = shlex.split(_after(text, "# the same as command-line flags"))
    own = shlex.split(_after(text, "# your script's own arguments"))
    parser = HfArgumentParser((_script_arguments(), TrainingArguments))
    exported, rest = parser.parse_known_args(ours + own)
    measured, left = parser.parse_known_args(_measured_argv(best, knobs, base_dir)[2:])
    assert rest == left == [] and vars(exported) == vars(measured)
    assert measured.tf32 is True and measured.bf16 is True
    assert measured.gradient_checkpointing is True and measured.per_device_train_batch_size == 8
    assert _plain(measured.optim) == "adamw_torch_fused"
    kwargs = _kwargs(text)
    assert kwargs == {name: _plain(getattr(measured, name)) for name in kwargs}
    assert {"tf32", "optim", "output_dir", "max_steps"} <= set(kwargs)
    assert "attn_implementation" not in kwargs and "--attn_implementation sdpa" in " ".join(own)
    assert "your script's own arguments (no TrainingArguments field)" in text


def test_export_hf_form_is_the_same_training_arguments(tmp_path: Path) -> None:
    """Where TrainingArguments can be built on the CPU (fp32: --tf32 wants an Ampere GPU), the
    keyword arguments and the flags build the same TrainingArguments as the measured command."""
    from transformers import HfArgumentParser, TrainingArguments

    best, knobs, base_dir = _hf_best(tmp_path, precision="fp32", optim="adamw_torch")
    text = export(best, ["hf"])[0].text
    parser = HfArgumentParser(TrainingArguments)
    measured = parser.parse_args_into_dataclasses(
        _measured_argv(best, knobs, base_dir)[2:], return_remaining_strings=True
    )[0]
    assert TrainingArguments(**_kwargs(text)).to_dict() == measured.to_dict()
    flags = shlex.split(_after(text, "# the same as command-line flags"))
    assert parser.parse_args_into_dataclasses(flags)[0].to_dict() == measured.to_dict()
    assert measured.optim.value == "adamw_torch" and measured.gradient_accumulation_steps == 2


def _words(forms: list[Form]) -> list[str]:
    """Every word of the forms' text, code and comments, quotes and brackets set apart."""
    return [w for f in forms for w in re.findall(r"[^\s'\"()\[\],]+", f.text)]


@pytest.mark.slow
@pytest.mark.parametrize("study", ["hf", "config"])
def test_export_no_absolute_path_but_the_interpreter(tmp_path: Path, study: str) -> None:
    """Paths are relative to the study's folder; the one absolute path is the interpreter the
    trial ran (`{python}`: autotune's; `python`: as the PATH finds it), the command's first word."""
    best = _hf_best(tmp_path)[0] if study == "hf" else _command_best(tmp_path)
    forms = export(best, ["all"])
    assert [f.format for f in forms] == ALL
    program = sys.executable if study == "hf" else shutil.which("python") or "python"
    assert program in shlex.split(_line(forms[0], "cd "))
    for form in forms:
        form.text = form.text.replace(program, "PROGRAM")
    absolute = [w for w in _words(forms) if w.startswith("/") or "=/" in w]
    assert absolute == []
    assert all(str(tmp_path) not in f.text and str(ROOT) not in f.text for f in forms)


def test_export_forms_that_fit_the_study(tmp_path: Path) -> None:
    train = export(_train_best(tmp_path / "train"))
    assert [f.format for f in train] == ["torchrun", "hf", "lightning", "torchtitan", "json"]
    best = _hf_best(tmp_path / "hf")[0]
    assert [f.format for f in export(best, ["torchtitan", "command"])] == ["torchtitan", "command"]
    doc = yaml.safe_load(best.read_text())
    doc["command"]["measure"] = "lightning"
    best.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert [f.format for f in export(best)] == ["command", "lightning", "json"]
    doc["command"]["measure"] = "report"  # an HF job still: its script builds a Trainer
    best.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert [f.format for f in export(best)] == ["command", "hf", "json"]
    # a plain script (nanoGPT's) whose flag shares a TrainingArguments name: no Trainer, no hf
    doc["command"]["argv"][1] = str(ROOT / "tests" / "data" / "jobs" / "nanogpt_style.py")
    doc["command"]["knobs"] = {"grad_accum_steps": {"flag": "--gradient_accumulation_steps"}}
    best.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert [f.format for f in export(best)] == ["command", "json"]


def test_export_cli_prints_the_fitting_forms_or_all(tmp_path: Path) -> None:
    best = _hf_best(tmp_path)[0]
    fitting = CliRunner().invoke(app, ["export", str(best)])
    assert fitting.exit_code == 0, fitting.output
    headers = [x for x in fitting.output.splitlines() if x.startswith("# ==== ")]
    assert headers == ["# ==== command ====", "# ==== hf ====", "# ==== json ===="]
    every = CliRunner().invoke(app, ["export", str(best), "-f", "all"])
    assert [x for x in every.output.splitlines() if x.startswith("# ==== ")] == [
        f"# ==== {name} ====" for name in ALL
    ]
    with pytest.raises(ConfigError, match=r"--format command: does not apply to this study"):
        export(_train_best(tmp_path / "train"), ["all", "command"])


def test_export_hf_form_without_transformers_keeps_the_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    best, knobs, base_dir = _hf_best(tmp_path)
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` fails
    assert training_fields() is None
    hf = export(best, ["hf"])[0]
    assert NO_TRANSFORMERS in hf.text and "TrainingArguments(" not in hf.text
    flags = _measured_argv(best, knobs, base_dir)[2:]
    assert _line(hf, "--output_dir") == shlex.join(flags)
    assert [f.format for f in export(best)] == ["command", "hf", "json"]  # measure hf says so


def test_export_flag_groups_and_fields() -> None:
    argv = ["torchrun", "--nproc-per-node", "2", "train.py", "data", "--bf16", "--x=1"]
    groups = flag_groups(argv)
    assert groups == [["data"], ["--bf16"], ["--x=1"]]
    assert flag_groups(["python", "-m", "pkg.train", "--lr", "1"]) == [["--lr", "1"]]
    found = training_fields()
    assert found is not None
    fields = found[0]
    assert field_of(["--per-device-train-batch-size", "4"], fields) == "per_device_train_batch_size"
    assert field_of(["--optim=adamw_torch"], fields) == "optim"
    assert field_of(["--no_remove_unused_columns"], fields) == "remove_unused_columns"
    assert field_of(["--no_bf16"], fields) is None and field_of(["data"], fields) is None


def test_export_hf_form_bad_flag_value_is_one_line(tmp_path: Path) -> None:
    best = _hf_best(tmp_path)[0]
    doc = yaml.safe_load(best.read_text())
    doc["knobs"]["optim"] = "no_such_optimizer"
    doc["command"]["knobs"]["optim"]["values"] = ["no_such_optimizer"]
    best.write_text(yaml.safe_dump(doc, sort_keys=False))
    bad = r"best\.yaml: command: .*--optim no_such_optimizer.*invalid"
    with pytest.raises(ConfigError, match=bad):
        export(best, ["hf"])


def _job_study(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A tiny command study searched for real (tests/data/jobs/fake_job.py copied into the project
    as job.py, named relatively, with a config file, flag, env and key mappings): its best.yaml and
    the chosen trial's record."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(JOB, project / "job.py")
    (project / "cfg.json").write_text('{"train": {"lr": 1.0, "other": "kept"}}')
    knobs = {
        "micro_batch_size": {"flag": "--bs"},
        "grad_accum_steps": {"flag": "--accum"},
        "optim": {"flag": "--optim", "values": ["adamw", "sgd"]},
        "lr": {"key": "train.lr", "values": [0.001, 0.01]},
        "lr_env": {"env": "MY_LR", "values": ["a", "b"]},
    }
    argv = ["{python}", "job.py", "--config", "{config}"]
    doc = {
        "name": "job",
        "workload": {
            "task": "command",
            "warmup_steps": 2,
            "measure_steps": 4,
            "global_batch_size": 2,
        },
        "command": {"argv": argv, "config_file": "cfg.json", "knobs": knobs},
        "space": {"micro_batch_size": [1, 2]},
        "study": {"trials": 2, "seed": 0, "confirm_top": 0, "trial_timeout_min": 1},
    }
    (project / "job.yaml").write_text(yaml.safe_dump(doc))
    cfg = load_config(project / "job.yaml")
    result = run_search(cfg, out_root=project / "trials", device="cpu")
    chosen = yaml.safe_load(result.best_yaml.read_text())["chosen"]["trial"]
    trial = next(t for t in result.history.seen.values() if t.number == chosen)
    return result.best_yaml, trial.user_attrs


def _first_config_line(line: str, folder: Path) -> str:
    """What the exported line's job prints of its configuration, run by a shell from `folder`
    (the shell's python: this test's); the job is ended once it has said it."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    proc = subprocess.Popen(
        ["bash", "-c", line],
        cwd=folder,
        env={**os.environ, "PATH": path},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: the shell and the job ended together, by its id
    )
    try:
        assert proc.stdout is not None
        return next(x for x in proc.stdout if x.startswith("config:"))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.slow
def test_export_command_form_is_what_the_chosen_trial_ran(tmp_path: Path) -> None:
    """The command form is the chosen trial's record (its argv, environment and config file),
    only its interpreter, trial folder and config path written for the study's folder; run from
    beside best.yaml, the job sees the configuration the trial's job saw."""
    best, record = _job_study(tmp_path)
    forms = export(best)
    assert [f.format for f in forms] == ["command", "json"]  # no TrainingArguments flag: no hf form
    line = _line(forms[0], "cd ")
    words = shlex.split(line)
    assert words[:3] == ["cd", "../..", "&&"]
    start = words.index(sys.executable)  # {python}, by the path the trial's record keeps
    applied = record["applied"]
    trial_config = str(Path(record["run_dir"]) / "config.json")
    ran = {trial_config: "trials/job/best.config.json"}
    assert words[start:] == [ran.get(a, a) for a in applied["command"]]
    assert dict(w.split("=", 1) for w in words[3:start]) == applied["env"]
    assert (best.parent / "../..").resolve() == Path(applied["cwd"]).resolve()
    exported = best.parent / "best.config.json"
    assert json.loads(exported.read_text()) == json.loads(Path(trial_config).read_text())
    seen = _first_config_line(line, best.parent)
    log = (Path(record["run_dir"]) / "worker.log").read_text().splitlines()
    trial_seen = next(x for x in log if x.startswith("config:"))
    assert json.loads(seen.partition(":")[2]) == json.loads(trial_seen.partition(":")[2])
