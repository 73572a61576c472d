"""The winner as Lightning `Trainer(...)` arguments, and the lines of your LightningModule or script
for the knobs that are no Trainer argument (the batch size is the DataLoader's, torch.compile and
TF32 are torch's).

Trainer's precision names are Lightning 2's ("32-true", "16-mixed", "bf16-mixed"); DDPStrategy
passes its keyword arguments on to DistributedDataParallel and takes ddp_comm_hook / ddp_comm_state.
"""

from __future__ import annotations

from typing import Any

from autotune.command import render as command_render
from autotune.export._form import (
    Code,
    Form,
    Out,
    Rule,
    call,
    env_block,
    missing_lines,
    no_equivalent,
    py,
    same,
    translate,
)
from autotune.export._measured import declared_lines, lightning_lines
from autotune.export._winner import Winner
from autotune.protocol import Knobs

NOT_AN_ARGUMENT = "no Trainer argument"
PRECISION = {"fp32": "32-true", "tf32": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}
COMM_HOOKS = {
    "fp16_compress": "default_hooks.fp16_compress_hook",
    "bf16_compress": "default_hooks.bf16_compress_hook",
}
POWERSGD_START = 2  # autotune's start_powerSGD_iter (knobs.POWERSGD_START)


def _precision(value: Any, w: Winner) -> Out:
    if value == "fp8":
        return no_equivalent(
            "torchao float8 training; Lightning's fp8 precision is TransformerEngine's"
        )
    out = Out({"precision": PRECISION[value]})
    if value == "tf32":
        out.lines.append(
            'torch.set_float32_matmul_precision("high")  # TF32 matmuls: not a Trainer argument'
        )
    return out


def _compile(value: Any, w: Winner) -> Out:
    if value is False:
        return Out()
    mode = "" if value in (True, "default") else f"mode={py(value)}"
    if w.knobs.get("compile_scope") == "block":
        return Out(
            lines=[
                f"for block in model.blocks: block.compile({mode})  # your repeated blocks; not a "
                "Trainer argument"
            ]
        )
    return Out(
        lines=[
            f"model = torch.compile(model{', ' + mode if mode else ''})  # not a Trainer argument"
        ]
    )


def _checkpointing(value: Any, w: Winner) -> Out:
    if value == "none":
        return Out()
    return no_equivalent(
        "code in your model: torch.utils.checkpoint(block, ..., use_reentrant=False) per block"
    )


def _comm_hook(knobs: Knobs) -> dict[str, Any]:
    hook = knobs.get("ddp_comm_hook") or "none"
    if hook == "powersgd":
        state = (
            "powerSGD.PowerSGDState(process_group=None, "
            f"matrix_approximation_rank={knobs['powersgd_rank']}, "
            f"start_powerSGD_iter={POWERSGD_START})"
        )
        return {"ddp_comm_state": Code(state), "ddp_comm_hook": Code("powerSGD.powerSGD_hook")}
    return {"ddp_comm_hook": Code(COMM_HOOKS[hook])} if hook in COMM_HOOKS else {}


def _parallel(value: Any, w: Winner) -> Out:
    if value == "fsdp":
        return no_equivalent(
            "FSDP2 fully_shard of every block: ModelParallelStrategy and fully_shard in "
            'configure_model; strategy="fsdp" is FSDP1'
        )
    k = w.knobs
    options = {key: k[key] for key in ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph")}
    options.update(_comm_hook(k))
    imports = ["from lightning.pytorch.strategies import DDPStrategy"]
    if "ddp_comm_hook" in options:
        imports.append(
            "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook "
            "as powerSGD"
        )
    strategy = "DDPStrategy(" + ", ".join(f"{key}={py(v)}" for key, v in options.items()) + ")"
    return Out({"strategy": Code(strategy)}, lines=imports)


def _ddp_compile(value: Any, w: Winner) -> Out:
    if value == "split":
        return Out()
    return no_equivalent("torch._dynamo.config.optimize_ddp = False in your script")


RULES: dict[str, Rule] = {
    "micro_batch_size": lambda v, w: Out(
        lines=[f"DataLoader(..., batch_size={v})  # not a Trainer argument"]
    ),
    "grad_accum_steps": lambda v, w: Out({"accumulate_grad_batches": v}),
    "precision": _precision,
    "compile": _compile,
    "compile_scope": same,  # in compile's line
    "activation_checkpointing": _checkpointing,
    "fused_optimizer": lambda v, w: Out(
        lines=["torch.optim.AdamW(..., fused=True)  # in configure_optimizers"] if v else []
    ),
    "parallel": _parallel,
    "bucket_cap_mb": same,  # the DDPStrategy's
    "gradient_as_bucket_view": same,
    "static_graph": same,
    "ddp_comm_hook": same,
    "powersgd_rank": same,
    "ddp_compile": _ddp_compile,
}


def _trainer_args(w: Winner, args: dict[str, Any]) -> dict[str, Any]:
    ranks = {
        "accelerator": "gpu" if w.device == "cuda" else "cpu",
        "devices": w.world_size // w.nnodes,
    }
    if w.nnodes > 1:
        ranks["num_nodes"] = w.nnodes
    return {**ranks, **args}


def _imports_first(lines: list[str]) -> list[str]:
    return sorted(lines, key=lambda line: not line.startswith(("from ", "import ")))


def lightning(w: Winner) -> Form:
    """The Trainer's arguments and your script's lines; of a command study (measure lightning), the
    PL_TRAINER_* variables its trials set too, as they set them, and the knobs its script sets."""
    done = translate(w, RULES, NOT_AN_ARGUMENT)
    trainer_env = command_render.knob_env(w.command or {}, w.knobs)
    lines = [
        *env_block({**w.env, **trainer_env}),
        *lightning_lines(w),
        *declared_lines(w),
        *(["# lines to add to your script", *_imports_first(done.lines)] if done.lines else []),
        "# Trainer arguments (with your own: max_steps, callbacks, ...)",
        *call("trainer = Trainer", _trainer_args(w, done.args)),
        *missing_lines("lightning", done.missing),
    ]
    return Form("lightning", "\n".join(lines) + "\n", done.missing)
