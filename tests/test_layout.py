"""The architecture, pinned: no import cycle, short functions, the parent/child split, report and check apart
from the search loop. Read from the source with ast (nothing is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "autotune"
MODULES = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
           for p in sorted(PACKAGE.rglob("*.py"))}
# What a trial process may import of autotune: the shared protocol modules (standard library only) and itself.
SHARED = ("autotune.protocol", "autotune.knobs", "autotune.nccl_log")
MAX_FUNCTION_LINES = 80


def _imports(path: Path, top_level_only: bool) -> set[str]:
    """autotune modules imported by a file; top_level_only: module-level imports outside TYPE_CHECKING."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES}
    return {m for m in found if m.startswith("autotune")}


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def test_layout_no_import_cycle() -> None:
    graph = {m: {r for i in _imports(p, top_level_only=True) if (r := _resolve(i)) and r != m} for m, p in MODULES.items()}
    for m in graph:  # importing a.b runs a/__init__ first (except from inside package a, which is loading it)
        graph[m] |= {parent for dep in list(graph[m]) for parent in _parents(dep) if not m.startswith(parent + ".")} - {m}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for dep in sorted(graph[m]):
            if state.get(dep) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path[path.index(dep):], dep]))
            if dep not in state:
                visit(dep, [*path, dep])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in MODULES]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_layout_functions_are_short(module: str) -> None:
    tree = ast.parse(MODULES[module].read_text())
    long = [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{module}: functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_layout_trial_process_imports_only_the_shared_protocol() -> None:
    for module, path in MODULES.items():
        if module.startswith("autotune.workloads"):
            outside = {i for i in _imports(path, top_level_only=False)
                       if not i.startswith("autotune.workloads") and i not in SHARED and i != "autotune"}
            assert not outside, f"{module} (runs in the trial process) imports {outside}"


def test_layout_parent_never_imports_the_trial_process() -> None:
    for module, path in MODULES.items():
        if not module.startswith("autotune.workloads"):
            inside = {i for i in _imports(path, top_level_only=False) if i.startswith("autotune.workloads")}
            assert not inside, f"{module} imports the trial's modules {inside}; it launches them by name"


@pytest.mark.parametrize("reader", ["autotune.report", "autotune.report._collect", "autotune.report._render",
                                    "autotune.report._html", "autotune.report._table", "autotune.regress",
                                    "autotune.views", "autotune.search.best", "autotune.search.history",
                                    "autotune.search.storage"])
def test_layout_readers_never_import_the_search_loop(reader: str) -> None:
    seen, todo = set(), [reader]
    while todo:  # everything the reader loads at import time, transitively
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo += [r for i in _imports(MODULES[m], top_level_only=True) if (r := _resolve(i))]
        todo += _parents(m)
    assert "autotune.search.loop" not in seen and "autotune.search.confirm" not in seen, sorted(seen)
