"""The built-in decoder-only transformer: gpt (LayerNorm, GELU, learned positions) or llama
(RMSNorm, SwiGLU, RoPE, GQA).

Imported only inside a trial's process: needs torch and nothing else from autotune.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import math
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

if TYPE_CHECKING:
    from torch.utils.checkpoint import SelectiveCheckpointContext

    from autotune.protocol import TrialSpec


class Dims(TypedDict):
    """The built-in model as a trial builds it: the model section's sizes (the parent fills in the
    derived kv_heads and ffn_hidden: runner.model_spec) and what the trial's knobs lay out
    (train.build_model)."""

    family: str  # gpt or llama
    n_layers: int
    d_model: int
    n_heads: int
    kv_heads: int
    ffn_hidden: int
    vocab_size: int
    seq_len: int
    rope_theta: float  # llama's RoPE base
    tie_embeddings: bool
    attention: NotRequired[str]  # the knob: eager runs eager_attention, else SDPA
    padded_vocab: NotRequired[int]  # rows of the embedding and head (>= vocab_size)
    checkpoint_every: NotRequired[int]  # 0: no activation checkpointing; k: every k-th block
    checkpoint_ops: NotRequired[bool]  # keep the matmul and attention outputs (selective_op)
    ce_chunks: NotRequired[int]  # slices of the tokens the head and loss run over


def dims_of(
    spec: TrialSpec,
    *,
    attention: str,
    padded_vocab: int,
    checkpoint_every: int = 0,
    checkpoint_ops: bool = False,
    ce_chunks: int = 1,
) -> Dims:
    """The built-in model of this trial: its spec's model section (JSON the parent checked against
    config.ModelConfig) with the layout its knobs chose."""
    assert spec.model is not None, "the built-in model needs the spec's model section"
    layout = {
        "attention": attention,
        "padded_vocab": padded_vocab,
        "checkpoint_every": checkpoint_every,
        "checkpoint_ops": checkpoint_ops,
        "ce_chunks": ce_chunks,
    }
    return cast(Dims, {**spec.model, **layout})


# torchtitan's per-op selective activation checkpointing: inside each block, the outputs of these
# ops are saved (every matmul's but every second one, the attention kernels'), everything else is
# recomputed in backward.
def _op_policy() -> Any:
    from collections import defaultdict

    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    mms = {aten.mm.default, aten.addmm.default}
    save = mms | {
        getattr(aten, name).default
        for name in (
            "_scaled_dot_product_flash_attention",
            "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_cudnn_attention",
            "_scaled_dot_product_flash_attention_for_cpu",
        )
        if hasattr(aten, name)
    }
    counts: dict[str, int] = defaultdict(int)

    def policy(
        ctx: SelectiveCheckpointContext, func: object, *args: object, **kwargs: object
    ) -> CheckpointPolicy:
        mode = "recompute" if ctx.is_recompute else "forward"
        if func in mms:
            counts[mode] += 1
        keep = func in save and not (func in mms and counts[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


# AOTAutograd's cache skips a graph with a selective-checkpointing context_fn unless the function
# names a stable `cache_hash` (torch/_functorch/_aot_autograd/autograd_cache.py): without it every
# fresh process recompiled a checkpointed block the study had compiled. The policy's own source is
# its identity, so an edit to it is a new key.
_op_policy.cache_hash = hashlib.sha256(  # type: ignore[attr-defined]
    inspect.getsource(_op_policy).encode()
).hexdigest()


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(QK^T / sqrt(d)) V with the causal mask, the score matrix materialised (the slow
    reference)."""
    # grouped-query attention: share each K/V head among its query heads
    if k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    t = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v


class Attention(nn.Module):
    def __init__(self, m: Dims) -> None:
        super().__init__()
        self.eager = m.get("attention") == "eager"
        self.n_heads, self.n_kv = m["n_heads"], m["kv_heads"]
        self.head_dim = m["d_model"] // m["n_heads"]
        bias = m["family"] == "gpt"  # GPT-2 has biases, Llama has none
        self.qkv = nn.Linear(
            m["d_model"], (self.n_heads + 2 * self.n_kv) * self.head_dim, bias=bias
        )
        self.proj = nn.Linear(m["d_model"], m["d_model"], bias=bias)

    def heads(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, ...]:
        """Q, K, V as [batch, heads, tokens, head_dim], RoPE applied (llama); the generate
        workload's cache decoder calls this too."""
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split(
            [self.n_heads * self.head_dim, self.n_kv * self.head_dim, self.n_kv * self.head_dim],
            dim=-1,
        )
        q = q.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = _apply_rope(q, *rope), _apply_rope(k, *rope)
        return q, k, v

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None
    ) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.heads(x, rope)
        if self.eager:
            y = eager_attention(q, k, v)
        else:
            y = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, enable_gqa=self.n_kv != self.n_heads
            )
        return self.proj(y.transpose(1, 2).reshape(b, t, -1))


def _rope_tables(
    seq_len: int, head_dim: int, theta: float, device: torch.device | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / theta ** (
        torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim
    )
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32, device=device), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)  # rotate-half form, as in HF Llama
    return (x * cos + rotated * sin).to(x.dtype)


class MLP(nn.Module):
    def __init__(self, m: Dims) -> None:
        super().__init__()
        self.swiglu = m["family"] == "llama"
        d, h = m["d_model"], m["ffn_hidden"]
        bias = not self.swiglu
        # SwiGLU: gate and up in one matmul
        self.up = nn.Linear(d, 2 * h if self.swiglu else h, bias=bias)
        self.down = nn.Linear(h, d, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            gate, up = self.up(x).chunk(2, dim=-1)
            return self.down(F.silu(gate) * up)
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, m: Dims) -> None:
        super().__init__()
        norm = (
            (lambda: nn.RMSNorm(m["d_model"], eps=1e-5))
            if m["family"] == "llama"
            else (lambda: nn.LayerNorm(m["d_model"]))
        )
        self.norm1, self.attn, self.norm2, self.mlp = norm(), Attention(m), norm(), MLP(m)
        # set by Transformer (m["checkpoint_every"])
        self.checkpointed, self.checkpoint_ops = False, False

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None
    ) -> torch.Tensor:
        """The checkpoint is taken here, inside the block (torchtitan's checkpoint_wrapper sits
        inside fully_shard and torch.compile the same way): a block compiled in place then compiles
        the checkpoint with it, and Inductor's partitioner honours the per-op policy. Taken around a
        compiled block instead, the policy never sees the compiled ops, saves nothing, and
        selective_op becomes full recomputation (seen on the H200: the same peak memory and speed as
        full)."""
        if not self.checkpointed:
            return self._forward(x, rope)
        if not self.checkpoint_ops:
            return torch.utils.checkpoint.checkpoint(self._forward, x, rope, use_reentrant=False)
        # _op_policy named here, not through a variable: Dynamo traces a checkpoint's context_fn
        # only when it is the function itself (a variable holding it is a LazyVariableTracker)
        return torch.utils.checkpoint.checkpoint(
            self._forward, x, rope, use_reentrant=False, context_fn=_op_policy
        )

    def _forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None
    ) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), rope)
        return x + self.mlp(self.norm2(x))


class StaticKV(nn.Module):
    """K and V of every position a generation reaches, preallocated; written in place (index_copy_):
    the generate workload's static cache (workloads/decoder.py)."""

    k: torch.Tensor
    v: torch.Tensor

    def __init__(
        self,
        b: int,
        heads: int,
        length: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        super().__init__()
        shape = (b, heads, length, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        # CUDA graphs keep them in place rather than copying them
        with contextlib.suppress(Exception):
            torch._dynamo.mark_static_address(self.k)
            torch._dynamo.mark_static_address(self.v)

    def update(
        self, pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.k.index_copy_(2, pos, k)
        self.v.index_copy_(2, pos, v)
        return self.k, self.v


class Transformer(nn.Module):
    """forward(tokens, targets) returns the mean cross-entropy loss, so torch.compile covers the
    loss too.

    m["padded_vocab"] (>= vocab_size) sizes the embedding and head; logits past vocab_size are cut
    off before the loss, so padding changes the matmul shapes and nothing else.
    m["checkpoint_every"]: 0 (no activation checkpointing), 1 (every block) or 2 (every other
    block); m["checkpoint_ops"]: inside each checkpointed block keep the matmul and attention
    outputs (torchtitan's per-op selective policy). m["ce_chunks"] > 1: the head and cross-entropy
    run over that many slices of the tokens, each recomputed in backward, so only one slice's logits
    are ever alive (the 128k-vocabulary logits dominate Llama-3's memory).

    Built as torchtitan builds: construct under `torch.device("meta")` (no memory, no work), then
    `to_empty(device=...)` and `init_weights()` there: an 8B model never exists on the CPU.
    """

    def __init__(self, m: Dims) -> None:
        super().__init__()
        self.cfg = m
        self.vocab = m["vocab_size"]
        self.padded_vocab = m.get("padded_vocab") or m["vocab_size"]
        self.checkpoint_every = m.get("checkpoint_every", 0)
        self.checkpoint_ops = bool(m.get("checkpoint_ops"))
        self.ce_chunks = int(m.get("ce_chunks") or 1)
        # compile_dynamic batch (workloads/compiling.apply_compile_dynamic): the hidden state's
        # batch dimension is marked dynamic before each separately compiled region
        self.dynamic_batch = False
        self.tok = nn.Embedding(self.padded_vocab, m["d_model"])
        self.pos = nn.Embedding(m["seq_len"], m["d_model"]) if m["family"] == "gpt" else None
        blocks = [Block(m) for _ in range(m["n_layers"])]
        for i, block in enumerate(blocks):
            block.checkpointed = bool(self.checkpoint_every) and i % self.checkpoint_every == 0
            block.checkpoint_ops = self.checkpoint_ops
        self.blocks = nn.ModuleList(blocks)
        self.norm = (
            nn.RMSNorm(m["d_model"], eps=1e-5)
            if m["family"] == "llama"
            else nn.LayerNorm(m["d_model"])
        )
        self.head = nn.Linear(m["d_model"], self.padded_vocab, bias=False)
        if m["family"] == "llama":
            cos, sin = _rope_tables(m["seq_len"], m["d_model"] // m["n_heads"], m["rope_theta"])
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """Initialise every parameter and buffer on the device the model lives on (after to_empty
        too):
        normal(0, 0.02) weights, GPT-2's scaled residual projections, unit norms, the RoPE tables;
        the head tied to the embedding again (to_empty from the meta device unties shared
        parameters)."""
        m = self.cfg
        if m["tie_embeddings"]:
            self.head.weight = self.tok.weight
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2's scaled init of residual projections
            if name.endswith(("proj.weight", "down.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * m["n_layers"]))
        if m["family"] == "llama":
            self.rope_cos, self.rope_sin = _rope_tables(
                m["seq_len"],
                m["d_model"] // m["n_heads"],
                m["rope_theta"],
                device=self.tok.weight.device,
            )

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
            module.reset_parameters()

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.head_loss(self._dynamic(self.hidden(tokens)), self._dynamic(targets))

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        """The last block's output for every position (embedding, positions or RoPE, the blocks;
        activation checkpointing as configured): what the loss, or the generate workload's drift
        check, reads."""
        t = tokens.shape[1]
        x = self.tok(tokens)
        rope = None
        if self.pos is not None:
            x = x + self.pos(torch.arange(t, device=tokens.device))
        else:
            rope = (self.rope_cos[:t], self.rope_sin[:t])
        for block in self.blocks:
            x = block(self._dynamic(x), rope)  # checkpointed inside, as configured
        return x

    def _dynamic(self, x: torch.Tensor) -> torch.Tensor:
        """x with its batch dimension marked dynamic for the compiled region it enters (eager code
        between per-block regions only: inside a whole-model compile Dynamo marks nothing)."""
        if self.dynamic_batch and not torch.compiler.is_compiling():
            torch._dynamo.maybe_mark_dynamic(x, 0)
        return x

    def head_loss(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Final norm, output head and cross-entropy: what follows the blocks (compile_scope block
        compiles it as one more region, so the fp32 logits of the loss are fused rather than
        materialised)."""
        if self.ce_chunks > 1:
            xs, ts = (
                x.reshape(-1, x.shape[-1]).chunk(self.ce_chunks),
                targets.reshape(-1).chunk(self.ce_chunks),
            )
            total = sum(
                torch.utils.checkpoint.checkpoint(self._loss_sum, xc, tc, use_reentrant=False)
                for xc, tc in zip(xs, ts)
            )
            return total / targets.numel()
        return self._loss_sum(x, targets) / targets.numel()

    def _loss_sum(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.norm(x))
        if self.padded_vocab != self.vocab:
            logits = logits[..., : self.vocab]
        # autocast runs the cross-entropy in fp32
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum"
        )

    def flop_params(self) -> int:
        """Parameters counted in 6N (PaLM appendix B): all of them, once, except position embeddings
        and vocabulary padding (the model's FLOPs, not the padded matmul's)."""
        n = sum(p.numel() for p in self.parameters())
        pad_rows = (self.padded_vocab - self.vocab) * self.cfg["d_model"]
        n -= pad_rows if self.cfg["tie_embeddings"] else 2 * pad_rows
        return n - (self.pos.weight.numel() if self.pos is not None else 0)

    def checkpointed_blocks(self) -> int:
        """How many blocks recompute in backward (all of their activations, or all but the saved
        ops')."""
        return sum(1 for block in self.blocks if block.checkpointed)
