"""Shared fixtures: a tiny model YAML and ways to run the real CLI."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

TINY: dict[str, Any] = {
    "name": "t",
    "model": {"family": "gpt", "n_layers": 1, "d_model": 32, "n_heads": 2, "vocab_size": 128, "seq_len": 16},
    "workload": {"task": "train", "global_batch_size": 8, "world_size": 1, "warmup_steps": 1, "measure_steps": 2},
    "space": {"micro_batch_size": [2, 4, 8], "precision": ["fp32", "bf16"], "grad_accum_steps": "auto",
              "compile": False},
    "study": {"trials": 3, "timeout_min": 5, "sampler": "tpe", "seed": 0, "trial_timeout_min": 2, "confirm_rounds": 0},
    "baseline": {"micro_batch_size": 2, "precision": "fp32"},
}


def tiny(**overrides: Any) -> dict[str, Any]:
    """The tiny config with sections merged from overrides (section=dict) or top-level keys replaced."""
    data = copy.deepcopy(TINY)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


@pytest.fixture
def write_yaml(tmp_path: Path):
    def write(data: Any, name: str = "model.yaml") -> Path:
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
        return path

    return write


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """The real `autotune` command in a subprocess (exit codes, signals and files are real)."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    full_env.pop("AUTOTUNE_FAULT", None) if env is None or "AUTOTUNE_FAULT" not in env else None
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
