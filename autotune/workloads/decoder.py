"""The models a generate trial decodes with: the built-in GPT with a static or dynamic KV cache of
its own (Decoder, gpt-fast's layout), and a Hugging Face model through its own cache (HFDecoder);
full_logits is the cache-free reference the drift guard and the tests compare with.

Imported only inside a trial's process: torch, nothing else.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import torch as torch_types
    from torch import Tensor
    from transformers import Cache, PreTrainedModel

    from autotune.workloads.model import Block, Transformer

# the dynamic cache: each block's K and V so far, [batch, kv heads, positions, head_dim]
Caches = list[tuple["Tensor", "Tensor"]]


class Decoder:
    """The built-in Transformer's blocks run with a KV cache: static (buffers, a mask over the whole
    cache) or dynamic (tensors passed in and returned, grown by torch.cat)."""

    def __init__(
        self,
        torch: ModuleType,
        model: Transformer,
        batch: int,
        length: int,
        dtype: torch_types.dtype,
        static: bool,
        eager: bool,
    ) -> None:
        self.torch, self.model, self.static, self.eager = torch, model, static, eager
        self.length = length
        from autotune.workloads.model import StaticKV

        # the model's blocks as built (an nn.ModuleList types its items as plain modules)
        self.blocks = cast("list[Block]", list(model.blocks))
        self.layers = len(self.blocks)
        attn = self.blocks[0].attn
        self.n_heads, self.n_kv, self.head_dim = attn.n_heads, attn.n_kv, attn.head_dim
        dev = model.tok.weight.device
        if static:
            self.caches = [
                StaticKV(batch, self.n_kv, length, self.head_dim, dtype, dev) for _ in self.blocks
            ]
            self.mask = torch.ones(length, length, dtype=torch.bool, device=dev).tril()

    def forward(
        self, tokens: Tensor, pos: Tensor, caches: Caches | None = None
    ) -> tuple[Tensor, Caches | None]:
        """Logits of the last position of `tokens` (at positions `pos`), and (dynamic cache) the
        grown caches."""
        torch, model = self.torch, self.model
        b, t = tokens.shape
        x = model.tok(tokens)
        rope = None
        if model.pos is not None:
            x = x + model.pos(pos)
        else:
            rope = (model.rope_cos[pos], model.rope_sin[pos])
        grown = []
        for i, block in enumerate(self.blocks):
            a = block.attn
            q, k, v = a.heads(block.norm1(x), rope)
            if self.static:
                k, v = self.caches[i].update(pos, k, v)
                # [1, 1, t, length]: each query sees the positions up to its own
                mask = self.mask[pos][None, None]
            else:
                if caches is not None:
                    k = torch.cat([caches[i][0], k], dim=2)
                    v = torch.cat([caches[i][1], v], dim=2)
                grown.append((k, v))
                mask = None
            y = self._attend(q, k, v, mask, causal=not self.static and t > 1)
            x = x + a.proj(y.transpose(1, 2).reshape(b, t, -1))
            x = x + block.mlp(block.norm2(x))
        logits = model.head(model.norm(x[:, -1:]))
        return logits[..., : model.vocab], (None if self.static else grown)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
        torch = self.torch
        if not self.eager:
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=self.n_kv != self.n_heads
            )
        if k.shape[1] != q.shape[1]:
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        if causal:
            t, s = q.shape[-2], k.shape[-2]
            mask = torch.ones(t, s, dtype=torch.bool, device=q.device).tril(s - t)[None, None]
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v


class HFDecoder:
    """A transformers causal LM decoded with its own DynamicCache (passed in and returned, as
    Decoder's dynamic cache): the same interface as Decoder."""

    def __init__(self, hf: PreTrainedModel, vocab: int) -> None:
        cfg = hf.config
        self.hf, self.vocab = hf, vocab
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.layers = cfg.num_hidden_layers

    def forward(
        self, tokens: Tensor, pos: Tensor, caches: Cache | None = None
    ) -> tuple[Tensor, Cache]:
        out = self.hf(input_ids=tokens, past_key_values=caches, use_cache=True)
        return out.logits[:, -1:, : self.vocab], out.past_key_values


def full_logits(torch: ModuleType, model: Transformer, tokens: Tensor, last: int) -> Tensor:
    """Logits (float32) of the last `last` positions, from the model's own training forward (no
    cache)."""
    x = model.hidden(tokens)
    return model.head(model.norm(x[:, -last:]))[..., : model.vocab].float()
