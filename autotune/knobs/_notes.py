"""How to apply each knob's value in your own script: the lines of best.yaml's apply.notes, knob by
knob.

Standard library only: shared by the parent (best.yaml) and the trial process (autotune.knobs
imports it). A knob that a task applies its own way has one function per task (knobs.Knob.note maps
the task to it).
"""

from __future__ import annotations

from autotune.knobs._knob import Knobs

# The SDPA backend each `attention` value forces (torch.nn.attention.SDPBackend member names).
SDPA_BACKENDS = {
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "math": "MATH",
}
# torchao's config class for each weight_quant value (torchao.quantization)
QUANT_CONFIGS = {
    "int8_weight_only": "Int8WeightOnlyConfig",
    "int4_weight_only": "Int4WeightOnlyConfig",
    "float8_weight_only": "Float8WeightOnlyConfig",
    "float8_dynamic": "Float8DynamicActivationFloat8WeightConfig",
}


def generate_precision(k: Knobs, device: str) -> list[str]:
    """generate: the model's weights and cache in that dtype."""
    return [
        {
            "fp32": "model in float32, TF32 off",
            "tf32": "model in float32, TF32 matmuls",
            "bf16": "model.to(torch.bfloat16)",
            "fp16": "model.to(torch.float16)",
        }.get(str(k["precision"]), "")
    ]


def precision(k: Knobs, device: str) -> list[str]:
    """train: autocast (or TF32) around forward and loss; fp8 through torchao."""
    return [
        {
            "fp32": "torch.backends.cuda.matmul.fp32_precision = 'ieee' (no TF32)",
            "tf32": "torch.backends.cuda.matmul.fp32_precision = 'tf32'",
            "bf16": f"with torch.autocast({device!r}, dtype=torch.bfloat16): forward and loss",
            "fp16": (
                f"with torch.autocast({device!r}, dtype=torch.float16): forward and loss; "
                f"torch.amp.GradScaler({device!r})"
            ),
            "fp8": (
                "torchao.float8.convert_to_float8_training(model, "
                f"config=Float8LinearConfig.from_recipe_name({k.get('fp8_recipe')!r}), "
                "module_filter_fn=lambda m, fqn: fqn != 'head'); bf16 autocast"
            ),
        }[str(k["precision"])]
    ]


def _compile_args(k: Knobs) -> str:
    mode = k["compile"]
    return "" if mode in (True, "default") else f"mode={mode!r}"


def compile_generate(k: Knobs, device: str) -> list[str]:
    """generate: the decode step (and the prefill) are what is compiled."""
    if not k["compile"]:
        return ["no torch.compile"]
    args = _compile_args(k)
    return [
        f"decode_one_token = torch.compile(decode_one_token{', ' + args if args else ''})"
        + (", dynamic=True" if k.get("kv_cache") == "dynamic" else "")
        + (
            "; prefill compiled separately (without CUDA graphs)"
            if k.get("compile_prefill")
            else "; prefill eager"
        )
    ]


def compile_train(k: Knobs, device: str) -> list[str]:
    """train: the model (loss included), or each block in place and the head with its loss."""
    if not k["compile"]:
        return ["no torch.compile"]
    args = _compile_args(k)
    if k.get("compile_scope") == "block":
        return [
            f"for block in model.blocks (the repeated transformer blocks): block.compile({args}), "
            "in place, before wrapping; then model.head_loss = torch.compile(model.head_loss"
            f"{', ' + args if args else ''}) (final norm, head and loss, where the model has "
            "head_loss); the embedding runs eager"
        ]
    return [f"model = torch.compile(model{', ' + args if args else ''})"]


def attention(k: Knobs, device: str) -> list[str]:
    attention = k.get("attention", "auto")
    if attention == "eager":
        return ["attention as softmax(QK^T)V, materialised"]
    if attention in SDPA_BACKENDS:
        return [
            f"with torch.nn.attention.sdpa_kernel(SDPBackend.{SDPA_BACKENDS[attention]}): forward"
        ]
    return []


def parallel(k: Knobs, device: str) -> list[str]:
    if k.get("parallel") == "ddp":
        how = (
            f"DistributedDataParallel(model, bucket_cap_mb={k['bucket_cap_mb']}, "
            f"gradient_as_bucket_view={k['gradient_as_bucket_view']}, "
            f"static_graph={k['static_graph']}); no_sync() on all but the "
            "last micro-batch of a step"
        )
    elif k.get("parallel") == "fsdp":
        reduce = "bfloat16" if k.get("fsdp_reduce_dtype") == "bf16" else "float32"
        how = (
            f"fully_shard(block, reshard_after_forward={k['reshard_after_forward']}) on every "
            "block, then on the model, MixedPrecisionPolicy(param_dtype=<precision>, "
            f"reduce_dtype={reduce}); "
        ) + (
            "set_requires_gradient_sync(False) on all but the last micro-batch"
            if k.get("fsdp_grad_sync", "last") == "last"
            else "gradients reduce-scattered every micro-batch"
        )
        fwd, bwd = (
            int(k.get("fsdp_forward_prefetch") or 0),
            int(k.get("fsdp_backward_prefetch") or 1),
        )
        if fwd:
            how += f"; blocks[i].set_modules_to_forward_prefetch(blocks[i+1:i+{fwd + 1}])"
        if bwd > 1:
            how += (
                f"; blocks[i].set_modules_to_backward_prefetch([blocks[i-1], ..., blocks[i-{bwd}]])"
            )
    else:
        return []
    return [
        how,
        "launch: torchrun --nproc-per-node <GPUs> your_script.py, with apply.env set for every "
        "rank",
    ]


def quant(k: Knobs, device: str) -> list[str]:
    quant = k.get("weight_quant", "none")
    if quant in (None, "none"):
        return []
    if quant == "int4_weight_only" and k.get("int4_kernel") == "gemlite":
        return [
            "from torchao.quantization import quantize_; from "
            "torchao.prototype.quantization.quant_api import UIntxWeightOnlyConfig; "
            f"quantize_(model, UIntxWeightOnlyConfig(group_size={k['int4_group_size']}, "
            "bit_width=4)) after the model is in its dtype on the GPU (needs gemlite<0.6 with "
            "torchao 0.18)"
        ]
    args = (
        f"group_size={k['int4_group_size']}, int4_packing_format='tile_packed_to_4d'"
        if quant == "int4_weight_only"
        else ""
    )
    config = QUANT_CONFIGS[str(quant)]
    return [
        f"from torchao.quantization import quantize_, {config}; "
        f"quantize_(model, {config}({args})) after the model is in its dtype on the "
        "GPU"
    ]


def kv_cache(k: Knobs, device: str) -> list[str]:
    if k.get("kv_cache") == "dynamic":
        return ["KV cache grown with torch.cat each token (dynamic shapes)"]
    return [
        "KV cache preallocated for prompt_len + gen_len positions (static shapes), written with "
        "index_copy_"
    ]
