"""The distribution's name (issue 66, item 6): pyproject.toml's, the one autotune reads its version
by and the one every `pip install '...[extra]'` message and page names, held together; the import
package and the command stay `autotune`."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import autotune

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# autotune...[extra] in a message or a page (`pip install 'autotune-llm[hf]'`; an f-string's
# `[{tracker}]` too)
EXTRA = re.compile(r"(autotune[\w.-]*)\[([\w,{}-]+)\]")


def _texts() -> list[Path]:
    """Every file a user reads an install line in: the package's messages, the pages, the YAMLs."""
    found = [*ROOT.glob("autotune/**/*.py"), *ROOT.glob("docs/*.md"), *ROOT.glob("*.md")]
    return [*found, *ROOT.glob("search_spaces/*.yaml"), ROOT / "Makefile", ROOT / "pyproject.toml"]


def _distribution(name: str) -> str:
    """The distribution a requirement names: its own name, or a wheel file's (the name's - written
    _: autotune_llm-0.1.0-py3-none-any.whl)."""
    return name.split("-")[0].replace("_", "-") if name.endswith(".whl") else name


def test_install_the_distribution_name_is_pyprojects() -> None:
    assert PROJECT["name"] == autotune.DISTRIBUTION == "autotune-llm"
    assert PROJECT["scripts"] == {"autotune": "autotune.cli:main"}  # the command keeps its name


def test_install_every_extra_named_is_the_distributions_and_exists() -> None:
    extras = set(PROJECT["optional-dependencies"])
    wrong = []
    for path in _texts():
        if path.name == "BENCHMARKS.md":
            continue  # the record of what was run then, under the name of that time
        for name, listed in EXTRA.findall(path.read_text()):
            unknown = set() if "{" in listed else set(listed.split(",")) - extras
            if _distribution(name) != autotune.DISTRIBUTION or unknown:
                wrong.append(f"{path.relative_to(ROOT)}: {name}[{listed}]")
    assert not wrong, wrong


def test_install_the_version_is_read_from_the_built_metadata(tmp_path: Path) -> None:
    """The wheel's metadata as setuptools builds it from pyproject.toml (no install): its name, its
    command, and `autotune --version` reading the version from it by the distribution's name."""
    build_meta = pytest.importorskip("setuptools.build_meta")
    made = build_meta.prepare_metadata_for_build_wheel(str(tmp_path))
    info = tmp_path / made
    assert made.startswith("autotune_llm-"), made
    metadata = (info / "METADATA").read_text()
    assert f"Name: {autotune.DISTRIBUTION}\n" in metadata
    assert "autotune = autotune.cli:main" in (info / "entry_points.txt").read_text()
    assert (info / "top_level.txt").read_text().split() == ["autotune"]
    # a process that finds that metadata first (and this tree's package): what --version prints
    env_path = f"{tmp_path}:{ROOT}"
    code = "import autotune; print(autotune.__version__)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == PROJECT["version"]
