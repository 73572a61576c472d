"""This trial process as one rank of a torchrun group: the process group, autotune's own gloo side
group, gathering, and how a failing rank reports and leaves."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import TypeVar

from autotune import nccl_log
from autotune.protocol import TrialResult

_T = TypeVar("_T")


class Ranks:
    """The rank group of a trial: process group (NCCL on GPUs, gloo on the CPU) and a gloo side
    group."""

    def __init__(self, torch: ModuleType, device: str) -> None:
        import torch.distributed as dist

        self.dist = dist
        self.rank, self.local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.backend = "nccl" if device == "cuda" else "gloo"
        self.device = device
        if device == "cuda":
            torch.cuda.set_device(self.local_rank)
            dist.init_process_group("nccl", device_id=torch.device("cuda", self.local_rank))
            # autotune's own bookkeeping (barrier, gathering timings) goes over gloo: an NCCL_ALGO
            # that NCCL refuses for AllGather (Tree on NCCL 2.28) then fails the training's
            # collectives, not ours.
            self.side = dist.new_group(backend="gloo")
        else:
            dist.init_process_group("gloo")
            self.side = None

    @classmethod
    def start(cls, torch: ModuleType, device: str) -> Ranks | None:
        """The group when torchrun started this process as one of several ranks, else None."""
        return cls(torch, device) if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None

    def nccl_env(self) -> dict[str, str | None] | str:
        """The NCCL environment this rank ran with (NCCL_NVLS_ENABLE only read, never set)."""
        return (
            {k: os.environ.get(k) for k in nccl_log.ENV}
            if self.backend == "nccl"
            else "not applicable to gloo"
        )

    def barrier(self) -> None:
        self.dist.barrier(group=self.side)

    def gather(self, obj: _T) -> list[_T]:
        """Every rank's `obj` (picklable), in rank order."""
        out: list[_T] = [obj] * self.world  # all_gather_object fills every slot
        self.dist.all_gather_object(out, obj, group=self.side)
        return out

    def stop(self) -> None:
        self.dist.destroy_process_group()


def env_rank() -> tuple[int, int]:
    """(rank, world size) as torchrun set them; (0, 1) for a single process."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def fail_rank(result_path: str, result: TrialResult) -> None:
    """A failing rank of a torchrun group: write its reason beside the result (result.rankR.json),
    then exit 1 at once, so that torchrun ends the other ranks (a normal shutdown can block in the
    process group's teardown with collectives in flight)."""
    result.reason = f"rank {result.rank}: {result.reason}"
    result.at_ns = time.time_ns()
    result.write(Path(result_path).with_name(f"result.rank{result.rank}.json"))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)
