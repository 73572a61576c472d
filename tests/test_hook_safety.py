"""command.measure hf / lightning made safe (issue 51): one Trainer measured a job, the user's
PYTHONPATH first with autotune's hook folder alone added, the hook only in the job's first process
and its launcher's ranks, and the settings the job really ran with compared with the trial's knobs.
Real subprocesses and real tiny Trainers on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from conftest import TINY_LM

from autotune import reporting
from autotune.command.hook import launch
from autotune.command.render import measure_env
from autotune.command.report import JobFailed, Report

ROOT = Path(__file__).resolve().parents[1]
SITE = launch.site_dir()


def _env(tmp_path: Path, pythonpath: str = "", **extra: str) -> dict[str, str]:
    """The job's environment as the trial makes it (measure hf), AUTOTUNE_* included."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.pop("LOCAL_RANK", None)
    env.update(measure_env("hf", {"PYTHONPATH": pythonpath}))
    env.update({reporting.ENV_REPORT: str(tmp_path / "steps.jsonl"), reporting.ENV_STEPS: "1,2"})
    return {**env, **extra}


def test_measure_env_puts_the_users_path_first_and_only_the_hook_folder() -> None:
    env = measure_env("hf", {"PYTHONPATH": os.pathsep.join(["/a", "/b"])})
    assert env["PYTHONPATH"].split(os.pathsep) == ["/a", "/b", SITE]
    assert measure_env("report", {}) == {}


def test_measure_env_puts_the_hook_first_before_a_user_sitecustomize(tmp_path: Path) -> None:
    """Behind a user folder with its own sitecustomize ours would never run: it goes first, and
    theirs still runs (ours chains it)."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os; os.environ['THEIRS_RAN'] = '1'\n")
    env = _env(tmp_path, pythonpath=str(theirs))
    assert env["PYTHONPATH"].split(os.pathsep) == [SITE, str(theirs)]
    code = (
        "import os, sys; print(os.environ.get('THEIRS_RAN'), "
        "'autotune.command.hook.launch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.split() == ["1", "True"], out.stderr[-2000:]


# A job's first process, then what it starts: a plain Python child, a rank (LOCAL_RANK), the rank's
# own child, a shell script's python and a spawned multiprocessing worker. Each says whether the
# hook acts in it and what of autotune it still sees.
PROBE = """
import json, os, sys
def state():
    return {
        "hooked": any(type(f).__name__ == "_Finder" for f in sys.meta_path),
        "autotune_env": sorted(k for k in os.environ if k.startswith("AUTOTUNE_")),
        "site": "_site" in os.environ.get("PYTHONPATH", ""),
    }
"""
JOB = (
    PROBE
    + """
import multiprocessing, subprocess
def run(argv, **env):
    out = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
def worker(queue):
    queue.put(state())
if __name__ == "__main__":
    child = [sys.executable, sys.argv[1]]
    seen = {"first": state()}
    seen["child"] = run(child)
    seen["rank"] = run(child + ["again"], LOCAL_RANK="0")
    seen["rank's child"] = seen["rank"].pop("child")
    seen["shell's python"] = run(["sh", "-c", " ".join(child)])
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=worker, args=(queue,))
    process.start()
    seen["spawned worker"] = queue.get(timeout=60)
    process.join()
    print(json.dumps(seen))
"""
)
CHILD = (
    PROBE
    + """
import subprocess
seen = state()
if sys.argv[1:] == ["again"]:
    out = subprocess.run([sys.executable, sys.argv[0]], capture_output=True, text=True)
    seen["child"] = json.loads(out.stdout)
print(json.dumps(seen))
"""
)


def test_hook_acts_in_the_first_process_and_its_ranks_only(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "child.py").write_text(CHILD)
    out = subprocess.run(
        [sys.executable, str(tmp_path / "job.py"), str(tmp_path / "child.py")],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    measured = ["AUTOTUNE_HOOK", "AUTOTUNE_MEASURE", "AUTOTUNE_REPORT", "AUTOTUNE_STEPS"]
    for name in ("first", "rank"):
        assert seen[name] == {"hooked": True, "autotune_env": measured, "site": True}, name
    for name in ("child", "rank's child", "shell's python", "spawned worker"):
        assert seen[name] == {"hooked": False, "autotune_env": [], "site": False}, name


@pytest.mark.slow
def test_hook_reaches_autotune_without_its_folder_on_the_path(tmp_path: Path) -> None:
    """A job whose Python has no autotune (the base interpreter, the environment's packages on its
    PYTHONPATH as plain folders: no editable install): `autotune` is this copy's folder, its
    __init__ not run; the framework comes from the job's path; the Trainer gets the callback."""
    base = getattr(sys, "_base_executable", sys.executable)
    packages = sysconfig.get_paths()["purelib"]
    probe = subprocess.run(
        [base, "-c", "import autotune"], capture_output=True, timeout=60, cwd=tmp_path
    )
    if probe.returncode == 0:
        pytest.skip("the base interpreter has an autotune of its own")
    code = (
        "import sys, autotune\n"
        "from autotune.command.hook import launch\n"
        "print(hasattr(autotune, 'run_search'), autotune.__path__[0] == %r)\n"
        "print(any(p.rstrip('/').endswith('autotune') for p in sys.path))\n"
        "print(any(isinstance(f, launch._Finder) for f in sys.meta_path))\n"
        "import transformers.trainer as t\n"
        "print(t.__file__.startswith(%r), getattr(t.Trainer.__init__, '_autotune', False))\n"
    ) % (str(ROOT / "autotune"), packages)
    out = subprocess.run(
        [base, "-c", code],
        env=_env(tmp_path, pythonpath=packages),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True", "False", "True", "True", "True"]


def test_reporter_one_training_measured_a_second_after_a_short_first_fails(tmp_path: Path) -> None:
    path = tmp_path / "steps.jsonl"
    r = reporting.Reporter(str(path), "1,2", sync=lambda: None)
    first, second = object(), object()
    assert r.claim(first) and not r.claim(second)  # the first is still training: silent
    r.record(0.1, 10)
    r.close()
    assert not r.claim(second)
    failed = [json.loads(x) for x in path.read_text().splitlines()][-1]["failed"]
    assert failed.startswith("the job trained a second Trainer after the first training's 1 of the")
    with pytest.raises(JobFailed, match="autotune measures one Trainer's training"):
        Report(path, 0.0, 10).read()
    # the first gave autotune its steps: another training is no concern of the trial's
    done = reporting.Reporter(str(tmp_path / "done.jsonl"), "1,2", sync=lambda: None)
    assert done.claim(first)
    for _ in range(3):
        done.record(0.1, 10)
    assert not done.claim(second)
    assert "failed" not in (tmp_path / "done.jsonl").read_text()


def test_report_job_settings_that_contradict_the_knobs_fail_the_trial(tmp_path: Path) -> None:
    path = tmp_path / "steps.jsonl"
    r = reporting.Reporter(str(path), "1,2", sync=lambda: None)
    r.job_settings(
        {"micro_batch_size": 20, "grad_accum_steps": 1, "precision": "bf16"},
        {"micro_batch_size": "per_device_train_batch_size"},
    )
    agreed = Report(path, 0.0, 10, {"micro_batch_size": 20, "grad_accum_steps": 1})
    agreed.read()
    assert agreed.settings == {"micro_batch_size": 20, "grad_accum_steps": 1, "precision": "bf16"}
    said = (
        "the job ran micro_batch_size 20 (per_device_train_batch_size) but the trial set 8: map "
        "the knob (command.knobs.micro_batch_size: {flag: ...}) or declare the value the script "
        "fixes (space.micro_batch_size: [20])"
    )
    with pytest.raises(JobFailed) as err:
        Report(path, 0.0, 10, {"micro_batch_size": 8}).read()
    assert str(err.value) == said and err.value.status == "invalid_config"


def test_report_job_settings_line_that_cannot_be_fails(tmp_path: Path) -> None:
    path = tmp_path / "steps.jsonl"
    path.write_text(json.dumps({"job_settings": {"micro_batch_size": [1] * 9}}) + "\n")
    with pytest.raises(Exception, match="job_settings has"):
        Report(path, 0.0, 10).read()


# Two HF Trainers in one job, trained in turn, each with autotune's callback on one reporter.
def _hf_trainer(tmp_path: Path, reporter: reporting.Reporter, max_steps: int, batch: int) -> Any:
    import torch
    from transformers import Trainer, TrainingArguments

    from autotune.callbacks.hf import AutotuneCallback

    class TinyLM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(32, 8)
            self.head = torch.nn.Linear(8, 32)

        def forward(self, input_ids: Any, attention_mask: Any = None, labels: Any = None) -> Any:
            logits = self.head(self.embed(input_ids))
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
            return {"loss": loss, "logits": logits}

    gen = torch.Generator().manual_seed(0)
    rows = [torch.randint(1, 32, (16,), generator=gen) for _ in range(64)]
    data = [{"input_ids": r, "attention_mask": torch.ones_like(r), "labels": r} for r in rows]
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        report_to="none",
        max_steps=max_steps,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=2,
        save_strategy="no",
        logging_steps=1000,
        disable_tqdm=True,
    )
    callback = AutotuneCallback(reporter)
    return Trainer(model=TinyLM(), args=args, train_dataset=data, callbacks=[callback])


@pytest.mark.slow
def test_callback_hf_measures_the_first_trainer_and_fails_a_second_after_a_short_first(
    tmp_path: Path,
) -> None:
    pytest.importorskip("transformers")
    path = tmp_path / "steps.jsonl"
    reporter = reporting.Reporter(str(path), "2,3", sync=lambda: None)
    _hf_trainer(tmp_path, reporter, max_steps=2, batch=4).train()
    _hf_trainer(tmp_path, reporter, max_steps=3, batch=2).train()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines[0]["job_settings"] == {
        "micro_batch_size": 4,
        "grad_accum_steps": 2,
        "precision": "fp32",
        "activation_checkpointing": "none",
        "compile": False,
        "optim": "adamw_torch_fused",  # the Trainer's default with PyTorch 2.8 or later
    }
    assert [x["step"] for x in lines if "step" in x] == [1, 2]  # the second's steps never counted
    assert sum("job_settings" in x for x in lines) == 1 and "done" in lines[-2]
    assert lines[-1]["failed"].startswith("the job trained a second Trainer after the first")
    with pytest.raises(JobFailed, match="a second Trainer") as err:
        Report(path, 0.0, 10).read()
    assert err.value.status == "crash" and "\n" not in str(err.value)


@pytest.mark.slow
def test_callback_hf_second_trainer_after_the_steps_stays_silent(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    path = tmp_path / "steps.jsonl"
    reporter = reporting.Reporter(str(path), "1,1", sync=lambda: None)
    first = _hf_trainer(tmp_path, reporter, max_steps=10, batch=4)
    second = _hf_trainer(tmp_path, reporter, max_steps=3, batch=4)
    first.train()
    second.train()
    assert first.state.global_step == 2 and second.state.global_step == 3  # stopped at its most
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["step"] for x in lines if "step" in x] == [1, 2]
    assert not any("failed" in x for x in lines)


# An unmodified HF Trainer script (measure: hf): `fixed` hard-codes its batch size (4, where the
# trial sets the default 8); `two` trains a Trainer for 2 steps, then a second.
HF_JOB = (
    """
import sys, torch
from transformers import Trainer, TrainingArguments

"""
    + TINY_LM
    + """
rows = [torch.randint(1, 32, (16,)) for _ in range(256)]
data = [{"input_ids": r, "attention_mask": torch.ones_like(r), "labels": r} for r in rows]
batch = 4 if sys.argv[1] == "fixed" else 8
for steps in ([2, 50] if sys.argv[1] == "two" else [200]):
    args = TrainingArguments(output_dir="out", use_cpu=True, report_to="none", max_steps=steps,
                             per_device_train_batch_size=batch, save_strategy="no",
                             disable_tqdm=True)
    Trainer(model=TinyLM(), args=args, train_dataset=data).train()
"""
)


def _hf_search(tmp_path: Path, mode: str) -> dict[str, Any]:
    """The record of the one trial (the baseline) of a search of the HF_JOB."""
    import yaml

    from autotune.errors import UnmeasuredError
    from autotune.job import load_config
    from autotune.search.run import run_search

    (tmp_path / "job.py").write_text(HF_JOB)
    doc = {
        "name": "job",
        "workload": {"task": "command", "warmup_steps": 2, "measure_steps": 4},
        "command": {"argv": ["{python}", "job.py", mode], "cwd": str(tmp_path), "measure": "hf"},
        "space": {},
        "study": {"trials": 1, "seed": 0, "confirm_top": 0, "trial_timeout_min": 2},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    try:
        result = run_search(load_config(path), out_root=tmp_path / "trials", device="cpu")
    except UnmeasuredError as err:  # a baseline that crashed: its reason is the error's
        return {"status": "crash", "reason": str(err)}
    (trial,) = result.history.seen.values()
    return dict(trial.user_attrs)


@pytest.mark.slow
def test_command_measure_hf_job_that_ran_another_batch_size_fails_naming_it(
    tmp_path: Path,
) -> None:
    pytest.importorskip("transformers")
    rec = _hf_search(tmp_path, "fixed")
    assert rec["status"] == "invalid_config"
    assert rec["reason"].startswith(
        "the job ran micro_batch_size 4 (per_device_train_batch_size) but the trial set 8: map "
    )
    assert rec["reason"].endswith("(space.micro_batch_size: [4])")


@pytest.mark.slow
def test_command_measure_hf_job_with_a_second_trainer_fails_naming_it(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    rec = _hf_search(tmp_path, "two")
    assert rec["status"] == "crash", rec["reason"]
    assert "the job trained a second Trainer after the first training's 2 of the 6" in rec["reason"]
