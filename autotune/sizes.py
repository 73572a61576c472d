"""The built-in model's derived sizes, defined once: the config, the memory estimate and the trial
read them here.

Standard library only (the trial process imports it, as it imports autotune.knobs).
"""

from __future__ import annotations

import math


def default_ffn(family: str, d_model: int) -> int:
    """The MLP's hidden width when model.ffn_hidden is absent: 4 x d_model (GPT-2), or 8/3 x d_model
    rounded up to a multiple of 256 (Llama's SwiGLU with multiple_of=256, Meta's reference
    model.py)."""
    return 4 * d_model if family == "gpt" else 256 * math.ceil(8 * d_model / 3 / 256)


def padded_vocab(vocab: int, multiple: int | None) -> int:
    """The embedding's and head's rows under pad_vocab_multiple (50257 -> 50304 with 64), else the
    vocabulary."""
    return -(-vocab // multiple) * multiple if multiple else vocab
