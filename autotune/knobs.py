"""The knob catalogue: every knob declared once (values, default, where it acts, how a trial applies it).

Everything else reads this table: the YAML schema (`config.SpaceConfig` is built from it), space resolution
(`space.py`), the trial's defaults (`protocol.TrialSpec.knobs`), best.yaml's apply notes and environment,
and README's knob table (`markdown_table`, pinned by a test). Adding a knob is one entry here plus the
code in the trial that applies it.

Standard library only: the trial's process imports it too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Optional, Union, get_args, get_origin

from autotune import knob_notes as notes
from autotune.knob_notes import QUANT_CONFIGS, SDPA_BACKENDS  # noqa: F401  (re-exported: the trial reads them here)

Note = Callable[[dict[str, Any], str], list[str]]

CHECKPOINT_EVERY = {"none": 0, "full": 1, "selective": 2, "selective_op": 1}  # checkpoint every k-th block
CE_CHUNKS = 8  # cross_entropy chunked: the tokens' slices, each with its own logits, recomputed in backward
POWERSGD_START = 2  # ddp_comm_hook powersgd compresses from this step on (PowerSGD's minimum with error feedback)


def numerics(knobs: dict[str, Any]) -> dict[str, Any]:
    """The knob values of a training trial that change its arithmetic against the reference (bf16, exact
    gradient all-reduce, fp32 reduction): what study.loss_check compares and, past its limit, the cause."""
    out: dict[str, Any] = {}
    if knobs.get("precision") in ("fp8", "fp16"):
        out["precision"] = knobs["precision"]
        if knobs["precision"] == "fp8":
            out["fp8_recipe"] = knobs.get("fp8_recipe")
    if knobs.get("ddp_comm_hook") not in (None, "none"):
        out["ddp_comm_hook"] = knobs["ddp_comm_hook"]
    if knobs.get("fsdp_reduce_dtype") == "bf16":
        out["fsdp_reduce_dtype"] = "bf16"
    return out


def reference_of(knobs: dict[str, Any]) -> dict[str, Any]:
    """The same trial without what `numerics` names: bf16 for fp8/fp16, no comm hook, fp32 reduction."""
    ref = {**knobs}
    if knobs.get("precision") in ("fp8", "fp16"):
        ref.update(precision="bf16", fp8_recipe=None, fp8_all_gather=None)
    if knobs.get("ddp_comm_hook") not in (None, "none"):
        ref.update(ddp_comm_hook="none", powersgd_rank=None)
    if knobs.get("fsdp_reduce_dtype") == "bf16":
        ref["fsdp_reduce_dtype"] = "fp32"
    return ref
TASKS = ("train", "generate")  # workload.task values; each knob says which of them it acts in
BOTH = ("train", "generate")


@dataclass(frozen=True)
class Not:
    """only_with's value for "any value but this one" (compile_scope acts whenever compile is not false)."""

    value: Any

    def __str__(self) -> str:
        return f"not {str(self.value).lower() if isinstance(self.value, bool) else self.value}"


@dataclass(frozen=True)
class Knob:
    """One knob: its values, its default, where it acts and how a trial applies it."""

    name: str
    type: Any  # typing form of one value: Literal[...], int, bool, str, Optional[int], Union[...]
    default: Any  # the value when the YAML leaves the knob out
    help: str  # what it is (the YAML field's description)
    effect: str  # how the trial applies it (README's table)
    values: str = ""  # README's 'values' column where the type alone says too little
    tasks: tuple[str, ...] = ("train",)  # the workloads it acts in
    only_with: tuple[str, Any] | None = None  # acts only when this other knob has this value, or not Not.value (else None)
    multi_rank: bool = False  # acts only across ranks: not searched with world_size 1
    nccl: bool = False  # an NCCL setting: meaningless on gloo (CPU)
    env: tuple[str, ...] = ()  # environment variables of the trial's processes it sets ("default" sets none)
    ranged: bool = False  # also accepts {multiple_of, min, max}
    sizes: bool = False  # positive integers, searched in ascending order
    climb: bool = False  # stepped toward the study's limits by the loop (search/boundary.py); sizes knobs only
    derived: bool = False  # YAML default `auto`: derived from workload.global_batch_size
    check: Callable[[Any], str | None] | None = None  # the message for a value the type admits but the knob does not
    # best.yaml: how to apply these values; a mapping where a task applies the knob its own way
    note: Note | dict[str, Note] | None = None

    def acts_with(self, value: Any) -> bool:
        """Whether this knob acts when its only_with knob has `value`."""
        assert self.only_with is not None
        want = self.only_with[1]
        return value != want.value if isinstance(want, Not) else value == want

    def choices(self) -> tuple[Any, ...]:
        """The closed set of values (a Literal type), else ()."""
        kinds = get_args(self.type) if get_origin(self.type) is Union else (self.type,)
        return tuple(v for k in kinds if get_origin(k) is Literal for v in get_args(k))


MAX_SIZE = 65536  # the largest micro-batch, accumulation, bucket (MiB) or padding multiple a knob accepts


def _positive(value: Any) -> str | None:
    if 1 <= value <= MAX_SIZE:
        return None
    return f"{value} is not a size from 1 to {MAX_SIZE}" if value >= 1 else f"{value} is not a positive integer; sizes must be >= 1"


def _pad(value: Any) -> str | None:
    if value is None or 1 <= value <= MAX_SIZE:
        return None
    return f"{value} is not a positive integer up to {MAX_SIZE}; use null or a multiple such as 64"


def _prefetch(low: int) -> Callable[[Any], str | None]:
    """FSDP2 prefetch depths: low (FSDP2's own default) to MAX_PREFETCH blocks."""

    def check(value: Any) -> str | None:
        if low <= value <= MAX_PREFETCH:
            return None
        return f"{value} is not a prefetch depth; use an integer from {low} to {MAX_PREFETCH} (blocks ahead)"

    return check


MAX_PREFETCH = 8  # each block prefetched holds its gathered weights: deeper costs memory and no more overlap


def _env_value(value: Any) -> str | None:
    """A value that becomes an environment variable: printable, one line, of a sane length."""
    if len(value) > 1024 or not value.isprintable():
        return (f"{value[:40]!r}... is not a setting ({len(value)} characters; at most 1024, printable, one line)"
                if len(value) > 40 else f"{value!r} is not a setting (printable characters, one line)")
    return None


def _channels(value: Any) -> str | None:
    ok = value == "default" or (not isinstance(value, bool) and isinstance(value, int) and 1 <= value <= 64)
    return None if ok else f"{value!r} is not a channel count; use default or an integer from 1 to 64"


Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp8"]
CompileMode = Union[bool, Literal["default", "max-autotune-no-cudagraphs", "reduce-overhead", "max-autotune"]]
NcclAlgo = Literal["default", "Ring", "Tree", "CollnetDirect", "CollnetChain", "PAT", "NVLS"]
NcclProto = Literal["default", "Simple", "LL", "LL128"]
WeightQuant = Literal["none", "int8_weight_only", "int4_weight_only", "float8_weight_only", "float8_dynamic"]


CATALOGUE: tuple[Knob, ...] = (
    Knob("micro_batch_size", int, 8, ranged=True, sizes=True, check=_positive,
         help="Sequences per forward/backward pass: a list, one value, or {multiple_of, min, max}.",
         values="list, one value, or `{multiple_of, min, max}`", effect="sequences per forward/backward"),
    Knob("precision", Precision, "fp32", note={"train": notes.precision, "generate": notes.generate_precision}, tasks=BOTH,
         help="fp32 (TF32 off), tf32 (TF32 matmuls), bf16 (autocast), fp16 (autocast + GradScaler), "
              "fp8 (torchao float8 training of the linear layers, head in bf16; needs torchao and an sm89+ GPU).",
         effect="fp32: TF32 off; tf32: TF32 matmuls (`fp32_precision=\"tf32\"`); bf16: `torch.autocast` bf16; fp16: "
                "autocast fp16 + `GradScaler` (dynamic loss scaling); fp8: torchao `convert_to_float8_training` on "
                "every linear but the output head, under bf16 autocast (needs torchao, `pip install "
                "'autotune[fp8]'`, and an sm89+ GPU; else the trial ends `invalid_config` saying so)"),
    Knob("grad_accum_steps", int, 1, derived=True, sizes=True, check=_positive,
         help="auto: global_batch_size / (micro_batch_size x world_size). "
              "A list (or one value) only when global_batch_size is absent; default then 1.",
         values="`auto` or a list", effect="micro-steps per optimizer step"),
    Knob("compile", CompileMode, False, note={"train": notes.compile_train, "generate": notes.compile_generate}, tasks=BOTH,
         help="torch.compile: false, true (= default), or a mode: max-autotune-no-cudagraphs, "
              "reduce-overhead, max-autotune.",
         values="`false`, `true`/`default`, `max-autotune-no-cudagraphs`, `reduce-overhead`, `max-autotune`",
         effect="`torch.compile(model, mode=...)` (loss included)"),
    Knob("compile_scope", Literal["model", "block"], "model", only_with=("compile", Not(False)),
         help="What torch.compile compiles: model (the whole model, loss included) or block (each repeated "
              "transformer block, compiled once and reused for all: a cold compile of one block, not of every "
              "layer; plus the model's head_loss, i.e. final norm, head and loss, as one more region; the embedding runs eager).",
         effect="model: `torch.compile(model)`; block: `block.compile()` on every block of the model's list of "
                "repeated blocks (built-in model: `blocks`; others: the largest `ModuleList` of one block class; "
                "none: `invalid_config`), then `model.head_loss = torch.compile(model.head_loss)` where the model has one (the "
                "built-in model and hf_config models)"),
    Knob("attention", Literal["auto", "flash", "efficient", "cudnn", "math", "eager"], "auto", note=notes.attention,
         tasks=BOTH,
         help="auto (PyTorch picks the SDPA kernel), an SDPA backend forced with sdpa_kernel "
              "(flash, efficient, cudnn, math), or eager (softmax(QK^T)V materialised, the slow reference).",
         effect="auto: PyTorch's SDPA choice; flash/efficient/cudnn/math: that SDPA backend forced with "
                "`sdpa_kernel` (unavailable here: `invalid_config` with PyTorch's reason); eager: softmax(QK^T)V "
                "materialised"),
    Knob("pad_vocab_multiple", Optional[int], None, check=_pad,
         note=lambda k, d: [f"pad embedding and head to a multiple of {k['pad_vocab_multiple']}; cut logits to the "
                            "vocab before the loss"] if k.get("pad_vocab_multiple") else [],
         help="Pad the embedding and head to a multiple of this (null: no padding); the padded "
              "logits are cut off before the loss, so the model is the same.",
         values="`null`, or an integer such as 64, 128",
         effect="embedding and head padded (50257 -> 50304 with 64); the padded logits are cut off before the loss, "
                "so the model is the same; MFU counts the unpadded model"),
    Knob("activation_checkpointing", Literal["none", "full", "selective", "selective_op"], "none",
         note=lambda k, d: [] if k.get("activation_checkpointing", "none") == "none" else [
             "torch.utils.checkpoint.checkpoint(block, ..., use_reentrant=False"
             + (", context_fn=<torchtitan's op policy>) on every block" if k["activation_checkpointing"] == "selective_op"
                else ") on " + ("every block" if k["activation_checkpointing"] == "full" else "every other block"))],
         help="Recompute activations in the backward pass: none, full (every block), selective (every other "
              "block), selective_op (every block, but the outputs of its matmuls, all but every second one, "
              "and of attention are saved: torchtitan's per-op selective checkpointing).",
         effect="`torch.utils.checkpoint` (non-reentrant) on every block, or every other block; selective_op: "
                "every block with `context_fn=create_selective_checkpoint_contexts(policy)`, the policy saving "
                "`aten.mm`/`addmm` outputs (every second one recomputed) and the SDPA kernels' outputs"),
    Knob("cross_entropy", Literal["standard", "chunked"], "standard",
         note=lambda k, d: [] if k.get("cross_entropy", "standard") == "standard" else [
             f"the tokens in {CE_CHUNKS} slices, each slice's head and cross-entropy under "
             "torch.utils.checkpoint (logits recomputed in backward)"],
         help=f"The loss: standard (the whole batch's logits at once) or chunked ({CE_CHUNKS} slices of the "
              "tokens, each recomputed in backward, so one slice's fp32 logits are alive at a time: less memory "
              "for large vocabularies, one more head matmul).",
         effect=f"chunked: head + cross-entropy over {CE_CHUNKS} token slices, each checkpointed; built-in model only"),
    Knob("fused_optimizer", bool, False,
         note=lambda k, d: ["torch.optim.AdamW(..., fused=True)"] if k.get("fused_optimizer") else [],
         help="AdamW(fused=True) instead of foreach.",
         effect="`AdamW(fused=True)` instead of the foreach implementation"),
    Knob("fp8_recipe", Literal["tensorwise", "rowwise"], "tensorwise", only_with=("precision", "fp8"),
         help="torchao float8 scaling recipe; searched only when precision fp8 is in the space.",
         effect="torchao's float8 scaling recipe; searched only when `fp8` is in `precision`"),
    Knob("fp8_all_gather", bool, False, only_with=("precision", "fp8"), multi_rank=True,
         note=lambda k, d: ["Float8LinearConfig(enable_fsdp_float8_all_gather=True); after each optimizer step "
                            "torchao.float8.precompute_float8_dynamic_scale_for_fsdp(model)"]
         if k.get("fp8_all_gather") else [],
         help="fp8 with fsdp: all-gather the sharded weights in float8 instead of bf16 (half the bytes); "
              "tensorwise recipe only.",
         effect="`Float8LinearConfig(enable_fsdp_float8_all_gather=True)` and "
                "`precompute_float8_dynamic_scale_for_fsdp` after each optimizer step (fsdp, tensorwise); "
                "otherwise `invalid_config`"),
    Knob("cuda_alloc_conf", str, "default", env=("PYTORCH_CUDA_ALLOC_CONF",), check=_env_value, tasks=BOTH,
         help="PYTORCH_CUDA_ALLOC_CONF of the trial process, e.g. expandable_segments:True "
              "(default sets nothing).",
         values="strings, e.g. `default`, `expandable_segments:True`",
         effect="`PYTORCH_CUDA_ALLOC_CONF` of the trial process (`default` sets nothing)"),
    Knob("nccl_algo", NcclAlgo, "default", multi_rank=True, nccl=True, env=("NCCL_ALGO",),
         help="NCCL_ALGO of the ranks (default sets nothing); searched only when world_size > 1 on GPUs. "
              "NVLS is never offered unless you list it; autotune never sets NCCL_NVLS_ENABLE.",
         effect="`NCCL_ALGO` of the ranks (`default` sets nothing). NVLS is never offered unless you list it"),
    Knob("parallel", Literal["ddp", "fsdp"], "ddp", multi_rank=True, note=notes.parallel,
         help="Data parallelism when world_size > 1: ddp (DistributedDataParallel) or "
              "fsdp (FSDP2 fully_shard of every block and the root; mixed precision follows precision).",
         effect="world_size > 1: `DistributedDataParallel` (`no_sync` on all but the last micro-batch), or FSDP2 "
                "`fully_shard` on every block and the root with `MixedPrecisionPolicy(param_dtype=<precision>, "
                "reduce_dtype=float32)` (`set_requires_gradient_sync` likewise; fp16 with fsdp is "
                "`invalid_config`: no sharded GradScaler)"),
    Knob("bucket_cap_mb", int, 25, multi_rank=True, only_with=("parallel", "ddp"), ranged=True, sizes=True,
         check=_positive, help="DDP gradient bucket size in MiB (ddp only).", values="integers, e.g. 25, 50, 100",
         effect="DDP gradient bucket size (ddp only: `null` in fsdp trials)"),
    Knob("ddp_comm_hook", Literal["none", "fp16_compress", "bf16_compress", "powersgd"], "none", multi_rank=True,
         only_with=("parallel", "ddp"),
         help="DDP gradient compression: none, fp16_compress / bf16_compress (all-reduce in half precision), "
              f"powersgd (low-rank, rank powersgd_rank, from step {POWERSGD_START}). Each is checked against the "
              "uncompressed run's loss (study.loss_check). ddp only.",
         effect="`ddp.register_comm_hook(None, default_hooks.<name>_hook)`, or `PowerSGDState(matrix_approximation_rank"
                f"=powersgd_rank, start_powerSGD_iter={POWERSGD_START})` with `powerSGD_hook`; what the library refuses "
                "(bf16 needs NCCL) ends `invalid_config` with its reason"),
    Knob("powersgd_rank", int, 4, multi_rank=True, only_with=("ddp_comm_hook", "powersgd"), check=_positive,
         help="PowerSGD's matrix approximation rank (ddp_comm_hook powersgd only).", values="integers, e.g. 1, 4, 16",
         effect="`PowerSGDState(matrix_approximation_rank=...)`"),
    Knob("ddp_compile", Literal["split", "whole"], "split", multi_rank=True, only_with=("parallel", "ddp"),
         help="How torch.compile meets DDP (ddp with compile): split, Dynamo's DDPOptimizer cuts the compiled graph "
              "at the gradient buckets so each bucket's all-reduce overlaps the rest of the backward (PyTorch's "
              "default); whole, one graph (more fusion), every gradient all-reduced after the compiled backward. "
              "Compiling inside DDP (nanoGPT's DDP(torch.compile(model))) splits the same way: only this flag "
              "changes it.",
         values="`split`, `whole`",
         effect="`torch._dynamo.config.optimize_ddp` true (split) or false (whole) in the trial"),
    Knob("gradient_as_bucket_view", bool, False, multi_rank=True, only_with=("parallel", "ddp"),
         help="DDP gradient_as_bucket_view (ddp only).", effect="DDP option (ddp only)"),
    Knob("static_graph", bool, False, multi_rank=True, only_with=("parallel", "ddp"),
         help="DDP static_graph (ddp only).", effect="DDP option (ddp only)"),
    Knob("reshard_after_forward", bool, True, multi_rank=True, only_with=("parallel", "fsdp"),
         help="FSDP2: free the gathered parameters after forward (fsdp only).", effect="FSDP2 option (fsdp only)"),
    Knob("fsdp_reduce_dtype", Literal["fp32", "bf16"], "fp32", multi_rank=True, only_with=("parallel", "fsdp"),
         help="FSDP2: the dtype of the gradient reduce-scatter (bf16 halves its bytes and changes the sums; checked "
              "against fp32's loss by study.loss_check). fsdp only.",
         effect="`MixedPrecisionPolicy(reduce_dtype=...)`"),
    Knob("fsdp_forward_prefetch", int, 0, multi_rank=True, only_with=("parallel", "fsdp"), check=_prefetch(0),
         help="FSDP2 forward prefetch: 0, FSDP2's implicit prefetching (the next block's all-gather overlaps the "
              "current block's compute, issued after it); n, each block issues the all-gathers of the next n "
              "blocks before its own forward (set_modules_to_forward_prefetch): earlier on the CPU, at n more "
              "gathered blocks of memory. fsdp only.", values="integers from 0 to 8, e.g. 0, 1, 2",
         effect="n > 0: `blocks[i].set_modules_to_forward_prefetch(blocks[i+1:i+1+n])`; 0 sets nothing"),
    Knob("fsdp_backward_prefetch", int, 1, multi_rank=True, only_with=("parallel", "fsdp"), check=_prefetch(1),
         help="FSDP2 backward prefetch: 1, FSDP2's default (the next block in reverse forward order); n > 1, each "
              "block's backward prefetches the all-gathers of the n blocks before it "
              "(set_modules_to_backward_prefetch), at n - 1 more gathered blocks of memory. FSDP2 cannot turn it "
              "off. fsdp only.", values="integers from 1 to 8, e.g. 1, 2",
         effect="n > 1: `blocks[i].set_modules_to_backward_prefetch([blocks[i-1], ..., blocks[i-n]])`; 1 sets "
                "nothing"),
    Knob("fsdp_grad_sync", Literal["last", "every"], "last", multi_rank=True, only_with=("parallel", "fsdp"),
         help="FSDP2 with gradient accumulation: reduce-scatter the gradients on the last micro-batch only "
              "(last: less communication, but every rank keeps the whole model's unsharded fp32 gradients "
              "between micro-batches, 4 bytes a parameter) or after every micro-batch (every: sharded "
              "gradients only, as torchtitan does). fsdp only.",
         effect="last: `model.set_requires_gradient_sync(False)` on all but the last micro-batch; every: never "
                "disabled"),
    Knob("nccl_proto", NcclProto, "default", multi_rank=True, nccl=True, env=("NCCL_PROTO",),
         help="NCCL_PROTO of the ranks (default sets nothing); world_size > 1 on GPUs.",
         effect="`NCCL_PROTO` of the ranks"),
    Knob("nccl_nchannels", Union[Literal["default"], int], "default", multi_rank=True, nccl=True,
         env=("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"), check=_channels,
         help="Sets NCCL_MIN_NCHANNELS and NCCL_MAX_NCHANNELS of the ranks (default sets nothing); world_size > 1 on "
              "GPUs.", values="`default` or 1 to 64",
         effect="`NCCL_MIN_NCHANNELS` and `NCCL_MAX_NCHANNELS` of the ranks"),
    # --- generate (text generation: prefill, then decode with a KV cache) ---
    Knob("batch_size", int, 1, ranged=True, sizes=True, climb=True, check=_positive, tasks=("generate",),
         note=lambda k, d: [f"{k['batch_size']} sequences decoded together"],
         help="Concurrent sequences of a generation (prefilled and decoded together): a list, one value, or "
              "{multiple_of, min, max}.", values="list, one value, or `{multiple_of, min, max}`",
         effect="sequences prefilled and decoded together"),
    Knob("weight_quant", WeightQuant, "none", tasks=("generate",), note=notes.quant,
         help="Weights of every linear layer through torchao quantize_: none, int8_weight_only, int4_weight_only "
              "(group size: int4_group_size), float8_weight_only, float8_dynamic (weights and activations, sm89+). "
              "Each quantized trial checks its outputs against the unquantized model (study.drift).",
         effect="`torchao.quantization.quantize_(model, <Config>())` on every `nn.Linear` (head included); each layer's output error, the "
                "greedy tokens and the KL divergence against the unquantized model are recorded, and a trial past "
                "`study.drift` ends `invalid_config: outputs drift`"),
    Knob("int4_group_size", Literal[32, 64, 128, 256], 128, tasks=("generate",),
         only_with=("weight_quant", "int4_weight_only"),
         help="Group size of int4 weight-only quantization (int4_weight_only only).",
         values="`32`, `64`, `128`, `256`", effect="`Int4WeightOnlyConfig(group_size=...)`"),
    Knob("int4_kernel", Literal["tinygemm", "gemlite"], "tinygemm", tasks=("generate",),
         only_with=("weight_quant", "int4_weight_only"),
         help="The int4 kernel (int4_weight_only only): tinygemm, torch's own (tile-packed layout); gemlite, "
              "Triton kernels through torchao's prototype UIntxWeightOnlyConfig (needs `pip install 'autotune[gemlite]'`: "
              "gemlite<0.6 with torchao 0.18). On an H200 both decode batch 1 at 1.6x bf16 over the linears "
              "(docs/BENCHMARKS.md); gemlite 0.5.1's prefill kernel rejects bf16 (invalid_config).",
         values="`tinygemm`, `gemlite`",
         effect="tinygemm: `Int4WeightOnlyConfig(group_size, int4_packing_format='tile_packed_to_4d')`; gemlite: "
                "`UIntxWeightOnlyConfig(group_size, bit_width=4)`"),
    Knob("compile_prefill", bool, False, tasks=("generate",), only_with=("compile", Not(False)),
         help="Also compile the prefill (without CUDA graphs); false runs it eager, as gpt-fast does by default. "
              "Compiled prefill can be slower than eager with quantized weights (on an H200, int8 weight-only: "
              "7.9 s against 38 ms for 512 tokens) and costs compile time.",
         effect="`prefill = torch.compile(prefill)` (mode `default` or `max-autotune`, never CUDA graphs); false: "
                "the prefill runs eager"),
    Knob("kv_cache", Literal["static", "dynamic"], "static", tasks=("generate",), note=notes.kv_cache,
         help="static: K/V of prompt_len + gen_len positions preallocated, decode at fixed shapes (what CUDA graphs "
              "need); dynamic: the cache grows by concatenation every token.",
         effect="static: preallocated K/V, written in place with `index_copy_`, attention over the whole cache with a "
                "mask; dynamic: `torch.cat` per token (compiled with `dynamic=True`; `reduce-overhead` needs static)"),
)

BY_NAME: dict[str, Knob] = {k.name: k for k in CATALOGUE}
NAMES: tuple[str, ...] = tuple(BY_NAME)


def defaults(task: str = "train") -> dict[str, Any]:
    """Every knob of the task at its default: what a trial assumes for a knob its spec leaves out."""
    return {k.name: k.default for k in CATALOGUE if task in k.tasks}


def env_of(knobs: dict[str, Any]) -> dict[str, str]:
    """Environment variables that apply these knob values (best.yaml's apply.env); "default" sets nothing."""
    return {var: str(knobs[k.name]) for k in CATALOGUE if k.env and knobs.get(k.name, "default") not in ("default", None)
            for var in k.env}


def apply_notes(knobs: dict[str, Any], device: str, task: str = "train") -> list[str]:
    """How to reproduce these knob values in a script of the task (best.yaml's apply.notes), knob by knob."""
    lines = []
    for k in CATALOGUE:
        note = k.note.get(task) if isinstance(k.note, dict) else k.note
        if note is not None and k.name in knobs:
            lines += note(knobs, device)
    return lines


def values_text(knob: Knob) -> str:
    if knob.values:
        return knob.values
    if knob.type is bool:
        return "`false`, `true`" if knob.default is False else "`true`, `false`"
    return ", ".join(f"`{v}`" for v in knob.choices())


def _default_text(knob: Knob) -> str:
    if knob.derived:
        return "`auto`"
    value = knob.default
    return f"`{'null' if value is None else str(value).lower() if isinstance(value, bool) else value}`" \
        if not isinstance(value, int) or isinstance(value, bool) else str(value)


def markdown_table() -> str:
    """README's knob table, made from the catalogue (a test fails when README's copy differs)."""
    rows = ["| knob | values | default when absent | applies to | effect in the trial (recorded in the trial's `applied`) |",
            "|---|---|---|---|---|"]
    for k in CATALOGUE:
        where = ", ".join(k.tasks)
        if k.only_with:
            owner, value = k.only_with
            where += f" with `{owner}` not `{str(value.value).lower()}`" if isinstance(value, Not) else \
                f" with `{owner}: {value}`"
        if k.multi_rank:
            where += ", world_size > 1" + (" on GPUs" if k.nccl else "")
        rows.append(f"| `{k.name}` | {values_text(k)} | {_default_text(k)} | {where} | {k.effect} |")
    return "\n".join(rows) + "\n"
