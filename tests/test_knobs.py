"""The knob catalogue: declared once, and everything else follows from it (schema, defaults, notes,
the knob table of docs/yaml.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import tiny

from autotune import knobs, tasks
from autotune.config import SpaceConfig
from autotune.errors import exit_codes_markdown
from autotune.job import parse_config
from autotune.protocol import TrialSpec

ROOT = Path(__file__).resolve().parents[1]


def _section(doc: str, begin: str, end: str) -> str:
    text = (ROOT / doc).read_text()
    match = re.search(re.escape(begin) + r"\n(.*?)" + re.escape(end), text, re.S)
    assert match, f"{doc} has no {begin} ... {end} section"
    return match.group(1)


def test_knobs_docs_table_is_the_catalogues() -> None:
    # the knob table lives in the YAML reference (docs/yaml.md). Regenerate with:
    # python -c "from autotune.knobs import markdown_table; print(markdown_table(), end='')"
    table = _section("docs/yaml.md", "<!-- knobs:begin -->", "<!-- knobs:end -->")
    assert table == knobs.markdown_table()


def test_knobs_readme_exit_codes_are_the_errors_modules() -> None:
    codes = _section("README.md", "<!-- exit-codes:begin -->", "<!-- exit-codes:end -->")
    assert codes == exit_codes_markdown()


def test_knobs_schema_has_one_documented_field_per_knob() -> None:
    assert tuple(SpaceConfig.model_fields) == knobs.NAMES
    for knob in knobs.CATALOGUE:
        field = SpaceConfig.model_fields[knob.name]
        assert field.description == knob.help and knob.effect, knob.name
        assert field.default == ("auto" if knob.derived else [knob.default])


def test_knobs_trial_defaults_come_from_the_catalogue() -> None:
    spec = TrialSpec(task="train", device="cpu", knobs={"precision": "bf16"})
    assert spec.knobs == {**knobs.defaults("train"), "precision": "bf16"}
    # the all-reduce workload has no knobs
    assert TrialSpec(task="allreduce", device="cpu").knobs == {}


def test_knobs_only_with_and_multi_rank_rules_resolve_from_the_catalogue() -> None:
    from autotune.space import resolve_space

    cfg = parse_config(
        tiny(
            workload={"world_size": 2},
            space={
                "parallel": ["ddp", "fsdp"],
                "bucket_cap_mb": [25, 50],
                "reshard_after_forward": [True, False],
            },
        )
    )
    space = resolve_space(cfg, "cuda")
    fsdp = space.knobs({**space.baseline, "parallel": "fsdp"})
    ddp = space.knobs({**space.baseline, "parallel": "ddp"})
    assert fsdp["bucket_cap_mb"] is None and fsdp["reshard_after_forward"] is not None
    assert ddp["reshard_after_forward"] is None and ddp["bucket_cap_mb"] in (25, 50)


def test_knobs_apply_notes_and_env() -> None:
    k = {
        **knobs.defaults(),
        "precision": "fp8",
        "fp8_recipe": "rowwise",
        "compile": "max-autotune",
        "attention": "cudnn",
        "cuda_alloc_conf": "expandable_segments:True",
        "nccl_nchannels": 8,
        "parallel": None,
    }
    notes = knobs.apply_notes(k, "cuda")
    assert "from_recipe_name('rowwise')" in notes[0]
    assert "model = torch.compile(model, mode='max-autotune')" in notes
    assert "with torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION): forward" in notes
    assert knobs.env_of(k) == {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "NCCL_MIN_NCHANNELS": "8",
        "NCCL_MAX_NCHANNELS": "8",
    }


def test_knobs_choices_from_the_types() -> None:
    assert knobs.BY_NAME["nccl_proto"].choices() == ("default", "Simple", "LL", "LL128")
    assert "NVLS" in knobs.BY_NAME["nccl_algo"].choices() and "NVLS" not in tiny()["space"]
    assert knobs.BY_NAME["nccl_nchannels"].choices() == ("default",)
    assert knobs.BY_NAME["micro_batch_size"].choices() == ()


def test_knobs_compile_scope_acts_only_when_compile_is_on() -> None:
    from autotune.space import resolve_space

    cfg = parse_config(tiny(space={"compile": [False, True], "compile_scope": ["model", "block"]}))
    space = resolve_space(cfg, "cpu")
    assert (
        space.knobs({**space.baseline, "compile": False, "compile_scope": "block"})["compile_scope"]
        is None
    )
    assert (
        space.knobs({**space.baseline, "compile": True, "compile_scope": "block"})["compile_scope"]
        == "block"
    )
    off = resolve_space(
        parse_config(tiny(space={"compile": [False], "compile_scope": ["model", "block"]})), "cpu"
    )
    assert "compile_scope" not in off.searched
    assert "not searched: compile is always false" in off.notes["compile_scope"]
    notes = knobs.apply_notes({"compile": True, "compile_scope": "block"}, "cuda")
    assert any("block.compile()" in n for n in notes)


def test_an_older_best_yaml_is_told_which_knobs_it_lacks() -> None:
    """check refuses a best.yaml without every knob (a damaged one must not be measured at
    defaults), and for one from an older autotune lists the knobs added since as a search would have
    written them."""
    from autotune.documents.best_file import _old_behaviour

    old = {
        "micro_batch_size": 64,
        "precision": "bf16",
        "grad_accum_steps": 4,
        "compile": True,
        "nccl_algo": "default",
    }
    missing = [k.name for k in knobs.CATALOGUE if "train" in k.tasks and k.name not in old]
    one = _old_behaviour(old, missing, 1)
    assert one["compile_scope"] == "model" and one["activation_checkpointing"] == "none"
    # cannot act
    assert one["parallel"] is None and one["bucket_cap_mb"] is None and one["fp8_recipe"] is None
    two = _old_behaviour(old, missing, 2)
    assert (
        two["parallel"] == "ddp"
        and two["bucket_cap_mb"] == 25
        and two["reshard_after_forward"] is None
    )


NEW_KNOB = """
import json, sys
from typing import Literal
import autotune.knobs as k
new = k.Knob("demo_knob", Literal["off", "on"], "off", help="A knob added in a test.", effect="nothing")
k.CATALOGUE = (*k.CATALOGUE, new)
k.BY_NAME["demo_knob"] = new
k.NAMES = tuple(k.BY_NAME)
from autotune.documents import identity
from autotune.config import SpaceConfig
from autotune.job import parse_config
from autotune.space import resolve_space
doc = json.loads(sys.argv[1])
plain = parse_config(doc)
doc["space"]["demo_knob"] = ["off", "on"]
searched = parse_config(doc)
print(json.dumps({"field": "demo_knob" in SpaceConfig.model_fields, "searched": resolve_space(searched).searched.get("demo_knob"),
                  "fixed": resolve_space(plain).fixed.get("demo_knob"), "table": "`demo_knob`" in k.markdown_table(),
                  "defaults": k.defaults("train").get("demo_knob"),
                  "identity": identity.digest(plain.model_dump(mode="json"))}))
"""  # noqa: E501


def test_a_new_knob_is_its_catalogue_entry_alone_on_the_parent_side() -> None:
    """Adding a knob is its catalogue entry (knobs.py) plus its apply step in the trial
    (workloads/): the YAML schema, the resolved space, the defaults the trial assumes and the
    table of docs/yaml.md follow from the entry, and a study that never names it keeps its
    identity."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from conftest import tiny

    from autotune.documents import identity
    from autotune.job import parse_config

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-c", NEW_KNOB, json.dumps(tiny())],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {
        "field": True,
        "searched": ["off", "on"],
        "fixed": "off",
        "table": True,
        "defaults": "off",
        "identity": identity.digest(parse_config(tiny()).model_dump(mode="json")),
    }


@pytest.mark.parametrize("value", ["4", 4.0, True, None])
def test_knobs_batch_arithmetic_refuses_a_value_that_is_not_a_whole_number(value: object) -> None:
    """The batch rule multiplies micro_batch_size: a value of another type (a hand-edited
    best.yaml) is a TypeError naming the knob, not a repeated string or a float batch."""
    assert knobs.int_of({"micro_batch_size": 4}, "micro_batch_size") == 4
    with pytest.raises(TypeError, match="micro_batch_size"):
        tasks.task("train").derived_knobs({"micro_batch_size": value}, 32, 1)


def test_knobs_memory_order_is_declared_once_with_the_knobs_own_values() -> None:
    """Values that can only need more memory (issue 61), in the catalogue and nowhere else; a value
    the knob does not have is refused where the knob is declared."""
    assert {k.name: k.memory_order for k in knobs.CATALOGUE if k.memory_order} == {
        "precision": (("fp32", "tf32"), ("bf16", "fp16")),
        "attention": (("eager", "math"), ("auto", "flash", "efficient", "cudnn")),
        "activation_checkpointing": (("none",), ("full", "selective", "selective_op")),
    }
    precision = knobs.BY_NAME["precision"]
    assert precision.needs_at_least("tf32", "bf16") and precision.needs_at_least("fp8", "fp8")
    assert not precision.needs_at_least("bf16", "fp32")
    assert not precision.needs_at_least("fp32", "fp8")
    # precision's tiers need the same memory each (memory_alike): TF32 stores what fp32 does
    assert precision.memory_alike and precision.needs_at_least("tf32", "fp32")
    assert precision.needs_at_least("fp32", "tf32") and precision.needs_at_least("fp16", "bf16")
    # the fused attention kernels are not alike: flash says nothing of cudnn's workspace
    attention = knobs.BY_NAME["attention"]
    assert not attention.memory_alike and not attention.needs_at_least("cudnn", "flash")
    with pytest.raises(
        ValueError, match=r"memory_order .* names \['sdpa'\], not values of the knob"
    ):
        knobs.Knob(
            "attention",
            knobs.BY_NAME["attention"].type,
            "auto",
            help="",
            effect="",
            memory_order=(("eager",), ("sdpa",)),
        )
    with pytest.raises(ValueError, match="names a value twice"):
        knobs.Knob("x", precision.type, "fp32", "", "", memory_order=(("fp32",), ("fp32",)))
