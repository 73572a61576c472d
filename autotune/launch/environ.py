"""The environment autotune's process was started with: a trial inherits these variables, never one
a library set since (mlflow.set_tracking_uri writes MLFLOW_TRACKING_URI, with its password, into
os.environ): launch.process.inherited_env.

Read once, when `autotune` itself is first imported (its __init__ imports this module before
anything else that could touch os.environ)."""

from __future__ import annotations

import os

INHERITED = frozenset(os.environ)
