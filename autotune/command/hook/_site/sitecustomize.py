"""Imported by Python at the start of every Python process of a command job measured with
command.measure hf or lightning (this folder is on its PYTHONPATH, after the user's own entries):
autotune's callback is added to the job's Trainer (autotune/command/hook/launch.py). The
environment's own sitecustomize, if any, still runs after it.

The hook acts in the job's first Python process (it marks itself in AUTOTUNE_HOOK: its pid) and in
the ranks a distributed launcher starts from it: children of the marked process whose environment
carries LOCAL_RANK (torchrun, accelerate's multi-GPU launch, Lightning's DDP), or any child when the
marked process is itself a launcher (`accelerate launch` of one process sets no LOCAL_RANK). Every
other Python process (an evaluation subprocess, spawned DataLoader workers, a shell script's python)
takes this folder off its PYTHONPATH and the AUTOTUNE_* variables out of os.environ, so that neither
it nor its own children are measured, and adds no callback: it only watches (launch.witness), so
that a Trainer trained there is noted beside the report, and the trial, finding no step, says the
job trained in a child the hook does not measure.

autotune's modules are reached without putting autotune's folder on the job's path (it would bring
autotune's environment's transformers or torch ahead of the job's own): when the job's Python has no
`autotune` of its own, a package module `autotune` is registered whose __path__ is this copy's
package folder, without running its __init__ (which imports nothing the callbacks need), so
autotune.command.hook, autotune.callbacks.*, autotune.reporting load from here and everything else
from the job's path.
"""

import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
# autotune/ (this is autotune/command/hook/_site)
_package = os.path.dirname(os.path.dirname(os.path.dirname(_here)))
MARK = "AUTOTUNE_HOOK"
# the commands that start a job's ranks (as the first argument's name, or after -m)
LAUNCHERS = ("torchrun", "accelerate", "deepspeed")
LAUNCHER_MODULES = (
    "torch.distributed.run",
    "torch.distributed.launch",
    "accelerate.commands.launch",
    "deepspeed.launcher.runner",
    "deepspeed.launcher.launch",
)


def _ours(entry: str) -> bool:
    return os.path.abspath(entry or ".") == _here


def _launcher() -> bool:
    """This process is a distributed launcher (Python's own command line, sys.orig_argv)."""
    argv = list(getattr(sys, "orig_argv", []))
    if "-m" in argv[:-1]:
        return argv[argv.index("-m") + 1] in LAUNCHER_MODULES
    return len(argv) > 1 and os.path.basename(argv[1]) in LAUNCHERS


def _acts() -> bool:
    """Whether the hook acts in this process (module docstring); marks the first process."""
    if not os.environ.get("AUTOTUNE_MEASURE"):
        return False
    mark = os.environ.get(MARK)
    if not mark:
        os.environ[MARK] = f"{os.getpid()}:launcher" if _launcher() else str(os.getpid())
        return True
    pid, _, kind = mark.partition(":")
    if str(os.getppid()) != pid or not (kind or "LOCAL_RANK" in os.environ):
        return False
    if _launcher():  # a launcher started by the launcher (deepspeed's runner): its ranks act too
        os.environ[MARK] = f"{os.getpid()}:launcher"
    return True


def _leave() -> None:
    """Not a process of the job's training: no hook here, nor in what this process starts."""
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and not _ours(p)]
    if kept:
        os.environ["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        os.environ.pop("PYTHONPATH", None)
    for name in [n for n in os.environ if n.startswith("AUTOTUNE_")]:
        del os.environ[name]


def _autotune_package() -> None:
    """`autotune` as this copy's package folder, unless the job's Python has one of its own."""
    if "autotune" in sys.modules or importlib.util.find_spec("autotune") is not None:
        return
    spec = importlib.util.spec_from_file_location(
        "autotune", os.path.join(_package, "__init__.py"), submodule_search_locations=[_package]
    )
    assert spec is not None
    sys.modules["autotune"] = importlib.util.module_from_spec(spec)  # its __init__ is not run


def _witness(framework: str, report: str, mark: str) -> None:
    """Note a training of this process, which the hook does not measure (launch.witness)."""
    try:
        _autotune_package()
        from autotune.command.hook import launch

        launch.witness(framework, report, mark.partition(":")[0])
    except ImportError:
        pass  # no autotune to be found: the first process said so


def _install() -> None:
    try:
        _autotune_package()
        from autotune.command.hook import launch

        launch.install()
    except ImportError as err:  # no autotune to be found: say so once, run the job as it is
        sys.stderr.write(f"autotune: command.measure needs autotune in the job's Python ({err})\n")


def _chain() -> None:
    """The environment's own sitecustomize (the next one on the path), as Python would have run."""
    path = [p for p in sys.path if not _ours(p)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None and spec.origin != __file__:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if _acts():
    _install()
    _chain()
else:
    # what the witness needs, read before _leave takes it out of the environment
    _seen = [os.environ.get(n, "") for n in ("AUTOTUNE_MEASURE", "AUTOTUNE_REPORT", MARK)]
    _leave()
    if all(_seen):
        _witness(*_seen)
    _chain()
    sys.path[:] = [p for p in sys.path if not _ours(p)]
