"""The estimate itself: the built-in model's shapes, each part of a step's memory, and the peak (memory/__init__.py
says what is counted and how it was checked)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from autotune import knobs as catalogue
from autotune import sizes

GIB = 2**30
# The CUDA context (about 0.5 GiB), NCCL's buffers and the allocator's free blocks: what nvidia-smi shows beyond
# max_memory_allocated. A rough allowance for a capacity check, not a measurement.
RESERVED_OVERHEAD_BYTES = 2 * GIB
CE_CHUNKS = catalogue.CE_CHUNKS  # cross_entropy chunked: slices of the tokens (knobs.py)
# torch.compile with math or eager attention (not measured on a GPU): the fraction of a block's activations
# still saved, from the min-cut partitioner on the CPU (0.85 llama, 0.95 gpt). With flash-type attention the
# compiled block is counted tensor by tensor (compiled_block_activations), as measured on an H200.
COMPILE_ACTIVATIONS = 0.9
# The per-parameter state torch.optim.AdamW keeps (its `step` is one scalar a tensor, left out), each tensor the
# parameter's shape and dtype: read from a real AdamW by tests/test_memory.py, so a change in torch shows.
ADAMW_STATE = ("exp_avg", "exp_avg_sq")


@dataclass(frozen=True)
class Shape:
    """The built-in model's sizes as model.py builds it (derived sizes resolved as config.py resolves them)."""

    family: str
    n_layers: int
    d_model: int
    n_heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    padded_vocab: int
    seq_len: int
    tied: bool

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


def shape(model: dict[str, Any], knobs: dict[str, Any] | None = None) -> Shape | None:
    """The sizes of the built-in model (None for hf_config and entrypoint models): n_kv_heads defaults to
    n_heads; ffn_hidden to 4*d_model (gpt) or 8/3*d_model rounded up to 256 (llama), as config.ModelConfig.ffn;
    the vocabulary padded to knobs' pad_vocab_multiple as train.build_model pads it."""
    if model.get("hf_config") or model.get("entrypoint") or not model.get("family"):
        return None
    d, family = int(model["d_model"]), model["family"]
    ffn = model.get("ffn_hidden") or sizes.default_ffn(family, d)
    vocab = int(model["vocab_size"])
    padded = sizes.padded_vocab(vocab, (knobs or {}).get("pad_vocab_multiple"))
    return Shape(family, int(model["n_layers"]), d, int(model["n_heads"]),
                 int(model.get("kv_heads") or model.get("n_kv_heads") or model["n_heads"]), int(ffn), vocab,
                 padded, int(model["seq_len"]), bool(model.get("tie_embeddings", True)))


@dataclass(frozen=True)
class Param:
    """One parameter tensor: rows (dim 0, what FSDP2 shards) x cols; linear: a weight or bias of an nn.Linear."""

    name: str
    rows: int
    cols: int = 1
    linear: bool = False

    @property
    def numel(self) -> int:
        return self.rows * self.cols

    def shard(self, world: int) -> int:
        """Elements one rank holds under FSDP2: dim 0 split into world_size chunks, padded to equal size."""
        return -(-self.rows // world) * self.cols


def block_params(s: Shape) -> list[Param]:
    """One transformer block's parameters, as model.Block creates them."""
    d, gpt = s.d_model, s.family == "gpt"
    qkv = (s.n_heads + 2 * s.kv_heads) * s.head_dim
    up = s.ffn_hidden if gpt else 2 * s.ffn_hidden  # SwiGLU: gate and up in one matmul
    norm = [Param("norm.weight", d), Param("norm.bias", d)] if gpt else [Param("norm.weight", d)]
    ps = [*norm, *norm, Param("qkv.weight", qkv, d, True), Param("proj.weight", d, d, True),
          Param("up.weight", up, d, True), Param("down.weight", d, s.ffn_hidden, True)]
    if gpt:  # GPT-2 has biases, Llama none
        ps += [Param("qkv.bias", qkv, 1, True), Param("proj.bias", d, 1, True), Param("up.bias", up, 1, True),
               Param("down.bias", d, 1, True)]
    return ps


def root_params(s: Shape) -> list[Param]:
    """The parameters outside the blocks: token embedding, positions (gpt), final norm, head (once when tied)."""
    d = s.d_model
    ps = [Param("tok.weight", s.padded_vocab, d)]
    if s.family == "gpt":
        ps += [Param("pos.weight", s.seq_len, d), Param("norm.weight", d), Param("norm.bias", d)]
    else:
        ps += [Param("norm.weight", d)]
    if not s.tied:
        ps += [Param("head.weight", s.padded_vocab, d, True)]
    return ps


def n_params(s: Shape) -> int:
    """Parameters of the model, as sum(p.numel() for p in Transformer(m).parameters()) counts them."""
    return s.n_layers * sum(p.numel for p in block_params(s)) + sum(p.numel for p in root_params(s))


@dataclass(frozen=True)
class Estimate:
    """Bytes per rank of one training trial. The six parts are each at its own largest; `total` is the peak,
    the larger of `backward` and `step` (module docstring), since the parts are not all alive at once."""

    params: int  # fp32 master parameters this rank holds (1/world_size of them with FSDP)
    grads: int  # fp32 gradients this rank holds after backward (same sharding)
    optimizer: int  # AdamW's exp_avg and exp_avg_sq, fp32 (same sharding)
    gathered: int  # weight copies: autocast's bf16 casts, FSDP's unsharded blocks and root, DDP's buckets
    activations: int  # what the blocks, final norm and head save for backward (+ one block recomputed)
    logits: int  # the loss's peak for one micro-batch: head output, cross-entropy's fp32 tensors, head gradient
    overhead: int = 0  # outside the allocator's tensors (0: the estimate is of max_memory_allocated)
    backward: int = 0  # alive at the peak of backward: the loss's backward, or a block's (0: not computed)
    step: int = 0  # alive at the optimizer step (or the end of backward): parameters, gradients, moments, temporaries
    saved: int = 0  # of activations + logits, what autograd holds at the end of forward (no recompute, no
    # transients of the loss): the number a real forward's saved tensors are checked against

    @property
    def total(self) -> int:
        """The estimated peak of max_memory_allocated, plus overhead (every part at once for an Estimate whose
        backward and step were not computed)."""
        if not (self.backward or self.step):
            return (self.params + self.grads + self.optimizer + self.gathered + self.activations + self.logits
                    + self.overhead)
        return max(self.backward, self.step) + self.overhead

    @property
    def static(self) -> int:
        """The part of the peak that does not scale with the micro-batch: total less activations and logits."""
        return self.total - self.activations - self.logits

    @property
    def phase(self) -> str:
        """Where the peak is: 'backward' or 'optimizer step'."""
        return "backward" if self.backward >= self.step else "optimizer step"

    def as_dict(self) -> dict[str, int]:
        """Every field, and the total, in bytes (for a trial's record)."""
        return {**asdict(self), "total": self.total}


def _knobs(knobs: dict[str, Any], world_size: int) -> dict[str, Any]:
    """The trial's knobs, absent (or null) ones at the catalogue's default; parallel None on one rank."""
    k = {**catalogue.defaults("train"), **{key: v for key, v in knobs.items() if v is not None}}
    k["parallel"] = (knobs.get("parallel") or "ddp") if world_size > 1 else None
    if not isinstance(k.get("grad_accum_steps"), int):  # "auto" before the space is resolved
        k["grad_accum_steps"] = 1
    return k


def compute_bytes(precision: str) -> int:
    """Bytes of a linear's input and output: 2 under autocast (bf16, fp16; fp8 runs under bf16 autocast), else 4."""
    return 2 if precision in ("bf16", "fp16", "fp8") else 4


def residual_bytes(k: dict[str, Any]) -> int:
    """Bytes of the residual stream between blocks: fp32 (the embedding's fp32 output plus bf16 outputs), but
    bf16 under FSDP with autocast, whose MixedPrecisionPolicy casts every block's inputs to its param_dtype.
    Inside a block the norms save an fp32 copy either way (CUDA autocast runs them in fp32)."""
    return 2 if k["parallel"] == "fsdp" and compute_bytes(k["precision"]) == 2 else 4


def attention_kind(s: Shape, c: int, attention: str) -> str:
    """'flash' (flash, cuDNN or memory-efficient SDPA: output and logsumexp saved), 'math' or 'eager'. auto in
    fp32 with grouped-query heads falls to math: flash needs bf16/fp16 and memory-efficient has no GQA."""
    if attention == "eager":
        return "eager"
    if attention == "math" or (attention == "auto" and c == 4 and s.kv_heads != s.n_heads):
        return "math"
    return "flash"


def block_activations(s: Shape, c: int, attention: str) -> tuple[int, int, int]:
    """Bytes one block saves for backward, read op by op from model.Block under CUDA autocast: (per token, per
    sequence, per micro-batch; the last two are the seq x seq attention terms of math and eager). c: compute_bytes.

    RMSNorm saves its fp32 input and rstd (CUDA's fused _fused_rms_norm; the CPU's composite also saves the
    normalised fp32 tensor), LayerNorm its input, mean and rstd."""
    d, h, kvd, f, t = s.d_model, s.n_heads, s.kv_heads * s.head_dim, s.ffn_hidden, s.seq_len
    gpt, kind = s.family == "gpt", attention_kind(s, c, attention)
    norm = 4 * d + (8 if gpt else 4)  # fp32 residual input + LayerNorm's mean and rstd, or RMSNorm's rstd
    qkv = c * d + c * (d + 2 * kvd)  # the linear's input, its output (V, a view of it, keeps all of it)
    rope = 0 if gpt else c * (d + kvd)  # RoPE'd Q and K (.to(x.dtype) copies)
    per_seq = per_batch = 0
    if kind == "flash":
        attn = c * d + 4 * h  # output (proj's input too) and fp32 logsumexp
    elif kind == "eager":  # fp32 softmax output (+ its bf16 cast for @ V under autocast), the causal mask
        attn = c * d  # the output, copied by reshape
        if kvd != d:  # K and V repeated for the query heads are saved instead of RoPE'd K and the qkv output
            qkv, rope, attn = c * d, c * d, attn + 2 * c * d
        per_seq, per_batch = h * t * t * (4 + (2 if c == 2 else 0)), t * t
    else:  # math SDPA (not checked against a GPU): Q, K, V in fp32 (repeated for GQA), fp32 probabilities
        attn = 12 * d + c * d
        per_seq = 4 * h * t * t
    mlp_in = c * d
    mlp = c * (2 * f + f + f) if not gpt else c * (f + f)  # SwiGLU: gate|up, silu(gate), product; GELU in, out
    return 2 * norm + qkv + rope + attn + mlp_in + mlp, per_seq, per_batch


def compiled_block_activations(s: Shape, c: int, fp8: bool, scope: str) -> int:
    """Bytes a token one block saves for backward under torch.compile with flash-type attention, tensor by
    tensor as Inductor's min-cut partitioner chose on an H200 (benchmarks/compile_saved.py, 2026-12-01: exact
    for llama and gpt blocks, bf16 and fp8, per block and whole-model compile). Against eager (block_activations):

    * per block (compile_scope block), the block's fp32 input is its only saved residual (the second norm's
      input is recomputed) and the attention output is saved twice (SDPA's and the contiguous copy the output
      projection reads); whole-model compile keeps both residuals and the one copy of eager mode;
    * SwiGLU's SiLU output is recomputed (the product and the gate|up output are saved); GELU keeps both;
    * fp8 (torchao's float8 linears): the inputs Inductor can recompute cheaply are recomputed and cast again
      in backward: both norms' outputs (the qkv and MLP-up inputs) and the MLP's down input (SwiGLU's product,
      GELU's output). The attention's inputs and output, the qkv and MLP-up outputs stay.
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


def checkpointed_blocks(s: Shape, k: dict[str, Any]) -> int:
    """Blocks run under torch.utils.checkpoint, as model.py picks them (train.build_model's checkpoint_every)."""
    n = s.n_layers
    return {"full": n, "selective": (n + 1) // 2, "selective_op": n}.get(k.get("activation_checkpointing", "none"), 0)


def op_saved(s: Shape, c: int, attention: str) -> int:
    """Bytes per token selective_op keeps of a block besides its input: qkv's and MLP up's matmul outputs (the
    first and third mm; proj and down, the second and fourth, are recomputed) and the attention kernel's."""
    d, h, kvd, f = s.d_model, s.n_heads, s.kv_heads * s.head_dim, s.ffn_hidden
    up = c * (f if s.family == "gpt" else 2 * f)
    return c * (d + 2 * kvd) + up + (c * d + 4 * h if attention_kind(s, c, attention) == "flash" else 0)


def activation_bytes(s: Shape, k: dict[str, Any]) -> tuple[int, int]:
    """(bytes the blocks save for one micro-batch at the end of forward, bytes of the one block recomputed at a
    time in backward) under the checkpointing knob: none saves every block's activations; full, every block's
    input only; selective, every other block's (blocks 0, 2, ...); selective_op, every block's input and the ops
    op_saved names. compile: COMPILE_ACTIVATIONS of a block's."""
    c, mbs, n = compute_bytes(k["precision"]), int(k["micro_batch_size"]), s.n_layers
    tokens = mbs * s.seq_len
    per_token, per_seq, per_batch = block_activations(s, c, k.get("attention", "auto"))
    block = per_token * tokens + per_seq * mbs + per_batch
    if k.get("compile") and attention_kind(s, c, k.get("attention", "auto")) == "flash":
        scope = k.get("compile_scope") or "model"
        block = compiled_block_activations(s, c, k["precision"] == "fp8", scope) * tokens
    elif k.get("compile"):
        block = int(block * COMPILE_ACTIVATIONS)
    checkpointed = checkpointed_blocks(s, k)
    kept = residual_bytes(k) * s.d_model * tokens  # a checkpointed block's input: the residual stream
    selective_op = k.get("activation_checkpointing") == "selective_op"
    ops = op_saved(s, c, k.get("attention", "auto")) * tokens if selective_op else 0
    saved = checkpointed * (kept + ops) + (n - checkpointed) * block
    positions = 8 * s.seq_len if s.family == "gpt" else 0  # gpt's position ids (int64), saved by its embedding
    return saved + positions, (block - ops if checkpointed else 0)


def loss_bytes(s: Shape, k: dict[str, Any], device: str = "cuda") -> dict[str, int]:
    """For one micro-batch: what the final norm and head save (head), what the loss saves (saved), the loss's
    peak in forward (forward) and in backward (peak).

    Eager, the two autocasts differ. cross_entropy calls log_softmax(logits, dim, dtype=<the logits' dtype>);
    CUDA's autocast (log_softmax is an fp32_set_opt_dtype op: a dtype given is kept) runs it in bf16 and saves
    its c-byte output, and nll_loss (an fp32 op) copies that to fp32 and saves the copy; in backward the NLL
    gradient (fp32) joins both: 6 bytes saved, 10 the peak (measured on an H200: the estimate with 12 was
    1.8-1.9 bytes a logit high in all three bf16 cases of tests/test_memory.py -m gpu). The CPU's autocast casts
    log_softmax's input to fp32 instead and saves its fp32 output; the NLL gradient and the log-softmax
    gradient join it: 4 saved, 12 the peak (measured by the CPU tests). Without autocast (fp32), 12 on both.
    Compiled (head_loss is always compiled with the model), the loss is fused: the c-byte logits and two
    fp32 numbers a token are saved, and the logits' gradient is written into the saved logits' buffer once the
    compiled backward has read them (Inductor frees a backward input after its last use and reuses the buffer):
    c bytes a logit at the peak, not 2c (on an H200 the estimate with 2c was 7.8 GiB high, a third of a compiled
    0.6B trial with full checkpointing, benchmarks/memory_vs_peaks.py). Then the head's weight gradient
    is made: the loss's remains, a c-byte gradient and (one rank, DDP) its fp32 copy; that moment can be the
    larger for short sequences. Chunked: each of CE_CHUNKS slices of the tokens is recomputed in backward, so
    one slice's loss is alive at a time, beside the head's gradient summed so far."""
    c, d, v, padded = compute_bytes(k["precision"]), s.d_model, s.vocab, s.padded_vocab
    tokens, fsdp = int(k["micro_batch_size"]) * s.seq_len, k["parallel"] == "fsdp"
    head = 4 * d + (8 if s.family == "gpt" else 4) + c * d  # final norm's fp32 input and stats, the head's input
    if k.get("compile"):  # the logits' gradient is written over the saved logits (Inductor reuses the buffer)
        # where it was seen to (an empirical rule; why Inductor reuses the buffer in one graph and not in another
        # is not established): fp32 logits (GPT-2 small, tf32, 6 trials), and the bf16 logits of the llama
        # family (8 trials, 2026-12-01), not those of the gpt family (6 trials, padded or not: 2c a logit; older
        # code, 2026-11-30, reused them in some GPT-2 trials). The calibration's constant absorbs a miss once one
        # trial of the study has run (benchmarks/memory_vs_peaks.py)
        reused = c == 4 or s.family == "llama"
        grad = 0 if reused else c * padded
        forward, peak, saved, rest = c * padded, c * padded + grad + 8, c * padded + 8, c * padded
    elif c == 2 and device == "cuda":  # bf16 log-softmax output and its fp32 copy saved, the logits held by then
        forward, saved = c * padded + 6 * v, 6 * v
        peak, rest = max(forward, 10 * v), c * v + (c * padded if padded != v else 0)
    else:
        forward = c * padded + (4 * v if c == 2 or padded != v else 0) + 4 * v
        peak, saved, rest = max(forward, 12 * v), 4 * v, c * v + (c * padded if padded != v else 0)
    grad = s.padded_vocab * d * (c + (4 if c == 2 and not fsdp else 0))  # FSDP: the unsharded bf16 gradient
    if k.get("cross_entropy", "standard") == "chunked":
        chunk, g = -(-tokens // CE_CHUNKS), s.padded_vocab * d * c
        # every slice's head shares one weight (autocast caches its cast), so backward sums the slices' c-byte
        # gradients in its buffer (old + new -> sum) and makes the fp32 copy once, after the last slice
        return {"head": residual_bytes(k) * d * tokens, "saved": 0, "forward": chunk * (head + forward),
                "peak": max(g + chunk * (head + peak), 3 * g + chunk * rest, grad)}
    return {"head": head * tokens, "saved": saved * tokens, "forward": (forward - saved) * tokens,
            "peak": max(peak * tokens, rest * tokens + grad)}


def weight_bytes(s: Shape, k: dict[str, Any], world: int) -> dict[str, int]:
    """What the weights cost this rank: params, grads, optimizer; weight copies alive during the loss's backward
    (copies, before a block is recomputed) and during a block's (block_copies, the block being run); autocast's
    bf16 casts (cast_block, a block's; cast_head), cached for the whole forward but kept after it only where a
    linear saved them (checkpointed blocks' are made again in their recompute); gradients that exist before
    backward starts (first_grads) and during the blocks' backward (block_grads); a block's gradients as its
    backward makes them (grad_block); step_extra (module docstring)."""
    blocks, roots, n = block_params(s), root_params(s), s.n_layers
    total, vd = n_params(s), s.padded_vocab * s.d_model
    fsdp, c, accum = k["parallel"] == "fsdp", compute_bytes(k["precision"]), int(k["grad_accum_steps"])
    mine = n * sum(p.shard(world) for p in blocks) + sum(p.shard(world) for p in roots) if fsdp else total
    extra = 0 if k.get("fused_optimizer") else 4 * mine  # foreach AdamW's sqrt(exp_avg_sq) temporary
    state = 4 * len(ADAMW_STATE) * mine  # each state tensor of a parameter, in its (fp32) dtype
    out = {"params": 4 * mine, "grads": 4 * mine, "optimizer": state, "cast_block": 0, "cast_head": 0}
    if fsdp:  # MixedPrecisionPolicy(param_dtype=bf16) under autocast: c bytes a gathered parameter
        fp8 = k["precision"] == "fp8" and bool(k.get("fp8_all_gather"))
        block = sum(p.numel * (1 if fp8 and p.linear and p.cols > 1 else c) for p in blocks)
        root, numel = sum(p.numel for p in roots), sum(p.numel for p in blocks)
        # the root (embedding, final norm, head) is never resharded after forward; of the blocks, the last is
        # gathered again as backward starts, or all stay gathered (reshard_after_forward false); a block's
        # backward adds its unsharded gradients (param dtype) and their fp32 reduce-scatter input
        reshard = k.get("reshard_after_forward", True)
        gathered = root * c + (block if reshard else n * block)
        # explicit prefetching holds that many more gathered blocks (fsdp_forward_prefetch n: n in forward;
        # fsdp_backward_prefetch n: n - 1 beyond FSDP2's default one); without resharding all are gathered anyway
        ahead_fwd = int(k.get("fsdp_forward_prefetch") or 0) * block if reshard else 0
        ahead_bwd = (int(k.get("fsdp_backward_prefetch") or 1) - 1) * block if reshard else 0
        # no_sync accumulation keeps unsharded fp32 gradients (FSDP2's to_accumulated_grad_if_needed);
        # fsdp_grad_sync every reduce-scatters each micro-batch: from the second micro-batch on, the sharded
        # gradients exist through forward and backward (measured on 2x H200: without them the estimate of an
        # 8B trial was 13% low, 80.5 against 92.6 GiB)
        last_only = k.get("fsdp_grad_sync", "last") == "last"
        first = (4 * total if last_only else 4 * mine) if accum > 1 else 0
        # the end of backward: the root still gathered, its unsharded gradients and their fp32 reduce-scatter input
        end = root * (2 * c + 4) + (c * vd if s.tied else 0)
        return {**out, "copies": gathered, "block_copies": gathered + ahead_bwd + numel * (c + 4),
                "ahead": ahead_fwd, "first_grads": first,
                "block_grads": max(first, c * vd), "grad_block": 4 * sum(p.shard(world) for p in blocks),
                "step_extra": max(extra, end)}
    if c == 2:  # linear weights only: biases' casts are cached too but no linear saves them
        fp8 = k["precision"] == "fp8"  # torchao's float8 linears cast their own weights and save the fp32 ones
        out.update(cast_block=0 if fp8 else 2 * sum(p.numel for p in blocks if p.linear and p.cols > 1),
                   cast_head=2 * vd)  # the head stays a bf16 linear (tied too: the embedding's cast)
    ddp = k["parallel"] == "ddp"
    buckets = 4 * total if ddp and not k.get("gradient_as_bucket_view") else 0
    first = 4 * total if accum > 1 or (ddp and k.get("gradient_as_bucket_view")) else 0
    end = 8 * vd if s.tied else 0  # a tied embedding's dense gradient and its sum with the head's, at the end
    return {**out, "copies": buckets, "block_copies": buckets, "first_grads": first, "block_grads": max(first, 4 * vd),
            "grad_block": 0 if first else 4 * sum(p.numel for p in blocks), "step_extra": max(extra, end) + buckets}


def _moments(s: Shape, k: dict[str, Any], w: dict[str, int], saved: int, recompute: int,
             loss: dict[str, int]) -> tuple[int, int, int]:
    """(gathered, backward's peak, the step's peak). Backward's peak is the largest of: the end of forward
    (autocast's cache still holds every cast; the loss's forward), the loss's backward (every activation, the
    loss's peak, gradients only where they already exist), the last block's and the first block's backward
    (the head's gradient, FSDP's gathered block and gradient buffers, the block being recomputed with its
    casts; by the first block the others' activations and casts are freed and their gradients made)."""
    n, checkpointed = s.n_layers, checkpointed_blocks(s, k)
    kept = (n - checkpointed) * w["cast_block"] + w["cast_head"]  # casts a linear saved
    held = w["params"] + w["optimizer"] + saved + loss["head"]
    forward = held + w["copies"] + w.get("ahead", 0) + n * w["cast_block"] + w["cast_head"] + w["first_grads"] + \
        loss["saved"] + loss["forward"]
    at_loss = held + w["copies"] + kept + w["first_grads"] + loss["peak"]
    copies = w["block_copies"] + kept + (w["cast_block"] if checkpointed else 0)
    last = held + copies + w["block_grads"] + recompute
    freed = saved // n + w["cast_block"] * (n - checkpointed) // n  # a block's activations and saved casts
    first = last + (n - 1) * (w["grad_block"] - freed)
    gathered = max(w["copies"] + w.get("ahead", 0) + n * w["cast_block"] + w["cast_head"], copies)
    return gathered, max(forward, at_loss, last, first), w["params"] + w["grads"] + w["optimizer"] + w["step_extra"]


def estimate(model: dict[str, Any], knobs: dict[str, Any], world_size: int = 1, device: str = "cuda") -> Estimate | None:
    """Per-rank bytes of a training trial of the built-in model with these knob values (absent knobs at their
    defaults), before it is launched; None for hf_config and entrypoint models, whose layers are not known here.
    model: the YAML model section as a dict (Config.model.model_dump(mode="json"), or runner.model_spec's);
    device: "cuda" or "cpu", whose autocast the loss follows (loss_bytes)."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1 but got {world_size}")
    k = _knobs(knobs, world_size)
    s = shape(model, k)
    if s is None:
        return None
    w = weight_bytes(s, k, world_size)
    saved, recompute = activation_bytes(s, k)
    loss = loss_bytes(s, k, device)
    gathered, backward, step = _moments(s, k, w, saved, recompute, loss)
    return Estimate(w["params"], w["grads"], w["optimizer"], gathered, saved + loss["head"] + recompute,
                    loss["peak"], backward=backward, step=step, saved=saved + loss["head"] + loss["saved"])
