"""command.measure hf / lightning: autotune's callback added to an unmodified HF Trainer or
Lightning job.

The trial puts autotune/command/hook/_site on the job's PYTHONPATH (after the user's entries) and
names the framework in AUTOTUNE_MEASURE. Python imports that folder's sitecustomize at start-up;
in the job's first Python process and the ranks a launcher starts from it (torchrun's,
accelerate's, Lightning's DDP: _site/sitecustomize.py says which), it calls `install`: an import
hook that, once the framework's Trainer module has been imported by the job, wraps
Trainer.__init__ so that every Trainer the job makes gets an AutotuneCallback (unless it has one:
an edited script is not counted twice). The first Trainer whose training begins is the one
measured (reporting.Reporter.claim), in any of the job's processes: a shell script's second Python
is a first process to the hook too, and its Trainer fails the trial at the claim file. Nothing is
imported before the job imports it, so the job's own start-up is unchanged.

In the job's other Python processes (a child of the first, a spawned worker) the hook does not act:
there `witness` wraps the Trainer's training method instead, which notes each training beside the
report (hook/unmeasured.py) and adds nothing, so that a job whose Trainer trained in a child is told
so, not that it reported no step.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

# the frameworks' Trainers, by mode (standard library only: the job's frameworks are imported by
# the job, never here)
from autotune.modes import MODES, Trainer

ENV_MEASURE = "AUTOTUNE_MEASURE"


def _trainer(framework: str) -> Trainer | None:
    """The Trainer of the mode named `framework` (AUTOTUNE_MEASURE) that the hook adds its callback
    to; None for a mode without one, or a name no mode has."""
    mode = MODES.get(framework)
    return mode.trainer if mode is not None else None


def patch(module: ModuleType, framework: str) -> None:
    """Wrap the module's Trainer.__init__: the callback added once the Trainer is made."""
    trainer_class = module.Trainer
    if getattr(trainer_class.__init__, "_autotune", False):
        return
    original = trainer_class.__init__

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        trainer = _trainer(framework)
        assert trainer is not None  # patch is called for a mode with a Trainer
        trainer.add(self, importlib.import_module(trainer.callback).AutotuneCallback)

    init._autotune = True  # type: ignore[attr-defined]
    trainer_class.__init__ = init


def watch(module: ModuleType, framework: str, report: str, first: str) -> None:
    """Wrap the module's Trainer's training method: each training noted (hook/unmeasured.py),
    nothing added. first: the pid of the job's first process (the hook's mark)."""
    trainer_class = module.Trainer
    trainer = _trainer(framework)
    assert trainer is not None  # watch is called for a mode with a Trainer
    method, named = trainer.trains, trainer.named
    original = getattr(trainer_class, method)
    if getattr(original, "_autotune", False):
        return

    @functools.wraps(original)
    def trains(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            _noted(report, first, f"{named} ({_model_name(framework, self, args, kwargs)})")
        except Exception:  # a note of autotune's never stops the job's own training
            pass
        return original(self, *args, **kwargs)

    trains._autotune = True  # type: ignore[attr-defined]
    setattr(trainer_class, method, trains)


def _model_name(framework: str, trainer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The class of the model the Trainer trains (HF: its model; Lightning: fit's first argument),
    inside DDP's and torch.compile's wrappers."""
    found = _trainer(framework)
    model = found.model(trainer, kwargs) if found is not None else None
    model = model if model is not None or not args else args[0]
    for name in ("_orig_mod", "module"):
        model = getattr(model, name, model)
    return type(model).__name__


def _noted(report: str, first: str, trained: str) -> None:
    """Note this child's training: what kind of child, its parent, the job's first process."""
    from autotune.command.hook import unmeasured  # in the job's process, once it trains

    first_program = unmeasured.program_of(first)
    child = unmeasured.child_kind()
    unmeasured.note(
        report,
        child=child,
        ppid=os.getppid(),
        first=first,
        first_program=first_program,
        trained=trained,
    )


class _Loader(importlib.abc.Loader):
    """The framework module's own loader, then what the hook does to it (`then`)."""

    def __init__(self, inner: importlib.abc.Loader, then: Callable[[ModuleType], None]) -> None:
        self.inner, self.then = inner, then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        self.then(module)


class _Hook(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for the framework's Trainer module, the spec the other finders give,
    its loader wrapped to do `then` to the module once it has run."""

    def __init__(self, target: str, then: Callable[[ModuleType], None]) -> None:
        self.then, self.target = then, target

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != self.target:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, self.then)
                return spec
        return None


class _Finder(_Hook):
    """The hook of a process it acts in: the callback added to every Trainer (patch)."""

    def __init__(self, framework: str, target: str) -> None:
        super().__init__(target, functools.partial(patch, framework=framework))


class _Witness(_Hook):
    """The hook of a process it does not act in: each training noted (watch), nothing added."""

    def __init__(self, framework: str, target: str, report: str, first: str) -> None:
        noted = functools.partial(watch, framework=framework, report=report, first=first)
        super().__init__(target, noted)


def install(framework: str | None = None) -> None:
    """Add the callback to every Trainer of `framework` (default: AUTOTUNE_MEASURE) the process
    makes."""
    framework = framework or os.environ.get(ENV_MEASURE, "")
    trainer = _trainer(framework)
    if trainer is None:
        return
    module = sys.modules.get(trainer.module)
    if module is not None:  # already imported (install called late): patch it now
        patch(module, framework)
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(framework, trainer.module))


def witness(framework: str, report: str, first: str) -> None:
    """In a Python process of the job that the hook does not act in (a child of its first process):
    each training of the framework's Trainer is noted beside the report, unmeasured, so that the
    trial can say where the job trained (hook/unmeasured.py). first: the first process's pid."""
    trainer = _trainer(framework)
    if trainer is None:
        return
    module = sys.modules.get(trainer.module)
    if module is not None:  # already imported (witness called late): watched now
        watch(module, framework, report, first)
        return
    if not any(isinstance(f, _Witness) for f in sys.meta_path):
        sys.meta_path.insert(0, _Witness(framework, trainer.module, report, first))


def site_dir() -> str:
    """The folder whose sitecustomize calls install (the one folder autotune adds to the job's
    PYTHONPATH)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_site")
