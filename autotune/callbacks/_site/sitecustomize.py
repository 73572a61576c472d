"""Imported by Python at the start of every process of a command job measured with command.measure
hf or lightning (this folder is first on its PYTHONPATH): autotune's callback is added to the job's
Trainer (autotune/callbacks/launch.py). The environment's own sitecustomize, if any, still runs
after it."""

import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
try:
    from autotune.callbacks import launch

    launch.install()
except ImportError as err:  # the job's Python has no autotune: say so once, run the job as it is
    sys.stderr.write(f"autotune: command.measure needs autotune in the job's Python ({err})\n")

_path = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _path)
if _spec is not None and _spec.loader is not None and _spec.origin != __file__:
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
