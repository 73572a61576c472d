"""autotune.export: best.yaml's winner in each format, from real files (a train study's best.yaml
modelled on the fixture study's, a command study's with flag, env and key mappings); no trial is
run."""

from __future__ import annotations

import ast
import copy
import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_cli
from typer.testing import CliRunner

import autotune
from autotune import knobs as catalogue
from autotune.cli import app
from autotune.errors import ConfigError
from autotune.export import Form, export

FIXTURE = Path(__file__).parent / "data" / "studies" / "fixture-v0" / "best.yaml"
DDP = {
    "parallel": "ddp",
    "bucket_cap_mb": 25,
    "ddp_comm_hook": "none",
    "ddp_compile": "split",
    "gradient_as_bucket_view": False,
    "static_graph": False,
}
FSDP = {
    "parallel": "fsdp",
    "reshard_after_forward": True,
    "fsdp_reduce_dtype": "fp32",
    "fsdp_forward_prefetch": 0,
    "fsdp_backward_prefetch": 1,
    "fsdp_grad_sync": "last",
}


def _train_best(tmp_path: Path, world_size: int = 1, **knobs: Any) -> Path:
    """The fixture's best.yaml with these knob values (global batch 32 kept) and world size, in a
    study folder."""
    doc = yaml.safe_load(FIXTURE.read_text())
    doc["knobs"].update(knobs)
    doc["workload"]["world_size"] = world_size
    doc["apply"]["knobs"] = copy.deepcopy(doc["knobs"])
    doc["apply"]["env"] = catalogue.env_of(doc["knobs"])
    path = tmp_path / "trials" / "fixture-v0" / "best.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _form(forms: list[Form], name: str) -> Form:
    return next(f for f in forms if f.format == name)


def _call_kwargs(text: str, name: str) -> dict[str, Any]:
    """The keyword arguments of the `name(...)` call in the form's text, as Python reads them."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.endswith(f"{name}("))
    end = next(i for i in range(start, len(lines)) if lines[i] == ")")
    source = (
        "\n".join(lines[start : end + 1]).split("=", 1)[1]
        if name == "Trainer"
        else "\n".join(lines[start : end + 1])
    )
    call = ast.parse(source.strip()).body[0].value
    return {
        k.arg: ast.unparse(k.value) if isinstance(k.value, ast.Call) else ast.literal_eval(k.value)
        for k in call.keywords
    }


def test_export_hf_kwargs_and_flags(tmp_path: Path) -> None:
    best = _train_best(
        tmp_path,
        micro_batch_size=4,
        grad_accum_steps=8,
        precision="bf16",
        compile="max-autotune",
        compile_scope="model",
        activation_checkpointing="full",
        fused_optimizer=True,
    )
    hf = _form(export(best, ["hf"]), "hf")
    assert _call_kwargs(hf.text, "TrainingArguments") == {
        "per_device_train_batch_size": 4,
        "bf16": True,
        "gradient_accumulation_steps": 8,
        "torch_compile": True,
        "torch_compile_mode": "max-autotune",
        "gradient_checkpointing": True,
        "gradient_checkpointing_kwargs": {"use_reentrant": False},
        "optim": "adamw_torch_fused",
    }
    flag_line = next(line for line in hf.text.splitlines() if line.startswith("--"))
    flags = shlex.split(flag_line)
    assert dict(zip(flags[::2], flags[1::2]))["--per_device_train_batch_size"] == "4"
    assert (
        flags[flags.index("--bf16") + 1] == "True"
        and flags[flags.index("--torch_compile_mode") + 1] == "max-autotune"
    )
    assert hf.missing == []


def test_export_hf_precision_and_compile_defaults(tmp_path: Path) -> None:
    kwargs = _call_kwargs(
        _form(
            export(
                _train_best(tmp_path, precision="tf32", compile=True, compile_scope="model"), ["hf"]
            ),
            "hf",
        ).text,
        "TrainingArguments",
    )
    assert (
        kwargs["tf32"] is True
        and kwargs["torch_compile"] is True
        and "torch_compile_mode" not in kwargs
    )
    assert "bf16" not in kwargs and "gradient_checkpointing" not in kwargs


def test_export_lightning_trainer_and_lines(tmp_path: Path) -> None:
    best = _train_best(
        tmp_path,
        world_size=2,
        micro_batch_size=4,
        grad_accum_steps=4,
        precision="tf32",
        compile="reduce-overhead",
        compile_scope="model",
        nccl_algo="Ring",
        **{**DDP, "bucket_cap_mb": 50},
    )
    form = _form(export(best, ["lightning"]), "lightning")
    kwargs = _call_kwargs(form.text, "Trainer")
    assert (
        kwargs["devices"] == 2
        and kwargs["accumulate_grad_batches"] == 4
        and kwargs["precision"] == "32-true"
    )
    assert (
        kwargs["strategy"]
        == "DDPStrategy(bucket_cap_mb=50, gradient_as_bucket_view=False, static_graph=False)"
    )
    assert 'torch.set_float32_matmul_precision("high")' in form.text
    assert "DataLoader(..., batch_size=4)" in form.text
    assert 'model = torch.compile(model, mode="reduce-overhead")' in form.text
    assert "export NCCL_ALGO=Ring" in form.text


def test_export_lightning_bf16_and_powersgd(tmp_path: Path) -> None:
    best = _train_best(
        tmp_path,
        world_size=2,
        micro_batch_size=4,
        grad_accum_steps=4,
        precision="bf16",
        **{**DDP, "ddp_comm_hook": "powersgd", "powersgd_rank": 8},
    )
    kwargs = _call_kwargs(_form(export(best, ["lightning"]), "lightning").text, "Trainer")
    assert kwargs["precision"] == "bf16-mixed"
    assert (
        "matrix_approximation_rank=8" in kwargs["strategy"]
        and "powerSGD.powerSGD_hook" in kwargs["strategy"]
    )


def _flags(text: str) -> dict[str, str]:
    """The torchtitan form's overrides: --key value (a bare flag: "true"), the policy subcommand as
    ac."""
    out = {}
    for line in text.splitlines():
        item = line.strip().removesuffix("\\").strip()
        if item.startswith("--"):
            key, _, value = item[2:].partition(" ")
            out[key] = value or "true"
        elif item.startswith("activation-checkpoint:"):
            out["ac"] = item.partition(":")[2]
    return out


def test_export_torchtitan_flags_of_its_current_config(tmp_path: Path) -> None:
    """torchtitan's config as of 2026-08 (Python config functions, tokens not samples): overrides
    after --module/--config, and the float8 converter as lines of the config function."""
    best = _train_best(
        tmp_path,
        world_size=2,
        micro_batch_size=2,
        grad_accum_steps=8,
        precision="fp8",
        fp8_recipe="rowwise",
        fp8_all_gather=False,
        compile=True,
        compile_scope="block",
        activation_checkpointing="selective_op",
        **FSDP,
    )
    form = _form(export(best, ["torchtitan"]), "torchtitan")
    flags = _flags(form.text)
    seq = yaml.safe_load(best.read_text())["model"]["seq_len"]
    assert flags["training.num_tokens_per_microbatch_per_dp_rank"] == str(2 * seq)
    assert flags["training.num_tokens_per_train_step"] == str(2 * seq * 8 * 2)
    assert flags["training.max_context_length"] == str(seq)
    assert "training.local_batch_size" not in form.text and ".toml" not in form.text
    assert flags["training.mixed_precision_param"] == "bfloat16"
    assert flags["compile.enable"] == "true"
    assert json.loads(flags["compile.components"].strip("'")) == ["model", "loss"]
    assert flags["ac"] == "selective"
    assert form.text.splitlines()[-1].startswith("#") or "activation-checkpoint:" in form.text
    assert flags["parallelism.data_parallel_shard_degree"] == "2"
    assert flags["optimizer.implementation"] == "foreach"
    converter = 'Float8LinearConverter.Config(recipe_name="rowwise", filter_fqns=["lm_head"])'
    assert converter in form.text
    assert "# no equivalent in torchtitan: fsdp_grad_sync=last (" in form.text
    assert any(m.startswith("fsdp_grad_sync=last") for m in form.missing)


def test_export_torchtitan_ddp_fp32(tmp_path: Path) -> None:
    best = _train_best(
        tmp_path,
        world_size=2,
        micro_batch_size=4,
        grad_accum_steps=4,
        **{**DDP, "bucket_cap_mb": 100},
    )
    flags = _flags(_form(export(best, ["torchtitan"]), "torchtitan").text)
    assert flags["parallelism.data_parallel_replicate_degree"] == "2"
    assert flags["parallelism.data_parallel_shard_degree"] == "1"
    assert flags["training.mixed_precision_param"] == "float32" and flags["ac"] == "none"
    assert "compile.enable" not in flags


def test_export_torchtitan_names_what_its_current_config_lacks(tmp_path: Path) -> None:
    knobs = {"precision": "fp8", "fp8_recipe": "tensorwise"}
    best = _train_best(tmp_path, activation_checkpointing="selective", **knobs)
    form = _form(export(best, ["torchtitan"]), "torchtitan")
    named = "fp8_recipe=tensorwise (Float8LinearConverter has"
    assert any(m.startswith(named) for m in form.missing)
    assert any(m.startswith("activation_checkpointing=selective (") for m in form.missing)


def test_export_json_parses(tmp_path: Path) -> None:
    best = _train_best(
        tmp_path, world_size=2, micro_batch_size=4, grad_accum_steps=4, nccl_algo="Tree", **DDP
    )
    doc = json.loads(_form(export(best, ["json"]), "json").text)
    assert doc["knobs"]["nccl_algo"] == "Tree" and doc["env"] == {"NCCL_ALGO": "Tree"}
    assert doc["metrics"]["tokens_per_s_per_gpu"] == 13605.0


def test_export_names_knob_without_equivalent(tmp_path: Path) -> None:
    forms = export(_train_best(tmp_path, attention="flash", pad_vocab_multiple=64))
    assert [f.format for f in forms] == ["torchrun", "hf", "lightning", "torchtitan", "json"]
    for name in ("hf", "lightning", "torchtitan", "torchrun"):
        form = _form(forms, name)
        assert f"# no equivalent in {name}: attention=flash (" in form.text
        assert any(m.startswith("pad_vocab_multiple=64 (") for m in form.missing)
    # every knob at its default: nothing to name
    quiet = export(_train_best(tmp_path / "b"), ["hf"])[0]
    assert quiet.missing == [] and "no equivalent" not in quiet.text


def test_export_torchrun_prefix_and_env(tmp_path: Path) -> None:
    best = _train_best(
        tmp_path,
        world_size=2,
        micro_batch_size=4,
        grad_accum_steps=4,
        cuda_alloc_conf="expandable_segments:True",
        **DDP,
    )
    text = export(best, ["torchrun"])[0].text
    assert "torchrun --standalone --nproc-per-node 2 your_script.py" in text
    assert "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in text
    assert "your script's own flags are your script's" in text


def test_export_bad_format_exit_2_one_line(tmp_path: Path) -> None:
    best = _train_best(tmp_path)
    proc = run_cli("export", str(best), "-f", "xml", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    allowed = "use command, torchrun, hf, lightning, torchtitan, json or all"
    assert f"--format: 'xml' is not allowed; {allowed}" in proc.stderr
    with pytest.raises(
        ConfigError, match=r"--format command: does not apply to this study \(task train"
    ):
        export(best, ["command"])


def test_export_cli_prints_forms_and_missing_file(tmp_path: Path) -> None:
    best = _train_best(tmp_path, precision="bf16")
    result = CliRunner().invoke(app, ["export", str(best), "-f", "hf", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert (
        "# ==== hf ====" in result.output
        and "bf16=True" in result.output
        and '"knobs"' in result.output
    )
    single = CliRunner().invoke(app, ["export", str(best), "--format", "json"])
    # one form: its text alone, ready to pipe
    assert json.loads(single.output)["knobs"]["precision"] == "bf16"
    missing = CliRunner().invoke(app, ["export", str(tmp_path / "absent.yaml")])
    assert missing.exit_code == 2 and "BEST_YAML: no such file" in missing.output


def test_export_run_export_is_the_library_function() -> None:
    """The API's run_export takes export's arguments (checked first: api_options) and calls it."""
    import inspect

    assert list(inspect.signature(autotune.run_export).parameters) == list(
        inspect.signature(export).parameters
    )


# --- a command study
# -------------------------------------------------------------------------------------------


def _command_best(tmp_path: Path, base_dir: str = "top") -> Path:
    """A command study's best.yaml: flag, env and key mappings, a JSON config file, a knob of the
    user's own. base_dir: "top", the study YAML's folder as write_best writes it; "command", in the
    command section; "none", absent (best.yaml's folder is the command's)."""
    project = tmp_path / "project"
    study = project / "trials" / "cmd"
    study.mkdir(parents=True)
    config_folder = study if base_dir == "none" else project
    (config_folder / "config.json").write_text(
        json.dumps({"training": {"lr": 0.1, "steps": 100}, "model": {"name": "x"}})
    )
    (config_folder / "train.py").write_text(TRAINER_SCRIPT)  # read for its class, never run
    command = {
        "argv": ["python", "train.py", "--config", "{config}", "--out", "{run_dir}/log"],
        "env": {"FOO": "bar baz"},
        "cwd": None,
        "config_file": "config.json",
        "knobs": {
            "micro_batch_size": {"flag": "--per_device_train_batch_size"},
            "precision": {"flag": "--bf16", "map": {"bf16": ["--bf16", "true"], "fp32": []}},
            "grad_accum_steps": {"key": "training.grad_accum"},
            "my_lr": {"key": "training.lr", "values": [0.1, 0.01]},
            "my_threads": {"env": "OMP_NUM_THREADS", "values": [1, 4]},
        },
        **({"base_dir": str(project)} if base_dir == "command" else {}),
    }
    knobs = {
        "micro_batch_size": 4,
        "precision": "bf16",
        "grad_accum_steps": 8,
        "compile": False,
        "activation_checkpointing": "none",
        "cuda_alloc_conf": "expandable_segments:True",
        "my_lr": 0.01,
        "my_threads": 4,
    }
    doc = {
        "name": "cmd",
        "knobs": knobs,
        "metrics": {"tokens_per_s_per_gpu": 1000.0},
        "fingerprint": {"device": "cuda", "gpu_model": "NVIDIA H200"},
        "apply": {"env": catalogue.env_of(knobs), "knobs": knobs},
        "workload": {"task": "command", "world_size": 1, "nnodes": 1},
        "command": command,
        **({"base_dir": str(project)} if base_dir == "top" else {}),
    }
    path = study / "best.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# the script of _command_best's command: an HF Trainer job parsing TrainingArguments
TRAINER_SCRIPT = """\
from transformers import HfArgumentParser, Trainer, TrainingArguments

(args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
Trainer(model=None, args=args).train()
"""


def _command_line(form: Form) -> list[str]:
    return shlex.split(next(line for line in form.text.splitlines() if line.startswith("cd ")))


@pytest.mark.parametrize("base_dir", ["top", "command", "none"])
def test_export_command_line_env_and_config(tmp_path: Path, base_dir: str) -> None:
    best = _command_best(tmp_path, base_dir)
    forms = export(best)
    assert [f.format for f in forms] == ["command", "hf", "json"]  # TrainingArguments flags
    words = _command_line(_form(forms, "command"))
    folder = "." if base_dir == "none" else "../.."  # the command's folder, from the study's
    assert words[:3] == ["cd", folder, "&&"]
    # no trial record beside this best.yaml: `python` as the trial would find it, on the PATH
    program = shutil.which("python") or "python"
    start = words.index(program)
    env = dict(w.split("=", 1) for w in words[3:start])
    expected = {"FOO": "bar baz", "OMP_NUM_THREADS": "4"}
    assert env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", **expected}
    argv = words[start:]
    written = best.parent / "best.config.json"
    from_cwd = "best.config.json" if base_dir == "none" else "trials/cmd/best.config.json"
    assert argv[:6] == [program, "train.py", "--config", from_cwd, "--out", "./log"]
    assert (best.parent / folder / from_cwd).resolve() == written.resolve()
    assert argv[argv.index("--per_device_train_batch_size") + 1] == "4"
    assert argv[-2:] == ["--bf16", "true"]
    config = json.loads(written.read_text())
    assert config == {
        "training": {"lr": 0.01, "steps": 100, "grad_accum": 8},
        "model": {"name": "x"},
    }
    assert _form(forms, "command").missing == []


def test_export_command_study_hf_form_is_its_flags(tmp_path: Path) -> None:
    forms = export(_command_best(tmp_path), ["hf", "json"])
    hf = _form(forms, "hf")
    kwargs = _call_kwargs(hf.text, "TrainingArguments")
    assert kwargs == {"per_device_train_batch_size": 4, "bf16": True}  # the measured flags' fields
    assert "--config trials/cmd/best.config.json --out ./log" in hf.text  # the script's own, kept
    assert "training.lr=0.01" in hf.text and "export OMP_NUM_THREADS=4" in hf.text
    assert hf.missing == [] and "no equivalent" not in hf.text
    assert json.loads(_form(forms, "json").text)["knobs"]["my_lr"] == 0.01


def test_export_command_section_checked(tmp_path: Path) -> None:
    best = _command_best(tmp_path)
    doc = yaml.safe_load(best.read_text())
    doc["command"]["knobs"]["my_lr"] = {"key": "training.lr", "flag": "--lr"}
    best.write_text(yaml.safe_dump(doc))
    with pytest.raises(
        ConfigError,
        match=r"best\.yaml: command\.knobs\.my_lr: give exactly one of flag, env or key",
    ):
        export(best)
    doc["command"] = "python train.py"
    best.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"command: missing or not a mapping"):
        export(best)


def test_export_formats_of_a_task_without_training_forms(tmp_path: Path) -> None:
    from autotune.export import formats_of
    from autotune.export._winner import Winner

    generate = Winner(
        path=tmp_path / "best.yaml", name="g", task="generate", knobs={}, env={}, metrics={}
    )
    assert formats_of(generate) == ("json",)
    command = Winner(
        path=tmp_path / "best.yaml", name="c", task="command", knobs={}, env={}, metrics={}
    )
    assert "command" not in formats_of(command)  # no command section: nothing to render


def test_export_forms_are_declared_once_in_the_catalogue() -> None:
    """The catalogue (export/_catalogue.py) is the list: each form's function, the README's table,
    the CLI's --format help and every task's exports come from it or are held to it."""
    from autotune import tasks
    from autotune.export import ALL, FORMATS, FORMS, markdown_table

    assert list(FORMATS) == list(FORMS)
    assert all(callable(f) for f in FORMATS.values())
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    begin, end = "<!-- export-forms:begin -->\n", "<!-- export-forms:end -->"
    # regenerate: python -c "from autotune.export import markdown_table; print(markdown_table())"
    assert readme.split(begin)[1].split(end)[0] == markdown_table()
    result = CliRunner().invoke(app, ["export", "--help"], terminal_width=400)
    assert f"{', '.join(FORMS)}, or {ALL}" in " ".join(result.output.split())
    for task in tasks.TASKS.values():
        assert set(task.exports) <= set(FORMS), task.name
