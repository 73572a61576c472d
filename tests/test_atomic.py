"""No write follows a link planted in a study's folder, and an output path that is one of the
study's own files is refused before anything is measured (atomic.py, paths.not_a_study_file)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import run_cli

from autotune import atomic, yamlio
from autotune.errors import ConfigError
from autotune.paths import not_a_study_file

FIXTURES = Path(__file__).parent / "data" / "studies"


def _outside(tmp_path: Path) -> Path:
    target = tmp_path / "outside.txt"
    target.write_text("precious\n")
    return target


def test_atomic_write_never_writes_through_a_link_at_its_old_temporary_name(tmp_path: Path) -> None:
    target = _outside(tmp_path)
    study = tmp_path / "study"
    study.mkdir()
    os.symlink(target, study / "best.yaml.tmp")  # where earlier releases wrote before renaming
    yamlio.write(study / "best.yaml", {"a": 1})
    assert target.read_text() == "precious\n" and yamlio.read(study / "best.yaml", "x") == {"a": 1}


def test_atomic_write_replaces_a_link_at_the_target_instead_of_following_it(tmp_path: Path) -> None:
    target = _outside(tmp_path)
    os.symlink(target, tmp_path / "best.yaml")
    atomic.write_text(tmp_path / "best.yaml", "a: 1\n")
    assert target.read_text() == "precious\n"
    assert (
        not (tmp_path / "best.yaml").is_symlink()
        and (tmp_path / "best.yaml").read_text() == "a: 1\n"
    )
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize(
    "name", ["study.db", "best.yaml", "history.jsonl", "runs/0000/result.json"]
)
def test_atomic_an_output_that_is_a_study_file_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match=r"--junit: .* is one of the study's own files"):
        not_a_study_file(tmp_path / name, tmp_path, "--junit")


def test_atomic_check_junit_onto_study_db_exits_2_before_measuring(tmp_path: Path) -> None:
    study = tmp_path / "trials" / "fixture-v0"
    study.mkdir(parents=True)
    for f in ("study.db", "best.yaml"):
        shutil.copy(FIXTURES / "fixture-v0" / f, study / f)
    before = (study / "study.db").read_bytes()
    proc = run_cli(
        "check", str(study / "best.yaml"), "--junit", str(study / "study.db"), cwd=tmp_path
    )
    assert proc.returncode == 2 and "is one of the study's own files" in proc.stderr
    assert (study / "study.db").read_bytes() == before and not (study / "checks").exists()
