"""Issue 16, part 1: how many graphs does torch.compile make of a model under DDP? Compiled outside
DDP (torch.compile(DDP(model)), autotune's order) or inside (DDP(torch.compile(model)), nanoGPT's),
with Dynamo's DDPOptimizer on (torch._dynamo.config.optimize_ddp, PyTorch's default) or off. Prints
the number of subgraphs the DDPOptimizer cut (from its `ddp_graphs` log), on gloo, a 4-layer GPT
with 1 MB buckets:

    for order in outer inner; do for opt in true false; do
      TORCH_LOGS=ddp_graphs torchrun --standalone --nproc-per-node 2 benchmarks/ddp_graphs.py $order
      $opt 2>&1 \\
        | grep rank0 | grep -c 'call_module\\[target=submod_'; done; done
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch._dynamo import config as dynamo_config
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from autotune.workloads.model import Transformer  # noqa: E402


def main() -> None:
    order, optimize = sys.argv[1], sys.argv[2] == "true"
    dist.init_process_group("gloo")
    dynamo_config.optimize_ddp = optimize
    m = {
        "family": "gpt",
        "n_layers": 4,
        "d_model": 256,
        "n_heads": 4,
        "kv_heads": 4,
        "ffn_hidden": 1024,
        "vocab_size": 4096,
        "seq_len": 64,
        "rope_theta": 1e4,
        "tie_embeddings": True,
        "attention": "auto",
        "padded_vocab": 4096,
    }
    torch.manual_seed(0)
    model = Transformer(m)
    if order == "inner":
        model = torch.compile(model)
    ddp = DistributedDataParallel(model, bucket_cap_mb=1)
    step = torch.compile(ddp) if order == "outer" else ddp
    tokens = torch.randint(0, 4096, (2, 65))
    step(tokens[:, :-1], tokens[:, 1:]).backward()
    # both ranks past their last collective, then out without gloo's teardown (it can hang or abort)
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
