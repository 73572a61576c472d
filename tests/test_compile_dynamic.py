"""compile_dynamic batch (issue 28): trials of two micro-batch sizes share one compiled program
through the study's compile cache; a static compile specialises on the size. Real torch.compile
on the CPU (slow)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import tiny

from autotune.job import parse_config
from autotune.launch.runner import Bench, run_trial
from autotune.space import resolve_space

pytestmark = pytest.mark.slow

LLAMA = {
    "family": "llama",
    "n_layers": 1,
    "d_model": 64,
    "n_heads": 4,
    "n_kv_heads": 2,
    "ffn_hidden": 128,
    "vocab_size": 256,
    "seq_len": 32,
    "rope_theta": 10000.0,
    "tie_embeddings": False,
}


def _cache(bench: Bench, knobs: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    (bench.home / "tmp").mkdir(parents=True, exist_ok=True)
    outcome = run_trial(bench.spec(knobs), run_dir, timeout_s=600, env=bench.env())
    assert outcome.status == "ok", outcome.reason
    return outcome.result.applied


def test_compile_dynamic_batch_serves_a_second_micro_batch_from_the_cache(tmp_path: Path) -> None:
    cfg = parse_config(
        tiny(
            model=LLAMA,
            workload={"global_batch_size": 8, "warmup_steps": 1, "measure_steps": 2},
            space={"micro_batch_size": [4, 8], "compile": [True], "compile_dynamic": ["batch"]},
            baseline={"micro_batch_size": 4},
        )
    )
    space = resolve_space(cfg, "cpu")
    bench = Bench.of(
        cfg.model, cfg.workload, device="cpu", timeout_s=600, home=tmp_path / "study", base_dir=None
    )
    knobs = space.knobs({**space.baseline, "compile": True, "compile_dynamic": "batch"})
    first = _cache(bench, {**knobs, "micro_batch_size": 4, "grad_accum_steps": 2}, tmp_path / "a")
    second = _cache(bench, {**knobs, "micro_batch_size": 8, "grad_accum_steps": 1}, tmp_path / "b")
    assert first["compile_dynamic"].startswith("batch dimension dynamic")
    assert first["compile_cache"]["fxgraph_miss"] == 2  # forward and backward, compiled cold
    assert (
        second["compile_cache"]["fxgraph_miss"] == 0 and second["compile_cache"]["fxgraph_hit"] == 2
    )


@pytest.mark.parametrize("checkpointing", ["none", "selective"])
def test_compile_dynamic_batch_per_block_serves_another_micro_batch_warm(
    tmp_path: Path, checkpointing: str
) -> None:
    """Per-block compile with a dynamic batch (the staged search's screening program): a compiled
    block sees the hidden state, not the input batch, so the model marks that dynamic too, and a
    fresh process of another micro-batch is served whole by the cache (issue 50: before, every
    size compiled cold). With selective checkpointing the policy's cache_hash lets AOTAutograd's
    cache keep the checkpointed block."""
    cfg = parse_config(
        tiny(
            model=LLAMA,
            workload={"global_batch_size": 8, "warmup_steps": 1, "measure_steps": 2},
            space={"micro_batch_size": [4, 8], "compile": [True]},
            baseline={"micro_batch_size": 4},
        )
    )
    space = resolve_space(cfg, "cpu")
    bench = Bench.of(
        cfg.model, cfg.workload, device="cpu", timeout_s=600, home=tmp_path / "study", base_dir=None
    )
    knobs = {
        **space.knobs({**space.baseline, "compile": True}),
        "compile_scope": "block",
        "compile_dynamic": "batch",
        "activation_checkpointing": checkpointing,
    }
    first = _cache(bench, {**knobs, "micro_batch_size": 4, "grad_accum_steps": 2}, tmp_path / "a")
    second = _cache(bench, {**knobs, "micro_batch_size": 8, "grad_accum_steps": 1}, tmp_path / "b")
    assert "each compiled region's" in first["compile_dynamic"]
    assert first["compile_cache"]["state"] == "cold"
    cache = second["compile_cache"]
    assert cache["state"] == "warm", cache
    assert cache["autograd_hit"] >= 2 and cache["autograd_miss"] == cache["autograd_bypass"] == 0
