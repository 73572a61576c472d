"""MFU and step statistics against hand computations."""

from __future__ import annotations

import pytest

from autotune import metrics
from autotune.hardware import find_peak, peak_flops
from autotune.protocol import TrialResult


def test_metrics_flops_per_token_gpt2_small_by_hand() -> None:
    # GPT-2 small: N without position embeddings = 124,439,808 - 1024*768 = 123,653,376 (tied head).
    n = 124_439_808 - 1024 * 768
    by_hand = 6 * 123_653_376 + 12 * 12 * 768 * 1024  # = 741,920,256 + 113,246,208
    assert by_hand == 855_166_464
    assert metrics.flops_per_token(n, 12, 768, 1024) == by_hand


def test_metrics_mfu_by_hand() -> None:
    # 500,000 tokens/s x 855,166,464 FLOP/token = 427.58 TFLOP/s; over H200's 989.5 dense bf16 = 43.21%.
    value = metrics.mfu(500_000, 855_166_464, peak_flops("NVIDIA H200"))
    assert value == pytest.approx(427.583232e12 / 989.5e12)
    assert round(100 * value, 2) == 43.21
    assert metrics.mfu(500_000, 855_166_464, None) is None  # CPU / unknown GPU: n/a


def test_metrics_step_stats_median_and_spread() -> None:
    s = metrics.step_stats([1.0, 1.2, 0.9, 1.1, 5.0])
    assert s["median_s"] == 1.1
    assert s["spread_pct"] == pytest.approx(100 * (5.0 - 0.9) / 1.1)
    assert s["n"] == 5


def test_metrics_summarize_tokens_per_second() -> None:
    raw = TrialResult("ok", step_times_s=[2.0, 1.0, 1.0], tokens_per_step=4096, flop_params=1000, n_params=1100,
                      peak_mem_bytes=2**31, peak_mem_kind="cuda_max_memory_allocated")
    model = {"n_layers": 2, "d_model": 8, "seq_len": 16}
    out = metrics.summarize(raw, model, world_size=2, peak_flops=1e12)
    assert out["tokens_per_s_per_gpu"] == 4096
    assert out["tokens_per_s"] == 8192
    assert out["mfu"] == pytest.approx(4096 * (6 * 1000 + 12 * 2 * 8 * 16) / 1e12)
    assert out["peak_mem_gib"] == 2.0


def test_metrics_telemetry_only_inside_window() -> None:
    samples = [{"t": t, "power_w": p, "sm_clock_mhz": c, "temperature_c": 50 + t, "throttle": r}
               for t, p, c, r in [(0, 100, 300, ["gpu_idle"]), (1, 600, 1980, []), (2, 650, 1900, ["sw_power_cap"]),
                                  (3, 100, 300, ["gpu_idle"])]]
    tele = metrics.summarize_telemetry(samples, (0.5, 2.5))
    assert tele["power_w_mean"] == 625
    assert tele["sm_clock_mhz_min"] == 1900
    assert tele["throttle_reasons"] == ["sw_power_cap"] and tele["in_window"]
    assert metrics.summarize_telemetry(samples, (10, 11)) is None
    short = metrics.summarize_telemetry(samples, (1.4, 1.5))  # shorter than the sampling interval: the nearest
    assert short["samples"] == 2 and not short["in_window"] and short["power_w_mean"] == 625


def test_hardware_peak_table_lookup() -> None:
    assert find_peak("NVIDIA H200").model == "H200 SXM"
    assert find_peak("NVIDIA H200 NVL").model == "H200 NVL"
    assert find_peak("NVIDIA H100 80GB HBM3").model == "H100 SXM"
    assert find_peak("NVIDIA H100 PCIe").model == "H100 PCIe"
    assert find_peak("NVIDIA A100-SXM4-80GB").model == "A100"
    assert find_peak("NVIDIA L40S").model == "L40S"
    assert find_peak("NVIDIA B200").model == "B200"
    assert find_peak("NVIDIA GeForce RTX 4090") is None
    assert peak_flops(None) is None
