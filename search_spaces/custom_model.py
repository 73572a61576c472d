"""An example of the entrypoint protocol (search_spaces/entrypoint-example.yaml): your own model.

autotune calls build(knobs, device) inside each trial's process and applies precision, compile, the
SDPA backend, the optimizer and the timing itself. See autotune/workloads/external.py for the
protocol.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, SEQ, D, LAYERS, HEADS = 1024, 128, 96, 2, 4


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        layer = nn.TransformerEncoderLayer(
            D, HEADS, 4 * D, dropout=0.0, batch_first=True, norm_first=True
        )
        self.layers = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(D, VOCAB, bias=False)
        self.register_buffer(
            "mask", nn.Transformer.generate_square_subsequent_mask(SEQ), persistent=False
        )

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.layers(
            self.embed(inputs), mask=self.mask[: inputs.shape[1], : inputs.shape[1]], is_causal=True
        )
        logits = self.head(x)
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def build(knobs: dict, device: str) -> dict:
    model = TinyLM()
    gen = torch.Generator(device=device).manual_seed(0)

    def make_batch(micro_batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, VOCAB, (micro_batch_size, SEQ + 1), device=device, generator=gen)
        return tokens[:, :-1], tokens[:, 1:]

    return {
        "model": model,
        "make_batch": make_batch,
        "tokens_per_sample": SEQ,
        # optional: MFU counts the FLOPs itself (torch.utils.flop_counter); N of 6N only if counting
        # fails
        "flop_params": sum(p.numel() for p in model.parameters()),
        "n_layers": LAYERS,
        "d_model": D,
    }
