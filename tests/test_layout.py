"""The architecture, pinned: no import cycle, short functions, the parent/child split, report and
check apart from the search loop. Read from the source with ast (nothing is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "autotune"
MODULES = {
    ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
    for p in sorted(PACKAGE.rglob("*.py"))
}
# What a trial process may import of autotune: the shared protocol modules (standard library only)
# and itself.
SHARED = (
    "autotune.protocol",
    "autotune.tracebacks",  # where a traceback was raised: protocol.last_words reads it
    "autotune.knobs",
    "autotune.knobs._knob",
    "autotune.knobs._catalogue",
    "autotune.knobs._generate",
    "autotune.knobs._ranks",
    "autotune.knobs._notes",
    "autotune.sizes",
    "autotune.status",
    "autotune.nccl_log",
    "autotune.numerics",  # the numerics check's verdict: the trial's and the search's
    # the job's reporting API: the trial of task command reads what it writes
    "autotune.reporting",
    # the hook's notes of the trainings it did not measure: the job writes them, the trial reads
    "autotune.command.hook.unmeasured",
    # the job's reporting API: the trial of task command reads what it writes
    "autotune.atomic",
    # tokens over time and its interval: the command trial's window and the search's pruner
    "autotune.ratio",
    # task command's measure modes: where the trial reads a job's steps, how it stops it
    *(m for m in MODULES if m.startswith("autotune.modes")),
    "autotune.errors",  # a mode's messages (measure log's pattern: errors.excerpt)
)
# The trial process's modules: the workloads and the trial side of task command (autotune/command)
COMMAND_TRIAL = (
    "autotune.command.trial",
    "autotune.command.log",
    "autotune.command.report",
    "autotune.command.said",
    "autotune.command.window",
    "autotune.command.gpu_peak",
    "autotune.command.bursts",
)
TRIAL_PROCESS = ("autotune.workloads", *COMMAND_TRIAL)
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 450


def _imports(path: Path, top_level_only: bool) -> set[str]:
    """autotune modules imported by a file; top_level_only: module-level imports outside
    TYPE_CHECKING. `from a import b` is module a.b where b is one (the package a runs first:
    _parents), else a."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = {
                f"{node.module}.{a.name}"
                for a in node.names
                if f"{node.module}.{a.name}" in MODULES
            }
            found |= modules
            if len(modules) < len(node.names):
                found.add(node.module)
    return {m for m in found if m.startswith("autotune")}


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def test_layout_no_import_cycle() -> None:
    """Every import counted: module-level, inside functions (lazy) and under TYPE_CHECKING. The root
    package's lazy API (autotune/__init__.py: run_search, run_check, ...) is the one exception:
    importing autotune.x runs it, but it imports nothing until called, and it stands above every
    module by design."""
    graph = {
        m: {r for i in _imports(p, top_level_only=False) if (r := _resolve(i)) and r != m}
        for m, p in MODULES.items()
    }
    # importing a.b runs a/__init__ first (except from inside package a, which is loading it)
    for m in graph:
        graph[m] |= {
            parent
            for dep in list(graph[m])
            for parent in _parents(dep)
            if parent != "autotune" and not m.startswith(parent + ".")
        } - {m}
    _assert_acyclic({m: deps - {"autotune"} for m, deps in graph.items()}, "import cycle")


def _assert_acyclic(graph: dict[str, set[str]], what: str) -> None:
    """A depth-first walk of the graph; AssertionError naming the first cycle met."""
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for dep in sorted(graph.get(m, ())):
            if state.get(dep) == 1:
                raise AssertionError(f"{what}: " + " -> ".join([*path[path.index(dep) :], dep]))
            if dep not in state:
                visit(dep, [*path, dep])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def _folder(module: str) -> str:
    """The folder a module stands in: its subpackage of autotune, or itself at the root."""
    parts = module.split(".")
    return (
        ".".join(parts[:2])
        if len(parts) > 2 or module in MODULES and _is_package(module)
        else module
    )


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def test_layout_no_import_cycle_between_folders() -> None:
    """Imports run downhill between the folders too (config/ under tasks/ under search/, ...): no
    folder of autotune, nor a module at its root, imports one that imports it back, even lazily or
    for types. The root package's lazy API (autotune/__init__.py) stands above all, as above."""
    graph: dict[str, set[str]] = {}
    for m, p in MODULES.items():
        if m == "autotune":
            continue
        deps = {_folder(r) for i in _imports(p, top_level_only=False) if (r := _resolve(i))}
        graph.setdefault(_folder(m), set()).update(deps - {"autotune", _folder(m)})
    _assert_acyclic(graph, "folder import cycle")


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in MODULES]


def _body_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's code: from its first statement after the docstring to its end. The signature (a
    Typer command's options, one a line at 100 columns) and the docstring are declarations, not
    logic."""
    body = function.body
    first = body[0]
    docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    if docstring and isinstance(first.value.value, str) and len(body) > 1:
        first = body[1]
    return function.end_lineno - first.lineno + 1


@pytest.mark.parametrize("module", sorted(MODULES))
def test_layout_functions_are_short(module: str) -> None:
    tree = ast.parse(MODULES[module].read_text())
    functions = [
        n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    long = [(n.name, _body_lines(n)) for n in functions if _body_lines(n) > MAX_FUNCTION_LINES]
    assert not long, f"{module}: functions of over {MAX_FUNCTION_LINES} lines of code: {long}"


def test_layout_trial_process_imports_only_the_shared_protocol() -> None:
    for module, path in MODULES.items():
        if module.startswith(TRIAL_PROCESS):
            outside = {
                i
                for i in _imports(path, top_level_only=False)
                if not i.startswith(TRIAL_PROCESS) and i not in SHARED and i != "autotune"
            }
            assert not outside, f"{module} (runs in the trial process) imports {outside}"


def test_layout_parent_never_imports_the_trial_process() -> None:
    for module, path in MODULES.items():
        if not module.startswith(TRIAL_PROCESS):
            inside = {
                i for i in _imports(path, top_level_only=False) if i.startswith(TRIAL_PROCESS)
            }
            assert not inside, (
                f"{module} imports the trial's modules {inside}; it launches them by name"
            )


@pytest.mark.parametrize(
    "reader",
    [
        "autotune.report",
        "autotune.report._collect",
        "autotune.report._render",
        "autotune.report._html",
        "autotune.report._table",
        "autotune.check.regress",
        "autotune.check.bench",
        "autotune.views",
        "autotune.check.views",
        "autotune.search.best",
        "autotune.documents.best_file",
        "autotune.study.history",
        "autotune.study.chosen",
        "autotune.study.load",
        "autotune.search.storage",
    ],
)
def test_layout_readers_never_import_the_search_loop(reader: str) -> None:
    seen, todo = set(), [reader]
    while todo:  # everything the reader loads at import time, transitively
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo += [r for i in _imports(MODULES[m], top_level_only=True) if (r := _resolve(i))]
        todo += _parents(m)
    assert (
        "autotune.search.loop" not in seen
        and "autotune.search.run" not in seen
        and "autotune.search.confirm" not in seen
    ), sorted(seen)


# The modules that read best.yaml back (check, export) and the documents themselves: they read the
# file's typed owner (autotune/documents), never the search that wrote it, not even lazily.
BEST_YAML_READERS = (
    "autotune.documents",
    "autotune.check",
    "autotune.export",
    "autotune.cli.check",
    "autotune.cli.export",
)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(BEST_YAML_READERS)))
def test_layout_check_and_export_never_import_the_search(module: str) -> None:
    found = {
        i
        for i in _imports(MODULES[module], top_level_only=False)
        if i.startswith("autotune.search")
    }
    assert not found, f"{module} imports {sorted(found)}: read best.yaml through autotune.documents"


@pytest.mark.parametrize(
    "module", sorted(m for m in MODULES if m.startswith(("autotune.report", "autotune.study")))
)
def test_layout_report_and_study_never_import_the_search(module: str) -> None:
    """The report reads a study through autotune/study (its storage, its trials as records, the
    chosen configuration, the bound), which the search uses too; neither imports the search, not
    even lazily, and the study imports no report."""
    above = ("autotune.search", "autotune.cli") + (
        ("autotune.report",) if module.startswith("autotune.study") else ()
    )
    found = {i for i in _imports(MODULES[module], top_level_only=False) if i.startswith(above)}
    assert not found, f"{module} imports {sorted(found)}: read the study through autotune.study"


def test_layout_report_loads_no_search_module() -> None:
    """Everything the report loads, transitively and lazily too, holds no module of the search (the
    root package's lazy API stands above every module, as in the cycle test)."""
    seen, todo = set(), [m for m in MODULES if m.startswith("autotune.report")]
    while todo:
        m = todo.pop()
        if m in seen or m == "autotune":
            continue
        seen.add(m)
        todo += [r for i in _imports(MODULES[m], top_level_only=False) if (r := _resolve(i))]
        todo += _parents(m)
    assert not sorted(m for m in seen if m.startswith("autotune.search")), sorted(seen)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_layout_modules_are_short(module: str) -> None:
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, (
        f"{module}: {lines} lines, over {MAX_MODULE_LINES}: split it by concern"
    )


def _task_branches(tree: ast.AST) -> list[int]:
    """Lines comparing a task (`x.task`, `task`) with a task's name: `== "generate"`, `!= "train"`,
    `in (...)`."""
    from autotune import knobs

    names = set(knobs.TASKS)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        named = any(
            isinstance(x, ast.Name)
            and x.id == "task"
            or isinstance(x, ast.Attribute)
            and x.attr == "task"
            for x in sides
        )
        consts = {
            c.value
            for x in sides
            for c in ([x] if isinstance(x, ast.Constant) else getattr(x, "elts", []))
            if isinstance(c, ast.Constant)
        }
        if (
            named
            and consts & names
            or any(isinstance(x, ast.Constant) and x.value == "kv_cache" for x in sides)
        ):
            found.append(node.lineno)
    return found


def test_layout_the_parent_never_branches_on_the_task() -> None:
    """Each task is one plug-in on each side of the process boundary (tasks/, workloads/): elsewhere
    no code compares a task with a task's name, nor detects a task by a knob of it (`"kv_cache" in
    knobs`)."""
    for module, path in MODULES.items():
        # the command task's own package is its plug-in too (test_layout_the_command_task_lives_...)
        if module.startswith(("autotune.tasks", "autotune.workloads", "autotune.command")):
            continue
        lines = _task_branches(ast.parse(path.read_text()))
        assert not lines, (
            f"{module} branches on the task at line(s) {lines}: ask the Task plug-in "
            "(autotune/tasks)"
        )


def test_layout_the_task_registries_agree() -> None:
    """The parent's plug-ins (tasks.TASKS), the trial's (workloads/trial.py WORKLOADS) and the knob
    catalogue's task names (knobs.TASKS) name the same tasks."""
    from autotune import knobs, tasks

    tree = ast.parse((PACKAGE / "workloads" / "trial.py").read_text())
    workloads = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "WORKLOADS" for t in node.targets)
    )
    # the NCCL benchmark's workload is no study task
    child = {k.value for k in workloads.keys} - {"allreduce"}
    assert set(tasks.TASKS) == set(knobs.TASKS) == child


# The package root by concern (issue 37): starting and supervising a trial is autotune/launch,
# `autotune check` is autotune/check, the files autotune keeps are autotune/documents, the YAML's
# schema is autotune/config, each task's plug-in is autotune/tasks (workloads/ its trial side). What
# stays at the root is shared by several of them. A module added here is added on purpose.
ROOT_MODULES = {
    "api_options",  # run_search's and run_check's options, checked as the CLI checks them
    "atomic",  # files written whole (the trial process too)
    "errors",  # the error family and the exit codes
    "hardware",  # peak FLOPs, pynvml, telemetry, the fingerprint
    "intervals",  # a median's 95% interval and when it bounds nothing
    "job",  # a job's YAML checked whole: its schema, its model's code, its space
    "metrics",  # throughput, MFU and step statistics from raw samples
    "nccl",  # `autotune nccl`
    "nccl_log",  # what NCCL says (the trial process too)
    "numerics",  # the numerics check's verdict (the trial process too)
    "paths",  # paths the user gives, checked before anything runs
    "protocol",  # the hand-over between the parent and the trial process
    "ratio",  # tokens over time and its interval (the trial process too: the window, the pruner)
    "redact",  # credentials never shown
    "remedy",  # a failed trial's reason with its remedy
    "reporting",  # the job's reporting API (task command)
    "sizes",  # the built-in model's derived sizes
    "space",  # the resolved search space
    "status",  # a trial's status, shared by both sides
    "tracebacks",  # where a traceback in a process's output was raised (both sides)
    "views",  # the live view of a search and the CLI's tables
    "yamlio",  # YAML in and out, with limits
}


def test_layout_the_root_holds_only_what_is_shared() -> None:
    root = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert root == ROOT_MODULES, (
        f"new at the root: {sorted(root - ROOT_MODULES)}; gone: {sorted(ROOT_MODULES - root)}: "
        "put a module in the package of its concern (launch, check, documents, config, ...)"
    )


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("autotune.documents")))
def test_layout_documents_sit_below_their_writers_and_readers(module: str) -> None:
    """The files' owners import none of the search, check, export, report, launch or CLI, not even
    lazily: every one of those reads the files through them."""
    above = ("search", "check", "export", "report", "launch", "cli", "views")
    found = {
        i
        for i in _imports(MODULES[module], top_level_only=False)
        if i.split(".")[1:2] and i.split(".")[1] in above
    }
    assert not found, f"{module} imports {sorted(found)}, which read or write through it"


def test_layout_each_task_and_its_workload_agree_on_importing_torch() -> None:
    """A task whose trial imports no torch (Task.imports_torch) gets no process started ahead; its
    workload must then never import it (Workload.imports_torch), and the other way round."""
    from autotune import tasks
    from autotune.workloads.trial import workload_class

    for name in tasks.TASKS:
        assert tasks.task(name).imports_torch == workload_class(name).imports_torch, name


# Task command's parts outside autotune/command: its parent-side plug-ins, registered where the
# plug-ins of their kind live (tasks.TASKS, export's forms), whose packages import them.
COMMAND_PLUGINS = {"autotune.tasks._command", "autotune.export._hf_command"}
# ... and its section of the YAML's schema, where the schema is (autotune/config)
COMMAND_SCHEMA = "autotune.config.command"


def test_layout_the_command_task_lives_in_autotune_command() -> None:
    """Task command's rendering, trial side and hook are modules of autotune/command (its section of
    the schema is config/command.py, its measure modes autotune/modes); no module elsewhere is named
    after the command but its plug-ins and that schema."""
    parts = {
        m.removeprefix("autotune.command.") for m in MODULES if m.startswith("autotune.command.")
    }
    assert {"render", "task", "measure_only", "hook", "hook.launch"} | {
        m.removeprefix("autotune.command.") for m in COMMAND_TRIAL
    } <= parts, sorted(parts)
    assert (PACKAGE / "command" / "hook" / "_site" / "sitecustomize.py").is_file()
    strays = {
        m
        for m in MODULES
        if "command" in m.rpartition(".")[2]
        and not m.startswith("autotune.command")
        and not m.startswith("autotune.cli")
    }
    assert strays <= COMMAND_PLUGINS | {COMMAND_SCHEMA}, (
        f"task command's modules outside autotune/command: {strays}"
    )


def _third_party(path: Path) -> set[str]:
    """The top-level packages a file imports, lazily too, outside `if TYPE_CHECKING:`."""
    found, todo = set(), list(ast.parse(path.read_text()).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo += node.orelse
            continue
        if isinstance(node, ast.Import):
            found |= {a.name.partition(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.partition(".")[0])
        todo += list(ast.iter_child_nodes(node))
    return found


@pytest.mark.parametrize(
    "module", [*COMMAND_TRIAL, *(m for m in MODULES if m.startswith("autotune.modes"))]
)
def test_layout_the_command_trial_side_imports_no_pydantic_or_optuna(module: str) -> None:
    """What runs in a command trial's process (and everything of autotune it loads, transitively)
    needs the standard library alone: no pydantic, optuna, yaml, typer or rich."""
    seen, todo, found = set(), [module], set()
    while todo:
        m = todo.pop()
        if m in seen or m == "autotune":
            continue
        seen.add(m)
        found |= _third_party(MODULES[m])
        todo += [r for i in _imports(MODULES[m], top_level_only=False) if (r := _resolve(i))]
        todo += _parents(m)
    heavy = found & {"pydantic", "optuna", "yaml", "typer", "rich"}
    assert not heavy, f"{module} loads {sorted(heavy)} (through {sorted(seen)})"


# Optuna's attributes of a trial or a study, and its storage: read and written only by their typed
# owners in autotune/documents (the record's keys, the study's marks on a trial, the study's own
# attributes), which keep the stored names and layouts.
OPTUNA_ATTRS = {"user_attrs", "set_user_attr", "system_attrs", "set_system_attr", "_storage"}
ATTR_OWNERS = {
    "autotune/documents/record.py",
    "autotune/documents/trial_marks.py",
    "autotune/documents/study_attrs.py",
    "autotune/documents/confirmation.py",
}


def _optuna_attr_uses(path: Path) -> list[int]:
    """Lines reading or writing OPTUNA_ATTRS: an attribute of that name, or a keyword of that name
    (enqueue_trial, create_trial), but a FrozenTrial built in memory (a plot's or a tracker's view,
    no stored attribute read or written)."""
    tree = ast.parse(path.read_text())
    built = {
        id(k)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "FrozenTrial"
        for k in node.keywords
    }
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in OPTUNA_ATTRS:
            lines.append(node.lineno)
        elif isinstance(node, ast.Call):
            lines += [
                node.lineno for k in node.keywords if k.arg in OPTUNA_ATTRS and id(k) not in built
            ]
    return sorted(set(lines))


def test_layout_optuna_attributes_only_through_their_owners() -> None:
    """user_attrs, set_user_attr, system_attrs, set_system_attr and _storage appear in autotune only
    in the owners in autotune/documents: every other module reads and writes through them."""
    found = []
    for path in MODULES.values():
        rel = str(path.relative_to(PACKAGE.parent))
        if rel in ATTR_OWNERS:
            continue
        source = path.read_text().splitlines()
        for line in _optuna_attr_uses(path):
            found.append(f"{rel}:{line}: {source[line - 1].strip()}")
    assert not found, "read and write through their owners in autotune/documents:\n" + (
        "\n".join(found)
    )


MODE_NAMES = {"report", "hf", "lightning", "log"}  # autotune/modes' registry (a test holds it so)


def _measure_branches(tree: ast.AST) -> list[int]:
    """Lines comparing a measure mode (`x.measure`, `measure`, `x.get("measure")`) with a mode's
    name: `== "log"`, `!= "lightning"`, `in ("hf", "lightning")`."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        named = any(
            isinstance(x, ast.Name)
            and x.id == "measure"
            or isinstance(x, ast.Attribute)
            and x.attr == "measure"
            or isinstance(x, ast.Call)
            and isinstance(x.func, ast.Attribute)
            and x.func.attr == "get"
            and bool(x.args)
            and isinstance(x.args[0], ast.Constant)
            and x.args[0].value == "measure"
            for x in sides
        )
        consts = {
            c.value
            for x in sides
            for c in ([x] if isinstance(x, ast.Constant) else getattr(x, "elts", []))
            if isinstance(c, ast.Constant)
        }
        if named and consts & MODE_NAMES:
            found.append(node.lineno)
    return found


def test_layout_only_the_modes_know_a_measure_mode_by_name() -> None:
    """Each measure mode of task command is one plug-in (autotune/modes, MODES): elsewhere no code
    compares command.measure with a mode's name; it asks the mode (modes.of)."""
    from autotune import modes

    assert set(modes.MODES) == MODE_NAMES
    for module, path in MODULES.items():
        if module.startswith("autotune.modes"):
            continue
        lines = _measure_branches(ast.parse(path.read_text()))
        assert not lines, (
            f"{module} branches on the measure mode at line(s) {lines}: ask the Mode "
            "(autotune/modes)"
        )


def test_layout_the_measure_modes_are_registered() -> None:
    """Every module of autotune/modes but its base is a mode, registered under its name."""
    from autotune import modes

    files = {p.stem for p in (PACKAGE / "modes").glob("*.py")} - {"__init__", "_base"}
    assert files == set(modes.MODES)
    assert all(mode.name == name for name, mode in modes.MODES.items())


def test_layout_the_schema_imports_nothing_of_the_command_package() -> None:
    """config/ is the schema, below what reads it: its modules import nothing of autotune/command,
    not even lazily or for types (the command section's schema is config/command.py; the modes'
    rules it calls are autotune/modes, which imports no command module either)."""
    below = [m for m in MODULES if m.startswith(("autotune.config", "autotune.modes"))]
    for module in below:
        found = {
            i
            for i in _imports(MODULES[module], top_level_only=False)
            if i.startswith("autotune.command")
        }
        assert not found, f"{module} imports {sorted(found)}"
