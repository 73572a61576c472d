"""workloads/parallel.py and train.apply_fp8: the multi-rank knobs reach the objects torch runs (one
gloo rank)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, sys, torch, torch.distributed as dist
from autotune.workloads.parallel import apply_comm_hook, apply_fsdp
from autotune.workloads.model import Transformer
dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
m = {"family": "llama", "n_layers": 2, "d_model": 32, "n_heads": 2, "kv_heads": 2, "ffn_hidden": 64, "vocab_size": 64,
     "seq_len": 8, "tie_embeddings": False, "rope_theta": 10000.0}
out = {}
for reduce in ("fp32", "bf16"):
    knobs = {"precision": "bf16", "reshard_after_forward": True, "fsdp_reduce_dtype": reduce, "fsdp_grad_sync": "last",
             "fsdp_forward_prefetch": 0, "fsdp_backward_prefetch": 1}
    model, how, _ = apply_fsdp(torch, Transformer(m), knobs, torch.bfloat16)
    groups = [model._get_fsdp_state()._fsdp_param_group] + [b._get_fsdp_state()._fsdp_param_group for b in model.blocks]
    out[reduce] = {"applied": how["reduce_dtype"], "policies": sorted({str(g.mp_policy.reduce_dtype) for g in groups})}
for rank in (1, 3):
    ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    applied = apply_comm_hook(ddp, {"ddp_comm_hook": "powersgd", "powersgd_rank": rank})
    (hook, state), = ddp._comm_hooks
    out[f"powersgd{rank}"] = {"applied": applied, "hook": hook.__name__, "rank": state.matrix_approximation_rank}
print(json.dumps(out))
"""  # noqa: E501


@pytest.mark.slow
def test_parallel_reduce_dtype_and_powersgd_rank_reach_torch() -> None:
    """fsdp_reduce_dtype sets every FSDP2 group's MixedPrecisionPolicy.reduce_dtype; powersgd_rank
    the PowerSGDState DDP calls its hook with."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["fp32"] == {"applied": "float32", "policies": ["torch.float32"]}
    assert out["bf16"] == {"applied": "bfloat16", "policies": ["torch.bfloat16"]}
    assert out["powersgd1"] == {
        "applied": "powerSGD_hook(rank 1, from step 2)",
        "hook": "powerSGD_hook",
        "rank": 1,
    }
    assert out["powersgd3"]["rank"] == 3


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("torchao") is None, reason="needs torchao"
)
def test_parallel_fp8_all_gather_configures_torchao_and_needs_fsdp_tensorwise() -> None:
    """fp8_all_gather: torchao's Float8LinearConfig with enable_fsdp_float8_all_gather on every
    converted linear (not the head); refused (invalid_config, its cause) without fsdp or with the
    rowwise recipe."""
    import torch

    from autotune.workloads.base import InvalidConfig
    from autotune.workloads.model import Transformer
    from autotune.workloads.train import apply_fp8

    m = {
        "family": "llama",
        "n_layers": 2,
        "d_model": 32,
        "n_heads": 2,
        "kv_heads": 2,
        "ffn_hidden": 64,
        "vocab_size": 64,
        "seq_len": 8,
        "tie_embeddings": False,
        "rope_theta": 10000.0,
    }
    on = {
        "precision": "fp8",
        "fp8_recipe": "tensorwise",
        "fp8_all_gather": True,
        "parallel": "fsdp",
    }
    model = Transformer(m)
    assert apply_fp8(torch, model, on) == 2 * 4  # qkv, proj, up, down of each block
    converted = [mod for mod in model.modules() if type(mod).__name__ == "Float8Linear"]
    assert all(mod.config.enable_fsdp_float8_all_gather for mod in converted)
    off = Transformer(m)
    apply_fp8(torch, off, {**on, "fp8_all_gather": False})
    assert not any(
        mod.config.enable_fsdp_float8_all_gather for mod in off.modules() if hasattr(mod, "config")
    )
    with pytest.raises(InvalidConfig, match="fp8_all_gather needs parallel fsdp") as ddp:
        apply_fp8(torch, Transformer(m), {**on, "parallel": "ddp"})
    assert ddp.value.knobs == ("fp8_all_gather", "parallel")
    with pytest.raises(InvalidConfig, match="needs the tensorwise recipe, not rowwise"):
        apply_fp8(torch, Transformer(m), {**on, "fp8_recipe": "rowwise"})
