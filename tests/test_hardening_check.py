"""Issue 38, check and best.yaml: --junit never replaces a file autotune reads or keeps (the study's
journal, any best.yaml, the YAML given) nor anyone's file; a JUnit report when every repeat fails;
base_dir relative to best.yaml (a study moved with its code measures that code); a baseline without
its digest is refused. A real command study on the CPU (a job of a few 10 ms steps)."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from conftest import run_cli

from autotune import paths
from autotune.check import bench, regress
from autotune.documents.best_file import read_best
from autotune.errors import ConfigError, UnmeasuredError
from autotune.export._winner import read as read_winner
from autotune.job import load_config
from autotune.search.run import run_search
from autotune.tasks import check_workload

FIXTURES = Path(__file__).parent / "data" / "studies"
# real searches and checks (a module-wide study, the CLI): `make test-fast` leaves them out
pytestmark = pytest.mark.slow

FAIL = "HARDENING_CHECK_JOB_FAILS"  # set: the job exits 3 before its first step

# The user's job: marks its own folder as run, fails when FAIL is set, else reports 10 ms steps.
JOB = f"""
import os, sys, time
from pathlib import Path
from autotune import reporting

Path(__file__).with_name("ran").write_text("")
if os.environ.get("{FAIL}"):
    sys.exit(3)
while not reporting.step(tokens=100):
    time.sleep(0.01)
"""


def _project(folder: Path, journal: Path) -> Path:
    """A command study's folder: its job and its YAML (study in a journal outside the folder),
    searched once; returns its best.yaml."""
    folder.mkdir(parents=True)
    (folder / "job.py").write_text(JOB)
    doc = {
        "name": "job",
        "workload": {"task": "command", "warmup_steps": 2, "measure_steps": 4},
        "command": {"argv": ["{python}", "job.py"]},
        "space": {},
        "study": {
            "trials": 1,
            "seed": 0,
            "confirm_top": 0,
            "trial_timeout_min": 1,
            "storage": f"journal:{journal}",
        },
    }
    (folder / "job.yaml").write_text(yaml.safe_dump(doc))
    run_search(load_config(folder / "job.yaml"), out_root=folder / "trials", device="cpu")
    return folder / "trials" / "job" / "best.yaml"


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("check")
    return _project(root / "proj", root / "journal.log")


def _untouched(best: Path, *files: Path) -> dict[Path, bytes]:
    return {f: f.read_bytes() for f in (best, *files)}


@pytest.mark.parametrize("target", ["journal", "other_best", "model_yaml", "itself", "notes"])
def test_hardening_check_junit_onto_a_file_autotune_reads_or_anyones_is_refused(
    study: Path, tmp_path: Path, target: str
) -> None:
    journal, model = study.parents[3] / "journal.log", study.parents[2] / "job.yaml"
    nightly = tmp_path / "nightly.yaml"  # best.yaml under another name, checked as itself
    shutil.copy(study, nightly)
    other = tmp_path / "elsewhere" / "kept.yaml"  # another study's best.yaml: any name, any folder
    other.parent.mkdir()
    other.write_bytes(study.read_bytes())
    (tmp_path / "notes.txt").write_text("a file someone keeps\n")
    junit = {
        "journal": journal,
        "other_best": other,
        "model_yaml": model,
        "itself": nightly,
        "notes": tmp_path / "notes.txt",
    }[target]
    before = _untouched(study, journal, junit)
    needle = {
        "journal": "is the study's storage",
        "other_best": "is a best.yaml",
        "model_yaml": "is the --model YAML",
        "itself": "is the best.yaml being checked",
        "notes": "exists and is not XML, not a JUnit XML report",
    }[target]
    with pytest.raises(ConfigError, match=needle):
        regress.check(nightly, model_yaml=model, repeats=1, junit=junit)
    assert _untouched(study, journal, junit) == before  # nothing written
    assert not (tmp_path / "checks").exists() and not (study.parent / "checks").exists()


def test_hardening_check_junit_onto_the_journal_is_one_line_exit_2(study: Path) -> None:
    journal = study.parents[3] / "journal.log"
    before = journal.read_bytes()
    proc = run_cli("check", str(study), "--repeats", "1", "--junit", str(journal), cwd=study.parent)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--junit:" in lines[0] and "is the study's storage" in lines[0]
    assert journal.read_bytes() == before and not (study.parent / "checks").exists()


def test_hardening_check_junit_replaces_a_report_or_an_empty_file(tmp_path: Path) -> None:
    """A previous night's report (any JUnit root, namespaced or not) and an empty file are replaced;
    an SQLite database or another XML document are not."""
    for name, text in [
        ("a.xml", '<?xml version="1.0"?>\n<!-- night 3 -->\n<testsuite tests="1"/>'),
        ("b.xml", "<testsuites><testsuite/></testsuites>"),
        ("c.xml", ""),
    ]:
        (tmp_path / name).write_text(text)
        assert paths.replaceable_report(tmp_path / name, "--junit") == tmp_path / name
    (tmp_path / "d.xml").write_bytes(paths.SQLITE_MAGIC + b"\0" * 100)
    (tmp_path / "e.xml").write_text("<project><target/></project>")
    with pytest.raises(ConfigError, match="is an SQLite database, not a JUnit XML report"):
        paths.replaceable_report(tmp_path / "d.xml", "--junit")
    with pytest.raises(ConfigError, match="an XML document whose root is 'project'"):
        paths.replaceable_report(tmp_path / "e.xml", "--junit")


def test_hardening_check_every_repeat_failed_still_writes_its_junit(
    study: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAIL, "1")
    junit = tmp_path / "junit.xml"
    with pytest.raises(UnmeasuredError, match="all 2 repeats failed"):
        regress.check(study, repeats=2, junit=junit)
    suite = ET.parse(junit).getroot()
    assert suite.get("errors") == "1" and suite.get("failures") == "0"
    error = suite.find("testcase").find("error")
    assert error.get("type") == "unmeasured" and "all 2 repeats failed" in error.get("message")
    assert "repeat 0: " in error.text and "repeat 1: " in error.text  # each repeat's reason


def test_hardening_check_base_dir_moves_with_the_study(tmp_path: Path) -> None:
    """best.yaml names its study's folder relative to itself: the study moved with its code is
    measured there, not the other code now at the old path; an export reads it there too."""
    old, new = tmp_path / "old", tmp_path / "new"
    _project(old, tmp_path / "journal.log")
    old.rename(new)
    (new / "ran").unlink()
    old.mkdir()
    (old / "job.py").write_text(JOB.replace('with_name("ran")', 'with_name("old code ran")'))
    regress.check(new / "trials" / "job" / "best.yaml", repeats=1, max_repeats=0, max_load=0)
    assert (new / "ran").exists() and not (old / "old code ran").exists()
    assert read_winner(new / "trials" / "job" / "best.yaml").base_dir == str(new.resolve())
    assert yaml.safe_load((new / "trials" / "job" / "best.yaml").read_text())["base_dir"] == "../.."


def test_hardening_check_base_dir_absolute_reads_as_before(study: Path, tmp_path: Path) -> None:
    doc = yaml.safe_load(study.read_text())
    doc["base_dir"] = str(study.parents[2])  # as releases before this one wrote it
    (tmp_path / "best.yaml").write_text(yaml.safe_dump(doc))
    assert read_winner(tmp_path / "best.yaml").base_dir == str(study.parents[2])
    assert paths.beside(tmp_path / "best.yaml", doc["base_dir"]) == str(study.parents[2])


def _without_digest(study: Path, tmp_path: Path, baseline: bool) -> Path:
    """The study's folder copied, its best.yaml's digest removed and its model edited; with a
    check baseline recorded before (also without its digest) or none."""
    shutil.copytree(study.parents[2], tmp_path / "proj", ignore=shutil.ignore_patterns("checks"))
    best = tmp_path / "proj" / "trials" / "job" / "best.yaml"
    doc = yaml.safe_load(best.read_text())
    del doc["measured"]
    doc["command"]["argv"].append("--edited")
    if baseline:
        doc["check_baseline"] = {"tokens_per_s_samples": [1000.0], "recorded_at": "2026-12-01"}
    best.write_text(yaml.safe_dump(doc))
    return best


@pytest.mark.parametrize("baseline", [True, False], ids=["check_baseline", "search"])
def test_hardening_check_a_baseline_without_its_digest_is_refused(
    study: Path, tmp_path: Path, baseline: bool
) -> None:
    best = _without_digest(study, tmp_path, baseline)
    with pytest.raises(ConfigError, match=r"measured: missing beside .*--reset-baseline"):
        regress.check(best, repeats=1)
    assert not (best.parent / "checks").exists()


def test_hardening_check_reset_baseline_records_the_digest(study: Path, tmp_path: Path) -> None:
    best = _without_digest(study, tmp_path, baseline=True)
    regress.reset_baseline(best, repeats=1, max_load=0)  # this shared machine's load unjudged
    recorded = read_best(best, check_workload).doc.check_baseline
    assert recorded is not None and recorded.measured
    bench.baseline_belongs(best, read_best(best, check_workload))  # checks again


@pytest.mark.parametrize("name", ["fixture-v0", "fixture-older", "fixture-v3"])
def test_hardening_check_today_s_file_belongs_an_older_one_is_refused(
    study: Path, name: str
) -> None:
    """Today's file belongs; schema 1 (no digest) and 3 (a digest of less, issue 52) cannot tell
    what they measured: refused, --reset-baseline named (tests/test_hardening5_check.py)."""
    bench.baseline_belongs(study, read_best(study, check_workload))
    older = FIXTURES / name / "best.yaml"
    with pytest.raises(
        ConfigError, match=r"(measured: missing|schema_version: 3).*--reset-baseline"
    ):
        bench.baseline_belongs(older, read_best(older, check_workload))


def test_hardening_check_storage_files_of_a_url(tmp_path: Path) -> None:
    """An SQLite file anywhere (its URL quoted as search writes it) or a journal, with the files
    beside them; a database server has none."""
    from autotune.study.load import sqlite_url

    db = tmp_path / "odd dir%" / "s.db"
    assert paths.storage_files(sqlite_url(db))[:2] == [db, Path(f"{db}-journal")]
    assert paths.storage_files("journal:j.log") == [Path("j.log"), Path("j.log.lock")]
    assert paths.storage_files("postgresql://u:***@h/db") == []
