"""autotune/config is the YAML's schema only: no module of it imports the task plug-ins, and reading
a best.yaml with its classes never runs the user-code probe (launch/probe.py); the study's YAML is
probed once, by job.validate's pass."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from autotune.documents.best_file import read_best
from autotune.export import _winner
from autotune.job import load
from autotune.launch import probe
from autotune.tasks import check_workload
from tests.conftest import tiny

CONFIG = Path(__file__).resolve().parents[1] / "autotune" / "config"
FIXTURE = Path(__file__).resolve().parent / "data" / "studies" / "fixture-v3" / "best.yaml"


def _imported(path: Path) -> set[str]:
    """Every module a file imports: at its top, inside functions, under TYPE_CHECKING."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return found


@pytest.mark.parametrize("path", sorted(CONFIG.glob("*.py")), ids=lambda p: p.name)
def test_config_schema_imports_no_task(path: Path) -> None:
    tasks = sorted(
        m for m in _imported(path) if m == "autotune.tasks" or m.startswith("autotune.tasks.")
    )
    assert not tasks, f"autotune/config/{path.name} imports {tasks}: config is the schema only"


def test_config_schema_import_scan_sees_function_level_imports(tmp_path: Path) -> None:
    """The scan above finds an import inside a function and `from autotune import tasks`."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from autotune import tasks\n    return tasks\n")
    assert "autotune.tasks" in _imported(module)


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every start of the user-code probe (launch/probe._run), its arguments; the probe still
    runs."""
    started: list[list[str]] = []
    real = probe._run

    def counted(code: str, args: list[str], what: str) -> dict[str, object] | str:
        started.append(args)
        return real(code, args, what)

    monkeypatch.setattr(probe, "_run", counted)
    return started


def _counted_model(folder: Path) -> Path:
    """An entrypoint module whose every import appends a line to imports.log: its path."""
    log = folder / "imports.log"
    (folder / "counted.py").write_text(
        f"with open({str(log)!r}, 'a') as f:\n    f.write('imported\\n')\n\n\n"
        "def build(knobs, device):\n    raise RuntimeError('never built here')\n"
    )
    return log


def _imports(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_config_schema_reading_best_yaml_never_probes_user_code(
    tmp_path: Path, probes: list[list[str]]
) -> None:
    log = _counted_model(tmp_path)
    data = {**tiny(), "model": {"entrypoint": "counted:build"}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(data))
    cfg, _ = load(tmp_path / "study.yaml")  # the study's one validation pass probes it once
    assert cfg.model is not None and cfg.model.entrypoint == "counted:build"
    assert (_imports(log), len(probes)) == (1, 1)

    best = yaml.safe_load(FIXTURE.read_text())
    best.update(model={"entrypoint": "counted:build"}, base_dir=".")
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump(best, sort_keys=False))
    read = read_best(path, check_workload)  # check's reader
    winner = _winner.read(path)  # export's
    assert read.model is not None and read.model.entrypoint == "counted:build"
    assert read.base_dir == str(tmp_path) and winner.base_dir == str(tmp_path)
    assert (_imports(log), len(probes)) == (1, 1), "reading best.yaml ran the user-code probe"
