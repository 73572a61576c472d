"""torchao's float8 training programs served by AOTAutograd's cache (workloads/float8_cache.py): a
second fresh process of a compiled float8 model is warm, where without it every process re-traces.
Real torchao, real torch.compile on the CPU, two processes each (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torchao")
pytestmark = pytest.mark.slow

PROGRAM = textwrap.dedent(
    """
    import json, sys
    import torch
    from torch._dynamo.utils import counters
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    from autotune.workloads import float8_cache

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name("tensorwise"))
    installed = float8_cache.install(torch) if sys.argv[1] == "patched" else False
    step = torch.compile(model)
    x = torch.randn(32, 64)
    with torch.autocast("cpu", torch.bfloat16):
        loss = step(x).float().square().mean()
    loss.backward()
    aot = counters["aot_autograd"]
    print(json.dumps({"installed": installed, "hit": aot["autograd_cache_hit"],
                      "bypass": aot["autograd_cache_bypass"], "loss": loss.item()}))
    """
)


def _run(how: str, cache: Path) -> dict[str, object]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "TORCHINDUCTOR_VEC_ISA_OK": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM, how], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_float8_cache_a_fresh_process_of_a_compiled_float8_model_starts_warm(
    tmp_path: Path,
) -> None:
    plain = [_run("plain", tmp_path / "plain") for _ in range(2)]
    assert plain[1]["hit"] == 0 and plain[1]["bypass"] >= 1  # today: every process re-traces
    patched = [_run("patched", tmp_path / "patched") for _ in range(2)]
    assert patched[0]["installed"] is True
    assert patched[1]["hit"] >= 1 and patched[1]["bypass"] == 0, patched
    assert patched[1]["loss"] == plain[1]["loss"]  # the same program, served from the cache
