"""The headline's figures say what they rest on (issue 49): a conditional knob is judged only on the
trials where it acts, every MFU figure names the peak it divides by (an fp8 trial's both), and a
power or clock cap its measured steps ran at is said. In-memory studies of recorded trials, no trial
run."""

from __future__ import annotations

import io
import json
from html import escape
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution
from rich.console import Console

from autotune import metrics, report
from autotune.hardware import PEAKS
from autotune.report import _card, _html
from autotune.report._text import effects_lines

DIST = {
    "micro_batch_size": CategoricalDistribution([2, 4]),
    "compile": CategoricalDistribution([False, True]),
    "compile_scope": CategoricalDistribution(["model", "block"]),
    "compile_dynamic": CategoricalDistribution(["static", "batch"]),
    "precision": CategoricalDistribution(["bf16", "fp8"]),
}
H200 = next(p for p in PEAKS if p.model == "H200 SXM").tflops
ON_H200 = {"device": "cuda", "gpu_model": "NVIDIA H200"}


def _trial(
    params: dict[str, Any], value: float, knobs: dict[str, Any] | None = None, **attrs: Any
) -> optuna.trial.FrozenTrial:
    """A completed trial as the search stores it: params as sampled, knobs as space.knobs records
    them (None where a knob cannot act), metrics, raw steps; attrs: fingerprint, telemetry, metrics
    to add."""
    extra = attrs.pop("metrics", {})
    user_attrs = {
        "status": "ok",
        "knobs": knobs or dict(params),
        "predicted": False,
        "wall_s": 10.0,
        "reason": "",
        "metrics": {
            "tokens_per_s_per_gpu": value,
            "tokens_per_s": value,
            "mfu": None,
            "peak_mem_gib": 1.0,
            **extra,
        },
        "raw": {"step_times_s": [1.0, 1.01, 0.99, 1.0]},
        **attrs,
    }
    return optuna.trial.create_trial(
        params=params,
        distributions={k: DIST[k] for k in params},
        value=value,
        user_attrs=user_attrs,
    )


def _study(trials: list[optuna.trial.FrozenTrial]) -> optuna.Study:
    """An in-memory study of these trials; the first is the baseline."""
    study = optuna.create_study(direction="maximize")
    study.add_trials(trials)
    study.set_user_attr("baseline_knobs", trials[0].user_attrs["knobs"])
    return study


def _compiled(mbs: int, scope: str, value: float) -> optuna.trial.FrozenTrial:
    params = {"micro_batch_size": mbs, "compile": True, "compile_scope": scope}
    return _trial({**params, "compile_dynamic": "static"}, value)


def _eager(mbs: int, value: float) -> optuna.trial.FrozenTrial:
    """compile off: the sampler still drew a scope and a dynamic mode; neither acts, so the record
    holds None for both (space.knobs)."""
    params = {"micro_batch_size": mbs, "compile": False, "compile_scope": "model"}
    params["compile_dynamic"] = "static"
    knobs = {**params, "compile_scope": None, "compile_dynamic": None}
    return _trial(params, value, knobs)


def _text(data: dict[str, Any]) -> dict[str, str]:
    """Every form the headline is drawn in: Markdown, terminal, the HTML card (JSON is `data`)."""
    console = Console(file=io.StringIO(), width=400)
    report.render_rich(data, console)
    return {
        "markdown": report.to_markdown(data),
        "terminal": console.file.getvalue(),  # type: ignore[attr-defined]
        "html": _card.card_html(data, _card.chosen(data)),
    }


def test_report_conditional_knob_is_judged_only_where_its_parent_is_on() -> None:
    # compile is worth +30%; among the compile-on trials the scope moves the figure 0.3%, inside
    # the 0.8% noise, and one dynamic mode ran: their "None" (compile off) is compile's effect,
    # which ranked both with compile's 23% (issue 49)
    study = _study(
        [
            _eager(2, 100.0),
            _eager(4, 100.3),
            _compiled(2, "model", 130.0),
            _compiled(4, "block", 130.4),
        ]
    )
    data = report.collect(study)
    eff = data.effects
    assert eff["ranked"] == ["compile"]
    scope = eff["knobs"]["compile_scope"]
    assert set(scope["values"]) == {"model", "block"} and scope["effect_pct"] < 0.5
    assert scope["among"] == {"knob": "compile", "when": "compile on", "trials": 2}
    dynamic = eff["knobs"]["compile_dynamic"]
    assert set(dynamic["values"]) == {"static"} and dynamic["effect_pct"] is None
    # compile's own pairs: on and off differ in the knobs only compile on has, not in those alone
    compile_off = eff["knobs"]["compile"]["values"]["False"]
    assert eff["knobs"]["compile"]["basis"] == "paired" and compile_off["pairs"] == 2
    assert eff["knobs"]["micro_batch_size"]["among"] is None
    forms = {**_text(data), "html": _html._effects_html(data)}  # the page's knob section
    for text in forms.values():
        assert (
            "compile_scope (effect 0.3%, best at each value, among the 2 trials with compile on)"
            in text
        )
        assert "compile_dynamic (one value ran, among the 2 trials with compile on)" in text
    assert not any("None:" in line for line in effects_lines(data))  # no level "None"


def test_report_mfu_names_the_bf16_peak_it_divides_by() -> None:
    base = {"micro_batch_size": 2, "precision": "bf16"}
    study = _study(
        [
            _trial(base, 100.0, metrics={"mfu": 0.3}, fingerprint=ON_H200),
            _trial(
                {**base, "micro_batch_size": 4}, 140.0, metrics={"mfu": 0.42}, fingerprint=ON_H200
            ),
        ]
    )
    data = report.collect(study)
    peak = f"{H200['bf16']:,.1f}"  # 989.5, the dense rate
    assert data.chosen["mfu_peaks"] == [{"precision": "bf16", "tflops": H200["bf16"], "mfu": 0.42}]
    forms = _text(data)
    for form in ("markdown", "terminal"):
        assert f"MFU 42.0% of the bf16 dense peak, {peak} TFLOP/s" in forms[form]
    assert f"MFU: <b>42.0%</b> of the bf16 dense peak, {peak} TFLOP/s." in forms["html"]
    assert "| MFU (bf16 peak) |" in forms["markdown"]  # the table's header names it too
    row = json.loads(report.to_json(data))["trials"][0]
    assert row["mfu_peaks"] == [{"precision": "bf16", "tflops": H200["bf16"], "mfu": 0.42}]


def test_report_mfu_of_an_fp8_trial_names_both_peaks() -> None:
    base = {"micro_batch_size": 2, "precision": "bf16"}
    fp8 = {**base, "precision": "fp8"}
    study = _study(
        [
            _trial(base, 100.0, metrics={"mfu": 0.4}, fingerprint=ON_H200),
            _trial(fp8, 172.5, metrics={"mfu": 0.69}, fingerprint=ON_H200),
        ]
    )
    data = report.collect(study)
    against_fp8 = 0.69 * H200["bf16"] / H200["fp8"]
    bf16, fp8_peak = data.chosen["mfu_peaks"]
    assert bf16 == {"precision": "bf16", "tflops": H200["bf16"], "mfu": 0.69}
    assert fp8_peak["precision"] == "fp8" and fp8_peak["tflops"] == H200["fp8"]
    assert abs(fp8_peak["mfu"] - against_fp8) < 1e-12
    both = f"69.0% of bf16's 989.5 TFLOP/s, {100 * against_fp8:.1f}% of fp8's 1,979"
    forms = _text(data)
    assert f"MFU {both}" in forms["markdown"] and f"MFU {both}" in forms["terminal"]
    assert f"<b>{100 * against_fp8:.1f}%</b> of fp8's 1,979" in forms["html"]
    assert f"69.0% (fp8 {100 * against_fp8:.1f}%)" in forms["markdown"]  # the table's cell
    bf16_row = next(r for r in data.trials if r.knobs["precision"] == "bf16")
    assert len(bf16_row.mfu_peaks) == 1  # a bf16 trial: one peak


def test_report_mfu_names_the_peak_its_record_stored() -> None:
    # a record names the peak it divided by: a later table does not change what the figure meant
    study = _study(
        [
            _trial({"micro_batch_size": 2}, 100.0, metrics={"mfu": 0.5, "mfu_peak_tflops": 900.0}),
        ]
    )
    assert "MFU 50.0% of the bf16 dense peak, 900 TFLOP/s" in report.to_markdown(
        report.collect(study)
    )


def test_metrics_summarize_stores_the_peak_beside_mfu() -> None:
    from autotune.protocol import TrialResult

    raw = TrialResult(
        "ok", step_times_s=[1.0], tokens_per_step=100, flops_per_token=9000.0, peak_mem_bytes=0
    )
    out = metrics.summarize(raw, None, world_size=1, peak_flops=989.5e12)
    assert out["mfu_peak_tflops"] == 989.5 and out["mfu"] == 100 * 9000.0 / 989.5e12
    assert metrics.summarize(raw, None, world_size=1, peak_flops=None)["mfu_peak_tflops"] is None


TELEMETRY = {
    "samples": 40,
    "in_window": True,
    "power_w_mean": 698.0,
    "power_limit_w": 700.0,
    "sm_clock_mhz_mean": 1710.0,
    "sm_clock_mhz_min": 1650,
    "temperature_c_max": 71,
    "throttle_reasons": ["sw_power_cap"],
    "series": [],
}


def _capped(telemetry: dict[str, Any] | None) -> dict[str, Any]:
    base = {"micro_batch_size": 2}
    extra = {"telemetry": telemetry} if telemetry is not None else {}
    study = _study(
        [
            _trial(base, 100.0, fingerprint=ON_H200),
            _trial({"micro_batch_size": 4}, 140.0, fingerprint=ON_H200, **extra),
        ]
    )
    return report.collect(study)


def test_report_says_the_power_cap_its_measured_steps_ran_at() -> None:
    data = _capped(TELEMETRY)
    said = (
        "At the power cap (698 of 700 W; NVML: sw_power_cap) during its measured steps: the "
        "figure is the cap's."
    )
    for form, text in _text(data).items():
        assert (escape(said) if form == "html" else said) in text
    assert data.chosen["power_cap"]["reasons"] == ["sw_power_cap"]
    assert data.best_telemetry["power_cap"]["at_limit"]
    # at the limit with no reason recorded (NVML's own flags missed it): still the cap's figure
    at_limit = _capped({**TELEMETRY, "power_w_mean": 695.0, "throttle_reasons": []})
    assert "At the power cap (695 of 700 W) during its measured steps" in report.to_markdown(
        at_limit
    )
    # a thermal slowdown well under the power limit: a clock limit
    hot = _capped({**TELEMETRY, "power_w_mean": 450.0, "throttle_reasons": ["hw_thermal_slowdown"]})
    assert (
        "At a clock limit (hw_thermal_slowdown per NVML; 450 of 700 W; SM clock 1,710 MHz mean)"
        in report.to_markdown(hot)
    )


def test_report_says_no_cap_without_one_or_without_telemetry() -> None:
    free = _capped({**TELEMETRY, "power_w_mean": 520.0, "throttle_reasons": ["gpu_idle"]})
    for data in (free, _capped(None)):
        assert data.chosen["power_cap"] is None
        for text in _text(data).values():
            assert "power cap" not in text and "clock limit" not in text


def test_metrics_telemetry_records_the_enforced_power_limit() -> None:
    samples = [
        {
            "t": t,
            "power_w": 699.0,
            "sm_clock_mhz": 1700,
            "temperature_c": 60,
            "throttle": ["sw_power_cap"],
            "power_limit_w": 700.0,
        }
        for t in (1.0, 1.5, 2.0)
    ]
    tele = metrics.summarize_telemetry(samples, (0.9, 2.1))
    assert tele is not None and tele["power_limit_w"] == 700.0
    assert metrics.power_cap(tele)["said"].startswith("at the power cap (699 of 700 W;")
    old = [{k: v for k, v in s.items() if k != "power_limit_w"} for s in samples]  # before issue 49
    assert metrics.summarize_telemetry(old, (0.9, 2.1))["power_limit_w"] is None
