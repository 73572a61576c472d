"""best.yaml's knobs checked as the search wrote them (read_best and export check with these):
every knob of the task and of the command, each value one its knob accepts, the global batch kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from autotune import knobs as catalogue
from autotune.errors import ConfigError
from autotune.protocol import Knobs

if TYPE_CHECKING:
    from autotune.config import WorkloadConfig
    from autotune.config.command import CommandConfig, Scalar


def check_batch(path: Path, knobs: Knobs, workload: WorkloadConfig) -> None:
    """The knobs keep the workload's global batch (micro-batch x accumulation x ranks), as the
    search did."""
    gbs, world = workload.global_batch_size, workload.world_size
    if gbs is None:
        return
    per_rank = catalogue.int_of(knobs, "micro_batch_size") * catalogue.int_of(
        knobs, "grad_accum_steps"
    )
    if per_rank * world != gbs:
        raise ConfigError(
            f"{path}: knobs: micro_batch_size {knobs['micro_batch_size']} x grad_accum_steps "
            f"{knobs['grad_accum_steps']} x world_size {world} is not workload.global_batch_size "
            f"{gbs}"
        )


def user_knobs(command: CommandConfig | None) -> dict[str, list[Scalar]]:
    """A command study's own knobs (its command section's knobs with values), name -> values."""
    if command is None:
        return {}
    return {n: m.values for n, m in command.knobs.items() if m.values is not None}


def check_knobs(path: Path, knobs: Knobs, task: str, own: dict[str, list[Scalar]]) -> None:
    """Every knob of the workload's task (and of the command's own), each value one its knob accepts
    (None:
    not acting in this trial)."""
    names = {k.name for k in catalogue.CATALOGUE if task in k.tasks} | set(own)
    if set(knobs) != names:
        wrong = sorted(set(knobs) ^ names)
        raise ConfigError(
            f"{path}: knobs: {wrong[0]} is {'missing' if wrong[0] in names else 'not a knob'}; "
            f"best.yaml lists every knob of task {task}"
        )
    check_own(path, knobs, own)
    check_knob_values(path, knobs, own)


def check_own(path: Path, knobs: Knobs, own: dict[str, list[Scalar]]) -> None:
    """A command's own knobs (own: name -> values), each value one of its values."""
    for name, values in own.items():
        if knobs[name] not in values:
            raise ConfigError(
                f"{path}: knobs.{name}: {knobs[name]!r} is not one of its values {values}"
            )


def check_knob_values(path: Path, knobs: Knobs, own: Iterable[str] = ()) -> None:
    """autotune's knobs among `knobs` (those of the catalogue, but a command's `own`), each value
    one its knob accepts as the space section does (None: not acting in this trial); ConfigError
    naming knobs.<name>. read_best and export (a command study's best.yaml) check with it."""
    from autotune.config.load import describe_error
    from autotune.config.space import SpaceConfig

    skip = set(own)
    given = {
        k: [v]
        for k, v in knobs.items()
        if k in catalogue.BY_NAME and k not in skip and v is not None
    }
    try:
        SpaceConfig.model_validate(given)
    except ValidationError as err:
        raise ConfigError(
            f"{path}: knobs.{describe_error(err, 'space').removeprefix('space.')}"
        ) from None
