"""The winner as Hugging Face `TrainingArguments(...)` keyword arguments and the same as
command-line flags.

The field names are TrainingArguments' (transformers/src/transformers/training_args.py):
per_device_train_batch_size, gradient_accumulation_steps, bf16, fp16, tf32, torch_compile,
torch_compile_mode, gradient_checkpointing, gradient_checkpointing_kwargs, optim, ddp_bucket_cap_mb.
HfArgumentParser makes each a `--<name> <value>` flag.
A command study's HF form is its measured command's own flags instead (_hf_command).
"""

from __future__ import annotations

import shlex
from typing import Any

from autotune.documents import strict_json
from autotune.export._form import (
    MODEL_CODE,
    Form,
    Out,
    Rule,
    call,
    env_block,
    launcher,
    missing_lines,
    no_equivalent,
    one_line,
    translate,
)
from autotune.export._hf_command import hf_command
from autotune.export._winner import Winner

NOT_AN_ARGUMENT = "no TrainingArguments argument"


def _precision(value: Any, w: Winner) -> Out:
    if value == "fp32":  # TF32 off: PyTorch's default, which TrainingArguments' tf32=None leaves
        return Out()
    if value == "fp8":
        return no_equivalent(
            "torchao float8 training of the linear layers: no TrainingArguments argument"
        )
    return Out({value: True})


def _compile(value: Any, w: Winner) -> Out:
    if value is False:
        return Out()
    if value in (True, "default"):
        return Out({"torch_compile": True})
    return Out({"torch_compile": True, "torch_compile_mode": value})


def _compile_scope(value: Any, w: Winner) -> Out:
    if value == "model":
        return Out()
    return no_equivalent("the Trainer's torch_compile compiles the whole model, not each block")


def _attention(value: Any, w: Winner) -> Out:
    if value == "auto":
        return Out()
    if value == "eager":  # an argument of the model's loading, not of TrainingArguments
        return Out(
            lines=['model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="eager")']
        )
    return no_equivalent(MODEL_CODE["attention"](value))


def _checkpointing(value: Any, w: Winner) -> Out:
    if value == "none":
        return Out()
    if value == "full":  # every layer, non-reentrant, as autotune's trial
        return Out(
            {
                "gradient_checkpointing": True,
                "gradient_checkpointing_kwargs": {"use_reentrant": False},
            }
        )
    return no_equivalent(
        f"{value} checkpointing; gradient_checkpointing checkpoints every layer whole"
    )


def _ddp_option(default: Any) -> Rule:
    def rule(value: Any, w: Winner) -> Out:
        return (
            Out()
            if value == default
            else no_equivalent("a DistributedDataParallel option no TrainingArguments sets")
        )

    return rule


def _ddp_compile(value: Any, w: Winner) -> Out:
    if value == "split":
        return Out()
    return no_equivalent("torch._dynamo.config.optimize_ddp = False in your script")


def _parallel(value: Any, w: Winner) -> Out:
    # the Trainer wraps the model in DistributedDataParallel when launched with torchrun
    if value == "ddp":
        return Out()
    return no_equivalent(
        "FSDP2 fully_shard of every block and the root; TrainingArguments' fsdp configures "
        "Accelerate's FSDP plug-in"
    )


RULES: dict[str, Rule] = {
    "micro_batch_size": lambda v, w: Out({"per_device_train_batch_size": v}),
    "grad_accum_steps": lambda v, w: Out({"gradient_accumulation_steps": v}),
    "precision": _precision,
    "compile": _compile,
    "compile_scope": _compile_scope,
    "attention": _attention,
    "activation_checkpointing": _checkpointing,
    # explicit both ways: newer transformers default to the fused AdamW where torch has it
    "fused_optimizer": lambda v, w: Out({"optim": "adamw_torch_fused" if v else "adamw_torch"}),
    "parallel": _parallel,
    "bucket_cap_mb": lambda v, w: Out({"ddp_bucket_cap_mb": v}),
    "ddp_comm_hook": _ddp_option("none"),
    "ddp_compile": _ddp_compile,
    "gradient_as_bucket_view": _ddp_option(False),
    "static_graph": _ddp_option(False),
}


def _flag_value(value: Any) -> str:
    return strict_json.dumps(value) if isinstance(value, dict) else str(value)


def flags(args: dict[str, Any]) -> str:
    """The arguments as HfArgumentParser's flags, quoted for a shell."""
    return shlex.join(
        [part for key, value in args.items() for part in (f"--{key}", _flag_value(value))]
    )


def hf(w: Winner) -> Form:
    """A command study: its measured command's flags (the study's own mappings rendered them);
    otherwise autotune's knobs translated to TrainingArguments."""
    if w.command is not None:
        return hf_command(w)
    done = translate(w, RULES, NOT_AN_ARGUMENT)
    launch = []
    if w.world_size > 1:
        launch = [one_line(f"# launch: {shlex.join(launcher(w))} your_script.py <the flags below>")]
    lines = [
        *env_block(w.env),
        *launch,
        "# TrainingArguments keyword arguments (with your own: output_dir, learning rate, ...)",
        *call("TrainingArguments", done.args),
        "# the same as command-line flags (HfArgumentParser)",
        flags(done.args),
        *(["# lines to add to your script", *done.lines] if done.lines else []),
        *missing_lines("hf", done.missing),
    ]
    return Form("hf", "\n".join(lines) + "\n", done.missing)
