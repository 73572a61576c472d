"""The winner as a fragment of a torchtitan job TOML (merge it into your train_configs/*.toml).

Section and key names are torchtitan's JobConfig (torchtitan/config/job_config.py, as of commit
e347b1e5e6b6941d789d16d340145294d82dc71e, 2026-02-15: the last before its config moved from TOML to Python
dataclasses): training.local_batch_size / global_batch_size (accumulation is derived from them) /
mixed_precision_param ("bfloat16" | "float32") / mixed_precision_reduce ("float32" only); compile.enable /
components; activation_checkpoint.mode ("none" | "selective" | "full") / selective_ac_option ("2": every 2nd
layer, "op"); model.converters with "quantize.linear.float8" (components/quantization/float8.py registers that
name) and quantize.linear.float8.recipe_name / enable_fsdp_float8_all_gather /
precompute_float8_dynamic_scale_for_fsdp / filter_fqns; optimizer.implementation ("fused" | "foreach");
parallelism.data_parallel_shard_degree / data_parallel_replicate_degree / fsdp_reshard_after_forward. What
torchtitan does without a key: each transformer block compiled (models/llama3/infra/parallelize.py apply_compile),
DDP with bucket_cap_mb=100 and optimize_ddp "ddp_optimizer" (apply_ddp).
"""

from __future__ import annotations

from typing import Any

from autotune.export._form import Form, Out, Rule, env_block, missing_lines, no_equivalent, same, translate, unlike
from autotune.export._winner import Winner

NOT_A_KEY = "no torchtitan config key"
FLOAT8 = "quantize.linear.float8"
TORCHTITAN_BUCKET_MB = 100  # apply_ddp's replicate(..., bucket_cap_mb=100)


def _batch(value: Any, w: Winner) -> Out:
    """torchtitan takes the global batch and derives the accumulation from it (data parallel: every rank)."""
    accum = w.knobs.get("grad_accum_steps") or 1
    return Out({"training.local_batch_size": value, "training.global_batch_size": value * accum * w.world_size})


def _precision(value: Any, w: Winner) -> Out:
    if value == "fp32":
        return Out({"training.mixed_precision_param": "float32"})
    if value == "bf16":
        return Out({"training.mixed_precision_param": "bfloat16"})
    if value == "fp8":  # torchao float8 linears under bf16, the output head left out as autotune's trial does
        return Out(
            {
                "training.mixed_precision_param": "bfloat16",
                "model.converters": [FLOAT8],
                f"{FLOAT8}.filter_fqns": ["output"],
            }
        )
    if value == "tf32":
        return Out(
            {"training.mixed_precision_param": "float32"},
            none="no TF32 key; add torch.backends.cuda.matmul.fp32_precision = 'tf32'",
        )
    return no_equivalent("mixed_precision_param takes bfloat16 or float32, not float16")


def _compile(value: Any, w: Winner) -> Out:
    if value is False:
        return Out()
    out = Out({"compile.enable": True, "compile.components": ["model", "loss"]})
    if value not in (True, "default"):
        out.none = "[compile] has no mode; torchtitan compiles with the default mode"
    return out


def _compile_scope(value: Any, w: Winner) -> Out:
    if value == "block":
        return Out()
    return unlike("torchtitan compiles each transformer block, not the whole model")


def _checkpointing(value: Any, w: Winner) -> Out:
    mode = {"none": "none", "full": "full", "selective": "selective", "selective_op": "selective"}[value]
    out = Out({"activation_checkpoint.mode": mode})  # explicit: torchtitan's own default is selective
    if value == "selective":
        out.args["activation_checkpoint.selective_ac_option"] = "2"  # every other block, as autotune's trial
    if value == "selective_op":
        out.args["activation_checkpoint.selective_ac_option"] = "op"
    return out


def _parallel(value: Any, w: Winner) -> Out:
    if value == "fsdp":
        return Out(
            {"parallelism.data_parallel_shard_degree": w.world_size, "parallelism.data_parallel_replicate_degree": 1}
        )
    return Out(
        {"parallelism.data_parallel_replicate_degree": w.world_size, "parallelism.data_parallel_shard_degree": 1}
    )


def _bucket(value: Any, w: Winner) -> Out:
    if value == TORCHTITAN_BUCKET_MB:
        return Out()
    return unlike(f"torchtitan's DDP buckets are {TORCHTITAN_BUCKET_MB} MiB, not a config key")


def _when(default: Any, why: str, always: bool = False) -> Rule:
    """A knob whose `default` is what torchtitan does without a key; its other values have none."""

    def rule(value: Any, w: Winner) -> Out:
        if value == default:
            return Out()
        return unlike(why) if always else no_equivalent(why)

    return rule


RULES: dict[str, Rule] = {
    "micro_batch_size": _batch,
    "grad_accum_steps": same,  # in global_batch_size
    "precision": _precision,
    "fp8_recipe": lambda v, w: Out({f"{FLOAT8}.recipe_name": v}),
    "fp8_all_gather": lambda v, w: Out(
        {f"{FLOAT8}.enable_fsdp_float8_all_gather": True, f"{FLOAT8}.precompute_float8_dynamic_scale_for_fsdp": True}
        if v
        else {}
    ),
    "compile": _compile,
    "compile_scope": _compile_scope,
    "activation_checkpointing": _checkpointing,
    "fused_optimizer": lambda v, w: Out({"optimizer.implementation": "fused" if v else "foreach"}),
    "parallel": _parallel,
    "bucket_cap_mb": _bucket,
    "ddp_comm_hook": _when("none", "torchtitan's DDP registers no comm hook"),
    "ddp_compile": _when("split", 'torchtitan sets optimize_ddp = "ddp_optimizer" (split)'),
    "gradient_as_bucket_view": _when(False, "not a torchtitan config key"),
    "static_graph": _when(False, "not a torchtitan config key"),
    "reshard_after_forward": lambda v, w: Out({"parallelism.fsdp_reshard_after_forward": "always" if v else "never"}),
    "fsdp_reduce_dtype": lambda v, w: (
        Out({"training.mixed_precision_reduce": "float32"})
        if v == "fp32"
        else no_equivalent("mixed_precision_reduce is float32 only")
    ),
    "fsdp_forward_prefetch": _when(0, "torchtitan sets no explicit forward prefetch"),
    "fsdp_backward_prefetch": _when(1, "torchtitan sets no explicit backward prefetch"),
    "fsdp_grad_sync": _when("every", "torchtitan reduce-scatters the gradients after every micro-batch", always=True),
}


def toml(args: dict[str, Any]) -> str:
    """{"training.local_batch_size": 8} as `[training]` then `local_batch_size = 8` (tomli-w writes it)."""
    import tomli_w

    from autotune.command_render import apply_overrides

    return "\n" + tomli_w.dumps(apply_overrides({}, args))


def torchtitan(w: Winner) -> Form:
    done = translate(w, RULES, NOT_A_KEY)
    lines = [
        "# torchtitan job config fragment: merge into your train_configs/*.toml",
        *env_block(w.env, prefix="# "),
        *missing_lines("torchtitan", done.missing),
    ]
    return Form("torchtitan", "\n".join(lines) + "\n" + toml(done.args), done.missing)
