"""task command: the user's own job tuned as it is (tests/data/jobs/fake_job.py, the HF Trainer and
plain PyTorch examples), its failures one line each, nothing of it left running, and the export
round trip."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import alive, cli_here, finishes

from autotune.errors import ConfigError, UnmeasuredError
from autotune.job import load_config
from autotune.search.run import run_search

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "data" / "jobs" / "fake_job.py"


def _yaml(tmp_path: Path, command: dict, space: dict | None = None, **workload) -> Path:
    doc = {
        "name": "job",
        "workload": {"task": "command", "warmup_steps": 2, "measure_steps": 4, **workload},
        "command": {"argv": ["{python}", str(JOB), *command.pop("args", [])], **command},
        "space": space or {},
        "study": {"trials": 2, "seed": 0, "confirm_top": 0, "trial_timeout_min": 1},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _search(path: Path, tmp_path: Path, trials: int | None = None):
    return run_search(load_config(path), out_root=tmp_path / "trials", device="cpu", trials=trials)


def _at_each(doc: dict, points: list[dict], tmp_path: Path) -> list:
    """The completed trials of one one-trial search of `doc` per point, the point its baseline
    (trial 0): chosen points take the values a test needs covered, where a sampler's draws would
    leave them to chance. Each point's trial must complete."""
    done = []
    for i, point in enumerate(points):
        one = {**doc, "baseline": point, "study": {**doc["study"], "trials": 1}}
        path = tmp_path / f"point{i}.yaml"
        path.write_text(yaml.safe_dump(one))
        result = _search(path, tmp_path / f"point{i}")
        assert len(result.history.completed) == 1, [t.user_attrs["reason"] for t in _trials(result)]
        done += result.history.completed
    return done


def _trials(result) -> list:
    return sorted(result.history.seen.values(), key=lambda t: t.number)


def _records(result) -> list[dict]:
    return [t.user_attrs for t in _trials(result)]


def _seen(run_dir: str) -> dict:
    """What the job printed of its own configuration (its first `config:` line)."""
    log = (Path(run_dir) / "worker.log").read_text()
    line = next(x for x in log.splitlines() if x.startswith("config:"))
    return json.loads(line.removeprefix("config:"))


BATCH = {"micro_batch_size": {"flag": "--bs"}, "grad_accum_steps": {"flag": "--accum"}}


@pytest.mark.slow
def test_command_flags_env_and_config_keys_reach_the_job(tmp_path: Path) -> None:
    (tmp_path / "cfg.json").write_text(json.dumps({"train": {"lr": 1.0, "other": "kept"}}))
    knobs = {
        **BATCH,
        "optim": {"flag": "--optim", "values": ["adamw", "sgd"]},
        "lr": {"key": "train.lr", "values": [0.001, 0.01]},
        "lr_env": {"env": "MY_LR", "values": ["a", "b"]},
    }
    command = {"args": ["--config", "{config}"], "config_file": "cfg.json", "knobs": knobs}
    path = _yaml(tmp_path, command, {"micro_batch_size": [2, 4]}, global_batch_size=8)
    # one trial (the baseline) with every knob at its last value, none the job's own default (bs 1,
    # accum 1, adamw, lr 1.0, no MY_LR): a mapping that did not reach the job would show
    doc = yaml.safe_load(path.read_text())
    doc["baseline"] = {"micro_batch_size": 4, "optim": "sgd", "lr": 0.01, "lr_env": "b"}
    path.write_text(yaml.safe_dump(doc))
    result = _search(path, tmp_path, trials=1)
    done = result.history.completed
    assert len(done) == 1, [t.user_attrs["reason"] for t in _trials(result)]
    for trial in done:
        rec = trial.user_attrs
        knobs_of = rec["knobs"]
        seen = _seen(rec["run_dir"])
        assert seen["bs"] * seen["accum"] == 8  # the global batch kept exact
        assert seen["bs"] == knobs_of["micro_batch_size"] and seen["optim"] == knobs_of["optim"]
        assert seen["config"] == {"train": {"lr": knobs_of["lr"], "other": "kept"}}
        assert seen["env_lr"] == knobs_of["lr_env"]
        # 10 of 12 tokens real
        assert rec["metrics"]["padding_pct"] == pytest.approx(100 / 6, abs=0.01)
    # the user's file untouched
    assert json.loads((tmp_path / "cfg.json").read_text())["train"]["lr"] == 1.0


@pytest.mark.parametrize(
    ("mode", "status", "reason"),
    [
        # one real job in `make test-fast`: the task's process boundary, a few seconds
        (
            "silent",
            "crash",
            r"exited 0 without reporting a step; expected steps in AUTOTUNE_REPORT",
        ),
        pytest.param(
            "early",
            "crash",
            r"exited 0 after 2 of 6 steps \(2 warm-up \+ 4 measured\): let it run at least",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "oom",
            "oom",
            r"^out of memory \(2.00 GiB more asked\); lower it with the job's micro-batch or its "
            r"activation checkpointing \(mapped in command.knobs\); the command ran out of memory: "
            r"torch.OutOfMemoryError: CUDA out of memory",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_command_job_that_fails_its_contract_says_so_in_one_line(
    tmp_path: Path, mode: str, status: str, reason: str
) -> None:
    path = _yaml(tmp_path, {"args": ["--mode", mode]})
    if mode == "silent":  # the baseline measured nothing, whatever its knobs: the search stops
        with pytest.raises(UnmeasuredError, match=reason) as err:
            _search(path, tmp_path, trials=1)
        assert len(str(err.value).splitlines()) == 1 and err.value.exit_code == 3
        return
    rec = _records(_search(path, tmp_path, trials=1))[0]
    assert rec["status"] == status
    assert len(rec["reason"].splitlines()) == 1
    assert __import__("re").search(reason, rec["reason"]), rec["reason"]


@pytest.mark.slow
def test_command_job_that_ignores_the_stop_is_ended_and_measured(tmp_path: Path) -> None:
    path = _yaml(
        tmp_path,
        {"args": ["--mode", "ignore_stop", "--pidfile", str(tmp_path / "pid")], "stop_grace_s": 1},
    )
    rec = _records(_search(path, tmp_path, trials=1))[0]
    assert rec["status"] == "ok", rec["reason"]
    # ended by stop_grace_s (1 s), not left to the trial's limit (1 min)
    assert rec["reason"].startswith(
        "measured; the command ignored the stop request and had not exited 1 s after the stop "
        "request, so its process group was ended"
    )
    assert not alive(int((tmp_path / "pid").read_text()))


@pytest.mark.slow
def test_command_job_that_hangs_times_out_with_its_steps_named(tmp_path: Path) -> None:
    path = _yaml(tmp_path, {"args": ["--mode", "hang", "--pidfile", str(tmp_path / "pid")]})
    cfg = load_config(path)
    cfg = cfg.model_copy(update={"study": cfg.study.model_copy(update={"trial_timeout_min": 0.35})})
    rec = _records(run_search(cfg, out_root=tmp_path / "trials", device="cpu", trials=1))[0]
    assert rec["status"] == "timeout"
    assert rec["reason"].startswith(
        "the command reported 1 of 6 steps by the trial's limit, 6 s (study.trial_timeout_min "
        "0.35: raise it to measure more): 0 s to its first step (start, model, first compile), "
        "then "
    ), rec["reason"]
    ended = "s without a step; none measured past its 2 warm-up steps; its output ends: config:"
    assert ended in rec["reason"]
    assert not alive(int((tmp_path / "pid").read_text()))


@pytest.mark.slow
def test_command_log_pattern_measures_a_job_that_prints_its_throughput(tmp_path: Path) -> None:
    command = {
        "args": ["--mode", "log"],
        "measure": "log",
        "log_pattern": r"tps: (?P<tokens_per_s>[0-9,.]+)",
    }
    rec = _records(_search(_yaml(tmp_path, command), tmp_path, trials=1))[0]
    assert rec["status"] == "ok", rec["reason"]
    assert rec["metrics"]["tokens_per_s_per_gpu"] == pytest.approx(1000)


@pytest.mark.slow
def test_command_trial_process_never_imports_torch(tmp_path: Path, monkeypatch) -> None:
    """The job imports its own torch; the trial beside it imports none (about 1.7 s of each trial
    on 2 cores). A torch that fails on import, first on the path, leaves the trial measured, and
    its fingerprint names that torch's versions as its files say."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('the command trial imported torch')\n")
    (fake / "version.py").write_text("__version__ = '0.0.fake'\ncuda: str | None = '99.9'\n")
    before = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(fake.parent), before])))
    rec = _records(_search(_yaml(tmp_path, {"args": ["--mode", "fixed"]}), tmp_path, trials=1))[0]
    assert rec["status"] == "ok", rec["reason"]
    assert (rec["fingerprint"]["torch"], rec["fingerprint"]["cuda"]) == ("0.0.fake", "99.9")


@pytest.mark.slow
def test_command_figure_is_what_the_job_delivers_known_by_construction(tmp_path: Path) -> None:
    """Steps of 10, 10, 10 and 50 tokens, each 20 ms plus 2 ms a token: the job delivers 80 tokens
    in 0.24 s, 333 tokens/s; the median of the steps' rates would say 250 (0.75x), the mean tokens
    over the median step 500 (1.5x). The figure is all tokens over all time."""
    rec = _records(_search(_yaml(tmp_path, {"args": ["--mode", "fixed"]}), tmp_path, trials=1))[0]
    assert rec["status"] == "ok", rec["reason"]
    assert rec["metrics"]["tokens_per_s_per_gpu"] == pytest.approx(80 / 0.24, rel=0.12)
    window = rec["metrics"]["window"]
    assert window["measured_steps"] >= 4
    assert window["tokens_per_s"] == rec["metrics"]["tokens_per_s_per_gpu"]
    assert "steps after" in window["said"]


@pytest.mark.slow
def test_command_kill_9_of_autotune_leaves_no_process_of_the_job(tmp_path: Path) -> None:
    path = _yaml(tmp_path, {"args": ["--mode", "hang", "--pidfile", str(tmp_path / "pid")]})
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "search", str(path), "--device", "cpu"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pidfile = tmp_path / "pid"
    deadline = time.monotonic() + 60
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    job = int(pidfile.read_text())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 15
    while alive(job) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(job)


BAD = [
    (
        {"knobs": {"micro_batch_size": {"flag": "bs"}}},
        r"command.knobs.micro_batch_size: flag 'bs' does not start with '-'",
    ),
    (
        {"knobs": {"micro_batch_size": {"flag": "--bs", "env": "BS"}}},
        r"give exactly one of flag, env or key \(got flag, env\)",
    ),
    (
        {"knobs": {"optim": {"flag": "--optim"}}},
        r"command.knobs.optim.values: a knob of your own lists its values",
    ),
    (
        {"knobs": {"precision": {"flag": "--p", "values": ["bf16"]}}},
        r"command.knobs.precision.values: precision is autotune's knob",
    ),
    (
        {"knobs": {"attention": {"flag": "--a", "values": ["x"]}}},
        r"command.knobs.attention: attention is a knob of task train, generate",
    ),
    (
        {"knobs": {"lr": {"key": "a.b", "values": [1]}}},
        r"command.knobs.lr: a key mapping needs command.config_file",
    ),
    (
        {"knobs": {"precision": {"flag": "--p", "map": {"fp32": []}}}},
        r"command.knobs.precision.map: no entry for bf16",
    ),
    ({"measure": "log"}, r"command.log_pattern: needed with measure log"),
    ({"measure": "log", "log_pattern": "tps: ([0-9]+)"}, r"has no named group tokens_per_s"),
    ({"cwd": "nowhere"}, r"command.cwd: no such folder: 'nowhere'"),
]


@pytest.mark.parametrize(("command", "message"), BAD)
def test_command_bad_mapping_is_one_line_naming_the_yaml_path(
    tmp_path: Path, command: dict, message: str
) -> None:
    path = _yaml(tmp_path, dict(command), {"precision": ["fp32", "bf16"]})
    doc = yaml.safe_load(path.read_text())
    if "precision" not in str(command):
        doc["command"].setdefault("knobs", {})["precision"] = {"flag": "--precision"}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=message) as err:
        load_config(path)
    assert len(str(err.value).splitlines()) == 1


def test_command_searched_knob_without_a_mapping_is_refused(tmp_path: Path) -> None:
    path = _yaml(tmp_path, {}, {"micro_batch_size": [2, 4]})
    with pytest.raises(
        ConfigError,
        match=r"space.micro_batch_size: \[2, 4\] set, but command.knobs.micro_batch_size",
    ):
        load_config(path)
    path = _yaml(
        tmp_path,
        {"knobs": {"micro_batch_size": {"flag": "--bs"}}},
        {"micro_batch_size": [2, 4]},
        global_batch_size=8,
    )
    with pytest.raises(
        ConfigError, match=r"command.knobs.grad_accum_steps: needed with workload.global_batch_size"
    ):
        load_config(path)


def test_command_sections_belong_to_their_tasks(tmp_path: Path) -> None:
    path = _yaml(tmp_path, {})
    doc = yaml.safe_load(path.read_text())
    doc["model"] = {
        "family": "gpt",
        "n_layers": 1,
        "d_model": 8,
        "n_heads": 1,
        "vocab_size": 16,
        "seq_len": 8,
    }
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"model: not used with task command"):
        load_config(path)
    doc["workload"]["task"] = "train"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"command: only for task command \(task is train\)"):
        load_config(path)


def _export_command(best: Path) -> tuple[str, list[str], dict[str, str]]:
    proc = cli_here("export", str(best), "-f", "command", cwd=best.parent)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    line = next(x for x in out.splitlines() if x.startswith("cd "))
    cwd, _, rest = line.removeprefix("cd ").partition(" && ")
    words = shlex.split(rest)
    env = dict(w.split("=", 1) for w in words if "=" in w.split("-")[0] and not w.startswith("-"))
    argv = [w for w in words if w not in {f"{k}={v}" for k, v in env.items()}]
    return cwd, argv, env


@pytest.mark.slow
def test_command_export_round_trips_to_the_trial_configuration(tmp_path: Path) -> None:
    knobs = {
        **BATCH,
        "optim": {"flag": "--optim", "values": ["adamw", "sgd"]},
        "lr_env": {"env": "MY_LR", "values": ["a", "b"]},
    }
    path = _yaml(tmp_path, {"knobs": knobs}, {"micro_batch_size": [2, 4]}, global_batch_size=8)
    # one trial, chosen: the baseline, every knob at a value other than the job's own default, so
    # each must reach the exported command for the job to see the same
    doc = yaml.safe_load(path.read_text())
    doc["baseline"] = {"micro_batch_size": 4, "optim": "sgd", "lr_env": "b"}
    path.write_text(yaml.safe_dump(doc))
    result = _search(path, tmp_path, trials=1)
    chosen = next(
        t
        for t in _trials(result)
        if t.number == yaml.safe_load(result.best_yaml.read_text())["chosen"]["trial"]
    )
    cwd, argv, env = _export_command(result.best_yaml)
    # the exported `cd` is relative to the study folder, its interpreter `python` on PATH
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    job = subprocess.Popen(
        argv,
        cwd=result.best_yaml.parent / cwd,
        env={**os.environ, **env, "PATH": path},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        # its first line, what it was given; outside autotune it then trains 1,000 steps (16 s)
        first = finishes(job.stdout.readline, 60, "the exported command's first line")
    finally:
        job.kill()
        job.wait()
    assert first.startswith("config:"), first
    assert json.loads(first.removeprefix("config:")) == _seen(chosen.user_attrs["run_dir"])


# The HF example's two points that between them take both values of every knob it maps: the
# YAML's baseline (the Trainer's defaults) and its opposite.
HF_POINTS = [
    {
        "micro_batch_size": 8,
        "precision": "fp32",
        "activation_checkpointing": "none",
        "optim": "adamw_torch_fused",
        "sampling": "random",
    },
    {
        "micro_batch_size": 4,
        "precision": "bf16",
        "activation_checkpointing": "full",
        "optim": "adamw_torch",
        "sampling": "group_by_length",
    },
]


@pytest.mark.slow
def test_command_hf_trainer_job_tuned_end_to_end(tmp_path: Path) -> None:
    """The HF Trainer example: micro-batch and accumulation at a fixed global batch, precision,
    gradient checkpointing and the optimizer reach the Trainer; its callback measures the real
    tokens. Both values of each knob, at two chosen points (HF_POINTS); at most 4 steps a trial
    (what reaches the Trainer and the tokens counted need no settled figure)."""
    pytest.importorskip("accelerate")
    doc = yaml.safe_load((ROOT / "search_spaces" / "hf-trainer-tiny.yaml").read_text())
    doc["command"].update(cwd=str(ROOT), max_steps=4)
    doc["workload"].update(warmup_steps=1, measure_steps=2)
    doc["study"].update(confirm_top=0, prune_below=0)  # every trial measured whole
    doc["space"].update(micro_batch_size=[4, 8])
    done = _at_each(doc, HF_POINTS, tmp_path)
    # bf16 runs on the CPU too
    assert {t.user_attrs["knobs"]["precision"] for t in done} == {"fp32", "bf16"}
    assert len({t.user_attrs["knobs"]["optim"] for t in done}) == 2
    for trial in done:
        knobs, seen = trial.user_attrs["knobs"], _seen(trial.user_attrs["run_dir"])
        assert (
            int(seen["per_device_train_batch_size"]) * int(seen["gradient_accumulation_steps"])
            == 16
        )
        assert seen["bf16"] == str(knobs["precision"] == "bf16")
        assert seen["gradient_checkpointing"] == str(knobs["activation_checkpointing"] == "full")
        assert seen["optim"].lower().endswith(knobs["optim"].upper().lower())
        assert seen["sampling"] == knobs["sampling"]
        # padded batches of variable lengths
        assert 0 < trial.user_attrs["metrics"]["padding_pct"] < 100


@pytest.mark.slow
def test_command_plain_pytorch_script_tuned(tmp_path: Path) -> None:
    """The plain PyTorch example: micro-batch and accumulation at a fixed global batch and the
    script's own optimizer flag reach it, at its defaults and at a point off every one of them; at
    most 4 steps a trial (what reaches the script needs no settled figure)."""
    doc = yaml.safe_load((ROOT / "search_spaces" / "torchrun-script.yaml").read_text())
    doc["command"].update(cwd=str(ROOT), max_steps=4)
    doc["workload"].update(warmup_steps=1, measure_steps=2)
    # every trial measured whole: the pruner's 80% cut fires on a CPU's swings (seen in CI)
    doc["study"].update(confirm_top=0, prune_below=0)
    points = [
        {"micro_batch_size": 4, "precision": "fp32", "optimizer": "adamw"},
        {"micro_batch_size": 16, "precision": "bf16", "optimizer": "sgd"},
    ]
    for trial in _at_each(doc, points, tmp_path):
        seen, knobs = _seen(trial.user_attrs["run_dir"]), trial.user_attrs["knobs"]
        assert seen["batch_size"] * seen["accum"] == 16 and seen["optimizer"] == knobs["optimizer"]
        assert seen["precision"] == knobs["precision"]
        # the script reports no padded count
        assert trial.user_attrs["metrics"]["padding_pct"] is None
