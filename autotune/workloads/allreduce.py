"""The all-reduce workload (`autotune nccl`): bus bandwidth of one rank group for each message size.

Every rank all-reduces float32 tensors of each size in spec.params.sizes (bytes): `warmup`
untimed samples, then `iters` samples, each `inner` back-to-back calls after an untimed barrier,
timed by timing.time_steps (CUDA events on GPUs). The time of a size is the median over the samples
of the slowest rank's; bandwidths as nccl-tests reports them: algbw = bytes / time, busbw = algbw x
2 (n - 1) / n.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from autotune.protocol import AllReduceParams
from autotune.workloads.base import InvalidConfig, Measured, Workload
from autotune.workloads.timing import time_steps

if TYPE_CHECKING:
    from torch import Tensor


class AllReduce(Workload):
    task = "allreduce"

    def build(self) -> None:
        if self.ranks is None:
            raise InvalidConfig(
                "the all-reduce workload needs a rank group of at least 2 (workload.world_size)"
            )
        cuda = self.ranks.backend == "nccl"
        self.dev = (
            self.torch.device("cuda", self.ranks.local_rank) if cuda else self.torch.device("cpu")
        )
        self.applied = {
            "world_size": self.ranks.world,
            "backend": self.ranks.backend,
            "nccl_env": self.ranks.nccl_env(),
        }

    def run(self) -> Measured:
        torch, p, ranks = self.torch, self.spec.params, self.ranks
        assert isinstance(p, AllReduceParams)
        assert ranks is not None  # build refused a single process
        inner = p.inner
        cuda = ranks.backend == "nccl"

        def line_up() -> None:
            # Line the ranks up first (untimed), then time `inner` back-to-back calls, as nccl-tests
            # does: one call alone would measure the other rank's launch delay at small sizes.
            if cuda:
                torch.cuda.synchronize()
            ranks.barrier()

        rows = []
        for size in p.sizes:
            x = torch.ones(size // 4, dtype=torch.float32, device=self.dev)

            def calls(x: Tensor = x) -> None:
                for _ in range(inner):
                    ranks.dist.all_reduce(x)

            timing = time_steps(
                torch,
                calls,
                warmup=p.warmup,
                measure=p.iters,
                device=self.spec.device,
                before_each=line_up,
            )
            slowest = [max(per_rank) / inner for per_rank in zip(*ranks.gather(timing.step_s))]
            t = statistics.median(slowest)
            algbw = size / t / 1e9
            rows.append(
                {
                    "bytes": size,
                    "time_us": t * 1e6,
                    "algbw_gbs": algbw,
                    "busbw_gbs": algbw * 2 * (ranks.world - 1) / ranks.world,
                    "samples_s": slowest,
                }
            )
        return Measured(None, output={"rows": rows})
