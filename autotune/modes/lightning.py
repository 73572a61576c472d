"""measure lightning: an unmodified Lightning job; the hook adds autotune's callback to its Trainer,
autotune's unmapped knobs reach the Trainer as Lightning's PL_TRAINER_* variables, and export
offers the Trainer form."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from autotune.modes._base import KnobEnv, Mode, Trainer, no_log_pattern

if TYPE_CHECKING:  # the job's own framework: never imported here
    import lightning.pytorch as pl

# autotune's knobs without a mapping reach the Trainer through Lightning's own environment defaults
# (PL_TRAINER_<ARG>, read by Trainer.__init__ for an argument the script does not pass)
KNOB_ENV: KnobEnv = {
    "precision": (
        "PL_TRAINER_PRECISION",
        {"fp32": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"},
    ),
    "grad_accum_steps": ("PL_TRAINER_ACCUMULATE_GRAD_BATCHES", None),
}


class _LightningTrainer(Protocol):
    """Lightning's Trainer as the hook reads it: its callbacks, a list its __init__ sets (through
    its callback connector, so the class declares no such attribute)."""

    callbacks: list[pl.Callback]


def _add(trainer: _LightningTrainer, callback_class: type[pl.Callback]) -> None:
    if not any(isinstance(c, callback_class) for c in trainer.callbacks):
        trainer.callbacks.append(callback_class())


def _model(trainer: _LightningTrainer, kwargs: dict[str, Any]) -> Any:
    return kwargs.get("model")  # fit's model (or its first argument: launch._model_name)


def _knob_values(name: str, values: list[Any]) -> None:
    """A value Lightning has no name for is refused (its knob reaches the Trainer by KNOB_ENV)."""
    variable, table = KNOB_ENV[name]
    if table is None:
        return
    missing = [v for v in values if v not in table]
    if missing:
        raise ValueError(
            f"space.{name}: {missing[0]} has no Lightning precision ({variable} takes "
            f"{', '.join(table)}); map it yourself in command.knobs.{name}, or drop it"
        )


TRAINER = Trainer(
    module="lightning.pytorch.trainer.trainer",
    callback="autotune.callbacks.lightning",
    trains="fit",
    named="a Lightning Trainer",
    add=_add,
    model=_model,
)
MODE = Mode(
    name="lightning",
    help=(
        "an unmodified Lightning job, autotune adds its callback to the job's Trainer itself (the "
        "precision and grad_accum_steps knobs reach it as PL_TRAINER_* variables, for arguments "
        "the script does not pass)"
    ),
    rules=no_log_pattern,
    reads="report",
    stop="file",
    trainer=TRAINER,
    knob_env=KNOB_ENV,
    knob_values=_knob_values,
    exports=("lightning",),
)
