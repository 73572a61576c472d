"""Issue 52, check and export of an edited best.yaml: whatever decides what a check runs (base_dir,
the command's argv, cwd and environment, apply.env, the knobs, the device, the time limit) or how it
is judged (the name, the baseline's numbers) is covered by its digest, so an edit is refused before
anything runs; a best.yaml without a digest (schema 1, or stripped of it) or with an older one is
never compared with a baseline it did not produce (--reset-baseline records one); export refuses a
metric that is not a number. A real command study on the CPU (a job of 10 ms steps)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_cli

from autotune.check import regress
from autotune.errors import ConfigError
from autotune.job import load_config
from autotune.search.run import run_search

# The user's job: marks its folder as run, then reports 10 ms steps (SLEEP_S: its step's sleep).
JOB = """
import time
from pathlib import Path
from autotune import reporting

Path(__file__).with_name("ran").write_text("")
while not reporting.step(tokens=100):
    time.sleep(SLEEP_S)
"""
ONE = ("--repeats", "1", "--max-repeats", "0", "--max-load", "0")
Edit = Callable[[dict[str, Any]], None]


def _job(folder: Path, sleep_s: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.py").write_text(JOB.replace("SLEEP_S", repr(sleep_s)))


def _study_yaml(folder: Path, journal: Path) -> Path:
    doc = {
        "name": "job",
        "workload": {"task": "command", "warmup_steps": 2, "measure_steps": 4},
        "command": {"argv": ["{python}", "job.py"]},
        "space": {"micro_batch_size": [8], "grad_accum_steps": [1]},
        "study": {
            "trials": 1,
            "seed": 0,
            "confirm_top": 0,
            "trial_timeout_min": 1,
            "storage": f"journal:{journal}",
        },
    }
    (folder / "job.yaml").write_text(yaml.safe_dump(doc))
    return folder / "job.yaml"


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A study of a slow job (100 ms steps), searched once: its project folder."""
    root = tmp_path_factory.mktemp("h5check")
    _job(root / "proj", 0.1)
    yaml_path = _study_yaml(root / "proj", root / "journal.log")
    run_search(load_config(yaml_path), out_root=root / "proj" / "trials", device="cpu")
    return root / "proj"


def _copy(searched: Path, tmp_path: Path, edit: Edit | None = None) -> Path:
    """The project copied (its best.yaml edited), and a fast job (10 ms steps) in another folder
    beside it; returns the copy's best.yaml."""
    shutil.copytree(searched, tmp_path / "proj", ignore=shutil.ignore_patterns("checks", "ran"))
    _job(tmp_path / "fast", 0.01)
    best = tmp_path / "proj" / "trials" / "job" / "best.yaml"
    if edit is not None:
        doc = yaml.safe_load(best.read_text())
        edit(doc)
        best.write_text(yaml.safe_dump(doc, sort_keys=False))
    return best


def _nothing_ran(tmp_path: Path) -> bool:
    return not any(
        (tmp_path / p).exists() for p in ("fast/ran", "proj/ran", "proj/trials/job/checks")
    )


EDITS: dict[str, Edit] = {
    "base_dir": lambda d: d.update(base_dir="../../../fast"),
    "command.cwd": lambda d: d["command"].update(cwd="../fast"),
    "command.argv": lambda d: d["command"]["argv"].__setitem__(1, "../fast/job.py"),
    "command.env": lambda d: d["command"]["env"].update(PYTHONPATH="../fast"),
    "apply.env": lambda d: d["apply"].update(env={"PYTHONPATH": "../fast"}),
    "interpreter": lambda d: d["command"]["argv"].__setitem__(0, shutil.which("python3") or "sh"),
    "knobs": lambda d: d["knobs"].update(micro_batch_size=4, grad_accum_steps=2),
    "name": lambda d: d.update(name="another"),
    "device": lambda d: d["fingerprint"].update(device="cuda"),
    "time limit": lambda d: d["measurement"].update(trial_timeout_min=0.01),
    "baseline number": lambda d: d["metrics"].update(tokens_per_s_per_gpu=1.0),
    "task": lambda d: d["workload"].update(task="train"),
}


@pytest.mark.slow
@pytest.mark.parametrize("what", list(EDITS))
def test_hardening5_check_an_edit_of_what_runs_or_judges_is_refused(
    searched: Path, tmp_path: Path, what: str
) -> None:
    best = _copy(searched, tmp_path, EDITS[what])
    with pytest.raises(ConfigError) as err:
        regress.check(best, repeats=1, max_repeats=0, max_load=0)
    assert "\n" not in str(err.value)
    assert _nothing_ran(tmp_path)


@pytest.mark.slow
def test_hardening5_check_base_dir_elsewhere_is_one_line_exit_2(
    searched: Path, tmp_path: Path
) -> None:
    """The case of the issue: base_dir pointed at another folder's faster job."""
    best = _copy(searched, tmp_path, EDITS["base_dir"])
    proc = run_cli("check", str(best), *ONE, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "base_dir" in lines[0] and "--reset-baseline" in lines[0]
    assert proc.stdout == "" and _nothing_ran(tmp_path)


def _strip(doc: dict[str, Any]) -> None:
    """An old best.yaml, edited: no schema_version, knob_set nor digest, other knobs."""
    for key in ("schema_version", "knob_set", "measured"):
        del doc[key]
    doc["knobs"].update(micro_batch_size=4, grad_accum_steps=2)


@pytest.mark.parametrize(
    "edit",
    [
        _strip,
        lambda d: d.update(schema_version=3),  # an older digest: it covered less
        lambda d: d.update(schema_version=3, base_dir="../../../fast"),
        lambda d: d.update(schema_version=1, measured=None),
    ],
    ids=["stripped", "older", "older-edited", "schema-1"],
)
@pytest.mark.slow
def test_hardening5_check_a_file_without_its_digest_is_not_compared(
    searched: Path, tmp_path: Path, edit: Edit
) -> None:
    best = _copy(searched, tmp_path, edit)
    before = best.read_bytes()
    proc = run_cli("check", str(best), *ONE, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--reset-baseline" in lines[0] and "autotune search" in lines[0]
    assert proc.stdout == "" and _nothing_ran(tmp_path) and best.read_bytes() == before


@pytest.mark.slow
def test_hardening5_check_a_stripped_file_gets_a_baseline_of_its_own(
    searched: Path, tmp_path: Path
) -> None:
    """The honest way to check a file without a digest: --reset-baseline measures it as it is now
    and records a baseline with its digest; check then compares with that one, and an edit after it
    is refused again."""
    best = _copy(searched, tmp_path, _strip)
    reset = run_cli(
        "check", str(best), "--reset-baseline", "--repeats", "2", "--max-load", "0", cwd=tmp_path
    )
    assert reset.returncode == 0, reset.stderr
    doc = yaml.safe_load(best.read_text())
    assert doc["schema_version"] == 4 and doc["check_baseline"]["measured"]
    proc = run_cli("check", str(best), "--repeats", "2", "--max-load", "0", cwd=tmp_path)
    assert proc.returncode in (0, 1, 5), proc.stderr  # judged against its own baseline
    assert "check --reset-baseline of" in proc.stdout
    doc["check_baseline"]["tokens_per_s_samples"] = [1.0, 1.0]  # a baseline number edited
    best.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError, match="check_baseline were edited"):
        regress.check(best, repeats=1, max_repeats=0, max_load=0)


@pytest.mark.slow
def test_hardening5_check_today_s_file_still_passes(searched: Path, tmp_path: Path) -> None:
    best = _copy(searched, tmp_path)
    proc = run_cli("check", str(best), "--repeats", "2", "--max-load", "0", cwd=tmp_path)
    assert proc.returncode in (0, 1, 5), proc.stderr  # measured and judged, never refused
    assert (tmp_path / "proj" / "ran").exists() and not (tmp_path / "fast" / "ran").exists()


@pytest.mark.slow
def test_hardening5_check_model_yaml_with_another_command_is_refused(
    searched: Path, tmp_path: Path
) -> None:
    best = _copy(searched, tmp_path)
    doc = yaml.safe_load((tmp_path / "proj" / "job.yaml").read_text())
    doc["command"]["argv"] = ["{python}", "../fast/job.py"]
    (tmp_path / "proj" / "other.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"--model: command.argv is .* in MODEL_YAML"):
        regress.check(best, model_yaml=tmp_path / "proj" / "other.yaml", repeats=1)
    assert _nothing_ran(tmp_path)


@pytest.mark.parametrize(
    ("key", "value"),
    [("tokens_per_s_per_gpu", "fast"), ("mfu", "fast"), ("step_time_median_s", [1])],
)
@pytest.mark.slow
def test_hardening5_export_refuses_a_metric_that_is_no_number(
    searched: Path, tmp_path: Path, key: str, value: Any
) -> None:
    best = _copy(searched, tmp_path, lambda d: d["metrics"].update({key: value}))
    for args in ((), ("-f", "json")):
        proc = run_cli("export", str(best), *args, cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and f"metrics.{key}" in lines[0], proc.stderr
        assert proc.stdout == ""


def test_hardening5_export_refuses_a_train_study_s_metric_of_fast(tmp_path: Path) -> None:
    """The train study's reader (documents.best_file.read_best) types the metrics too."""
    fixture = Path(__file__).parent / "data" / "studies" / "fixture-v3" / "best.yaml"
    doc = yaml.safe_load(fixture.read_text())
    doc["metrics"]["speedup_vs_baseline"] = "fast"
    (tmp_path / "best.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = run_cli("export", str(tmp_path / "best.yaml"), "-f", "json", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "metrics.speedup_vs_baseline" in proc.stderr and len(proc.stderr.splitlines()) == 1
