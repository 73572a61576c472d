"""Issue 63, item 2: nothing is written through a link planted in a study's folder.

A link at report/, checks/, runs/ or runs/NNNN (or at best.yaml, study.db, history.jsonl) made
search, report and check write outside the study. Every folder autotune writes into under the study
is made or verified as a real folder of it (paths.study_folder: os.mkdir, then openat with
O_NOFOLLOW | O_DIRECTORY), every command that opens a study checks its entries first
(paths.no_links), and a planted link is refused in one line, exit 2. The study folder itself may be
a link the user made."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import built_once, cli_here, run_cli, tiny

from autotune import atomic, paths
from autotune.errors import ConfigError

# the search and the study's commands run the real CLI: `make test-fast` leaves them out
SLOW = pytest.mark.slow
LINKED = "symbolic link"
RESUME = ("search", "model.yaml", "--out", "out", "--device", "cpu", "--trials", "3")
REPORT = ("report", "out/t")
CHECK = ("check", "out/t/best.yaml", "--repeats", "1", "--max-repeats", "0", "--reset-baseline")
EXPORT = ("export", "out/t/best.yaml")


def bad_input(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2 (bad input), one line on stderr starting with 'error:', each needle in it."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    assert all(n in lines[0] for n in needles), lines[0]


def _search(root: Path) -> None:
    """A searched tiny study in root/out/t: trials 0000 and 0001, no confirmation."""
    doc = tiny(space={"micro_batch_size": [2, 4], "precision": "fp32"})
    doc["study"] = {**doc["study"], "trials": 2, "confirm_top": 0}
    (root / "model.yaml").write_text(yaml.safe_dump(doc))
    proc = run_cli("search", "model.yaml", "--out", "out", "--device", "cpu", cwd=root)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return built_once(tmp_path_factory, "links-study", _search)


@pytest.fixture
def project(searched: Path, tmp_path: Path) -> Path:
    """A copy of the searched project (model.yaml, out/t) to plant links in."""
    return Path(shutil.copytree(searched, tmp_path / "project", symlinks=True))


def _outside(tmp_path: Path) -> Path:
    """A folder of the user's outside the study, holding files named as autotune's would be."""
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("report.html", "spec.json", "worker.log", "result.json"):
        (outside / name).write_text(f"the user's {name}\n")
    return outside


def _tree(root: Path) -> dict[str, bytes]:
    """Every entry below root, with a file's bytes (a folder: b'/')."""
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"/"
        for p in sorted(root.rglob("*"))
    }


def _plant(at: Path, target: Path) -> None:
    """A link at `at` (what was there removed) to target."""
    if at.is_dir():
        shutil.rmtree(at)
    at.unlink(missing_ok=True)
    os.symlink(target, at)


@SLOW
@pytest.mark.parametrize("planted", ["report", "checks", "runs", "runs/0002"])
def test_links_a_folder_link_is_refused_by_every_command_and_nothing_outside_changes(
    project: Path, tmp_path: Path, planted: str
) -> None:
    """The issue's case: search (a resume), report and check each refuse in one line, exit 2, and
    export (which only reads); the user's folder the link points to is as it was."""
    outside = _outside(tmp_path)
    _plant(project / "out" / "t" / planted, outside)
    before = _tree(outside)
    for args in (RESUME, REPORT, CHECK):
        bad_input(run_cli(*args, cwd=project), LINKED, f"out/t/{planted}")
    run_cli(*EXPORT, cwd=project)
    assert _tree(outside) == before


@SLOW
@pytest.mark.parametrize("planted", ["best.yaml", "study.db", "history.jsonl"])
def test_links_a_file_link_is_refused_and_its_target_never_written(
    project: Path, tmp_path: Path, planted: str
) -> None:
    """A study file that is a link to the user's file elsewhere (best.yaml, study.db moved out and
    linked back) is refused by search, report and check before anything is written."""
    outside = _outside(tmp_path)
    at = project / "out" / "t" / planted
    if at.exists():
        shutil.move(at, outside / planted)
    else:
        (outside / planted).write_text("the user's lines\n")
    os.symlink(outside / planted, at)
    before = _tree(outside)
    for args in (RESUME, REPORT, CHECK):
        bad_input(cli_here(*args, cwd=project), LINKED, planted)
    assert _tree(outside) == before


@SLOW
def test_links_the_study_folder_itself_may_be_the_users_link(project: Path, tmp_path: Path) -> None:
    """out/t a link to a scratch disk (the user's own): report and its HTML go there."""
    scratch = tmp_path / "scratch"
    shutil.move(project / "out" / "t", scratch)
    os.symlink(scratch, project / "out" / "t")
    proc = run_cli(*REPORT, cwd=project)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (scratch / "report" / "report.html").is_file() and not (scratch / "report").is_symlink()


def test_links_study_folder_makes_real_folders_below_the_study(tmp_path: Path) -> None:
    home = tmp_path / "study"
    made = paths.study_folder(home, home / "runs" / "0003")
    assert made == home / "runs" / "0003" and made.is_dir() and not made.is_symlink()


@pytest.mark.parametrize(
    ("linked", "folder"),
    [
        ("runs", "runs/0003"),
        ("runs/0003", "runs/0003"),
        ("checks/20261207-010203", "checks/20261207-010203/00"),
    ],
)
def test_links_study_folder_refuses_a_link_at_any_part(
    tmp_path: Path, linked: str, folder: str
) -> None:
    """A link planted after the command's first look (paths.no_links) is refused when the folder
    is made: never followed, nothing made outside."""
    home, outside = tmp_path / "study", tmp_path / "outside"
    outside.mkdir()
    (home / linked).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, home / linked)
    with pytest.raises(ConfigError, match=rf"{linked}' is a symbolic link .* never writes through"):
        paths.study_folder(home, home / folder)
    assert list(outside.iterdir()) == []


def test_links_study_folder_refuses_a_file_where_a_folder_goes(tmp_path: Path) -> None:
    home = tmp_path / "study"
    home.mkdir()
    (home / "report").write_text("x")
    with pytest.raises(ConfigError, match=r"report' is a file; autotune keeps a folder there"):
        paths.study_folder(home, home / "report")


def test_links_study_folder_follows_the_users_link_to_the_study(tmp_path: Path) -> None:
    """home given resolved (as a trial's bench has it) and the folder through the user's link."""
    scratch, trials = tmp_path / "scratch", tmp_path / "trials"
    (scratch / "t").mkdir(parents=True)
    os.symlink(scratch, trials)
    paths.study_folder((trials / "t").resolve(), trials / "t" / "tmp")
    assert (scratch / "t" / "tmp").is_dir()


def test_links_a_folder_outside_the_study_is_the_users(tmp_path: Path) -> None:
    """study.compile_cache or --html elsewhere: made as given, links in it the user's."""
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "cache")
    paths.study_folder(tmp_path / "study", tmp_path / "cache" / "inductor")
    assert (tmp_path / "real" / "inductor").is_dir()


def test_links_no_links_finds_one_in_runs(tmp_path: Path) -> None:
    home = tmp_path / "study"
    (home / "runs" / "0000").mkdir(parents=True)
    os.symlink(tmp_path, home / "runs" / "0009")
    with pytest.raises(ConfigError, match=r"runs/0009' is a symbolic link"):
        paths.no_links(home)


def test_links_a_log_or_signal_file_is_never_opened_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("mine\n")
    for name, write in (("worker.log", atomic.create), ("prune", atomic.touch)):
        os.symlink(target, tmp_path / name)
        with pytest.raises(OSError):
            write(tmp_path / name)
    assert target.read_text() == "mine\n"
