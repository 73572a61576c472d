"""What a step saves for backward: each block's activations under each checkpointing choice, eager
and compiled, and the loss's logits (memory/__init__.py says what is counted and how it was
checked)."""

from __future__ import annotations

from autotune import knobs as catalogue
from autotune.memory._shape import Shape
from autotune.protocol import Knobs

CE_CHUNKS = catalogue.CE_CHUNKS  # cross_entropy chunked: slices of the tokens (autotune/knobs)
# torch.compile with math or eager attention (not measured on a GPU): the fraction of a block's
# activations still saved, from the min-cut partitioner on the CPU (0.85 llama, 0.95 gpt). With
# flash-type attention the compiled block is counted tensor by tensor (compiled_block_activations),
# as measured on an H200.
COMPILE_ACTIVATIONS = 0.9


def compute_bytes(precision: str) -> int:
    """Bytes of a linear's input and output: 2 under autocast (bf16, fp16; fp8 runs under bf16
    autocast), else 4."""
    return 2 if precision in ("bf16", "fp16", "fp8") else 4


def residual_bytes(k: Knobs) -> int:
    """Bytes of the residual stream between blocks: fp32 (the embedding's fp32 output plus bf16
    outputs), but bf16 under FSDP with autocast, whose MixedPrecisionPolicy casts every block's
    inputs to its param_dtype.
    Inside a block the norms save an fp32 copy either way (CUDA autocast runs them in fp32)."""
    return 2 if k["parallel"] == "fsdp" and compute_bytes(str(k["precision"])) == 2 else 4


def attention_kind(s: Shape, c: int, attention: str) -> str:
    """'flash' (flash, cuDNN or memory-efficient SDPA: output and logsumexp saved), 'math' or
    'eager'. auto in fp32 with grouped-query heads falls to math: flash needs bf16/fp16 and
    memory-efficient has no GQA."""
    if attention == "eager":
        return "eager"
    if attention == "math" or (attention == "auto" and c == 4 and s.kv_heads != s.n_heads):
        return "math"
    return "flash"


def block_activations(s: Shape, c: int, attention: str) -> tuple[int, int, int]:
    """Bytes one block saves for backward, read op by op from model.Block under CUDA autocast: (per
    token, per sequence, per micro-batch; the last two are the seq x seq attention terms of math and
    eager). c:
    compute_bytes.

    RMSNorm saves its fp32 input and rstd (CUDA's fused _fused_rms_norm; the CPU's composite also
    saves the normalised fp32 tensor), LayerNorm its input, mean and rstd."""
    d, h, kvd, f, t = s.d_model, s.n_heads, s.kv_heads * s.head_dim, s.ffn_hidden, s.seq_len
    gpt, kind = s.family == "gpt", attention_kind(s, c, attention)
    # fp32 residual input + LayerNorm's mean and rstd, or RMSNorm's rstd
    norm = 4 * d + (8 if gpt else 4)
    # the linear's input, its output (V, a view of it, keeps all of it)
    qkv = c * d + c * (d + 2 * kvd)
    rope = 0 if gpt else c * (d + kvd)  # RoPE'd Q and K (.to(x.dtype) copies)
    per_seq = per_batch = 0
    if kind == "flash":
        attn = c * d + 4 * h  # output (proj's input too) and fp32 logsumexp
    # fp32 softmax output (+ its bf16 cast for @ V under autocast), the causal mask
    elif kind == "eager":
        attn = c * d  # the output, copied by reshape
        # K and V repeated for the query heads are saved instead of RoPE'd K and the qkv output
        if kvd != d:
            qkv, rope, attn = c * d, c * d, attn + 2 * c * d
        per_seq, per_batch = h * t * t * (4 + (2 if c == 2 else 0)), t * t
    # math SDPA (not checked against a GPU): Q, K, V in fp32 (repeated for GQA), fp32 probabilities
    else:
        attn = 12 * d + c * d
        per_seq = 4 * h * t * t
    mlp_in = c * d
    # SwiGLU: gate|up, silu(gate), product; GELU in, out
    mlp = c * (2 * f + f + f) if not gpt else c * (f + f)
    return 2 * norm + qkv + rope + attn + mlp_in + mlp, per_seq, per_batch


def compiled_block_activations(s: Shape, c: int, fp8: bool, scope: str) -> int:
    """Bytes a token one block saves for backward under torch.compile with flash-type attention,
    tensor by tensor as Inductor's min-cut partitioner chose on an H200
    (benchmarks/compile_saved.py, 2026-12-01: exact for llama and gpt blocks, bf16 and fp8, per
    block and whole-model compile). Against eager (block_activations):

    * per block (compile_scope block), the block's fp32 input is its only saved residual (the second
      norm's input is recomputed) and the attention output is saved twice (SDPA's and the contiguous
      copy the output projection reads); whole-model compile keeps both residuals and the one copy
      of eager mode;
    * SwiGLU's SiLU output is recomputed (the product and the gate|up output are saved); GELU keeps
      both;
    * fp8 (torchao's float8 linears): the inputs Inductor can recompute cheaply are recomputed and
      cast again in backward: both norms' outputs (the qkv and MLP-up inputs) and the MLP's down
      input (SwiGLU's product, GELU's output). The attention's inputs and output, the qkv and MLP-up
      outputs stay.
    """
    d, h, kvd, f = s.d_model, s.n_heads, s.kv_heads * s.head_dim, s.ffn_hidden
    gpt = s.family == "gpt"
    stats = 8 if gpt else 4  # LayerNorm's mean and rstd, or RMSNorm's rstd, per norm
    qkv = c * (d + 2 * kvd)  # the fused qkv output (V, a view of it, keeps all of it)
    rope = 0 if gpt else c * (d + kvd)  # RoPE'd Q and K
    attn = c * d + 4 * h  # SDPA's output and fp32 logsumexp
    mlp_up = c * f if gpt else 2 * c * f  # GELU's input, or SwiGLU's gate|up
    down_in = 0 if fp8 else c * f  # GELU's output, or SwiGLU's product
    norm_out = 0 if fp8 else 2 * c * d  # the qkv and MLP-up inputs
    if scope == "block":
        residual, attn_copy = 4 * d, c * d
    else:
        residual, attn_copy = 8 * d, 0
    return residual + 2 * stats + qkv + rope + attn + attn_copy + norm_out + mlp_up + down_in


def checkpointed_blocks(s: Shape, k: Knobs) -> int:
    """Blocks run under torch.utils.checkpoint, as model.py picks them (train.build_model's
    checkpoint_every)."""
    n = s.n_layers
    return {"full": n, "selective": (n + 1) // 2, "selective_op": n}.get(
        str(k.get("activation_checkpointing", "none")), 0
    )


def op_saved(s: Shape, c: int, attention: str) -> int:
    """Bytes per token selective_op keeps of a block besides its input: qkv's and MLP up's matmul
    outputs (the first and third mm; proj and down, the second and fourth, are recomputed) and the
    attention kernel's."""
    d, h, kvd, f = s.d_model, s.n_heads, s.kv_heads * s.head_dim, s.ffn_hidden
    up = c * (f if s.family == "gpt" else 2 * f)
    return (
        c * (d + 2 * kvd)
        + up
        + (c * d + 4 * h if attention_kind(s, c, attention) == "flash" else 0)
    )


def activation_bytes(s: Shape, k: Knobs) -> tuple[int, int]:
    """(bytes the blocks save for one micro-batch at the end of forward, bytes of the one block
    recomputed at a time in backward) under the checkpointing knob: none saves every block's
    activations; full, every block's input only; selective, every other block's (blocks 0, 2, ...);
    selective_op, every block's input and the ops op_saved names. compile: COMPILE_ACTIVATIONS of a
    block's."""
    c, mbs, n = (
        compute_bytes(str(k["precision"])),
        catalogue.int_of(k, "micro_batch_size"),
        s.n_layers,
    )
    tokens = mbs * s.seq_len
    per_token, per_seq, per_batch = block_activations(s, c, str(k.get("attention", "auto")))
    block = per_token * tokens + per_seq * mbs + per_batch
    if k.get("compile") and attention_kind(s, c, str(k.get("attention", "auto"))) == "flash":
        scope = str(k.get("compile_scope") or "model")
        block = compiled_block_activations(s, c, k["precision"] == "fp8", scope) * tokens
    elif k.get("compile"):
        block = int(block * COMPILE_ACTIVATIONS)
    checkpointed = checkpointed_blocks(s, k)
    # a checkpointed block's input: the residual stream
    kept = residual_bytes(k) * s.d_model * tokens
    selective_op = k.get("activation_checkpointing") == "selective_op"
    ops = op_saved(s, c, str(k.get("attention", "auto"))) * tokens if selective_op else 0
    saved = checkpointed * (kept + ops) + (n - checkpointed) * block
    # gpt's position ids (int64), saved by its embedding
    positions = 8 * s.seq_len if s.family == "gpt" else 0
    return saved + positions, (block - ops if checkpointed else 0)


def loss_bytes(s: Shape, k: Knobs, device: str = "cuda") -> dict[str, int]:
    """For one micro-batch: what the final norm and head save (head), what the loss saves (saved),
    the loss's peak in forward (forward) and in backward (peak).

    Eager, the two autocasts differ. cross_entropy calls log_softmax(logits, dim, dtype=<the logits'
    dtype>); CUDA's autocast (log_softmax is an fp32_set_opt_dtype op: a dtype given is kept) runs
    it in bf16 and saves its c-byte output, and nll_loss (an fp32 op) copies that to fp32 and saves
    the copy; in backward the NLL gradient (fp32) joins both: 6 bytes saved, 10 the peak (measured
    on an H200: the estimate with 12 was 1.8-1.9 bytes a logit high in all three bf16 cases of
    tests/test_memory.py -m gpu). The CPU's autocast casts log_softmax's input to fp32 instead and
    saves its fp32 output; the NLL gradient and the log-softmax gradient join it: 4 saved, 12 the
    peak (measured by the CPU tests). Without autocast (fp32), 12 on both.
    Compiled (head_loss is always compiled with the model), the loss is fused: the c-byte logits and
    two fp32 numbers a token are saved, and the logits' gradient is written into the saved logits'
    buffer once the compiled backward has read them (Inductor frees a backward input after its last
    use and reuses the buffer):
    c bytes a logit at the peak, not 2c (on an H200 the estimate with 2c was 7.8 GiB high, a third
    of a compiled 0.6B trial with full checkpointing, benchmarks/memory_vs_peaks.py). Then the
    head's weight gradient is made: the loss's remains, a c-byte gradient and (one rank, DDP) its
    fp32 copy; that moment can be the larger for short sequences. Chunked: each of CE_CHUNKS slices
    of the tokens is recomputed in backward, so one slice's loss is alive at a time, beside the
    head's gradient summed so far."""
    c, d, v, padded = compute_bytes(str(k["precision"])), s.d_model, s.vocab, s.padded_vocab
    tokens, fsdp = catalogue.int_of(k, "micro_batch_size") * s.seq_len, k["parallel"] == "fsdp"
    # final norm's fp32 input and stats, the head's input
    head = 4 * d + (8 if s.family == "gpt" else 4) + c * d
    # the logits' gradient is written over the saved logits (Inductor reuses the buffer)
    if k.get("compile"):
        # where it was seen to (an empirical rule; why Inductor reuses the buffer in one graph and
        # not in another is not established): fp32 logits (GPT-2 small, tf32, 6 trials), and the
        # bf16 logits of the llama family (8 trials, 2026-12-01), not those of the gpt family (6
        # trials, padded or not: 2c a logit; older code, 2026-11-30, reused them in some GPT-2
        # trials). The calibration's constant absorbs a miss once one trial of the study has run
        # (benchmarks/memory_vs_peaks.py)
        reused = c == 4 or s.family == "llama"
        grad = 0 if reused else c * padded
        forward, peak, saved, rest = c * padded, c * padded + grad + 8, c * padded + 8, c * padded
    # bf16 log-softmax output and its fp32 copy saved, the logits held by then
    elif c == 2 and device == "cuda":
        forward, saved = c * padded + 6 * v, 6 * v
        peak, rest = max(forward, 10 * v), c * v + (c * padded if padded != v else 0)
    else:
        forward = c * padded + (4 * v if c == 2 or padded != v else 0) + 4 * v
        peak, saved, rest = max(forward, 12 * v), 4 * v, c * v + (c * padded if padded != v else 0)
    # FSDP: the unsharded bf16 gradient
    grad = s.padded_vocab * d * (c + (4 if c == 2 and not fsdp else 0))
    if k.get("cross_entropy", "standard") == "chunked":
        chunk, g = -(-tokens // CE_CHUNKS), s.padded_vocab * d * c
        # every slice's head shares one weight (autocast caches its cast), so backward sums the
        # slices' c-byte gradients in its buffer (old + new -> sum) and makes the fp32 copy once,
        # after the last slice
        return {
            "head": residual_bytes(k) * d * tokens,
            "saved": 0,
            "forward": chunk * (head + forward),
            "peak": max(g + chunk * (head + peak), 3 * g + chunk * rest, grad),
        }
    return {
        "head": head * tokens,
        "saved": saved * tokens,
        "forward": (forward - saved) * tokens,
        "peak": max(peak * tokens, rest * tokens + grad),
    }
