"""The numerics check on the GPU (`pytest -m gpu -s tests/test_gpu_numerics.py`; skipped without
CUDA): torchao's fp8, tensorwise and rowwise, passes against bf16 on a Llama-style and a GPT-style
model of about 1B; a broken precision (fp16 without its GradScaler on small gradients, weights that
lose their bits) is still rejected, with a reason a user understands. Each case is one whole trial
(measured steps, then the check) in this process; the record's check goes to
$AUTOTUNE_GPU_NUMERICS_OUT (a JSON lines file) when set."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import torch

from autotune import knobs as knob_catalogue
from autotune.numerics import floor_nats
from autotune.protocol import RunSettings, TrialSpec
from autotune.workloads import trial

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

LLAMA_1B = {
    "family": "llama",
    "n_layers": 16,
    "d_model": 2048,
    "n_heads": 32,
    "kv_heads": 8,
    "ffn_hidden": 8192,
    "vocab_size": 128256,
    "seq_len": 2048,
    "rope_theta": 500000.0,
    "tie_embeddings": True,
}  # Llama-3.2-1B
GPT_1B = {
    "family": "gpt",
    "n_layers": 24,
    "d_model": 2048,
    "n_heads": 16,
    "kv_heads": 16,
    "ffn_hidden": 8192,
    "vocab_size": 50257,
    "seq_len": 2048,
    "tie_embeddings": False,
}  # issue 34's GPT-style 1.3B


def spec_of(
    model: dict[str, Any], precision: str, recipe: str = "tensorwise", floor: bool = False
) -> TrialSpec:
    """One trial of the model at micro-batch 4 (1 warm-up, 2 measured steps), then its 30-step
    numerics check (benchmarks/check_schedule.py runs the same)."""
    knobs = {
        **knob_catalogue.defaults("train"),
        "precision": precision,
        "fp8_recipe": recipe,
        "micro_batch_size": 4,
        "grad_accum_steps": 1,
    }
    return TrialSpec(
        task="train",
        device="cuda",
        knobs=knobs,
        model=dict(model),
        run=RunSettings(warmup_steps=1, measure_steps=2),
        params={"loss_check": {"steps": 30, "floor": floor}},
    )


def _trial(
    model: dict[str, Any], precision: str, recipe: str = "tensorwise", floor: bool = False
) -> dict[str, Any]:
    result = trial.run(spec_of(model, precision, recipe, floor))
    assert result.status == "ok", result.reason
    found = result.output["loss_check"]
    found["check_s"] = result.phases_s["check"]
    out = os.environ.get("AUTOTUNE_GPU_NUMERICS_OUT")
    if out:
        with open(out, "a") as f:
            f.write(
                json.dumps(
                    {
                        "model": model["family"],
                        "precision": precision,
                        "recipe": recipe,
                        "fault": os.environ.get("AUTOTUNE_FAULT", ""),
                        **found,
                    }
                )
                + "\n"
            )
    torch.cuda.empty_cache()
    return found


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("model", [LLAMA_1B, GPT_1B], ids=["llama-1b", "gpt-1.3b"])
def test_gpu_fp8_passes_the_numerics_check(
    model: dict[str, Any], recipe: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    found = _trial(model, "fp8", recipe, floor=recipe == "tensorwise")
    if found.get("checked") is False and "ran out of memory" in found["why"]:
        # the check trains its reference beside the trial's model: Llama 1B's at micro-batch 4
        # ran out at 73.2 of an H100's 79.2 GiB (2026-12-05); the test needs an H200's memory
        pytest.skip(f"this GPU holds too little for the check: {found['why']}")
    (attempt,) = found["attempts"]
    verdict = attempt["verdict"]
    print(f"\n{model['family']} fp8 {recipe}: {verdict} check {found['check_s']:.1f} s")
    assert verdict["passed"] is True and attempt["n_stalled"] == 0
    # trained as real training runs (warm-up, clipping): neither curve spikes in 30 steps
    assert verdict["spikes"] == {}
    # the recorded gap carries the sign most per-step gaps have
    assert (verdict["gap_nats"] > 0) == (verdict["behind_share"] > 0.5)
    if "floor" in found:
        floor = floor_nats(found["floor"]["losses"], attempt["reference"])
        print(f"floor ({found['floor']['twin']}): {floor:.4f} nats")


@pytest.mark.parametrize("fault", ["no_grad_scaler", "drift"])
def test_gpu_broken_precision_is_rejected(fault: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_FAULT", fault)
    found = _trial(LLAMA_1B, "fp16")
    verdicts = [a["verdict"] for a in found["attempts"]]
    print(f"\nfp16 with {fault}: {verdicts[-1]['why']}")
    assert [v["passed"] for v in verdicts] == [False, False]
