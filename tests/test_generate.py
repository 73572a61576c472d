"""task: generate on the CPU with real torch on tiny llama/gpt models: the KV cache against a full
recompute, the trial's latency numbers, the drift guard (a broken quantizer must be caught), the
latency limits, a search end to end, and bad input."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from conftest import cli_here

from autotune import metrics
from autotune.errors import ConfigError
from autotune.job import load_config
from autotune.protocol import RunSettings, TrialSpec
from autotune.workloads import trial
from autotune.workloads.decoder import Decoder, full_logits
from autotune.workloads.model import Transformer

ROOT = Path(__file__).resolve().parents[1]
MODEL = {
    "family": "llama",
    "n_layers": 2,
    "d_model": 64,
    "n_heads": 4,
    "n_kv_heads": 2,
    "kv_heads": 2,
    "vocab_size": 256,
    "seq_len": 48,
    "ffn_hidden": 128,
    "tie_embeddings": False,
    "rope_theta": 500000.0,
}
GEN = yaml.safe_load((ROOT / "search_spaces/tiny-generate.yaml").read_text())
has_torchao = pytest.mark.skipif(
    __import__("importlib").util.find_spec("torchao") is None, reason="needs torchao"
)


def _spec(**knobs: Any) -> TrialSpec:
    return TrialSpec(
        task="generate",
        device="cpu",
        knobs={"precision": "fp32", **knobs},
        model=MODEL,
        run=RunSettings(warmup_steps=1, measure_steps=2, prompt_len=12, gen_len=5),
        params={"drift": {"max_layer_error": 0.3}},
    )


@pytest.mark.parametrize("family", ["llama", "gpt"])
@pytest.mark.parametrize("static", [True, False])
@pytest.mark.parametrize("eager", [False, True])
def test_generate_cached_decoding_matches_full_recompute(
    family: str, static: bool, eager: bool
) -> None:
    """Greedy tokens from the KV-cache decoder equal those of recomputing the whole sequence each
    step."""
    torch.manual_seed(0)
    m = {
        **MODEL,
        "family": family,
        "attention": "eager" if eager else "auto",
        "padded_vocab": 256,
        "checkpoint_every": 0,
        **({"n_kv_heads": None, "kv_heads": 4} if family == "gpt" else {}),
    }
    model = Transformer(m).eval()
    prompts = torch.randint(0, 256, (2, 10))
    dec = Decoder(torch, model, 2, 16, torch.float32, static, eager)
    with torch.no_grad():
        logits, caches = dec.forward(prompts, torch.arange(10))
        got = [logits.argmax(-1)]
        for i in range(5):
            logits, caches = dec.forward(got[-1], torch.arange(10 + i, 11 + i), caches)
            got.append(logits.argmax(-1))
        seq, want = prompts, []
        for _ in range(6):
            nxt = full_logits(torch, model, seq, 1).argmax(-1)
            want.append(nxt)
            seq = torch.cat([seq, nxt], dim=1)
    assert torch.equal(torch.cat(got, 1), torch.cat(want, 1))


def test_generate_trial_reports_latency_per_token() -> None:
    result = trial.run(_spec(batch_size=3))
    out = result.output
    assert result.status == "ok" and result.tokens_per_step == 3 * 5
    # gen_len - 1 decode steps a generation
    assert len(result.step_times_s) == 2 and out["decode_steps"] == 2 * 4
    assert len(out["ttft_ms_samples"]) == 2 and out["ttft_ms"] > 0
    assert (
        min(out["tpot_ms_samples"])
        <= out["tpot_ms_median"]
        <= out["tpot_ms_p99"]
        <= max(out["tpot_ms_samples"])
    )
    assert (
        out["bytes_per_decode_step"] > 0 and result.applied["kv_cache"] == "static (17 positions)"
    )


@pytest.mark.slow
def test_generate_compiled_dynamic_cache_and_graphs_need_static() -> None:
    result = trial.run(_spec(compile=True, kv_cache="dynamic"))
    assert result.status == "ok" and result.applied["compile_mode"] == "default"
    err = trial.classify(
        _raises(lambda: trial.run(_spec(compile="reduce-overhead", kv_cache="dynamic"))), 1, {}
    )
    assert err.status == "invalid_config" and "needs kv_cache static" in err.reason


def _raises(fn: Any) -> Exception:
    try:
        fn()
    except Exception as err:  # noqa: BLE001 - the test classifies it
        return err
    raise AssertionError("no exception")


@has_torchao
def test_generate_drift_guard_passes_int8_and_catches_a_broken_quantizer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    good = trial.run(_spec(weight_quant="int8_weight_only"))
    d = good.applied["drift"]
    assert good.status == "ok" and d["layer_error_max"] < 0.05 and d["layers"] == 2 * 4 + 1
    assert d["greedy_agreement"] > 0.5 and d["kl_nats"] < 0.01
    monkeypatch.setenv("AUTOTUNE_FAULT", "drift")
    bad = trial.classify(
        _raises(lambda: trial.run(_spec(weight_quant="int8_weight_only"))),
        1,
        {"weight_quant": "int8_weight_only", "int4_group_size": None},
    )
    assert bad.status == "invalid_config" and bad.reason.startswith(
        "outputs drift: int8_weight_only"
    )
    assert "per-layer output error" in bad.reason and bad.cause == {
        "weight_quant": "int8_weight_only",
        "int4_group_size": None,
    }


@has_torchao
def test_generate_quantized_layers_that_cannot_run_the_prompt_are_an_invalid_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kernel that fails on the prompt's rows (gemlite 0.5.1's GEMM in bf16 on an H200: a Triton
    CompilationError) ends invalid_config with the library's reason, not a crash without a
    result."""
    from autotune.workloads import generate

    def fails(*args: Any) -> Any:
        raise RuntimeError(
            "at 140:14:\nAssertionError: Both operands must be same dtype. Got bf16 and fp16"
        )

    monkeypatch.setattr(generate, "layer_errors", fails)
    knobs = {"weight_quant": "int8_weight_only", "int4_kernel": None, "precision": "fp32"}
    err = trial.classify(
        _raises(lambda: trial.run(_spec(weight_quant="int8_weight_only"))), 1, knobs
    )
    assert err.status == "invalid_config" and err.cause == knobs
    assert err.reason.startswith("weight_quant int8_weight_only: the quantized layers fail on a")
    assert err.reason.endswith(
        "RuntimeError: AssertionError: Both operands must be same dtype. Got bf16 and fp16"
    )


@has_torchao
def test_generate_gemlite_versions_that_cannot_quantize_together_are_named() -> None:
    from autotune.workloads.quant import gemlite_mismatch

    reason = gemlite_mismatch("0.6.0.post2", "0.18.0")
    assert (
        reason and "gemlite 0.6.0.post2 returns four tensors" in reason and "gemlite<0.6" in reason
    )
    assert gemlite_mismatch("0.5.1.post1", "0.18.0") is None
    assert gemlite_mismatch("0.6.0", "0.19.0+cu130") is None


def test_generate_gemlite_int4_off_the_gpu_is_an_invalid_config() -> None:
    err = trial.classify(
        _raises(
            lambda: trial.run(
                _spec(weight_quant="int4_weight_only", int4_kernel="gemlite", int4_group_size=128)
            )
        ),
        1,
        {"int4_kernel": "gemlite"},
    )
    assert (
        err.status == "invalid_config"
        and "int4_kernel gemlite runs Triton kernels on NVIDIA GPUs only" in err.reason
    )


def test_generate_latency_limits_and_roofline_arithmetic() -> None:
    m = metrics.generation(
        {
            "batch_size": 4,
            "tpot_ms_median": 10.0,
            "tpot_ms_p99": 40.0,
            "ttft_ms": 300.0,
            "bytes_per_decode_step": 24e9,
        },
        4.8e12,
    )
    assert m["decode_tokens_per_s"] == pytest.approx(400.0) and m[
        "decode_bytes_per_s"
    ] == pytest.approx(2.4e12)
    assert m["roofline_share"] == pytest.approx(0.5)
    assert (
        metrics.generation(
            {"batch_size": 1, "tpot_ms_median": 5.0, "bytes_per_decode_step": 1}, None
        )["roofline_share"]
        is None
    )
    over = metrics.over_limits(m, {"p99_tpot_ms": 30, "ttft_ms": 500})
    assert over == ["p99 time per output token 40.0 ms > limit 30 ms (p99_tpot_ms; 33% over)"]
    assert metrics.over_limits(m, {"median_tpot_ms": 10.0}) == []


@pytest.mark.slow
def test_generate_search_end_to_end_with_limits(tmp_path: Path) -> None:
    """A tiny generate search: every trial over a 1 microsecond limit is over_limit with its numbers
    (PRUNED for Optuna, never chosen); with a reachable limit the search writes best.yaml and the
    report's columns (one trial: its front needs one), and check records and compares time per
    output token."""
    data = copy.deepcopy(GEN)
    data["space"] = {"batch_size": [1, 4], "kv_cache": ["static", "dynamic"]}
    data["baseline"] = {"batch_size": 1, "kv_cache": "static"}
    data["study"].update(trials=2, confirm_top=0, limits={"p99_tpot_ms": 0.001})
    (tmp_path / "gen.yaml").write_text(yaml.safe_dump(data))
    run = cli_here("search", "gen.yaml", "--out", "out", cwd=tmp_path)
    import optuna

    study = optuna.load_study(
        study_name="tiny-generate", storage=f"sqlite:///{tmp_path}/out/tiny-generate/study.db"
    )
    launched = [
        t for t in study.trials if not t.user_attrs.get("predicted") and "metrics" in t.user_attrs
    ]
    assert launched and all(t.user_attrs["status"] == "over_limit" for t in launched)
    assert all(t.state == optuna.trial.TrialState.PRUNED for t in launched)
    assert all("p99 time per output token" in t.user_attrs["reason"] for t in launched)
    assert not (tmp_path / "out/tiny-generate/best.yaml").exists()

    data["study"].update(trials=1, limits={"p99_tpot_ms": 60000})
    data["name"] = "gen-ok"
    (tmp_path / "gen.yaml").write_text(yaml.safe_dump(data))
    run = cli_here("search", "gen.yaml", "--out", "out", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    best = yaml.safe_load((tmp_path / "out/gen-ok/best.yaml").read_text())
    assert (
        best["workload"]["task"] == "generate"
        and best["workload"]["gen_len"] == data["workload"]["gen_len"]
    )
    assert any("KV cache" in note for note in best["apply"]["notes"])
    report = cli_here("report", "out/gen-ok", "--format", "markdown", cwd=tmp_path)
    assert report.returncode == 0 and "TPOT p99 ms" in report.stdout and "roofline" in report.stdout
    assert "Front, tokens/s against p99 time per output token" in report.stdout
    # any spread, the load unjudged: this shared CPU's processes are what they are (issue 62)
    unjudged = ("--tolerance", "100", "--max-load", "0")
    check = cli_here(
        "check",
        "out/gen-ok/best.yaml",
        "--repeats",
        "2",
        "--reset-baseline",
        *unjudged,
        cwd=tmp_path,
    )
    assert check.returncode == 0 and "baseline recorded" in check.stdout, (
        check.stdout + check.stderr
    )
    recorded = yaml.safe_load((tmp_path / "out/gen-ok/best.yaml").read_text())["check_baseline"]
    assert len(recorded["tpot_ms_samples"]) == 2 and best["metrics"]["tpot_ms_median"] > 0
    check = cli_here(
        "check",
        "out/gen-ok/best.yaml",
        "--repeats",
        "2",
        "--max-repeats",
        "2",
        "--tolerance",
        "99",
        *unjudged[2:],
        cwd=tmp_path,
    )
    # a pass, or inconclusive where this shared CPU scatters the repeats (the gate's own tests
    # settle pass and regression on real speeds, and the repeats added while inconclusive:
    # --max-repeats 2 keeps this one at two processes): never a regression of the same job
    assert check.returncode in (0, 5), check.stdout + check.stderr
    assert "time per output token" in check.stdout and "vs baseline" in check.stdout


@pytest.mark.parametrize(
    "change, pattern",
    [
        (lambda d: d["workload"].update(prompt_len=0), r"workload\.prompt_len"),
        (lambda d: d["workload"].pop("gen_len"), r"workload\.gen_len: required with task generate"),
        (lambda d: d["space"].update(weight_quant=["int3"]), r"space\.weight_quant"),
        (
            lambda d: d["space"].update(micro_batch_size=[4, 8]),
            r"space\.micro_batch_size: a knob of task train, command, not of generate",
        ),
        (
            lambda d: d["space"].update(precision=["fp8"]),
            r"space\.precision: fp8 is not a precision of task generate",
        ),
        (
            lambda d: d["model"].update(seq_len=40),
            r"model\.seq_len: 40 is shorter than workload\.prompt_len \+ gen_len",
        ),
        (
            lambda d: d["workload"].update(global_batch_size=8),
            r"workload\.global_batch_size: not used with task generate",
        ),
        (lambda d: d["study"].update(limits={"p99_tpot_ms": -1}), r"study\.limits\.p99_tpot_ms"),
        (
            lambda d: d.update(model={"entrypoint": "custom_model:build"}),
            r"model\.entrypoint: task generate runs",
        ),
        (lambda d: d["study"].update(limits={"p99_tpot": 30}), r"study\.limits\.p99_tpot"),
        (
            lambda d: d["baseline"].update(micro_batch_size=4),
            r"baseline\.micro_batch_size: not a knob of this task",
        ),
    ],
)
def test_generate_bad_input_is_one_line(tmp_path: Path, change: Any, pattern: str) -> None:
    data = copy.deepcopy(GEN)
    change(data)
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(data))
    (tmp_path / "custom_model.py").write_text((ROOT / "search_spaces/custom_model.py").read_text())
    with pytest.raises(ConfigError, match=pattern) as info:
        load_config(tmp_path / "g.yaml")
    assert "\n" not in str(info.value)


def test_generate_knobs_and_limits_refused_in_training(tmp_path: Path) -> None:
    from conftest import tiny

    for change, pattern in [
        (
            {"study": {"limits": {"ttft_ms": 500}}},
            r"study\.limits: latency limits are for task generate",
        ),
        ({"workload": {"prompt_len": 8}}, r"workload\.prompt_len: only for task generate"),
        (
            {"space": {"weight_quant": ["none", "int8_weight_only"]}},
            r"space\.weight_quant: a knob of task generate",
        ),
    ]:
        (tmp_path / "t.yaml").write_text(yaml.safe_dump(tiny(**change)))
        with pytest.raises(ConfigError, match=pattern):
            load_config(tmp_path / "t.yaml")


def test_generate_validate_and_identity_of_training_unchanged(tmp_path: Path) -> None:
    """A training study made before generate existed keeps its identity: generate's knobs and
    workload fields, absent, are no factor of it (identity.factors)."""
    from conftest import tiny

    from autotune.documents import identity

    (tmp_path / "t.yaml").write_text(yaml.safe_dump(tiny()))
    cfg = load_config(tmp_path / "t.yaml")
    dumped = cfg.model_dump(mode="json")
    assert "weight_quant" in dumped["space"]  # the field exists ...
    generate_only = (
        "batch_size",
        "weight_quant",
        "int4_group_size",
        "int4_kernel",
        "kv_cache",
        "compile_prefill",
    )
    older = {
        **dumped,
        "space": {k: v for k, v in dumped["space"].items() if k not in generate_only},
        "workload": {
            k: v for k, v in dumped["workload"].items() if k not in ("prompt_len", "gen_len")
        },
    }
    assert identity.digest(dumped) == identity.digest(older)  # ... but no factor of the identity
    assert os.path.exists(ROOT / "search_spaces/llama3-8b-generate.yaml")
    load_config(ROOT / "search_spaces/llama3-8b-generate.yaml")


def test_generate_report_front_is_the_non_dominated_trials() -> None:
    from dataclasses import fields, replace

    from autotune.report._collect import pareto_front
    from autotune.report._data import Row

    def row(n: int, tok: float | None, p99: float | None, state: str = "ok") -> Row:
        blank = Row(**{f.name: None for f in fields(Row)})
        return replace(blank, number=n, state=state, tokens_per_s_per_gpu=tok, tpot_ms_p99=p99)

    rows = [
        row(0, 100, 5),
        row(1, 300, 20),
        row(2, 200, 25),
        row(3, 500, 60, "over_limit"),
        row(4, 90, 5),
        row(5, None, None, "oom"),
        row(6, 250, 20),
        row(7, 600, 80, "pruned"),
    ]
    # 2, 4, 6 beaten; oom and pruned not measured
    assert [r.number for r in pareto_front(rows)] == [0, 1, 3]
    assert pareto_front([replace(r, tpot_ms_p99=None) for r in rows]) == []  # training: no front


HF_CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 64,
}


def _hf_spec(tmp_path: Path, **knobs: Any) -> TrialSpec:
    (tmp_path / "config.json").write_text(json.dumps(HF_CONFIG))
    m = {"hf_config": str(tmp_path / "config.json"), "seq_len": 48, "family": None}
    return TrialSpec(
        task="generate",
        device="cpu",
        knobs={"precision": "fp32", "kv_cache": "dynamic", **knobs},
        model=m,
        run=RunSettings(warmup_steps=1, measure_steps=2, prompt_len=12, gen_len=5),
        params={"drift": {"max_layer_error": 0.3}},
    )


@pytest.mark.slow
@pytest.mark.skipif(
    __import__("importlib").util.find_spec("transformers") is None, reason="needs transformers"
)
def test_generate_hf_config_model_decodes_with_its_own_cache(tmp_path: Path) -> None:
    """An hf_config model: transformers' DynamicCache decode equals recomputing the sequence; the
    trial runs eager and compiled, quantized with the drift guard; a static cache is the built-in
    model's (refused)."""
    from autotune.workloads.decoder import HFDecoder
    from autotune.workloads.external import hf_causal_lm

    spec = _hf_spec(tmp_path)
    hf, _ = hf_causal_lm(spec.model["hf_config"], spec.knobs, "cpu")
    hf.eval()
    dec, prompts = HFDecoder(hf, 256), torch.randint(0, 256, (2, 9))
    with torch.no_grad():
        logits, cache = dec.forward(prompts, None)
        got = [logits.argmax(-1)]
        for _ in range(4):
            logits, cache = dec.forward(got[-1], None, cache)
            got.append(logits.argmax(-1))
        seq, want = prompts, []
        for _ in range(5):
            want.append(hf(input_ids=seq).logits[:, -1:].argmax(-1))
            seq = torch.cat([seq, want[-1]], dim=1)
    assert torch.equal(torch.cat(got, 1), torch.cat(want, 1))
    assert trial.run(spec).status == "ok"
    assert trial.run(_hf_spec(tmp_path, compile=True)).applied["compile_mode"] == "default"
    err = trial.classify(
        _raises(lambda: trial.run(_hf_spec(tmp_path, kv_cache="static"))), 1, {"kv_cache": "static"}
    )
    assert (
        err.status == "invalid_config"
        and "hf_config model decodes with kv_cache: dynamic" in err.reason
    )
    if __import__("importlib").util.find_spec("torchao") is not None:
        quant = trial.run(_hf_spec(tmp_path, weight_quant="int8_weight_only"))
        assert quant.status == "ok" and quant.applied["drift"]["layer_error_max"] < 0.05


@pytest.mark.slow
def test_generate_pareto_objective_is_an_optuna_multi_objective_study(tmp_path: Path) -> None:
    """objective pareto: Optuna gets (tokens/s, p99 TPOT) to maximise and minimise; best.yaml keeps
    the fastest configuration and lists Optuna's front (no front trial beaten on both by another
    completed one); resuming the study under the single objective is refused (exit 2), nothing
    written."""
    import optuna

    data = copy.deepcopy(GEN)
    data.update(
        name="gen-pareto",
        space={"batch_size": [1, 4, 16], "kv_cache": ["static", "dynamic"]},
        baseline={"batch_size": 1, "kv_cache": "static"},
    )
    data["study"].update(trials=3, confirm_top=0, objective="pareto")
    data["study"].pop("limits")
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    run = cli_here("search", "p.yaml", "--out", "out", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    study = optuna.load_study(
        study_name="gen-pareto", storage=f"sqlite:///{tmp_path}/out/gen-pareto/study.db"
    )
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    # the measured ones: a repeat is told COMPLETE as the trial it repeats, with that trial's values
    done = [t for t in study.trials if t.user_attrs.get("status") == "ok"]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in done)
    assert done and all(
        t.values
        == [t.user_attrs["metrics"]["tokens_per_s_per_gpu"], t.user_attrs["metrics"]["tpot_ms_p99"]]
        for t in done
    )
    best = yaml.safe_load((tmp_path / "out/gen-pareto/best.yaml").read_text())
    assert best["chosen"]["trial"] == max(done, key=lambda t: t.values[0]).number
    front = best["front"]
    assert [f["tpot_ms_p99"] for f in front] == sorted(f["tpot_ms_p99"] for f in front)
    for f in front:
        assert not any(
            t.values[0] > f["tokens_per_s_per_gpu"] + 0.1 and t.values[1] < f["tpot_ms_p99"] - 1e-3
            for t in done
        )
    before = (tmp_path / "out/gen-pareto/study.db").read_bytes()
    data["study"]["objective"] = "tokens_per_s"
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    again = cli_here("search", "p.yaml", "--out", "out", cwd=tmp_path)
    assert (
        again.returncode == 2
        and "study.objective: tokens_per_s does not match the study" in again.stderr
    )
    assert (tmp_path / "out/gen-pareto/study.db").read_bytes() == before


def test_generate_pareto_needs_generate_and_decode_steps(tmp_path: Path) -> None:
    from conftest import tiny

    (tmp_path / "t.yaml").write_text(yaml.safe_dump(tiny(study={"objective": "pareto"})))
    with pytest.raises(
        ConfigError,
        match=(
            r"study\.objective: pareto \(tokens/s against p99 time per output token\) is for task "
            r"generate \(task is train\); use tokens_per_s"
        ),
    ):
        load_config(tmp_path / "t.yaml")
    data = copy.deepcopy(GEN)
    data["study"]["objective"] = "pareto"
    data["workload"]["gen_len"] = 1
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(
        ConfigError,
        match=r"study\.objective: pareto needs decode steps to time: workload\.gen_len >= 2",
    ):
        load_config(tmp_path / "g.yaml")
