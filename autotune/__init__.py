"""autotune: measured auto-tuning of LLM training configurations on NVIDIA GPUs, built on Optuna.

Kept import-light on purpose: a trial's process imports `autotune.workloads` and must need torch only.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__", "load_config", "resolve_space", "run_search", "AutotuneError", "ConfigError"]


def __getattr__(name: str):  # lazy re-exports (PEP 562): `import autotune` stays cheap
    if name in ("load_config",):
        from autotune.config import load_config

        return load_config
    if name == "resolve_space":
        from autotune.space import resolve_space

        return resolve_space
    if name == "run_search":
        from autotune.study import run_search

        return run_search
    if name in ("AutotuneError", "ConfigError"):
        from autotune import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
