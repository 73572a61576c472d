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
    # 500,000 tokens/s x 855,166,464 FLOP/token = 427.58 TFLOP/s; over H200's 989.5 dense bf16 =
    # 43.21%.
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
    raw = TrialResult(
        "ok",
        step_times_s=[2.0, 1.0, 1.0],
        tokens_per_step=4096,
        flop_params=1000,
        n_params=1100,
        peak_mem_bytes=2**31,
        peak_mem_kind="cuda_max_memory_allocated",
    )
    model = {"n_layers": 2, "d_model": 8, "seq_len": 16}
    out = metrics.summarize(raw, model, world_size=2, peak_flops=1e12)
    assert out["tokens_per_s_per_gpu"] == 4096
    assert out["tokens_per_s"] == 8192
    assert out["mfu"] == pytest.approx(4096 * (6 * 1000 + 12 * 2 * 8 * 16) / 1e12)
    assert out["peak_mem_gib"] == 2.0


def test_metrics_telemetry_only_inside_window() -> None:
    samples = [
        {"t": t, "power_w": p, "sm_clock_mhz": c, "temperature_c": 50 + t, "throttle": r}
        for t, p, c, r in [
            (0, 100, 300, ["gpu_idle"]),
            (1, 600, 1980, []),
            (2, 650, 1900, ["sw_power_cap"]),
            (3, 100, 300, ["gpu_idle"]),
        ]
    ]
    tele = metrics.summarize_telemetry(samples, (0.5, 2.5))
    assert tele["power_w_mean"] == 625
    assert tele["sm_clock_mhz_min"] == 1900
    assert tele["throttle_reasons"] == ["sw_power_cap"] and tele["in_window"]
    assert metrics.summarize_telemetry(samples, (10, 11)) is None
    # shorter than the sampling interval: the nearest
    short = metrics.summarize_telemetry(samples, (1.4, 1.5))
    assert short["samples"] == 2 and not short["in_window"] and short["power_w_mean"] == 625


def test_metrics_energy_from_the_nvml_counter_interpolated_at_the_window() -> None:
    """NVML's total-energy counter (mJ) read with each sample: the window's joules are the counter's
    rise between its start and end, interpolated between the samples around them; n/a without the
    counter or without a sample on both sides."""
    samples = [
        {
            "t": t,
            "power_w": 500,
            "sm_clock_mhz": 1980,
            "temperature_c": 50,
            "throttle": [],
            "energy_mj": e,
        }
        for t, e in [(0.0, 1_000_000), (1.0, 1_500_000), (2.0, 2_100_000), (3.0, 2_700_000)]
    ]
    assert metrics.window_energy_j(samples, (0.5, 2.5)) == pytest.approx(
        (2_400_000 - 1_250_000) / 1000
    )
    assert metrics.summarize_telemetry(samples, (1.0, 2.0))["energy_j"] == pytest.approx(600.0)
    assert metrics.window_energy_j(samples, (2.5, 3.5)) is None  # no sample after the end
    assert metrics.window_energy_j([{**s, "energy_mj": None} for s in samples], (0.5, 2.5)) is None


def test_hardware_hbm_table_lookup() -> None:
    from autotune.hardware import hbm_bandwidth

    assert (
        hbm_bandwidth("NVIDIA H200") == 4.8e12 and hbm_bandwidth("NVIDIA H100 80GB HBM3") == 3.35e12
    )
    assert (
        hbm_bandwidth("NVIDIA A100-SXM4-40GB") == 1.555e12
        and hbm_bandwidth("NVIDIA A100-SXM4-80GB") == 2.039e12
    )
    assert (
        hbm_bandwidth("NVIDIA H100 PCIe") == 2.0e12
        and hbm_bandwidth(None) is None
        and hbm_bandwidth("cpu") is None
    )


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


def test_metrics_record_has_tokens_per_joule_when_the_counter_is_there(tmp_path) -> None:
    """A trial's record: tokens per joule of its GPU over the measured steps (2 x 1000 tokens in a
    window the counter says drew 400 J: 5 tokens/J), n/a without the counter (the CPU)."""
    from autotune.launch.runner import Bench, Outcome, record_of
    from autotune.protocol import RunSettings, TrialResult

    res = TrialResult(
        "ok",
        step_times_s=[0.5, 0.5],
        tokens_per_step=1000,
        measure_window=[1.0, 2.0],
        peak_mem_bytes=2**30,
        peak_mem_kind="cuda_max_memory_allocated",
        env={"device": "cuda"},
    )
    tele = [
        {
            "t": t,
            "power_w": 400,
            "sm_clock_mhz": 1980,
            "temperature_c": 50,
            "throttle": [],
            "energy_mj": 400_000 * t,
        }
        for t in (0.8, 1.2, 1.6, 2.2)
    ]
    bench = Bench(model={}, run=RunSettings(), device="cuda", timeout_s=60, home=tmp_path)
    record = record_of(0, {}, Outcome("ok", result=res, telemetry=tele), bench)
    assert record.telemetry["energy_j"] == pytest.approx(400.0)
    assert record.metric("tokens_per_joule") == pytest.approx(5.0)
    assert (
        record_of(0, {}, Outcome("ok", result=res, telemetry=[]), bench).metric("tokens_per_joule")
        is None
    )


def test_metrics_summarize_takes_counted_flops_over_the_formula() -> None:
    raw = TrialResult(
        "ok",
        step_times_s=[1.0],
        tokens_per_step=100,
        flop_params=1000,
        n_params=1100,
        flops_per_token=9000.0,
        peak_mem_bytes=0,
        peak_mem_kind="cpu_max_rss",
    )
    out = metrics.summarize(
        raw, {"n_layers": 2, "d_model": 8, "seq_len": 16}, world_size=1, peak_flops=1e6
    )
    assert out["flops_per_token"] == 9000.0
    assert out["mfu"] == pytest.approx(100 * 9000.0 / 1e6)
