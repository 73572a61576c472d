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
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the job's own frameworks: never imported here before the job imports them
    import lightning.pytorch as pl
    import transformers

ENV_MEASURE = "AUTOTUNE_MEASURE"
# framework -> (the module defining its Trainer, the callback's module)
TRAINERS = {
    "hf": ("transformers.trainer", "autotune.callbacks.hf"),
    "lightning": ("lightning.pytorch.trainer.trainer", "autotune.callbacks.lightning"),
}


def _add_hf(
    trainer: transformers.Trainer, callback_class: type[transformers.TrainerCallback]
) -> None:
    if not any(isinstance(c, callback_class) for c in trainer.callback_handler.callbacks):
        trainer.add_callback(callback_class())


class _LightningTrainer(Protocol):
    """Lightning's Trainer as the hook reads it: its callbacks, a list its __init__ sets (through
    its callback connector, so the class declares no such attribute)."""

    callbacks: list[pl.Callback]


def _add_lightning(trainer: _LightningTrainer, callback_class: type[pl.Callback]) -> None:
    if not any(isinstance(c, callback_class) for c in trainer.callbacks):
        trainer.callbacks.append(callback_class())


# framework -> how its Trainer takes the callback (the Trainer and callback class of that framework)
ADD: dict[str, Callable[[Any, Any], None]] = {"hf": _add_hf, "lightning": _add_lightning}


def patch(module: ModuleType, framework: str) -> None:
    """Wrap the module's Trainer.__init__: the callback added once the Trainer is made."""
    trainer_class = module.Trainer
    if getattr(trainer_class.__init__, "_autotune", False):
        return
    original = trainer_class.__init__

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        callback_class = importlib.import_module(TRAINERS[framework][1]).AutotuneCallback
        ADD[framework](self, callback_class)

    init._autotune = True  # type: ignore[attr-defined]
    trainer_class.__init__ = init


class _Loader(importlib.abc.Loader):
    """The framework module's own loader, then the patch."""

    def __init__(self, inner: importlib.abc.Loader, framework: str) -> None:
        self.inner, self.framework = inner, framework

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        patch(module, self.framework)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for the framework's Trainer module, the spec the other finders give,
    its loader wrapped."""

    def __init__(self, framework: str) -> None:
        self.framework, self.target = framework, TRAINERS[framework][0]

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
                spec.loader = _Loader(spec.loader, self.framework)
                return spec
        return None


def install(framework: str | None = None) -> None:
    """Add the callback to every Trainer of `framework` (default: AUTOTUNE_MEASURE) the process
    makes."""
    framework = framework or os.environ.get(ENV_MEASURE, "")
    if framework not in TRAINERS:
        return
    module = sys.modules.get(TRAINERS[framework][0])
    if module is not None:  # already imported (install called late): patch it now
        patch(module, framework)
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(framework))


def site_dir() -> str:
    """The folder whose sitecustomize calls install (the one folder autotune adds to the job's
    PYTHONPATH)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_site")
