"""`autotune export`: the winner of a study (best.yaml) ready to paste, in the formats that fit it.

One module a part: _winner (best.yaml read and checked), _form (the Form returned, the per-knob
translation and what names a knob a format cannot express), _measured (a command study's measured
command, as command/render.py renders it), _shell (that command, a torchrun launch), _hf
(TrainingArguments and its flags), _hf_command (a command study's flags as TrainingArguments),
_lightning (Trainer), _torchtitan (a job TOML fragment). Every knob whose value is not autotune's
default and has no equivalent in a format is named in that format's text, never dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from autotune import modes, tasks
from autotune.documents import strict_json
from autotune.errors import ConfigError
from autotune.export._form import Form
from autotune.export._hf import hf
from autotune.export._hf_command import reads_training_arguments
from autotune.export._lightning import lightning
from autotune.export._shell import command, torchrun
from autotune.export._torchtitan import torchtitan
from autotune.export._winner import Winner, read

__all__ = ["FORMATS", "Form", "export", "fitting", "formats_of"]


def _json(w: Winner) -> Form:
    doc = {"name": w.name, "knobs": w.knobs, "env": w.env, "metrics": w.metrics}
    if set_by_script := w.set_by_script():  # in knobs too: the job's own values, never rendered
        doc["set_by_your_script"] = set_by_script
    return Form("json", strict_json.dumps(doc, indent=2) + "\n")


FORMATS: dict[str, Callable[[Winner], Form]] = {
    "command": command,
    "torchrun": torchrun,
    "hf": hf,
    "lightning": lightning,
    "torchtitan": torchtitan,
    "json": _json,
}
ALL = "all"  # --format all: every format that applies, not only those that fit the study


def formats_of(w: Winner) -> tuple[str, ...]:
    """The formats that apply to this winner; the command form needs best.yaml's command section."""
    found = tasks.task(w.task).exports  # the Task plug-in's forms (autotune/tasks)
    return tuple(f for f in found if f != "command" or w.command is not None)


def fitting(w: Winner) -> tuple[str, ...]:
    """The formats printed when none is asked for: a study with a command, its command, the form of
    the framework that reads its flags (its measure mode's forms: measure hf, lightning; else hf for
    a job whose flags are TrainingArguments') and
    json (a torchrun launch or a torchtitan TOML is not the job it measured); any other, all that
    apply."""
    if w.command is None:
        return formats_of(w)
    framework = modes.of(w.command).exports or (
        ("hf",) if reads_training_arguments(w.command) else ()
    )
    return tuple(f for f in ("command", *framework, "json") if f in formats_of(w))


def _allowed(formats: Sequence[str]) -> list[str]:
    """The formats asked for, each once, in the order given; ConfigError naming the allowed ones."""
    for f in formats:
        if f not in FORMATS and f != ALL:
            raise ConfigError(f"--format: {f!r} is not allowed; use {', '.join(FORMATS)} or {ALL}")
    return list(dict.fromkeys(formats))


def export(best_path: Path, formats: Sequence[str] | None = None) -> list[Form]:
    """best.yaml's winner in each format asked for, in that order (None: those that fit its study,
    `fitting`; "all": every one that applies). A command form writes the rendered config file
    beside best.yaml (best.config<suffix>) when the command reads one. ConfigError (exit 2): an
    unknown format, one that does not apply, a missing or invalid best.yaml."""
    asked = _allowed(formats) if formats else None
    w = read(Path(best_path))
    applies = formats_of(w)
    for f in asked or []:
        if f not in (*applies, ALL):
            raise ConfigError(
                f"--format {f}: does not apply to this study (task {w.task}"
                f"{'' if w.command is not None else ', no command section'}); use "
                f"{', '.join(applies)}"
            )
    if asked is None:
        asked = list(fitting(w))
    elif ALL in asked:
        asked = list(applies)
    return [FORMATS[f](w) for f in asked]
