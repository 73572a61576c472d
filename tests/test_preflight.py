"""What is checked before anything is written (issue 27's smaller breaks): an --out too long for
SQLite, a bad AUTOTUNE_PROFILE, the README's postgresql:// URL with the shipped extra."""

from __future__ import annotations

from pathlib import Path

import yaml
from conftest import run_cli, tiny


def _yaml(tmp_path: Path, **study) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(tiny(study={"trials": 1, "confirm_top": 0, **study})))
    return path


def test_preflight_out_past_sqlites_path_limit_creates_nothing(tmp_path: Path) -> None:
    out = tmp_path / ("d" * 200) / ("e" * 200) / ("f" * 200)
    proc = run_cli(
        "search", str(_yaml(tmp_path)), "--out", str(out), "--device", "cpu", cwd=tmp_path
    )
    assert proc.returncode == 2 and "SQLite opens at most 512" in proc.stderr, proc.stderr
    assert not (tmp_path / ("d" * 200)).exists()


def test_preflight_bad_profile_folder_is_refused_before_the_run(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    proc = run_cli(
        "search",
        str(_yaml(tmp_path)),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        cwd=tmp_path,
        env={"AUTOTUNE_PROFILE": str(tmp_path / "afile" / "prof")},
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: AUTOTUNE_PROFILE"), proc.stderr
    assert not (tmp_path / "out").exists()


def test_preflight_readme_postgresql_url_reaches_the_server(tmp_path: Path) -> None:
    proc = run_cli(
        "search",
        str(_yaml(tmp_path)),
        "--device",
        "cpu",
        "--storage",
        # nothing listens on port 1
        "postgresql://tuner:s3cret@127.0.0.1:1/nodb",
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and "Connection refused" in proc.stderr, proc.stderr
    assert "s3cret" not in proc.stderr and "No module named" not in proc.stderr
