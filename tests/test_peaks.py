"""Memory learned from measurement (study/peaks.py): the measured peaks of each setting as a line
in tokens per micro-batch, one point plus the smallest slope, an out-of-memory trial that rules out
no size below it, a peak no GPU can have refused, and the allocator's expandable segments offered to
a variable-length job."""

from __future__ import annotations

import optuna
import pytest

from autotune import tasks
from autotune.study import peaks, predict
from autotune.study.history import History

COMMAND = tasks.task("command")


def _trial(
    number: int,
    knobs: dict,
    peak: float | None = None,
    status: str = "ok",
    tokens: float | None = None,
    median: float | None = None,
) -> optuna.trial.FrozenTrial:
    attrs: dict = {"knobs": knobs, "status": status, "reason": "r", "predicted": False}
    metrics = {"peak_mem_gib": peak, "tokens_per_micro_batch": tokens}
    metrics["tokens_per_step_median"] = median
    attrs.update(metrics=metrics, fingerprint={"device": "cuda", "gpu_memory_gib": 80.0})
    state = optuna.trial.TrialState.COMPLETE if status == "ok" else optuna.trial.TrialState.PRUNED
    t = optuna.trial.create_trial(
        value=1.0 if status == "ok" else None, state=state, user_attrs=attrs
    )
    t.number = number
    return t


def _history(*trials: optuna.trial.FrozenTrial) -> History:
    h = History()
    for t in trials:
        (h.completed if t.user_attrs["status"] == "ok" else h.ooms).append(t)
    return h


BF16 = {"precision": "bf16", "optim": "fused"}
FP32 = {"precision": "fp32", "optim": "fused"}


def test_peaks_a_line_in_tokens_per_micro_batch_predicts_a_size_that_cannot_fit() -> None:
    # 10 GiB fixed, 1 GiB per 2,048 tokens; sequences of 1,024 tokens (the longest micro-batch)
    h = _history(
        _trial(0, {**BF16, "micro_batch_size": 8}, 14.0, tokens=8192),
        _trial(1, {**BF16, "micro_batch_size": 16}, 18.0, tokens=16384),
    )
    seen = peaks.forecast(h, {**BF16, "micro_batch_size": 128}, COMMAND)
    assert seen is not None and seen.peak_gib == pytest.approx(74.0) and not seen.over
    status, reason = predict.failure(h, {**BF16, "micro_batch_size": 256}, COMMAND)
    assert (
        status == "oom" and "peak memory 138.0 GiB (a line in tokens through trials 0, 1)" in reason
    )


def test_peaks_one_point_takes_the_smallest_slope_measured() -> None:
    h = _history(
        _trial(0, {**BF16, "micro_batch_size": 8}, 14.0, tokens=8192),
        _trial(1, {**BF16, "micro_batch_size": 16}, 18.0, tokens=16384),
        _trial(2, {**FP32, "micro_batch_size": 8}, 40.0, tokens=8192),
    )
    seen = peaks.forecast(h, {**FP32, "micro_batch_size": 128}, COMMAND)
    assert seen is not None and seen.over  # 40 + 60 GiB at least
    assert seen.how.startswith("trial 2's peak plus the smallest slope measured (trials 0, 1)")
    assert peaks.forecast(h, {**FP32, "micro_batch_size": 4}, COMMAND) is None  # below its point


def test_peaks_an_oom_never_rules_out_the_sizes_below_it() -> None:
    """Issue 61: an out-of-memory trial at 32 bounds 32 and larger, never 8 or 16, which no
    measured peak says cannot fit: with another kernel (none ran there), the best point is 8."""
    h = _history(
        _trial(0, {**BF16, "micro_batch_size": 4}),
        _trial(1, {**BF16, "micro_batch_size": 32}, status="oom"),
        _trial(2, {**BF16, "optim": "other", "micro_batch_size": 32}, status="oom"),
    )
    for optim in ("fused", "other"):
        for size in (8, 16):
            assert (
                predict.failure(h, {**BF16, "optim": optim, "micro_batch_size": size}, COMMAND)
                is None
            )
        status, reason = predict.failure(
            h, {**BF16, "optim": optim, "micro_batch_size": 64}, COMMAND
        )
        assert status == "oom" and "micro_batch_size 32 ran out of memory" in reason


def test_peaks_a_peak_no_gpu_can_have_is_refused() -> None:
    """A peak above the card's 80 GiB, or not above zero, is a broken reading: no point, no line."""
    assert peaks.possible(80.0, 80.0) and peaks.possible(0.5, None)
    assert not peaks.possible(81.0, 80.0) and not peaks.possible(-2.0, 80.0)
    assert not peaks.possible(0.0, 80.0) and not peaks.possible(float("nan"), None)
    for bad in (500.0, -3.0):
        assert peaks.point_of(_trial(1, {**BF16, "micro_batch_size": 16}, bad), COMMAND) is None
    h = _history(
        _trial(0, {**BF16, "micro_batch_size": 8}, 14.0, tokens=8192),
        _trial(1, {**BF16, "micro_batch_size": 16}, 500.0, tokens=16384),
    )
    # a line through 14 and 500 GiB would say 32 cannot fit; one point says nothing
    assert peaks.forecast(h, {**BF16, "micro_batch_size": 32}, COMMAND) is None
    assert predict.failure(h, {**BF16, "micro_batch_size": 32}, COMMAND) is None


def test_peaks_expandable_segments_offered_to_a_variable_length_job_that_ran_out() -> None:
    varied = _trial(0, {**BF16, "micro_batch_size": 8}, tokens=16384, median=4096.0)
    oom = _trial(1, {**BF16, "micro_batch_size": 16}, status="oom")
    offer = peaks.alloc_offer(_history(varied, oom), COMMAND)
    assert offer is not None and "the longest 4.0x the median" in offer
    assert peaks.alloc_offer(_history(varied), COMMAND) is None  # far from running out
    packed = _trial(0, {**BF16, "micro_batch_size": 8}, tokens=8192, median=8192.0)
    assert peaks.alloc_offer(_history(packed, oom), COMMAND) is None
    tried = _trial(2, {**BF16, "micro_batch_size": 8, "cuda_alloc_conf": peaks.EXPANDABLE})
    assert peaks.alloc_offer(_history(varied, oom, tried), COMMAND) is None


def _knobs(size: int, **other: str) -> dict:
    base = {"micro_batch_size": size, "precision": "bf16", "attention": "auto"}
    return {**base, "optim": "fused", "sampling": "grouped", **other}


def test_peaks_a_knob_measured_to_leave_the_peak_shares_an_oom() -> None:
    """Issue 61's H100 run: tf32 and eager ran out at micro-batch 4 with fused AdamW; the two AdamWs
    had measured the same peak at 8 (55.13 GiB), and the orders the same at 4 with AdamW apart
    (a pair that differs in a neutral knob and a new one teaches the new one): the sampler's tf32
    and eager at 8 with the other AdamW or order are predicted, not launched (they ran out)."""
    h = _history(
        _trial(1, _knobs(8), peak=55.13),
        _trial(3, _knobs(4, precision="tf32"), status="oom"),
        _trial(6, _knobs(4, attention="eager"), status="oom"),
        _trial(7, _knobs(4, optim="foreach"), peak=29.94),
        _trial(8, _knobs(4, sampling="random"), peak=29.96),
        _trial(12, _knobs(8, optim="foreach"), peak=55.13),
    )
    assert peaks.neutral(h, COMMAND) == {"optim", "sampling"}
    for knobs in (
        _knobs(8, precision="tf32", optim="foreach"),
        _knobs(8, attention="eager", optim="foreach"),
        _knobs(32, attention="eager", optim="foreach", sampling="random"),
    ):
        status, reason = predict.failure(h, knobs, COMMAND) or (None, "")
        assert status == "oom", knobs
        assert "optim foreach needs what its fused does (the same peak was measured" in reason
    # a knob measured to change the peak is not neutral; nor is one never measured apart
    h = _history(
        _trial(1, _knobs(8), peak=55.13),
        _trial(2, _knobs(8, optim="foreach"), peak=61.0),
        _trial(3, _knobs(4, precision="tf32"), status="oom"),
    )
    assert peaks.neutral(h, COMMAND) == frozenset()
    assert predict.failure(h, _knobs(8, precision="tf32", optim="foreach"), COMMAND) is None


def test_peaks_your_own_attn_implementation_shares_an_oom_as_attention() -> None:
    """Issue 61: the HF Trainer's attention is a knob of your own (attn_implementation); eager where
    sdpa ran out needs no less (knobs.AS_CATALOGUE: attention's eager over auto), the other way
    round or flash_attention_2 says nothing, and a value of no known kernel is not compared."""
    sdpa = {"micro_batch_size": 16, "precision": "bf16", "attn_implementation": "sdpa"}
    h = _history(_trial(0, sdpa, status="oom"))
    status, reason = predict.failure(h, {**sdpa, "attn_implementation": "eager"}, COMMAND) or (
        "",
        "",
    )
    assert status == "oom" and "attn_implementation eager needs no less than its sdpa" in reason
    for other in ("flash_attention_2", "flex_attention"):
        assert predict.failure(h, {**sdpa, "attn_implementation": other}, COMMAND) is None
    eager = _history(_trial(0, {**sdpa, "attn_implementation": "eager"}, status="oom"))
    assert predict.failure(eager, sdpa, COMMAND) is None
