"""The real `autotune` command end to end on the CPU: search, Ctrl-C and resume, exit codes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import (
    cli_here,
    interrupt_when_running,
    load_trials,
    none_left,
    run_cli,
    start_cli,
    tiny,
)

import autotune
from autotune import knobs as catalogue
from autotune.space import KNOBS


@pytest.mark.slow
def test_cli_search_writes_best_yaml(write_yaml, tmp_path: Path) -> None:
    # two trials: the baseline and one against it (the speed-up compares them)
    path = write_yaml(tiny(study={"trials": 2}))
    proc = cli_here(
        "search", str(path), "--out", str(tmp_path / "out"), "--device", "cpu", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "Top 5 of 2 completed trials" in proc.stdout
    best = yaml.safe_load((tmp_path / "out" / "t" / "best.yaml").read_text())
    assert tuple(best["knobs"]) == tuple(
        k for k in KNOBS if "train" in catalogue.BY_NAME[k].tasks
    )  # the task's knobs
    assert best["metrics"]["tokens_per_s_per_gpu"] > 0
    assert best["metrics"]["mfu"] is None  # CPU: n/a, never invented
    assert best["baseline"]["trial"] == 0
    assert best["metrics"]["speedup_vs_baseline"] >= 1.0
    assert best["fingerprint"]["device"] == "cpu" and best["fingerprint"]["torch"].startswith("2.")
    assert len(best["measurement"]["step_times_s"]) == 2  # the raw samples behind the median
    assert "apply" in best and best["apply"]["env"] == {}


@pytest.mark.slow
def test_cli_ctrl_c_keeps_study_and_resumes(write_yaml, tmp_path: Path) -> None:
    # Two points: the baseline (mbs 2) completes, the next (mbs 4) hangs until Ctrl-C.
    data = tiny(space={"micro_batch_size": [2, 4], "precision": "fp32"}, study={"trials": 2})
    path = write_yaml(data)
    out = tmp_path / "out"
    proc = start_cli(
        "search",
        str(path),
        "--out",
        str(out),
        "--device",
        "cpu",
        cwd=tmp_path,
        env={"AUTOTUNE_FAULT": "hang@micro_batch_size=4"},
    )
    hanging = out / "t" / "runs" / "0001" / "spec.json"
    _, err = interrupt_when_running(proc, lambda: [hanging] if hanging.exists() else [])
    assert proc.returncode == 130, err
    assert "interrupted: the study is kept" in err
    none_left(str(hanging))  # the trial's process group was ended
    assert [t.user_attrs.get("status") for t in load_trials(out)] == ["ok", "interrupted"]
    assert (out / "t" / "best.yaml").exists()  # what was measured is written out

    # the resumed search in this process: the Ctrl-C above was the real process's
    again = cli_here("search", str(path), "--out", str(out), "--device", "cpu", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    trials = load_trials(out)
    assert (
        trials[0].user_attrs["status"] == "ok" and trials[0].number == 0
    )  # the completed trial is kept
    assert [t.user_attrs.get("status") for t in trials] == ["ok", "interrupted", "ok"]
    assert trials[2].params == {
        "micro_batch_size": 4
    }  # the interrupted configuration is measured again


@pytest.mark.slow
def test_cli_no_trial_succeeded_exit_1(write_yaml, tmp_path: Path) -> None:
    path = write_yaml(
        tiny(space={"micro_batch_size": [2, 4], "precision": "fp32"}, study={"trials": 2})
    )
    # the fault reaches the trials through the environment cli_here sets, as run_cli's would
    proc = cli_here(
        "search",
        str(path),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        cwd=tmp_path,
        env={"AUTOTUNE_FAULT": "crash"},
    )
    assert proc.returncode == 1
    assert "error: no trial succeeded (2 launched)" in proc.stderr


@pytest.mark.slow
def test_cli_changed_space_refused_exit_2(write_yaml, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    path = write_yaml(
        tiny(space={"micro_batch_size": [2], "precision": "fp32"}, baseline={}, study={"trials": 1})
    )
    assert (
        cli_here("search", str(path), "--out", out, "--device", "cpu", cwd=tmp_path).returncode == 0
    )
    path = write_yaml(
        tiny(space={"micro_batch_size": [2, 4], "precision": "fp32"}, study={"trials": 1})
    )
    proc = cli_here("search", str(path), "--out", out, "--device", "cpu", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1  # one line
    assert "exists with a different model, workload or space (" in proc.stderr


def test_cli_dry_run_writes_nothing(write_yaml, tmp_path: Path) -> None:
    path = write_yaml(tiny())
    proc = cli_here("search", str(path), "--out", str(tmp_path / "out"), "--dry-run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Resolved space: 6 points" in proc.stdout
    # the baseline's value in its column of the space table
    assert re.search(r"│ micro_batch_size +│[^│\n]+│ searched +│ 2 +│", proc.stdout), proc.stdout
    assert not (tmp_path / "out").exists()


def test_cli_validate_and_hw(write_yaml, tmp_path: Path) -> None:
    proc = cli_here("validate", str(write_yaml(tiny())), cwd=tmp_path)
    assert proc.returncode == 0 and "is valid" in proc.stdout
    hw = cli_here("hw", cwd=tmp_path)
    assert hw.returncode == 0, hw.stderr
    assert "H200 SXM" in hw.stdout and "989.5" in hw.stdout
    assert "torch 2." in hw.stdout
    assert f"autotune {autotune.__version__}, python" in hw.stdout


def test_cli_bad_device_and_usage(write_yaml, tmp_path: Path) -> None:
    proc = cli_here("search", str(write_yaml(tiny())), "--device", "tpu", cwd=tmp_path)
    assert proc.returncode == 2 and "--device: 'tpu' is not allowed; use cuda or cpu" in proc.stderr
    assert cli_here("search", cwd=tmp_path).returncode == 2  # missing argument: usage error
    assert "Traceback" not in proc.stderr


def test_cli_help_lists_every_command_without_importing_torch_or_optuna(tmp_path: Path) -> None:
    # what keeps --help fast: neither torch nor optuna imported (Python's own import log, as
    # -X importtime writes it)
    proc = run_cli("--help", cwd=tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0
    for command in ("search", "validate", "hw", "nccl", "report", "check"):
        assert f"\n  {command} " in proc.stdout
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "autotune.cli" in imported  # the log is there: the check below can see an import
    heavy = sorted(m for m in imported if m.split(".")[0] in ("torch", "optuna"))
    assert not heavy, heavy


def test_cli_parent_modules_never_import_torch_at_top() -> None:
    code = (
        "import sys, autotune.cli, autotune.config, autotune.space, autotune.search.run, "
        "autotune.report, autotune.check.regress, autotune.launch.runner, autotune.nccl, "
        "autotune.views; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


@pytest.mark.slow
def test_cli_trial_worker_needs_torch_only() -> None:
    parent_only = (
        "optuna",
        "pydantic",
        "typer",
        "rich",
        "yaml",
        "scipy",
        "autotune.config",
        "autotune.search",
        "autotune.launch.runner",
        "autotune.space",
    )
    code = (
        "import sys, autotune.workloads.trial, autotune.workloads.train, "
        "autotune.workloads.allreduce, autotune.workloads.model; print(sorted(m for m in "
        f"{parent_only!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


@pytest.mark.slow
def test_cli_search_hf_config_and_entrypoint_examples(tmp_path: Path) -> None:
    """Each shipped example searched as shipped, one trial (its baseline): the model its YAML names
    is built in the trial, its FLOPs counted there, and the report says how. One trial leaves no
    top to confirm (search/confirm.py), so each example runs one trial process."""
    root = Path(__file__).resolve().parents[1]
    for name, model in (
        ("hf-tiny-llama", "transformers LlamaForCausalLM"),
        ("entrypoint-example", "entrypoint custom_model:build"),
    ):
        proc = cli_here(
            "search",
            str(root / "search_spaces" / f"{name}.yaml"),
            "--out",
            str(tmp_path / "out"),
            "--device",
            "cpu",
            "--trials",
            "1",
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        best = yaml.safe_load((tmp_path / "out" / name / "best.yaml").read_text())
        assert best["metrics"]["tokens_per_s_per_gpu"] > 0
        trial = load_trials(tmp_path / "out", name)[0]
        assert trial.user_attrs["applied"]["model"].startswith(model)
        assert (
            trial.user_attrs["applied"]["flops"]
            == "counted by torch.utils.flop_counter over one forward+backward"
        )
        assert (
            trial.user_attrs["metrics"]["flops_per_token"] > 0
        )  # MFU's FLOPs, counted in the trial
        report = cli_here(
            "report",
            str(tmp_path / "out" / name),
            "--format",
            "markdown",
            "--no-html",
            cwd=tmp_path,
        )
        assert "MFU n/a (FLOPs: counted by torch.utils.flop_counter" in report.stdout, (
            report.stdout + report.stderr
        )


def test_cli_version_is_the_installed_package(tmp_path: Path) -> None:
    from importlib import metadata

    proc = cli_here("--version", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"autotune {metadata.version(autotune.DISTRIBUTION)}"


def test_cli_validate_shows_the_knobs_that_act_here_and_all_with_all(write_yaml) -> None:
    from typer.testing import CliRunner

    from autotune.cli import app

    path = write_yaml(tiny())
    shown = CliRunner().invoke(app, ["validate", str(path)])
    assert shown.exit_code == 0, shown.output
    assert "knob(s) that cannot act here not shown (--all shows them)" in " ".join(
        shown.output.split()
    )
    for absent in (
        "fsdp_reduce_dtype",
        "bucket_cap_mb",
        "nccl_algo",
        "kv_cache",
        "weight_quant",
        "prompt_len",
    ):
        assert (
            absent not in shown.output
        )  # FSDP/DDP/NCCL on one GPU, generate's knobs and fields for train
    assert "micro_batch_size" in shown.output and "precision" in shown.output
    every = CliRunner().invoke(app, ["validate", str(path), "--all"])
    assert every.exit_code == 0, every.output
    for knob in (
        "fsdp_reduce_dtype",
        "bucket_cap_mb",
        "nccl_algo",
        "kv_cache",
        "weight_quant",
        "prompt_len",
    ):
        assert knob in every.output
    dry = CliRunner().invoke(app, ["search", str(path), "--dry-run", "--device", "cpu"])
    assert (
        dry.exit_code == 0 and "fsdp_reduce_dtype" not in dry.output and "not shown" in dry.output
    )
