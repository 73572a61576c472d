"""Throughput, MFU and step-time statistics from a trial's raw samples (standard library only)."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

from autotune.documents.record import Metric

if TYPE_CHECKING:
    from autotune.protocol import TrialResult


def flops_per_token(flop_params: int, n_layers: int, d_model: int, seq_len: int) -> float:
    """Training FLOPs per token, 6N + 12*L*d*T (PaLM, Chowdhery et al. 2022, appendix B).

    N: parameters without position embeddings; 12*L*d*T: the attention score and value matmuls
    (forward and backward) at sequence length T. Same formula as nanoGPT's estimate_mfu.
    """
    return 6.0 * flop_params + 12.0 * n_layers * d_model * seq_len


def mfu(
    tokens_per_s_per_gpu: float, flops_per_tok: float, peak_flops: float | None
) -> float | None:
    """Model FLOPs utilisation in [0, 1]; None where the peak is unknown (CPU, unlisted GPU)."""
    if not peak_flops:
        return None
    return tokens_per_s_per_gpu * flops_per_tok / peak_flops


# The peak a record's MFU divided by, in TFLOP/s (MFU_PRECISION's dense rate of its GPU), stored
# beside it: a later change of the peak table does not change what an old figure meant.
MFU_PEAK_TFLOPS = "mfu_peak_tflops"


def mfu_peaks(
    value: float | None,
    stored_peak_tflops: float | None,
    device_name: str | None,
    precision: str | None,
) -> list[dict[str, Any]]:
    """Each peak an MFU figure is read against: first MFU_PRECISION's (the stored figure's; its
    TFLOP/s as stored, else the peak table's for the GPU, else None: unknown), then, for a
    precision whose matmuls run at another peak (hardware.MATMUL_PEAK: fp8), the same work against
    that peak (None where the table has no such rate: n/a, never the bf16 figure under its name).
    Each is {"precision", "tflops", "mfu"}; [] without an MFU figure (a CPU)."""
    from autotune.hardware import MATMUL_PEAK, MFU_PRECISION, peak_flops

    if value is None:
        return []
    table = peak_flops(device_name)
    tflops = stored_peak_tflops or (table / 1e12 if table else None)
    peaks = [{"precision": MFU_PRECISION, "tflops": tflops, "mfu": value}]
    other = MATMUL_PEAK.get(str(precision))
    if other is not None:
        at = peak_flops(device_name, other)
        peaks.append(
            {
                "precision": other,
                "tflops": at / 1e12 if at else None,
                "mfu": value * tflops * 1e12 / at if at and tflops else None,
            }
        )
    return peaks


def step_stats(samples: list[float]) -> dict[str, float]:
    """Median and spread of raw step times; spread_pct = (max - min) / median."""
    med = statistics.median(samples)
    q = (
        statistics.quantiles(samples, n=4, method="inclusive")
        if len(samples) > 1
        else [med, med, med]
    )
    return {
        "median_s": med,
        "mean_s": statistics.fmean(samples),
        "min_s": min(samples),
        "max_s": max(samples),
        "p25_s": q[0],
        "p75_s": q[2],
        "spread_pct": 100.0 * (max(samples) - min(samples)) / med,
        "n": len(samples),
    }


def impossible(step_times: list[float], tokens_per_step: float | None) -> str:
    """Why a trial's measured steps are no measurement (none, or a time or token count that is not
    a finite number above 0), or '': the figure divides by them (a step of 0 s made it infinite,
    issue 38), and no such figure is recorded as measured."""
    if not step_times:
        return "the trial measured no step"
    for x in step_times:
        number = isinstance(x, (int, float)) and not isinstance(x, bool)
        if not (number and math.isfinite(x) and x > 0):
            return f"a measured step took {x!r} s; allowed: a finite number of seconds above 0"
    if tokens_per_step is not None and not (math.isfinite(tokens_per_step) and tokens_per_step > 0):
        return f"the trial's tokens per step are {tokens_per_step!r}; allowed: above 0"
    return ""


def impossible_figure(m: dict[str, Any]) -> str:
    """Why a trial's figure (tokens/s, the task's own too) cannot be, or ''."""
    for key in (Metric.TOKENS_PER_GPU, Metric.TOKENS):
        value = m.get(key)
        if value is not None and not (math.isfinite(value) and value > 0):
            return f"the trial's {key} is {value!r}; allowed: a finite number above 0"
    return ""


def summarize(
    res: TrialResult, model: dict[str, Any] | None, world_size: int, peak_flops: float | None
) -> dict[str, Any]:
    """The metrics a trial reports, from its TrialResult (protocol.py): step times, tokens, FLOPs,
    memory."""
    stats = step_stats(res.step_times_s)
    assert res.tokens_per_step is not None  # a trial that measured steps counted their tokens
    per_gpu = res.tokens_per_step / stats["median_s"]
    dims = res.mfu_dims or model or {}
    fpt = res.flops_per_token  # counted in the trial (hf_config, entrypoint models)
    if (
        not fpt and res.flop_params
    ):  # the built-in model's formula; none of the two: MFU n/a, never guessed
        fpt = flops_per_token(res.flop_params, dims["n_layers"], dims["d_model"], dims["seq_len"])
    value = mfu(per_gpu, fpt, peak_flops) if fpt else None
    return {
        Metric.TOKENS_PER_GPU: per_gpu,
        Metric.TOKENS: per_gpu * world_size,
        Metric.MFU: value,
        MFU_PEAK_TFLOPS: peak_flops / 1e12 if value is not None and peak_flops else None,
        Metric.FLOPS_PER_TOKEN: fpt,
        Metric.STEP_TIME: stats,
        Metric.PEAK_MEM_GIB: res.peak_mem_bytes / 2**30 if res.peak_mem_bytes is not None else None,
        Metric.PEAK_MEM_KIND: res.peak_mem_kind,
        Metric.N_PARAMS: res.n_params,
    }


def generation(output: dict[str, Any], hbm_bytes_per_s: float | None) -> dict[str, Any]:
    """A generate trial's latency metrics (from its `output`) and the decode step's share of the
    memory- bandwidth roofline: bytes a step must read (weights as stored, norms, the KV cache of
    the positions it attends to) over the median step time, against the GPU's peak HBM bandwidth
    (None where unknown)."""
    tpot = output.get("tpot_ms_median")
    need = output.get("bytes_per_decode_step")
    achieved = need / (tpot / 1000) if tpot and need else None
    return {
        Metric.TTFT_MS: output.get("ttft_ms"),
        Metric.TPOT_MEDIAN_MS: tpot,
        Metric.TPOT_P99_MS: output.get("tpot_ms_p99"),
        "decode_tokens_per_s": output["batch_size"] / (tpot / 1000) if tpot else None,
        "bytes_per_decode_step": need,
        "decode_bytes_per_s": achieved,
        Metric.ROOFLINE: achieved / hbm_bytes_per_s if achieved and hbm_bytes_per_s else None,
    }


LIMIT_METRICS = {
    "p99_tpot_ms": ("tpot_ms_p99", "p99 time per output token"),
    "median_tpot_ms": ("tpot_ms_median", "median time per output token"),
    "ttft_ms": ("ttft_ms", "time to first token"),
}


def over_limits(m: dict[str, Any], limits: dict[str, float]) -> list[str]:
    """One line for each latency limit the metrics miss (empty: within all)."""
    over = []
    for name, limit in limits.items():
        key, what = LIMIT_METRICS[name]
        value = m.get(key)
        if value is not None and value > limit:
            over.append(
                f"{what} {value:.1f} ms > limit {limit:g} ms ({name}; "
                f"{100 * (value / limit - 1):.0f}% over)"
            )
    return over


NEAREST_S = 0.5  # a window shorter than the sampling interval takes the samples this close to it


def summarize_telemetry(
    samples: list[dict[str, Any]], window: tuple[float, float]
) -> dict[str, Any] | None:
    """Mean power, SM clock and temperature over the measured window, and the throttle reasons seen
    there.

    A measured window shorter than the sampling interval (0.2 s) may hold no sample: then the
    samples within NEAREST_S of it stand for it, and `in_window` says so (False)."""
    inside = [s for s in samples if window[0] <= s["t"] <= window[1]]
    in_window = bool(inside)
    if not inside:
        inside = [s for s in samples if window[0] - NEAREST_S <= s["t"] <= window[1] + NEAREST_S]
    if not inside:
        return None
    reasons = sorted({r for s in inside for r in s["throttle"]})
    limits = [s["power_limit_w"] for s in inside if s.get("power_limit_w")]
    return {
        "energy_j": window_energy_j(samples, window),
        "samples": len(inside),
        "in_window": in_window,
        "power_w_mean": statistics.fmean(s["power_w"] for s in inside),
        # NVML's enforced power limit (the highest seen in the window); None where unread
        "power_limit_w": max(limits) if limits else None,
        "sm_clock_mhz_mean": statistics.fmean(s["sm_clock_mhz"] for s in inside),
        "sm_clock_mhz_min": min(s["sm_clock_mhz"] for s in inside),
        "temperature_c_max": max(s["temperature_c"] for s in inside),
        "throttle_reasons": reasons,
        "series": inside,
    }


# NVML's clock-event reasons that hold the clocks below what the load asks for: the power cap, a
# hardware or thermal slowdown, clocks an administrator set. Not gpu_idle, sync_boost nor
# display_clock_setting, which say nothing of a limit.
POWER_REASONS = ("sw_power_cap", "hw_power_brake_slowdown")
CLOCK_REASONS = (
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "applications_clocks_setting",
)
# a mean power within this share of the enforced limit is at the cap: NVML's power reading averages
# over its own window, so a capped GPU reads a few watts either side of the limit
AT_LIMIT_PCT = 3.0


def power_cap(tele: dict[str, Any] | None) -> dict[str, Any] | None:
    """Whether a measured window ran at a power or clock limit (its telemetry's throttle reasons,
    POWER_REASONS and CLOCK_REASONS, or a mean power within AT_LIMIT_PCT of the enforced limit),
    and what to say of its figure (`said`); None where it did not, or without telemetry (a CPU)."""
    if not isinstance(tele, dict):
        return None
    seen = [r for r in tele.get("throttle_reasons") or [] if isinstance(r, str)]
    mean, limit = _number(tele.get("power_w_mean")), _number(tele.get("power_limit_w"))
    at_limit = bool(mean and limit and mean >= limit * (1 - AT_LIMIT_PCT / 100))
    power = [r for r in seen if r in POWER_REASONS]
    clocks = [r for r in seen if r in CLOCK_REASONS]
    if not (at_limit or power or clocks):
        return None
    watts = (
        f"{mean:,.0f} of {limit:,.0f} W"
        if mean and limit
        else f"{mean:,.0f} W, limit not recorded"
        if mean
        else "power not recorded"
    )
    nvml = f"; NVML: {', '.join([*power, *clocks])}" if power or clocks else ""
    if at_limit or power:
        said = (
            f"at the power cap ({watts}{nvml}) during its measured steps: the figure is the cap's"
        )
    else:
        clock = _number(tele.get("sm_clock_mhz_mean"))
        sm = f"; SM clock {clock:,.0f} MHz mean" if clock else ""
        said = (
            f"at a clock limit ({', '.join(clocks)} per NVML; {watts}{sm}) during its measured "
            "steps: the figure is the limit's"
        )
    return {
        "power_w_mean": mean,
        "power_limit_w": limit,
        "at_limit": at_limit,
        "reasons": [*power, *clocks],
        "said": said,
    }


def _number(value: object) -> float | None:
    """A finite number above 0 as a float, else None (a record another program wrote)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def window_energy_j(samples: list[dict[str, Any]], window: tuple[float, float]) -> float | None:
    """Joules the GPU drew in the window, from NVML's total-energy counter (millijoules)
    interpolated linearly at the window's start and end between the samples around each; None
    without a sample before the start and one after the end (or without the counter)."""
    points = [(s["t"], s["energy_mj"]) for s in samples if s.get("energy_mj") is not None]

    def at(t: float) -> float | None:
        before = [p for p in points if p[0] <= t]
        after = [p for p in points if p[0] >= t]
        if not before or not after:
            return None
        (t0, e0), (t1, e1) = before[-1], after[0]
        return float(e0 if t1 == t0 else e0 + (e1 - e0) * (t - t0) / (t1 - t0))

    start, end = at(window[0]), at(window[1])
    if start is None or end is None or end <= start:
        return None
    return (end - start) / 1000.0


# A baseline is unsteady when its measured steps spread past UNSTEADY_SPREAD_PCT, the spread being
# (p90 - p10) / median of its raw step times: the middle 80%, so one slow step does not flag it and
# a machine swinging between two speeds does. Every "x baseline" is then flagged: one baseline
# measured at 120% made every trial read "293x baseline" (issue 29).
UNSTEADY_SPREAD_PCT = 50.0
UNSTEADY_RULE = "(p90 - p10) / median of the baseline's measured step times"


def middle_spread_pct(step_times: list[float]) -> float | None:
    """(p90 - p10) / median of raw step times, in percent; None under 2 steps."""
    if len(step_times) < 2:
        return None
    deciles = statistics.quantiles(step_times, n=10, method="inclusive")
    return 100.0 * (deciles[-1] - deciles[0]) / statistics.median(step_times)


def steadiness(step_times: list[float]) -> dict[str, Any]:
    """Whether a baseline's steps are steady enough for ratios to it to mean much
    (UNSTEADY_SPREAD_PCT)."""
    spread = middle_spread_pct(step_times)
    return {
        "spread_pct": spread,
        "limit_pct": UNSTEADY_SPREAD_PCT,
        "rule": UNSTEADY_RULE,
        "unsteady": spread is not None and spread > UNSTEADY_SPREAD_PCT,
    }
