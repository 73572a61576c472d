"""The built-in model's sizes and parameters, as model.py builds them (memory/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune import sizes
from autotune.protocol import Knobs


@dataclass(frozen=True)
class Shape:
    """The built-in model's sizes as model.py builds it (derived sizes resolved as autotune.config
    resolves them)."""

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


def shape(model: dict[str, Any], knobs: Knobs | None = None) -> Shape | None:
    """The sizes of the built-in model (None for hf_config and entrypoint models): n_kv_heads
    defaults to n_heads; ffn_hidden to 4*d_model (gpt) or 8/3*d_model rounded up to 256 (llama), as
    config.ModelConfig.ffn; the vocabulary padded to knobs' pad_vocab_multiple as train.build_model
    pads it."""
    if model.get("hf_config") or model.get("entrypoint") or not model.get("family"):
        return None
    d, family = int(model["d_model"]), model["family"]
    ffn = model.get("ffn_hidden") or sizes.default_ffn(family, d)
    vocab = int(model["vocab_size"])
    multiple = (knobs or {}).get("pad_vocab_multiple")
    padded = sizes.padded_vocab(vocab, multiple if isinstance(multiple, int) else None)
    return Shape(
        family,
        int(model["n_layers"]),
        d,
        int(model["n_heads"]),
        int(model.get("kv_heads") or model.get("n_kv_heads") or model["n_heads"]),
        int(ffn),
        vocab,
        padded,
        int(model["seq_len"]),
        bool(model.get("tie_embeddings", True)),
    )


@dataclass(frozen=True)
class Param:
    """One parameter tensor: rows (dim 0, what FSDP2 shards) x cols; linear: a weight or bias of an
    nn.Linear."""

    name: str
    rows: int
    cols: int = 1
    linear: bool = False

    @property
    def numel(self) -> int:
        return self.rows * self.cols

    def shard(self, world: int) -> int:
        """Elements one rank holds under FSDP2: dim 0 split into world_size chunks, padded to equal
        size."""
        return -(-self.rows // world) * self.cols


def block_params(s: Shape) -> list[Param]:
    """One transformer block's parameters, as model.Block creates them."""
    d, gpt = s.d_model, s.family == "gpt"
    qkv = (s.n_heads + 2 * s.kv_heads) * s.head_dim
    up = s.ffn_hidden if gpt else 2 * s.ffn_hidden  # SwiGLU: gate and up in one matmul
    norm = [Param("norm.weight", d), Param("norm.bias", d)] if gpt else [Param("norm.weight", d)]
    ps = [
        *norm,
        *norm,
        Param("qkv.weight", qkv, d, True),
        Param("proj.weight", d, d, True),
        Param("up.weight", up, d, True),
        Param("down.weight", d, s.ffn_hidden, True),
    ]
    if gpt:  # GPT-2 has biases, Llama none
        ps += [
            Param("qkv.bias", qkv, 1, True),
            Param("proj.bias", d, 1, True),
            Param("up.bias", up, 1, True),
            Param("down.bias", d, 1, True),
        ]
    return ps


def root_params(s: Shape) -> list[Param]:
    """The parameters outside the blocks: token embedding, positions (gpt), final norm, head (once
    when tied)."""
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
    """Parameters of the model, as sum(p.numel() for p in Transformer(m).parameters()) counts
    them."""
    return s.n_layers * sum(p.numel for p in block_params(s)) + sum(p.numel for p in root_params(s))
