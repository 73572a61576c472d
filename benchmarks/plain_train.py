"""Issue 34's hand-set expert configurations: the training loop an expert writes by hand for one
GPU, timed outside autotune, to hold autotune's chosen configuration against.

python3 benchmarks/plain_train.py --yaml benchmarks/spaces/staged-llama-1.2b.yaml --precision fp8
--recipe tensorwise --mbs 16 --compile --fused

Only the model class comes from autotune (autotune/workloads/model.py, a plain nn.Module, so both
run the same arithmetic) and the model section is read from the study's YAML; the precision (bf16
autocast; fp8: torchao's convert_to_float8_training on every linear but the head, under bf16
autocast), torch.compile of the whole model, AdamW (nanoGPT's settings, fused or not), activation
checkpointing (none), the accumulation to the global batch and the timing are written out here:
`--warmup` untimed optimizer steps (the first carries the compile), then `--steps` steps each
between CUDA events. Prints one JSON line: tokens/s from the median step and from all tokens over
all measured time, and every sample. On a machine without CUDA it runs the model on the CPU (bf16
only; the CPU test)."""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from autotune.workloads.model import Transformer  # noqa: E402


def model_dims(section: dict) -> dict:
    """The model section completed as an autotune trial completes it (kv heads, ffn, ...)."""
    from autotune.config import ModelConfig

    cfg = ModelConfig.model_validate(section)
    return {**cfg.model_dump(), "kv_heads": cfg.kv_heads, "ffn_hidden": cfg.ffn}


def build(a: argparse.Namespace, dev: torch.device) -> tuple[torch.nn.Module, int]:
    doc = yaml.safe_load(Path(a.yaml).read_text())
    m = model_dims(doc["model"])
    pad = a.pad_vocab or 1  # nanoGPT's 50304: the vocabulary padded to a multiple of 64
    padded = -(-m["vocab_size"] // pad) * pad
    m.update(attention="auto", padded_vocab=padded, checkpoint_every=0)
    with torch.device("meta"):
        model = Transformer(m)
    model = model.to_empty(device=dev)
    torch.manual_seed(0)
    model.init_weights()
    if a.precision == "fp8":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        config = Float8LinearConfig.from_recipe_name(a.recipe)
        convert_to_float8_training(
            model, config=config, module_filter_fn=lambda mod, fqn: fqn.split(".")[-1] != "head"
        )
    return model, m["seq_len"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--yaml", required=True, help="the study's YAML: its model section and global batch"
    )
    ap.add_argument("--precision", choices=["bf16", "fp8"], default="bf16")
    ap.add_argument("--recipe", choices=["tensorwise", "rowwise"], default="tensorwise")
    ap.add_argument("--mbs", type=int, default=16)
    ap.add_argument("--compile", action="store_true", help="torch.compile(model), the whole model")
    ap.add_argument("--fused", action="store_true", help="AdamW(fused=True)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument(
        "--pad-vocab", type=int, default=0, help="pad embedding and head to this multiple (0: none)"
    )
    a = ap.parse_args()
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    if cuda:
        torch.backends.cuda.matmul.fp32_precision = "ieee"
    doc = yaml.safe_load(Path(a.yaml).read_text())
    accum = doc["workload"]["global_batch_size"] // a.mbs
    model, seq_len = build(a, dev)
    fused = {"fused": True} if a.fused else {}
    opt = torch.optim.AdamW(
        model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, **fused
    )
    step_model = torch.compile(model) if a.compile else model
    gen = torch.Generator(device=dev).manual_seed(0)
    vocab = model.vocab
    data = torch.randint(0, vocab, (min(accum, 4), a.mbs, seq_len + 1), device=dev, generator=gen)
    amp = (
        torch.autocast(dev.type, dtype=torch.bfloat16)
        if cuda or a.precision == "bf16"
        else contextlib.nullcontext()
    )

    def step() -> torch.Tensor:
        total = torch.zeros((), device=dev)
        for i in range(accum):
            batch = data[i % len(data)]
            with amp:
                loss = step_model(batch[:, :-1], batch[:, 1:]) / accum
            loss.backward()
            total += loss.detach()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return total

    warm = []
    for _ in range(a.warmup):
        t0 = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        warm.append(time.perf_counter() - t0)
    events, losses = [], []
    t_start = time.perf_counter()
    for _ in range(a.steps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            losses.append(step())
            end.record()
            torch.cuda.synchronize()
            events.append(start.elapsed_time(end) / 1000)
        else:
            t0 = time.perf_counter()
            losses.append(step())
            events.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - t_start
    tokens = a.mbs * accum * seq_len
    out = {
        "script": "plain_train",
        "precision": a.precision,
        "recipe": a.recipe if a.precision == "fp8" else None,
        "mbs": a.mbs,
        "accum": accum,
        "compile": a.compile,
        "fused": a.fused,
        "pad_vocab": a.pad_vocab or None,
        "tokens_per_step": tokens,
        "tokens_per_s": tokens / statistics.median(events),
        "tokens_per_s_all": tokens * a.steps / elapsed,
        "step_s": events,
        "warmup_s": warm,
        "losses": [float(x) for x in torch.stack(losses).cpu()],
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
