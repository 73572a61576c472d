"""task train: optimizer steps at a fixed global batch; the memory estimate and the precision loss
check."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from autotune.knobs import int_of
from autotune.protocol import Knobs, TaskParams, TrainParams
from autotune.tasks._base import Task

if TYPE_CHECKING:
    from autotune.config import WorkloadConfig
    from autotune.config.command import CommandConfig
    from autotune.config.space import SpaceConfig

# A training configuration translated into each framework's form (autotune export)
TRAINING_EXPORTS = ("torchrun", "hf", "lightning", "torchtitan", "json")


class Training(Task):
    """The batch of the training tasks (train, command): micro-batches, accumulated to a fixed
    global batch when workload.global_batch_size is set."""

    size_knob: ClassVar[str] = "micro_batch_size"
    batch_knobs: ClassVar[tuple[str, ...]] = ("micro_batch_size", "grad_accum_steps")

    def batch_rule(
        self,
        space: SpaceConfig,
        wl: WorkloadConfig,
        values: dict[str, list[Any]],
        notes: dict[str, str],
    ) -> None:
        """With global_batch_size, the micro-batch sizes that divide it, the accumulation derived
        from them; without, grad_accum_steps as listed (auto: 1)."""
        # a field made from the catalogue at run time (config/space.py)
        accum: list[int] | Literal["auto"] = getattr(space, "grad_accum_steps")
        if wl.global_batch_size is not None:
            derive_accumulation(
                accum,
                wl.global_batch_size // wl.world_size,
                wl.global_batch_size,
                values,
                notes,
            )
        else:
            values["grad_accum_steps"] = [1] if accum == "auto" else list(accum)

    def derived_knobs(
        self, knobs: Knobs, global_batch_size: int | None, world_size: int
    ) -> dict[str, Any]:
        """With global_batch_size, grad_accum_steps = global_batch_size / (micro_batch_size x
        world_size); without, nothing (it is searched as listed)."""
        if global_batch_size is None:
            return {}
        return {
            "grad_accum_steps": global_batch_size
            // (int_of(knobs, "micro_batch_size") * world_size)
        }


class Train(Training):
    name: ClassVar[str] = "train"
    estimates_memory: ClassVar[bool] = True
    loss_check: ClassVar[bool] = True
    columns: ClassVar[tuple[str, ...]] = ("MFU",)
    exports: ClassVar[tuple[str, ...]] = TRAINING_EXPORTS

    def trial_params(
        self,
        drift: dict[str, Any] | None,
        loss_check: dict[str, Any] | None,
        *,
        command: CommandConfig | None = None,
        timeout_s: float = 3600.0,
    ) -> TaskParams:
        return TrainParams(dict(loss_check) if loss_check and loss_check.get("steps") else None)


def derive_accumulation(
    accum: list[int] | Literal["auto"],
    per_rank: int,
    global_batch: int,
    values: dict[str, list[Any]],
    notes: dict[str, str],
) -> None:
    """global_batch_size set: keep the micro-batch sizes that divide it; grad_accum_steps follows
    from them."""
    if accum != "auto":
        raise ValueError(
            f"space.grad_accum_steps: {accum} cannot be set when workload.global_batch_size "
            f"({global_batch}) is: it is derived; use grad_accum_steps: auto"
        )
    fits = [m for m in values["micro_batch_size"] if per_rank % m == 0]
    dropped = [m for m in values["micro_batch_size"] if per_rank % m]
    if not fits:
        raise ValueError(
            f"space.micro_batch_size: no value in {values['micro_batch_size']} divides "
            f"global_batch_size / world_size = {per_rank}; use divisors of {per_rank}"
        )
    if dropped:
        notes["micro_batch_size"] = (
            f"dropped {dropped}: they do not divide {per_rank} sequences per rank"
        )
    values["micro_batch_size"] = fits
    notes["grad_accum_steps"] = f"derived: {per_rank} / micro_batch_size"
