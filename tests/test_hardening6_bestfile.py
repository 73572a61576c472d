"""Issue 63, items 3 and 5: a committed best.yaml measures its own checkout, and export reads it as
check does. A real command study on the CPU (a job of 50 ms steps) searched by the real `autotune`
CLI with trials/ a symbolic link to a scratch folder elsewhere; best.yaml copied into the project at
the depth docs/check.md shows (perf/<name>/best.yaml), beside another checkout of a faster job that
the link's target once led a copy to."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_cli

from autotune.documents.best_file import measured_digest, read_best, record_check_baseline
from autotune.tasks import check_workload

# The user's job: marks its folder as run, then reports steps of SLEEP_S seconds.
JOB = """
import time
from pathlib import Path
from autotune import reporting

Path(__file__).with_name("ran").write_text("")
while not reporting.step(tokens=100):
    time.sleep(SLEEP_S)
"""
STUDY = {
    "name": "job",
    "workload": {"task": "command", "warmup_steps": 2, "measure_steps": 4},
    "command": {
        "argv": ["{python}", "job.py"],
        "knobs": {"my_knob": {"env": "MY_KNOB", "values": [1, 2]}},  # a knob of the user's own
    },
    "space": {"micro_batch_size": [8], "grad_accum_steps": [1]},
    "study": {"trials": 1, "seed": 0, "confirm_top": 0, "trial_timeout_min": 1},
}
CHECK = ("--repeats", "2", "--max-repeats", "0", "--max-load", "0")
Edit = Callable[[dict[str, Any]], None]


def _job(folder: Path, sleep_s: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.py").write_text(JOB.replace("SLEEP_S", repr(sleep_s)))


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ws/proj (the project: job.yaml, a 50 ms job), its trials/ a link to ws/scratch/a/t, and
    proj (another checkout: a 5 ms job) beside ws, where the link's target led a copy of best.yaml
    at perf/job/ before (../../../../proj from the target); searched once."""
    top = tmp_path_factory.mktemp("h6best")
    proj, scratch = top / "ws" / "proj", top / "ws" / "scratch" / "a" / "t"
    _job(proj, 0.05)
    _job(top / "proj", 0.005)
    scratch.mkdir(parents=True)
    (proj / "trials").symlink_to(scratch, target_is_directory=True)
    (proj / "job.yaml").write_text(yaml.safe_dump(STUDY))
    proc = run_cli("search", "job.yaml", "--device", "cpu", cwd=proj)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return top


def _commit(root: Path, where: str, edit: Edit | None = None) -> Path:
    """The study's best.yaml copied to ws/proj/<where>/best.yaml (edited), nothing run yet."""
    for ran in (root / "ws" / "proj" / "ran", root / "proj" / "ran"):
        ran.unlink(missing_ok=True)
    best = root / "ws" / "proj" / where / "best.yaml"
    best.parent.mkdir(parents=True, exist_ok=True)
    doc = yaml.safe_load((root / "ws" / "proj" / "trials" / "job" / "best.yaml").read_text())
    if edit is not None:
        edit(doc)
    best.write_text(yaml.safe_dump(doc, sort_keys=False))
    return best


def test_hardening6_bestfile_base_dir_is_stored_as_the_user_names_the_folder(root: Path) -> None:
    """best.yaml's base_dir: the project two folders up from trials/job as the user names it, not
    four from the link's target; read through the link it is the project."""
    best = root / "ws" / "proj" / "trials" / "job" / "best.yaml"
    doc = yaml.safe_load(best.read_text())
    assert doc["base_dir"] == "../.." and doc["schema_version"] == 5
    assert read_best(best, check_workload).base_dir == str(root / "ws" / "proj")


@pytest.mark.slow
def test_hardening6_bestfile_a_committed_copy_measures_its_own_checkout(root: Path) -> None:
    """The case of the issue: the copy at perf/job/ measured the other checkout's faster job
    ("faster, ratio 9.039", exit 0); it measures the project's own."""
    best = _commit(root, "perf/job")
    proc = run_cli(
        "check", str(best.relative_to(root / "ws" / "proj")), *CHECK, cwd=best.parents[2]
    )
    assert proc.returncode in (0, 1, 5), proc.stdout + proc.stderr  # measured and judged
    assert (root / "ws" / "proj" / "ran").exists(), proc.stdout + proc.stderr
    assert not (root / "proj" / "ran").exists(), "the other checkout's job ran"


@pytest.mark.slow
@pytest.mark.parametrize("where", ["perf/deep/job", "perf"], ids=["deeper", "shallower"])
def test_hardening6_bestfile_a_copy_at_another_depth_is_refused_before_measuring(
    root: Path, where: str
) -> None:
    """base_dir names a folder without the command's program (job.py): one line, exit 2, before
    any repeat (it ended exit 3 after three failed repeats, or measured whatever was there)."""
    best = _commit(root, where)
    proc = run_cli("check", str(best), *CHECK, cwd=root)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "base_dir" in lines[0] and "job.py" in lines[0], proc.stderr
    assert "nothing measured" in lines[0] and proc.stdout == ""
    assert not (best.parent / "checks").exists()
    assert not (root / "ws" / "proj" / "ran").exists() and not (root / "proj" / "ran").exists()


def _as_schema_4(doc: dict[str, Any]) -> None:
    """best.yaml as the release before wrote it through the link: base_dir from its target."""
    doc.update(schema_version=4, base_dir="../../../../proj")
    doc["measured"] = measured_digest(doc)


def test_hardening6_bestfile_an_older_file_reads_as_before(root: Path) -> None:
    """A schema 4 file's base_dir is relative to its folder's resolved path, as it was written:
    read in the study's folder through the link it is still the project, and a check's write-back
    keeps its schema (a later read gives the same folder)."""
    best = root / "ws" / "proj" / "trials" / "old" / "best.yaml"
    best.parent.mkdir()
    doc = yaml.safe_load((root / "ws" / "proj" / "trials" / "job" / "best.yaml").read_text())
    _as_schema_4(doc)
    best.write_text(yaml.safe_dump(doc, sort_keys=False))
    read = read_best(best, check_workload)
    assert read.base_dir == str((root / "ws" / "proj").resolve())
    record_check_baseline(best, read.doc, [1000.0, 1001.0], "2026-12-07T00:00:00", {})
    assert yaml.safe_load(best.read_text())["schema_version"] == 4
    assert read_best(best, check_workload).base_dir == read.base_dir


EDITS: dict[str, Edit] = {
    "schema_version": lambda d: d.update(schema_version=99),
    "my_knob": lambda d: d["knobs"].update(my_knob=[1, 2]),
    "micro_batch_size": lambda d: d["knobs"].update(micro_batch_size=[8, 16]),
}


@pytest.mark.slow
@pytest.mark.parametrize("what", list(EDITS))
def test_hardening6_bestfile_export_refuses_what_check_refuses(root: Path, what: str) -> None:
    """export read schema_version 99 and a list as a knob's value; it refuses them in check's own
    words, one line, exit 2, nothing printed."""
    best = _commit(root, f"edited/{what}", EDITS[what])
    check = run_cli("check", str(best), *CHECK, cwd=root)
    assert check.returncode == 2 and what in check.stderr, check.stdout + check.stderr
    for args in ((), ("-f", "json")):
        proc = run_cli("export", str(best), *args, cwd=root)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stdout == "" and proc.stderr == check.stderr
    shutil.rmtree(best.parent)
