"""Which import leaves CUDA poisoned for a fork (torch's 'Cannot re-initialize CUDA in forked
subprocess'): after each of the fork server's preloads, a forked child tries torch.cuda.init()."""

import importlib
import os
import sys


def probe(stage: str) -> None:
    pid = os.fork()
    if pid == 0:
        import torch

        try:
            torch.cuda.init()
            x = torch.ones(4, device="cuda").sum().item()
            print(stage, "ok", x, flush=True)
            os._exit(0)
        except Exception as err:
            print(stage, "FAILED", str(err)[:80], flush=True)
            os._exit(1)
    os.waitpid(pid, 0)


probe("nothing")
for name in sys.argv[1:]:
    importlib.import_module(name)
    probe(name)
