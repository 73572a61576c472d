"""Issue 16's plain DDP reference: the training loop a user would write by hand, timed as the
issue's script was (each optimizer step between a barrier and a synchronise), for the same
configuration an autotune DDP trial runs, so the two can be measured side by side on one machine,
one after the other.

    torchrun --nproc-per-node 2 benchmarks/plain_ddp.py --mbs 64 --accum 4 --bucket-mb 25 --compile
    split
    torchrun --nproc-per-node 1 benchmarks/plain_ddp.py ...            # the one-GPU number for the
    scaling

Only the model class comes from autotune (autotune/workloads/model.py, a plain nn.Module, so both
run the same arithmetic); the loop, the DDP wrapping, the timing and the data are written out here.
--compile:
how compile meets DDP, one question the issue raises: torch.compile(DDP(model)) with Dynamo's
DDPOptimizer (`split`: the graph cut at the bucket boundaries so the all-reduce overlaps the
backward; PyTorch's default, and what DDP(torch.compile(model)), nanoGPT's order, also gets: checked
on gloo, 14 subgraphs either way) or without it (`whole`: torch._dynamo.config.optimize_ddp = False,
one graph); `none`: eager. autotune's knob ddp_compile is the same switch. --profile DIR writes a
torch.profiler trace of two measured steps per rank (chrome trace JSON) for the comparison of both
harnesses.
Prints one JSON line (rank 0): per-GPU tokens/s from the median step (barrier to synchronise) and
from CUDA events, and every sample. On a machine without CUDA it runs on gloo with --tiny (the CPU
test)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from autotune.workloads.model import Transformer  # noqa: E402

GPT2_SMALL = {
    "family": "gpt",
    "n_layers": 12,
    "d_model": 768,
    "n_heads": 12,
    "vocab_size": 50257,
    "seq_len": 1024,
}
TINY = {
    "family": "gpt",
    "n_layers": 2,
    "d_model": 64,
    "n_heads": 4,
    "vocab_size": 256,
    "seq_len": 32,
}


def model_dims(section: dict) -> dict:
    """The model section completed as an autotune trial completes it (tied head, ffn 4 d for gpt,
    ...)."""
    from autotune.config import ModelConfig

    cfg = ModelConfig.model_validate(section)
    return {**cfg.model_dump(), "kv_heads": cfg.kv_heads, "ffn_hidden": cfg.ffn}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mbs", type=int, default=64)
    ap.add_argument("--accum", type=int, default=4)
    ap.add_argument("--bucket-mb", type=float, default=25)
    ap.add_argument("--compile", choices=["split", "whole", "none"], default="split")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument(
        "--pad-vocab",
        type=int,
        default=0,
        help="pad the vocabulary to a multiple of this (0: none)",
    )
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model (the CPU test)")
    ap.add_argument("--profile", type=Path, default=None)
    a = ap.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", 0))
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    m = model_dims(TINY if a.tiny else GPT2_SMALL)
    m.update(
        attention="auto",
        padded_vocab=-(-m["vocab_size"] // a.pad_vocab) * a.pad_vocab
        if a.pad_vocab
        else m["vocab_size"],
        checkpoint_every=0,
    )
    torch.manual_seed(0)
    model = Transformer(m).to(dev)
    opt = torch.optim.AdamW(
        model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=cuda
    )  # nanoGPT's
    if a.compile != "none":
        from torch._dynamo import config as dynamo_config

        dynamo_config.optimize_ddp = a.compile == "split"
    # one GPU: no DDP at all, as a hand-written loop runs it (and as autotune's one-rank trial does)
    ddp = (
        DistributedDataParallel(
            model, device_ids=[local] if cuda else None, bucket_cap_mb=a.bucket_mb
        )
        if world > 1
        else None
    )
    step_model = torch.compile(ddp or model) if a.compile != "none" else (ddp or model)
    gen = torch.Generator(device=dev).manual_seed(rank)
    data = torch.randint(
        0, m["vocab_size"], (a.accum, a.mbs, m["seq_len"] + 1), device=dev, generator=gen
    )
    dtype = torch.bfloat16

    def step() -> None:
        for i in range(a.accum):
            x, y = data[i, :, :-1], data[i, :, 1:]
            sync = i == a.accum - 1
            with (
                ddp.no_sync() if ddp and not sync else contextlib.nullcontext(),
                torch.autocast(dev.type, dtype=dtype),
            ):
                loss = step_model(x, y) / a.accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(a.warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
    wall, events = [], []
    # wall clock around the measured steps (to read nvidia-smi's clock log against)
    window = [time.time()]
    for _ in range(a.steps):
        dist.barrier()
        t0 = time.perf_counter()
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        step()
        if cuda:
            end.record()
            torch.cuda.synchronize()
            events.append(start.elapsed_time(end) / 1000)
        wall.append(time.perf_counter() - t0)
    window.append(time.time())
    if a.profile:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=acts) as prof:
            for _ in range(2):
                step()
            if cuda:
                torch.cuda.synchronize()
        a.profile.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(a.profile / f"plain-{a.compile}-rank{rank}.json"))
    tokens = a.mbs * a.accum * m["seq_len"]  # per GPU a step
    if rank == 0:
        out = {
            "script": "plain_ddp",
            "world_size": world,
            "mbs": a.mbs,
            "accum": a.accum,
            "bucket_mb": a.bucket_mb,
            "compile": a.compile,
            "tokens_per_s_per_gpu": tokens / statistics.median(wall),
            "tokens_per_s_per_gpu_events": tokens / statistics.median(events) if events else None,
            "step_s": wall,
            "event_step_s": events,
            "window": window,
            "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
            "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
        }
        print(json.dumps(out), flush=True)
    dist.barrier()  # every rank past its last collective
    # then leave without the process group's teardown, as autotune's trials do (trial.exit_now):
    # gloo's destroy_process_group hung or aborted (SIGABRT) in it under a loaded CPU, in CI too,
    # barrier or not
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
