"""Fuzz `autotune validate` with mutations of the shipped YAML files: it must only ever exit 0, or
exit 2 with one line of bounded length on stderr; never a traceback, never another code, never a
hang.

The mutations are seeded (reproducible): values replaced by other types, huge and negative numbers,
non-finite floats, markup and emoji codes, unicode (right-to-left marks, NUL), deep nesting, keys
removed or added, lists emptied or blown up, and raw-text damage (truncation, stray characters, a
line repeated).
"""

from __future__ import annotations

import copy
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import finishes
from typer.testing import CliRunner

from autotune.cli import app

# every test here runs searches, checks or several processes: `make test-fast` leaves them out
pytestmark = pytest.mark.slow


ROOT = Path(__file__).resolve().parents[1] / "search_spaces"
SHIPPED = sorted(p for p in ROOT.glob("*.yaml") if p.name != "train-basic.yaml")
CASES = 240
HANG_S = 120.0  # a hang guard per case (a case takes well under a second): never, not a speed

ODD_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    2**63,
    10**30,
    -(10**30),
    1.5,
    float("inf"),
    float("nan"),
    "",
    "x" * 5000,
    "[/x]",
    "[bold]b[/]",
    ":x:",
    "\u202egnp.eliF",
    "nul\x00byte",
    "é",
    [],
    {},
    [[[[[1]]]]],
    {"min": 1, "max": 10**9},
    {"multiple_of": 0, "min": 1, "max": 8},
    ["fp32"] * 3,
    list(range(2000)),
    "../../etc/passwd",
    "auto",
    "postgresql://u:s3cret@h/db",
    {"nested": {"deeper": {"deepest": [1, 2, 3]}}},
]


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += _paths(v, (*prefix, i))
    return found


def _set(doc: Any, path: tuple, value: Any) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


def _mutate(doc: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        paths = _paths(doc)
        path = rng.choice(paths)
        action = rng.random()
        if action < 0.6:
            _set(doc, path, copy.deepcopy(rng.choice(ODD_VALUES)))
        elif action < 0.75 and isinstance(path[-1], str):
            parent = doc
            for key in path[:-1]:
                parent = parent[key]
            parent.pop(path[-1], None)
        elif action < 0.9:
            parent = doc
            for key in path[:-1]:
                parent = parent[key]
            if isinstance(parent, dict):
                parent[rng.choice(["extra", "n_layer", "precison", "[/x]", "ü"])] = rng.choice(
                    ODD_VALUES
                )
        else:
            nested: Any = rng.choice(ODD_VALUES)
            for _ in range(rng.randint(10, 60)):
                nested = [nested]
            _set(doc, path, nested)
    return doc


def _damage_text(text: str, rng: random.Random) -> str:
    choice = rng.random()
    if choice < 0.4:
        return text[: rng.randint(0, len(text))]
    if choice < 0.7:
        at = rng.randint(0, len(text))
        return (
            text[:at]
            + rng.choice(["{", "]", ": :", "\t", "&a *a", "!!python/object:os.system", "%", "'"])
            + text[at:]
        )
    lines = text.splitlines(keepends=True)
    line = rng.choice(lines) if lines else ""
    return text + line


def _case(seed: int) -> str:
    rng = random.Random(seed)
    source = SHIPPED[seed % len(SHIPPED)]
    text = source.read_text()
    if rng.random() < 0.2:
        return _damage_text(text, rng)
    doc = yaml.safe_load(text)
    try:
        return yaml.safe_dump(_mutate(doc, rng), allow_unicode=True)
    except yaml.YAMLError:
        return _damage_text(text, rng)


@pytest.mark.parametrize("block", range(8))
def test_fuzz_validate_only_exits_0_or_2_with_one_bounded_line(
    tmp_path: Path, monkeypatch, block: int
) -> None:
    # relative paths (space, hf config, module) resolve as shipped
    shutil.copytree(ROOT, tmp_path / "search_spaces")
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "search_spaces" / "fuzz.yaml"
    for seed in range(block * CASES // 8, (block + 1) * CASES // 8):
        path.write_text(_case(seed))
        where = f"seed {seed} ({SHIPPED[seed % len(SHIPPED)].name})"
        result = finishes(lambda: CliRunner().invoke(app, ["validate", str(path)]), HANG_S, where)
        assert result.exit_code in (0, 2), (
            f"{where}: exit {result.exit_code}: {result.output[-500:]!r} {result.exception!r}"
        )
        assert "Traceback" not in result.output, where
        if result.exit_code == 2:
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and len(lines[0]) <= 1100, f"{where}: {result.stderr[:500]!r}"
            assert "s3cret" not in result.output + result.stderr, where
