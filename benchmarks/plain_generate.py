"""A plain hand-written generation loop (gpt-fast's recipe), to stand beside autotune's generate
trials.

    python3 benchmarks/plain_generate.py [--quant none|int8|int4] [--compile] [--batch 1] [--prompt
    512] [--gen 256]

Llama-3.1-8B shape (32 layers, d 4096, 32 heads, 8 KV heads, ffn 14336, vocab 128256), random bf16
weights, static KV cache, greedy decoding; with --compile the decode step is
torch.compile(mode="reduce-overhead", fullgraph=True) (CUDA graphs); the prefill runs eager
(--compile-prefill: compiled, without graphs).
Shares no code with autotune.
Times 3 generations after 2 warm-up ones (CUDA events around each), prints one JSON line: output
tokens/s (batch x gen / generation time), median time per output token, time to first token.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch import nn

D, L, H, KV, FFN, V, THETA = 4096, 32, 32, 8, 14336, 128256, 500000.0
HD = D // H


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return (x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin).to(x.dtype)


class Layer(nn.Module):
    def __init__(self, b: int, n: int) -> None:
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D, eps=1e-5), nn.RMSNorm(D, eps=1e-5)
        self.wqkv = nn.Linear(D, (H + 2 * KV) * HD, bias=False)
        self.wo = nn.Linear(D, D, bias=False)
        self.w13 = nn.Linear(D, 2 * FFN, bias=False)
        self.w2 = nn.Linear(FFN, D, bias=False)
        self.register_buffer("k", torch.zeros(b, KV, n, HD))
        self.register_buffer("v", torch.zeros(b, KV, n, HD))

    def forward(
        self,
        x: torch.Tensor,
        pos: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
    ):
        b, t, _ = x.shape
        q, k, v = self.wqkv(self.n1(x)).split([H * HD, KV * HD, KV * HD], -1)
        q = rope(q.view(b, t, H, HD).transpose(1, 2), cos, sin)
        k = rope(k.view(b, t, KV, HD).transpose(1, 2), cos, sin)
        v = v.view(b, t, KV, HD).transpose(1, 2)
        self.k.index_copy_(2, pos, k)
        self.v.index_copy_(2, pos, v)
        y = F.scaled_dot_product_attention(q, self.k, self.v, attn_mask=mask, enable_gqa=True)
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, D))
        g, u = self.w13(self.n2(x)).chunk(2, -1)
        return x + self.w2(F.silu(g) * u)


class Model(nn.Module):
    def __init__(self, b: int, n: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer(b, n) for _ in range(L))
        self.norm = nn.RMSNorm(D, eps=1e-5)
        self.out = nn.Linear(D, V, bias=False)
        inv = 1.0 / THETA ** (torch.arange(0, HD, 2).float() / HD)
        ang = torch.outer(torch.arange(n).float(), inv)
        ang = torch.cat([ang, ang], -1)
        self.register_buffer("cos", ang.cos())
        self.register_buffer("sin", ang.sin())
        self.register_buffer("causal", torch.ones(n, n, dtype=torch.bool).tril())

    def forward(self, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        x = self.emb(tok)
        cos, sin, mask = self.cos[pos], self.sin[pos], self.causal[pos][None, None]
        for layer in self.layers:
            x = layer(x, pos, cos, sin, mask)
        return self.out(self.norm(x[:, -1:])).argmax(-1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quant", default="none", choices=["none", "int8", "int4"])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument(
        "--compile-prefill", action="store_true", help="also compile the prefill (default: eager)"
    )
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=256)
    a = ap.parse_args()
    n = a.prompt + a.gen
    with torch.device("meta"):
        model = Model(a.batch, n).to(torch.bfloat16)
    model = model.to_empty(device="cuda")
    with torch.no_grad():
        for p in model.parameters():
            nn.init.normal_(p, std=0.02) if p.dim() > 1 else nn.init.ones_(p)
    inv = 1.0 / THETA ** (torch.arange(0, HD, 2, device="cuda").float() / HD)
    ang = torch.outer(torch.arange(n, device="cuda").float(), inv)
    ang = torch.cat([ang, ang], -1)
    model.cos, model.sin = ang.cos(), ang.sin()
    model.causal = torch.ones(n, n, dtype=torch.bool, device="cuda").tril()
    for layer in model.layers:
        layer.k.zero_()
        layer.v.zero_()
    model = model.eval().requires_grad_(False)
    if a.quant != "none":
        from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig, quantize_

        quantize_(
            model,
            Int8WeightOnlyConfig()
            if a.quant == "int8"
            else Int4WeightOnlyConfig(group_size=128, int4_packing_format="tile_packed_to_4d"),
        )
    prefill, decode = model.forward, model.forward
    if a.compile:
        if a.compile_prefill:
            prefill = torch.compile(model.forward, dynamic=False)
        decode = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    prompts = torch.randint(0, V, (a.batch, a.prompt), device="cuda")

    def generate() -> tuple[float, list[float], float]:
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(a.gen + 1)]
        ev[0].record()
        with torch.no_grad():
            tok = prefill(prompts, torch.arange(a.prompt, device="cuda")).clone()
            ev[1].record()
            for i in range(a.gen - 1):
                p = a.prompt + i
                tok = decode(tok, torch.arange(p, p + 1, device="cuda")).clone()
                ev[i + 2].record()
        torch.cuda.synchronize()
        gaps = [ev[i].elapsed_time(ev[i + 1]) for i in range(a.gen)]
        return ev[0].elapsed_time(ev[-1]), gaps[1:], gaps[0]

    for _ in range(2):
        generate()
    runs = [generate() for _ in range(3)]
    total = statistics.median(r[0] for r in runs)
    tpot = statistics.median(g for r in runs for g in r[1])
    print(
        json.dumps(
            {
                "script": "plain_generate",
                "quant": a.quant,
                "compile": a.compile,
                "compile_prefill": a.compile_prefill,
                "batch": a.batch,
                "prompt": a.prompt,
                "gen": a.gen,
                "tokens_per_s": a.batch * a.gen / (total / 1000),
                "tpot_ms_median": tpot,
                "ttft_ms": statistics.median(r[2] for r in runs),
                "torch": torch.__version__,
                "gpu": torch.cuda.get_device_name(),
            }
        )
    )


if __name__ == "__main__":
    main()
