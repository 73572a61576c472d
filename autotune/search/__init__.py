"""The search engine, split as optuna splits its study: the loop, storage, workers, confirmation,
best.yaml.

What it reads of a study (its trials as records, the chosen configuration, the bound, the memory
line, the predictions) is autotune/study, which the report reads too; only the CLI and the API
import the loop, and importing this package does not load it (PEP 562 lazy names).
"""

from __future__ import annotations

from typing import Any

__all__ = ["Observer", "SearchResult", "run_search"]


def __getattr__(name: str) -> Any:
    if name == "Observer":
        from autotune.search.observer import Observer

        return Observer
    if name in __all__:
        from autotune.search import run

        return getattr(run, name)
    raise AttributeError(f"module 'autotune.search' has no attribute {name!r}")
