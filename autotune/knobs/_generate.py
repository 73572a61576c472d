"""The knobs of task generate only (the catalogue ends with them: README's table keeps their
order)."""

from __future__ import annotations

from typing import Literal

from autotune.knobs import _notes as notes
from autotune.knobs._knob import Knob, Not, WeightQuant, _positive

GENERATE: tuple[Knob, ...] = (
    Knob(
        "batch_size",
        int,
        1,
        ranged=True,
        sizes=True,
        climb=True,
        check=_positive,
        tasks=("generate",),
        note=lambda k, d: [f"{k['batch_size']} sequences decoded together"],
        help="Concurrent sequences of a generation (prefilled and decoded together): a list, one "
        "value, or {multiple_of, min, max}.",
        values="list, one value, or `{multiple_of, min, max}`",
        effect="sequences prefilled and decoded together",
    ),
    Knob(
        "weight_quant",
        WeightQuant,
        "none",
        tasks=("generate",),
        note=notes.quant,
        help=(
            "Weights of every linear layer through torchao quantize_: none, int8_weight_only, "
            "int4_weight_only (group size: int4_group_size), float8_weight_only, float8_dynamic "
            "(weights and activations, sm89+). Each quantized trial checks its outputs against "
            "the unquantized model (study.drift)."
        ),
        effect=(
            "`torchao.quantization.quantize_(model, <Config>())` on every `nn.Linear` (head "
            "included); each layer's output error, the greedy tokens and the KL divergence "
            "against the unquantized model are recorded, and a trial past `study.drift` ends "
            "`invalid_config: outputs drift`"
        ),
    ),
    Knob(
        "int4_group_size",
        Literal[32, 64, 128, 256],
        128,
        tasks=("generate",),
        only_with=("weight_quant", "int4_weight_only"),
        help="Group size of int4 weight-only quantization (int4_weight_only only).",
        values="`32`, `64`, `128`, `256`",
        effect="`Int4WeightOnlyConfig(group_size=...)`",
    ),
    Knob(
        "int4_kernel",
        Literal["tinygemm", "gemlite"],
        "tinygemm",
        tasks=("generate",),
        only_with=("weight_quant", "int4_weight_only"),
        help=(
            "The int4 kernel (int4_weight_only only): tinygemm, torch's own (tile-packed layout); "
            "gemlite, Triton kernels through torchao's prototype UIntxWeightOnlyConfig (needs "
            "`pip install 'autotune-llm[gemlite]'`: gemlite<0.6 with torchao 0.18). On an H200 "
            "both decode batch 1 at 1.6x bf16 over the linears (docs/BENCHMARKS.md); gemlite "
            "0.5.1's prefill kernel rejects bf16 (invalid_config)."
        ),
        values="`tinygemm`, `gemlite`",
        effect=(
            "tinygemm: `Int4WeightOnlyConfig(group_size, "
            "int4_packing_format='tile_packed_to_4d')`; gemlite: "
            "`UIntxWeightOnlyConfig(group_size, bit_width=4)`"
        ),
    ),
    Knob(
        "compile_prefill",
        bool,
        False,
        tasks=("generate",),
        only_with=("compile", Not(False)),
        help=(
            "Also compile the prefill (without CUDA graphs); false runs it eager, as gpt-fast "
            "does by default. Compiled prefill can be slower than eager with quantized weights "
            "(on an H200, int8 weight-only: 7.9 s against 38 ms for 512 tokens) and costs compile "
            "time."
        ),
        effect="`prefill = torch.compile(prefill)` (mode `default` or `max-autotune`, never CUDA "
        "graphs); false: the prefill runs eager",
    ),
    Knob(
        "kv_cache",
        Literal["static", "dynamic"],
        "static",
        tasks=("generate",),
        note=notes.kv_cache,
        help="static: K/V of prompt_len + gen_len positions preallocated, decode at fixed shapes "
        "(what CUDA graphs need); dynamic: the cache grows by concatenation every token.",
        effect=(
            "static: preallocated K/V, written in place with `index_copy_`, attention over the "
            "whole cache with a mask; dynamic: `torch.cat` per token (compiled with "
            "`dynamic=True`; `reduce-overhead` needs static)"
        ),
    ),
)
