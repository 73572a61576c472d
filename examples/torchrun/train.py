"""A plain PyTorch training script (no framework) that reports its steps to autotune with two lines:
a small causal LM on random tokens, data-parallel when launched with torchrun. Its knobs are its own
flags.

    python examples/torchrun/train.py --batch_size 8 --accum 2 --precision bf16 --steps 50
    torchrun --standalone --nproc-per-node 2 examples/torchrun/train.py ...

autotune tunes it as it is (search_spaces/torchrun-script.yaml, task command).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os

import torch
import torch.nn.functional as F

from autotune import reporting


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch_size", type=int, default=8, help="sequences per micro-batch")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--compile", choices=["false", "true"], default="false")
    p.add_argument("--optimizer", choices=["adamw", "adamw_fused", "sgd"], default="adamw")
    p.add_argument("--steps", type=int, default=100, help="optimizer steps")
    p.add_argument("--seq_len", type=int, default=64)
    p.add_argument("--d_model", type=int, default=64)
    p.add_argument("--vocab", type=int, default=512)
    return p.parse_args()


def model_of(a: argparse.Namespace, device: str) -> torch.nn.Module:
    layer = torch.nn.TransformerEncoderLayer(
        a.d_model, 4, 4 * a.d_model, batch_first=True, norm_first=True
    )
    body = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    return torch.nn.Sequential(
        torch.nn.Embedding(a.vocab, a.d_model), body, torch.nn.Linear(a.d_model, a.vocab)
    ).to(device)


def optimizer_of(a: argparse.Namespace, params) -> torch.optim.Optimizer:
    if a.optimizer == "sgd":
        return torch.optim.SGD(params, lr=1e-2)
    return torch.optim.AdamW(params, lr=1e-3, fused=a.optimizer == "adamw_fused" or None)


def main() -> None:
    a = parse()
    print("config:", json.dumps(vars(a), sort_keys=True), flush=True)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if distributed:
        torch.distributed.init_process_group("nccl" if device == "cuda" else "gloo")
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    model = model_of(a, device)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = optimizer_of(a, model.parameters())
    step_fn = torch.compile(model) if a.compile == "true" else model
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
    autocast = torch.autocast(device, dtype=dtype) if dtype else contextlib.nullcontext()
    g = torch.Generator(device="cpu").manual_seed(0)
    reporting.begin()
    for _ in range(a.steps):
        for _ in range(a.accum):
            tokens = torch.randint(0, a.vocab, (a.batch_size, a.seq_len + 1), generator=g).to(
                device
            )
            with autocast:
                logits = step_fn(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten()) / a.accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if reporting.step(tokens=a.batch_size * a.accum * a.seq_len):
            break  # autotune has its steps
    if distributed:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
