"""`autotune export`: the winner of a study (best.yaml) ready to paste, in every format that has an equivalent.

One module a part: _winner (best.yaml read and checked), _form (the Form returned, the per-knob translation and
what names a knob a format cannot express), _shell (the command study's own command, a torchrun launch), _hf
(TrainingArguments and its flags), _lightning (Trainer), _torchtitan (a job TOML fragment). Every knob whose value
is not autotune's default and has no equivalent in a format is named in that format's text, never dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from autotune.errors import ConfigError
from autotune.export._form import Form
from autotune.export._hf import hf
from autotune.export._lightning import lightning
from autotune.export._shell import command, torchrun
from autotune.export._torchtitan import torchtitan
from autotune.export._winner import Winner, read

__all__ = ["FORMATS", "Form", "export", "formats_of"]


def _json(w: Winner) -> Form:
    doc = {"name": w.name, "knobs": w.knobs, "env": w.env, "metrics": w.metrics}
    return Form("json", json.dumps(doc, indent=2) + "\n")


FORMATS: dict[str, Callable[[Winner], Form]] = {
    "command": command,
    "torchrun": torchrun,
    "hf": hf,
    "lightning": lightning,
    "torchtitan": torchtitan,
    "json": _json,
}
# The formats that translate a training configuration, by workload.task (any other task: json only). A property of
# the task, kept here until the Task plug-in (autotune/tasks) carries it.
_TRAINING = ("torchrun", "hf", "lightning", "torchtitan", "json")
APPLIES: dict[str, tuple[str, ...]] = {"train": _TRAINING, "command": ("command", *_TRAINING)}


def formats_of(w: Winner) -> tuple[str, ...]:
    """The formats that apply to this winner; the command form needs best.yaml's command section."""
    found = APPLIES.get(w.task, ("json",))
    return tuple(f for f in found if f != "command" or w.command is not None)


def _allowed(formats: Sequence[str]) -> list[str]:
    """The formats asked for, each once, in the order given; ConfigError naming the allowed ones."""
    for f in formats:
        if f not in FORMATS:
            raise ConfigError(f"--format: {f!r} is not allowed; use {', '.join(FORMATS)}")
    return list(dict.fromkeys(formats))


def export(best_path: Path, formats: Sequence[str] | None = None) -> list[Form]:
    """best.yaml's winner in each format asked for (None: every one that applies to its study), in that order.
    A command form writes the rendered config file beside best.yaml (best.config<suffix>) when the command reads
    one. ConfigError (exit 2): an unknown format, one that does not apply, a missing or invalid best.yaml."""
    asked = _allowed(formats) if formats else None
    w = read(Path(best_path))
    applies = formats_of(w)
    for f in asked or []:
        if f not in applies:
            raise ConfigError(
                f"--format {f}: does not apply to this study (task {w.task}"
                f"{'' if w.command is not None else ', no command section'}); use {', '.join(applies)}"
            )
    return [FORMATS[f](w) for f in asked or applies]
