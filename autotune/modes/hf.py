"""measure hf: an unmodified HF Trainer job; the hook adds autotune's callback to its Trainer, which
reports its steps and stops it, and export offers the TrainingArguments form."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.modes._base import Mode, Trainer, no_log_pattern

if TYPE_CHECKING:  # the job's own framework: never imported here
    import transformers


def _add(trainer: transformers.Trainer, callback_class: type[transformers.TrainerCallback]) -> None:
    if not any(isinstance(c, callback_class) for c in trainer.callback_handler.callbacks):
        trainer.add_callback(callback_class())


def _model(trainer: transformers.Trainer, kwargs: dict[str, Any]) -> Any:
    return getattr(trainer, "model", None)


TRAINER = Trainer(
    module="transformers.trainer",
    callback="autotune.callbacks.hf",
    trains="train",
    named="an HF Trainer",
    add=_add,
    model=_model,
)
MODE = Mode(
    name="hf",
    help=("an unmodified HF Trainer job, autotune adds its callback to the job's Trainer itself"),
    rules=no_log_pattern,
    reads="report",
    stop="file",
    trainer=TRAINER,
    exports=("hf",),
)
