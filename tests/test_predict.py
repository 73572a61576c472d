"""What a study knows will not run: rules learned from configuration failures, the OOM bound, the memory model."""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.config import parse_config
from autotune.search import predict, run_search
from autotune.search.history import History
from conftest import load_trials, tiny


def _trial(number: int, knobs: dict, status: str = "ok", peak: float | None = None, cause: dict | None = None,
           memory: float = 80.0) -> optuna.trial.FrozenTrial:
    attrs = {"knobs": knobs, "status": status, "reason": "r", "predicted": False}
    if status == "ok":
        attrs.update(metrics={"peak_mem_gib": peak}, fingerprint={"device": "cuda", "gpu_memory_gib": memory})
    if cause:
        attrs["cause"] = cause
    state = optuna.trial.TrialState.COMPLETE if status == "ok" else optuna.trial.TrialState.PRUNED
    t = optuna.trial.create_trial(value=1.0 if status == "ok" else None, state=state, user_attrs=attrs)
    t.number = number
    return t


def _history(*trials: optuna.trial.FrozenTrial) -> History:
    h = History()
    for t in trials:
        if t.user_attrs["status"] == "ok":
            h.completed.append(t)
        elif t.user_attrs["status"] == "oom":
            h.ooms.append(t)
        elif t.user_attrs.get("cause"):
            h.invalid.append(t)
    return h


def test_predict_rule_from_an_invalid_configuration() -> None:
    h = _history(_trial(3, {"attention": "cudnn", "precision": "tf32", "micro_batch_size": 8}, "invalid_config",
                        cause={"attention": "cudnn", "precision": "tf32"}))
    status, reason = predict.failure(h, {"attention": "cudnn", "precision": "tf32", "micro_batch_size": 64})
    assert status == "invalid_config" and reason.startswith("predicted: attention cudnn, precision tf32 cannot run here (trial 3")
    assert predict.failure(h, {"attention": "cudnn", "precision": "bf16", "micro_batch_size": 8}) is None


def test_predict_memory_model_from_measured_peaks() -> None:
    base = {"precision": "bf16", "compile": True, "grad_accum_steps": 1}
    h = _history(_trial(0, {**base, "micro_batch_size": 8}, peak=12.0), _trial(1, {**base, "micro_batch_size": 16}, peak=20.0))
    assert predict.failure(h, {**base, "micro_batch_size": 64}) is None  # 12 + 1/GiB per sequence: 68 GiB fits in 80
    status, reason = predict.failure(h, {**base, "micro_batch_size": 128})  # 132 GiB does not
    assert status == "oom" and "peak memory 132.0 GiB" in reason and "above the GPU's 80.0 GiB" in reason
    other = {**base, "compile": False, "micro_batch_size": 128}  # another configuration: nothing is known
    assert predict.failure(h, other) is None


def test_predict_one_failed_precision_is_not_launched_again(tmp_path: Path, monkeypatch) -> None:
    """tf32 cannot run on the CPU: the first tf32 trial fails and names the cause; the other tf32 points are
    recorded as predicted, never launched and not counted."""
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    cfg = parse_config(tiny(space={"micro_batch_size": [2, 4, 8], "precision": ["fp32", "tf32"]},
                            study={"trials": 6, "sampler": "grid"}))
    result = run_search(cfg, out_root=tmp_path, device="cpu")
    tf32 = [t for t in load_trials(tmp_path) if t.params.get("precision") == "tf32"]
    launched = [t for t in tf32 if not t.user_attrs["predicted"]]
    assert len(launched) == 1 and launched[0].user_attrs["cause"] == {"precision": "tf32"}
    predicted = [t for t in tf32 if t.user_attrs["predicted"]]
    assert len(predicted) == 2 and all(t.user_attrs["status"] == "invalid_config" for t in predicted)
    assert not any((tmp_path / "t" / "runs" / f"{t.number:04d}").exists() for t in predicted)
    assert result.history.launched == 4  # 3 fp32 and the one tf32 that taught the rule
