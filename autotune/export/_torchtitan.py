"""The winner as torchtitan's command-line overrides, and the lines of its config function for what
has no flag.

torchtitan's configuration is a Python function returning a Trainer.Config (its TOML files were
removed on 2026-02-23, commit 9810191), chosen with `--module M --config F` and overridden by
`--section.option value` flags (tyro). Names as of torchtitan commit
b5bcd76c66d0acb1a08b176d9639425bc55e0b2a (2026-08-21), after "fold batch dim" (73aed7f, 2026-08-20)
replaced local_batch_size, global_batch_size and seq_len by token counts:
training.num_tokens_per_microbatch_per_dp_rank (micro-batch x sequence length),
training.num_tokens_per_train_step (the accumulation is derived from it),
training.max_context_length, training.mixed_precision_param ("bfloat16" | "float32") /
mixed_precision_reduce ("float32" only); compile.enable / components; the activation checkpointing
policy as a subcommand (`activation-checkpoint:none | full | selective`: selective is per-op,
torchtitan's default); optimizer.implementation ("fused" | "foreach" | ...);
parallelism.data_parallel_shard_degree / data_parallel_replicate_degree / fsdp_reshard_after_forward
("always" | "never"). Float8 is a model converter
(Float8LinearConverter.Config(recipe_name="rowwise" | "rowwise_with_gw_hp", filter_fqns)), set in
the config function's model_spec, which has no flag. What torchtitan does without a flag: each
transformer block compiled, DDP with bucket_cap_mb=100.
"""

from __future__ import annotations

from typing import Any

from autotune.export._form import (
    Form,
    Out,
    Rule,
    env_block,
    missing_lines,
    no_equivalent,
    one_line,
    same,
    translate,
    unlike,
)
from autotune.export._winner import Winner

NOT_A_KEY = "no torchtitan config field"
AC = "activation-checkpoint"  # the policy's subcommand: activation-checkpoint:<policy>
TORCHTITAN_BUCKET_MB = 100  # apply_ddp's replicate(..., bucket_cap_mb=100)
SNAPSHOT = "b5bcd76 (2026-08-21)"


def _batch(value: Any, w: Winner) -> Out:
    """torchtitan counts a micro-batch in tokens per data-parallel rank and derives the accumulation
    from the tokens of a training step (every rank)."""
    if not w.seq_len:
        return no_equivalent("torchtitan counts a batch in tokens; best.yaml has no model.seq_len")
    accum = w.knobs.get("grad_accum_steps") or 1
    tokens = value * w.seq_len
    return Out(
        {
            "training.num_tokens_per_microbatch_per_dp_rank": tokens,
            "training.num_tokens_per_train_step": tokens * accum * w.world_size,
            "training.max_context_length": w.seq_len,
        }
    )


def _float8(recipe: str) -> list[str]:
    """The config function's model_spec with torchtitan's float8 converter (no flag sets it)."""
    return [
        "from torchtitan.components.quantization.float8 import Float8LinearConverter",
        "model_spec = model_registry(  # your flavor; the head left out, as autotune's trial does",
        f'    "<flavor>", converters=[Float8LinearConverter.Config(recipe_name="{recipe}", '
        'filter_fqns=["lm_head"])]',
        ")",
    ]


def _precision(value: Any, w: Winner) -> Out:
    if value == "fp32":
        return Out({"training.mixed_precision_param": "float32"})
    if value == "bf16":
        return Out({"training.mixed_precision_param": "bfloat16"})
    if value == "fp8":  # the recipe's own rule writes the converter
        return Out({"training.mixed_precision_param": "bfloat16"})
    if value == "tf32":
        return Out(
            {"training.mixed_precision_param": "float32"},
            none="no TF32 field; add torch.backends.cuda.matmul.fp32_precision = 'tf32'",
        )
    return no_equivalent("mixed_precision_param takes bfloat16 or float32, not float16")


def _fp8_recipe(value: Any, w: Winner) -> Out:
    if value == "rowwise":
        return Out(lines=_float8("rowwise"))
    # named even at autotune's default: torchtitan would train bf16 without its converter
    return unlike(f"Float8LinearConverter has rowwise and rowwise_with_gw_hp, not {value}")


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
    """The policy subcommand, explicit: torchtitan's own default is selective (per-op)."""
    if value == "selective":
        return no_equivalent("torchtitan's selective policy is per-op, never every other block")
    policy = {"none": "none", "full": "full", "selective_op": "selective"}[value]
    return Out({AC: policy})


def _parallel(value: Any, w: Winner) -> Out:
    if value == "fsdp":
        return Out(
            {
                "parallelism.data_parallel_shard_degree": w.world_size,
                "parallelism.data_parallel_replicate_degree": 1,
            }
        )
    return Out(
        {
            "parallelism.data_parallel_replicate_degree": w.world_size,
            "parallelism.data_parallel_shard_degree": 1,
        }
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
    "fp8_recipe": _fp8_recipe,
    "fp8_all_gather": _when(False, "the float8 converter has no FSDP float8 all-gather field"),
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
    "reshard_after_forward": lambda v, w: Out(
        {"parallelism.fsdp_reshard_after_forward": "always" if v else "never"}
    ),
    "fsdp_reduce_dtype": lambda v, w: (
        Out({"training.mixed_precision_reduce": "float32"})
        if v == "fp32"
        else no_equivalent("mixed_precision_reduce is float32 only")
    ),
    "fsdp_forward_prefetch": _when(0, "torchtitan sets no explicit forward prefetch"),
    "fsdp_backward_prefetch": _when(1, "torchtitan sets no explicit backward prefetch"),
    "fsdp_grad_sync": _when(
        "every", "torchtitan reduce-scatters the gradients after every micro-batch", always=True
    ),
}


def flags(args: dict[str, Any]) -> list[str]:
    """{"training.steps": 2} as `--training.steps 2` (lists as JSON, bools as bare flags); the
    policy subcommand last, as tyro wants it."""
    from autotune.documents import strict_json

    out = []
    for key, value in args.items():
        if key == AC:
            continue
        if value is True:
            out.append(f"--{key}")
        elif isinstance(value, list):
            out.append(f"--{key} '{strict_json.dumps(value)}'")
        else:
            out.append(f"--{key} {value}")
    if AC in args:
        out.append(f"{AC}:{args[AC]}")
    return out


def torchtitan(w: Winner) -> Form:
    done = translate(w, RULES, NOT_A_KEY)
    args = done.args
    launch = ["MODULE=<your module> CONFIG=<your config function> ./run_train.sh \\"]
    launch += [f"  {flag} \\" for flag in flags(args)]
    launch[-1] = launch[-1].removesuffix(" \\")
    lines = [
        f"# torchtitan (its config as of {SNAPSHOT}): these overrides after --module/--config",
        *env_block(w.env),
        *launch,
        *missing_lines("torchtitan", done.missing),
    ]
    if done.lines:
        lines.append("# in your config function (no flag sets these):")
        lines += [one_line(f"#   {x}") for x in done.lines]
    return Form("torchtitan", "\n".join(lines) + "\n", done.missing)
