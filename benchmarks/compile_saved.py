"""What autograd saves for backward, tensor by tensor, in one micro-step of a training trial: eager
against torch.compile, bf16 against fp8, for each activation-checkpointing choice (issue 24 part 3:
the memory estimate's compiled terms are read from these lists).

    python3 benchmarks/compile_saved.py [--out FILE] [--families llama gpt] [--precisions bf16 fp8]

Each case builds the model exactly as a trial does (autotune.workloads.train.Train.build: meta
device, fp8 conversion, compile), then runs one forward under the trial's autocast inside
saved_tensors_hooks and the backward. Every storage packed for backward that is not a parameter, a
buffer or the input tokens is recorded with its shape, dtype and bytes (views of one storage count
once); so are the outputs selective_op's policy caches in eager mode (they bypass the hooks). Each
case runs at 1 and 2 layers: the difference is one block. Compiled cases compile per block (the
second layer count reuses the compiled block) and, without checkpointing, the whole model too.
One JSON line per case; the last lines print bytes a token of one block and of the rest.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune.protocol import RunSettings, TrialSpec  # noqa: E402
from autotune.workloads.faults import Fault  # noqa: E402
from autotune.workloads.train import Train  # noqa: E402

# Sizes chosen so that every width is distinct (d 384, K/V 128, qkv 640, ffn 1024, SwiGLU's 2048;
# gpt's qkv 1152 and ffn 1536), which names each saved tensor by its last dimension; fp8 needs
# multiples of 16.
SHAPES = {
    "llama": {
        "family": "llama",
        "d_model": 384,
        "n_heads": 6,
        "kv_heads": 2,
        "ffn_hidden": 1024,
        "vocab_size": 1000,
        "seq_len": 128,
        "tie_embeddings": False,
        "rope_theta": 10000.0,
    },
    "gpt": {
        "family": "gpt",
        "d_model": 384,
        "n_heads": 6,
        "kv_heads": 6,
        "ffn_hidden": 1536,
        "vocab_size": 1000,
        "seq_len": 128,
        "tie_embeddings": False,
    },
}
MBS = 2


def build(family: str, layers: int, knobs: dict[str, Any], device: str) -> Train:
    """The trial's Train workload, built (model, fp8, compile, optimizer) as a trial builds it."""
    model = {**SHAPES[family], "n_layers": layers}
    spec = TrialSpec(
        task="train",
        device=device,
        knobs={**knobs, "micro_batch_size": MBS, "grad_accum_steps": 1},
        model=model,
        run=RunSettings(warmup_steps=0, measure_steps=1),
    )
    work = Train(torch, spec, None, Fault({}))
    work.build()
    return work


def saved_tensors(work: Train) -> list[tuple[list[int], str, int]]:
    """(shape, dtype, bytes) of each distinct storage saved for backward in one micro-step,
    selective_op's cache included, less parameters, buffers and the tokens."""
    model, (inputs, targets) = work.model, work.batches[0]
    skip = {
        t.untyped_storage().data_ptr()
        for t in [*model.parameters(), *model.buffers(), inputs, targets]
    }
    found: dict[int, tuple[list[int], str, int]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip and storage.nbytes() > 8:
            found[storage.data_ptr()] = (
                list(t.shape),
                str(t.dtype).replace("torch.", ""),
                storage.nbytes(),
            )
        return t

    contexts = _capture_policy_contexts()
    amp = torch.autocast(work.spec.device, dtype=work.amp_dtype, enabled=work.amp_dtype is not None)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), amp, work.attention():
        loss = work.step_model(inputs, targets)
    # compiled: the partitioner saves them
    for caching, _ in contexts if not work.spec.knobs["compile"] else []:
        for outputs in caching.storage.values():
            for out in torch.utils._pytree.tree_leaves(outputs):
                t = getattr(out, "val", out)
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in found:
                    found[t.untyped_storage().data_ptr()] = (
                        list(t.shape),
                        str(t.dtype).replace("torch.", ""),
                        t.untyped_storage().nbytes(),
                    )
    loss.backward()
    _restore_policy()
    return sorted(found.values(), key=lambda x: -x[2])


_REAL = torch.utils.checkpoint.create_selective_checkpoint_contexts


def _capture_policy_contexts() -> list[Any]:
    """Keep the contexts selective_op's policy makes (eager mode caches its saved outputs there)."""
    contexts: list[Any] = []

    def keep(*args: Any, **kwargs: Any) -> Any:
        contexts.append(_REAL(*args, **kwargs))
        return contexts[-1]

    torch.utils.checkpoint.create_selective_checkpoint_contexts = keep
    return contexts


def _restore_policy() -> None:
    torch.utils.checkpoint.create_selective_checkpoint_contexts = _REAL


def case(
    family: str, precision: str, ac: str, compile_: Any, scope: str, device: str
) -> dict[str, Any]:
    """One configuration at 1 and 2 layers: the saved tensors of each, and bytes a token of a block
    and the rest."""
    knobs = {
        "precision": precision,
        "activation_checkpointing": ac,
        "compile": compile_,
        "compile_scope": scope,
        "fused_optimizer": True,
    }
    out: dict[str, Any] = {
        "family": family,
        "precision": precision,
        "activation_checkpointing": ac,
        "compile": compile_,
        "compile_scope": scope,
        "device": device,
        "mbs": MBS,
        "shape": SHAPES[family],
    }
    totals = {}
    for layers in (1, 2):
        torch._dynamo.reset()
        t0 = time.perf_counter()
        tensors = saved_tensors(build(family, layers, knobs, device))
        out[f"saved_{layers}"] = tensors
        out[f"seconds_{layers}"] = round(time.perf_counter() - t0, 1)
        totals[layers] = sum(b for _, _, b in tensors)
    tokens = MBS * SHAPES[family]["seq_len"]
    out["block_bytes_per_token"] = (totals[2] - totals[1]) / tokens
    out["rest_bytes_per_token"] = (2 * totals[1] - totals[2]) / tokens
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="compile-saved.jsonl")
    p.add_argument("--families", nargs="+", default=["llama", "gpt"])
    p.add_argument("--precisions", nargs="+", default=["bf16", "fp8"])
    p.add_argument("--checkpointing", nargs="+", default=["none", "full", "selective_op"])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    rows = []
    with open(args.out, "a") as f:
        for family in args.families:
            for precision in args.precisions:
                for ac in args.checkpointing:
                    # per-block compile for every choice (its second layer count reuses the compiled
                    # block: fast), whole-model compile once per family and precision, to show that
                    # the two save alike
                    for compile_, scope in ((False, "model"), (True, "block"), (True, "model")):
                        if compile_ and scope == "model" and ac != "none":
                            continue
                        row = case(family, precision, ac, compile_, scope, args.device)
                        f.write(json.dumps(row) + "\n")
                        f.flush()
                        rows.append(row)
                        label = "eager" if not compile_ else f"compile ({scope})"
                        print(
                            f"{family:5} {precision:4} {ac:12} {label:15} block "
                            f"{row['block_bytes_per_token']:8.0f} "
                            "B/token "
                            f"({row['block_bytes_per_token'] / SHAPES[family]['d_model']:5.2f} x "
                            "d), rest "
                            f"{row['rest_bytes_per_token']:8.0f} B/token  [{row['seconds_1']} + "
                            f"{row['seconds_2']} s]",
                            flush=True,
                        )


if __name__ == "__main__":
    main()
