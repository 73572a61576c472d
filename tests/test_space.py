"""The resolved space: the global-batch rule, world-size rule, baseline and Optuna suggestions."""

from __future__ import annotations

import optuna
import pytest
from conftest import tiny

from autotune import knobs as catalogue
from autotune import tasks
from autotune.errors import ConfigError
from autotune.job import parse_config
from autotune.knobs import env_of
from autotune.space import KNOBS, resolve_space


def test_space_global_batch_rule_keeps_batch_exact() -> None:
    cfg = parse_config(
        tiny(
            workload={"global_batch_size": 24},
            space={"micro_batch_size": [2, 4, 5, 8, 16], "precision": ["fp32"]},
            baseline={"micro_batch_size": 2},
        )
    )
    space = resolve_space(cfg)
    assert space.searched["micro_batch_size"] == [2, 4, 8]  # 5 and 16 do not divide 24
    assert "dropped [5, 16]" in space.notes["micro_batch_size"]
    for point in space.points():
        knobs = space.knobs(point)
        assert knobs["micro_batch_size"] * knobs["grad_accum_steps"] * cfg.workload.world_size == 24


def test_space_derived_knobs_are_the_tasks_rule() -> None:
    """The space asks its task for the knobs a point decides: training's accumulation from the
    global batch, nothing for generate."""
    space = resolve_space(parse_config(tiny(workload={"global_batch_size": 32})))
    assert space.task is tasks.task("train")
    assert space.knobs({"micro_batch_size": 4, "precision": "fp32"})["grad_accum_steps"] == 8
    assert tasks.task("command").derived_knobs({"micro_batch_size": 2}, 16, 2) == {
        "grad_accum_steps": 4
    }
    assert tasks.task("train").derived_knobs({"micro_batch_size": 2}, None, 1) == {}
    assert tasks.task("generate").derived_knobs({"batch_size": 2}, None, 1) == {}


def test_space_accum_searched_without_global_batch() -> None:
    data = tiny(space={"grad_accum_steps": [1, 2, 4]})
    del data["workload"]["global_batch_size"]
    space = resolve_space(parse_config(data))
    assert space.searched["grad_accum_steps"] == [1, 2, 4]
    assert space.size == 3 * 3 * 2


def test_space_accum_auto_without_global_batch_is_one() -> None:
    data = tiny()
    del data["workload"]["global_batch_size"]
    space = resolve_space(parse_config(data))
    assert space.fixed["grad_accum_steps"] == 1


def test_space_nccl_not_searched_on_one_gpu() -> None:
    space = resolve_space(parse_config(tiny(space={"nccl_algo": ["default", "Ring", "Tree"]})))
    assert "nccl_algo" not in space.searched
    assert space.fixed["nccl_algo"] == "default"
    assert "not searched: world_size is 1" in space.notes["nccl_algo"]
    assert space.size == 3 * 2  # no trial is spent on NCCL
    assert env_of(space.knobs(space.points()[0])) == {}


def test_space_baseline_defaults_and_fixed() -> None:
    space = resolve_space(
        parse_config(tiny(space={"compile": [False, True]}, baseline={"micro_batch_size": 4}))
    )
    assert space.baseline == {"micro_batch_size": 4, "precision": "fp32", "compile": False}


def test_space_baseline_must_match_a_fixed_knob() -> None:
    with pytest.raises(
        ConfigError, match=r"baseline\.compile: True is outside the space; allowed: \[False\]"
    ):
        parse_config(tiny(baseline={"compile": True}))


def test_space_suggest_covers_searched_knobs() -> None:
    space = resolve_space(parse_config(tiny()))
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=1))
    trial = study.ask()
    params = space.suggest(trial)
    assert set(params) == {"micro_batch_size", "precision"}
    assert tuple(space.knobs(params)) == tuple(
        k for k in KNOBS if "train" in catalogue.BY_NAME[k].tasks
    )  # the task's knobs


def test_space_nearest_unmeasured_neighbour() -> None:
    import random

    cfg = parse_config(
        tiny(
            space={"micro_batch_size": [1, 2, 4, 8], "compile": [False, True]},
            baseline={"micro_batch_size": 1},
        )
    )
    space = resolve_space(cfg)
    proposed = {"micro_batch_size": 4, "precision": "bf16", "compile": True}
    far = {"micro_batch_size": 1, "precision": "fp32", "compile": False}
    one_step = {"micro_batch_size": 8, "precision": "bf16", "compile": True}
    other_knob = {"micro_batch_size": 4, "precision": "fp32", "compile": True}
    assert space.distance(proposed, far) == 2 + 1 + 1
    assert space.distance(proposed, one_step) == 1
    picks = {
        tuple(space.nearest(proposed, [far, one_step, other_knob], random.Random(s)).values())
        for s in range(20)
    }
    # both at distance 1, never the far one
    assert picks == {tuple(one_step.values()), tuple(other_knob.values())}


def test_space_inert_knobs_are_those_that_cannot_act_here() -> None:
    one = resolve_space(parse_config(tiny()), "cpu")
    assert {
        "parallel",
        "bucket_cap_mb",
        "fsdp_reduce_dtype",
        "powersgd_rank",
        "nccl_algo",
        "fp8_recipe",
        # one rank: no DDP/FSDP/NCCL; fp32/bf16: no fp8; eager: no scope
        "compile_scope",
    } <= set(one.inert)
    assert not {"micro_batch_size", "precision", "attention", "compile"} & set(one.inert)
    two = resolve_space(
        parse_config(tiny(workload={"world_size": 2}, space={"micro_batch_size": [2, 4]})), "cuda"
    )
    assert (
        "parallel" not in two.inert
        and "bucket_cap_mb" not in two.inert
        and "nccl_algo" not in two.inert
    )
    assert "fsdp_reduce_dtype" in two.inert  # parallel is always ddp, so FSDP's knobs cannot act
    assert (
        "nccl_algo"
        in resolve_space(
            parse_config(tiny(workload={"world_size": 2}, space={"micro_batch_size": [2, 4]})),
            "cpu",
        ).inert
    )
