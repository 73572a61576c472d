"""--gpus split into the GPU groups trials run on, checked against the machine and the workload."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from autotune.errors import ConfigError
from autotune.hardware import detect

if TYPE_CHECKING:
    from autotune.config import Config


def gpu_groups(cfg: Config, device: str, gpus: list[str] | None) -> list[str] | None:
    """--gpus split into one group per trial: --gpus 0,1,2,3 with world_size 2 runs trials on 0,1
    and 2,3."""
    world = cfg.workload.world_size // cfg.workload.nnodes  # ranks of a trial on this node
    if device == "cuda":
        visible = len(detect()["gpus"])
        if not visible:
            raise ConfigError(
                "--device: cuda asked for, but pynvml sees no NVIDIA GPU; use --device cpu"
            )
        if gpus and max(map(int, gpus)) >= visible:
            raise ConfigError(
                f"--gpus: GPU {max(map(int, gpus))} does not exist; pynvml sees {visible} (0 to "
                f"{visible - 1})"
            )
        if world > (len(gpus) if gpus else visible):
            raise ConfigError(
                f"workload.world_size: {cfg.workload.world_size} needs {world} GPUs on this node a "
                f"trial, but {len(gpus) if gpus else visible} are available; lower world_size or "
                "list more --gpus"
            )
    else:  # gloo ranks and parallel trials are processes sharing the host's cores
        most = 8 * (os.cpu_count() or 1)
        if world * len(gpus or [0]) > most:
            raise ConfigError(
                f"workload.world_size / --gpus: {world * len(gpus or [0])} processes at once on "
                f"the CPU; this host's {os.cpu_count()} cores take at most {most}"
            )
    if gpus and len(gpus) % world:
        raise ConfigError(
            f"--gpus: {len(gpus)} GPUs cannot be split into trials of {world} "
            f"(workload.world_size); list a multiple of {world}"
        )
    return [",".join(gpus[i : i + world]) for i in range(0, len(gpus), world)] if gpus else None
