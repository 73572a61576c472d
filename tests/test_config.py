"""The YAML schema: every bad input gets one line naming the path, the value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import tiny
from pydantic import BaseModel
from typer.testing import CliRunner

from autotune import config as config_mod
from autotune.cli import app
from autotune.errors import ConfigError
from autotune.job import load_config

BAD = [
    # (id, config data or raw text, message pattern)
    (
        "unknown-top-key",
        tiny(modle={}),
        r"modle: unknown key; did you mean model\? allowed here: name, model, workload, space, "
        r"study, command, baseline",
    ),
    (
        "unknown-nested-key",
        tiny(model={"n_layer": 2}),
        r"model\.n_layer: unknown key; did you mean n_layers\? allowed here: family, hf_config, "
        r"entrypoint, n_layers",
    ),
    (
        "unknown-space-key",
        tiny(space={"precison": ["bf16"]}),
        r"space\.precison: unknown key; did you mean precision\? allowed here: micro_batch_size",
    ),
    (
        "unknown-study-key",
        tiny(study={"trails": 3}),
        r"study\.trails: unknown key; did you mean trials\? allowed here",
    ),
    ("unknown-far-key", tiny(study={"zzz": 3}), r"study\.zzz: unknown key; allowed here: trials"),
    (
        "wrong-type",
        tiny(model={"n_layers": "twelve"}),
        r"model\.n_layers: .*integer.*\(got 'twelve'\)",
    ),
    (
        "zero-size",
        tiny(model={"d_model": 0}),
        r"model\.d_model: .*greater than or equal to 1 \(got 0\)",
    ),
    (
        "negative-size",
        tiny(workload={"global_batch_size": -8}),
        r"workload\.global_batch_size: .*\(got -8\)",
    ),
    (
        "negative-mbs",
        tiny(space={"micro_batch_size": [4, -2]}),
        r"space\.micro_batch_size: -2 is not a positive",
    ),
    (
        "min-gt-max",
        tiny(space={"micro_batch_size": {"multiple_of": 2, "min": 8, "max": 2}}),
        r"space\.micro_batch_size: min \(8\) is greater than max \(2\)",
    ),
    (
        "dmodel-heads",
        tiny(model={"d_model": 30, "n_heads": 4}),
        r"model\.d_model: 30 is not divisible by model\.n_heads \(4\)",
    ),
    (
        "heads-kv",
        tiny(model={"family": "llama", "n_heads": 4, "n_kv_heads": 3, "d_model": 32}),
        r"model\.n_heads: 4 is not divisible by model\.n_kv_heads \(3\)",
    ),
    ("kv-on-gpt", tiny(model={"n_kv_heads": 1}), r"model\.n_kv_heads: 1 is only for family llama"),
    (
        "unknown-precision",
        tiny(space={"precision": ["fp32", "fp64"]}),
        r"space\.precision: 'fp64' is not allowed; allowed: fp32, tf32, fp16, bf16, fp8",
    ),
    (
        "unknown-sampler",
        tiny(study={"sampler": "cmaes"}),
        r"study\.sampler: Input should be 'tpe', 'random', 'grid' or 'gp'",
    ),
    ("empty-list", tiny(space={"precision": []}), r"space\.precision: empty list"),
    (
        "empty-range",
        tiny(space={"micro_batch_size": {"multiple_of": 8, "min": 9, "max": 15}}),
        r"space\.micro_batch_size: no multiple of 8 lies in \[9, 15\]",
    ),
    (
        "no-mbs-divides",
        tiny(space={"micro_batch_size": [3, 5]}),
        r"space\.micro_batch_size: no value in \[3, 5\] divides global_batch_size / world_size = 8",
    ),
    (
        "baseline-outside",
        tiny(baseline={"micro_batch_size": 16}),
        r"baseline\.micro_batch_size: 16 is outside the space",
    ),
    (
        "baseline-unknown",
        tiny(baseline={"flash_attn": True}),
        r"baseline\.flash_attn: unknown knob; allowed: ",
    ),
    (
        "baseline-misspelt",
        tiny(baseline={"precison": "fp32"}),
        r"baseline\.precison: unknown knob; did you mean precision\? ",
    ),
    (
        "accum-with-gbs",
        tiny(space={"grad_accum_steps": [1, 2]}),
        r"space\.grad_accum_steps: \[1, 2\] cannot be set when workload\.global_batch_size",
    ),
    ("bad-name", tiny(name="a/b"), r"name: .*'a/b' is not a valid study name"),
    (
        "missing-key",
        {k: v for k, v in tiny().items() if k != "model"},
        r"model: required with task train \(family, hf_config or entrypoint\)",
    ),
    ("not-a-mapping", "- just\n- a list\n", r"the file must hold a mapping"),
    ("invalid-yaml", "name: x\nmodel: {family: gpt\n", r"model\.yaml:\d+:\d+: invalid YAML"),
    (
        "space-file-missing",
        tiny(space="nowhere/space.yaml"),
        r"space: no such file: 'nowhere/space.yaml'",
    ),
]


@pytest.mark.parametrize("data,pattern", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_config_bad_input_one_line(write_yaml, data, pattern: str) -> None:
    path = write_yaml(data)
    with pytest.raises(ConfigError, match=pattern) as info:
        load_config(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("data,pattern", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_cli_bad_input_exit_2_nothing_written(
    write_yaml, tmp_path: Path, data, pattern: str
) -> None:
    import re

    path = write_yaml(data)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["search", str(path), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    # Rich wraps long lines on the runner's narrow terminal
    message = " ".join(result.output.split())
    assert re.search(pattern, message), message
    assert not out.exists()


def test_config_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"MODEL_YAML: no such file: .*absent\.yaml"):
        load_config(tmp_path / "absent.yaml")
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "absent.yaml")])
    assert result.exit_code == 2


def test_config_space_from_file_and_defaults(write_yaml) -> None:
    write_yaml(
        {"micro_batch_size": {"multiple_of": 2, "min": 2, "max": 8}, "precision": "bf16"},
        "space.yaml",
    )
    data = tiny()
    data["space"] = "space.yaml"
    data["baseline"] = {"micro_batch_size": 2}
    cfg = load_config(write_yaml(data))
    assert cfg.space.micro_batch_size == [2, 4, 6, 8]
    assert cfg.space.precision == ["bf16"]  # one value: fixed
    assert cfg.space.compile == [False]  # absent: its default
    assert cfg.space.nccl_algo == ["default"]


@pytest.mark.slow
def test_config_shipped_examples_are_valid() -> None:
    from autotune.space import resolve_space

    root = Path(__file__).resolve().parents[1]
    examples = sorted(
        p for p in (root / "search_spaces").glob("*.yaml") if p.name != "train-basic.yaml"
    )  # a space only
    assert len(examples) >= 10
    for path in examples:
        cfg = load_config(path)
        assert cfg.name == path.stem
        resolve_space(cfg, "cuda")  # the space resolves as on the GPU machine it was written for


def test_config_llama_1b_shape() -> None:
    cfg = load_config(Path(__file__).resolve().parents[1] / "search_spaces" / "llama-1b.yaml")
    m = cfg.model
    assert (m.n_layers, m.d_model, m.n_heads, m.kv_heads, m.vocab_size, m.seq_len) == (
        16,
        2048,
        32,
        8,
        128256,
        2048,
    )


def test_config_every_field_documented() -> None:
    from autotune.config import space as config_space
    from autotune.config import study as config_study

    models = [
        v
        for mod in (config_mod, config_space, config_study)
        for v in vars(mod).values()
        if isinstance(v, type)
        and issubclass(v, BaseModel)
        and v.__module__ == mod.__name__
        and v not in (config_mod._Section, config_space._SpaceBase)
    ]
    assert len(models) >= 6
    for model in models:
        assert model.model_config.get("extra") == "forbid", model
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"


def _ext(write_yaml, model: dict, **extra):
    data = tiny(baseline={"micro_batch_size": 2})
    data["model"] = model
    data.update(extra)
    return write_yaml(data)


def test_config_hf_config_missing_file_exit_2(write_yaml, tmp_path: Path) -> None:
    path = _ext(write_yaml, {"hf_config": "nope/config.json", "seq_len": 16})
    with pytest.raises(
        ConfigError, match=r"model\.yaml: model\.hf_config: no such file: .*nope/config\.json"
    ):
        load_config(path)
    result = CliRunner().invoke(app, ["search", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and not (tmp_path / "out").exists()


def test_config_hf_config_checks(write_yaml, tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"model\.hf_config: .*bad\.json' is not valid JSON"):
        load_config(_ext(write_yaml, {"hf_config": "bad.json", "seq_len": 16}))
    (tmp_path / "nomodel.json").write_text('{"hidden_size": 8}')
    with pytest.raises(ConfigError, match=r"has no model_type"):
        load_config(_ext(write_yaml, {"hf_config": "nomodel.json", "seq_len": 16}))
    (tmp_path / "ok.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ConfigError, match=r"model\.seq_len: required with hf_config"):
        load_config(_ext(write_yaml, {"hf_config": "ok.json"}))
    with pytest.raises(ConfigError, match=r"model\.d_model: not used with hf_config"):
        load_config(_ext(write_yaml, {"hf_config": "ok.json", "seq_len": 8, "d_model": 64}))
    with pytest.raises(
        ConfigError,
        match=r"model: give exactly one of family \(built-in\), hf_config or entrypoint",
    ):
        load_config(_ext(write_yaml, {"hf_config": "ok.json", "family": "gpt", "seq_len": 8}))


def test_config_entrypoint_import_errors_exit_2(write_yaml, tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"model\.entrypoint: 'nomodule' is not of the form 'package\.module:function'",
    ):
        load_config(_ext(write_yaml, {"entrypoint": "nomodule"}))
    with pytest.raises(
        ConfigError,
        match=r"model\.entrypoint: cannot import 'no_such_module_xyz': ModuleNotFoundError",
    ):
        load_config(_ext(write_yaml, {"entrypoint": "no_such_module_xyz:build"}))
    (tmp_path / "broken_mod.py").write_text("raise RuntimeError('boom at import')\n")
    with pytest.raises(
        ConfigError, match=r"cannot import 'broken_mod': RuntimeError: boom at import"
    ):
        load_config(_ext(write_yaml, {"entrypoint": "broken_mod:build"}))
    (tmp_path / "plain_mod.py").write_text("x = 1\n")
    with pytest.raises(
        ConfigError, match=r"model\.entrypoint: 'plain_mod' has no function 'build'"
    ):
        load_config(_ext(write_yaml, {"entrypoint": "plain_mod:build"}))
    path = _ext(write_yaml, {"entrypoint": "no_such_module_xyz:build"})
    result = CliRunner().invoke(app, ["search", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and not (tmp_path / "out").exists()


def test_config_builtin_needs_sizes(write_yaml) -> None:
    with pytest.raises(
        ConfigError, match=r"model\.n_layers: required for the built-in model \(family gpt\)"
    ):
        load_config(
            _ext(
                write_yaml,
                {"family": "gpt", "d_model": 32, "n_heads": 2, "vocab_size": 64, "seq_len": 8},
            )
        )
