"""autotune export's work: best.yaml's winner in each form asked for (the forms: _catalogue.py)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path

from autotune import modes, tasks
from autotune.documents import strict_json
from autotune.errors import ConfigError
from autotune.export._catalogue import ALL, FORMS, FormEntry
from autotune.export._form import Form
from autotune.export._hf_command import builds_trainer
from autotune.export._winner import Winner, read


def as_json(w: Winner) -> Form:
    """The winner's knobs, environment and metrics as JSON (any task's)."""
    doc = {"name": w.name, "knobs": w.knobs, "env": w.env, "metrics": w.metrics}
    if set_by_script := w.set_by_script():  # in knobs too: the job's own values, never rendered
        doc["set_by_your_script"] = set_by_script
    return Form("json", strict_json.dumps(doc, indent=2) + "\n")


def _maker(entry: FormEntry) -> Callable[[Winner], Form]:
    """The function of autotune/export that makes a catalogue's form."""
    module = importlib.import_module(f"autotune.export.{entry.module}")
    maker: Callable[[Winner], Form] = getattr(module, entry.function)
    return maker


# each form's function, by name, in the catalogue's order
FORMATS: dict[str, Callable[[Winner], Form]] = {n: _maker(e) for n, e in FORMS.items()}


def formats_of(w: Winner) -> tuple[str, ...]:
    """The formats that apply to this winner; the command form needs best.yaml's command section."""
    found = tasks.task(w.task).exports  # the Task plug-in's forms (autotune/tasks)
    return tuple(f for f in found if f != "command" or w.command is not None)


def fitting(w: Winner) -> tuple[str, ...]:
    """The formats printed when none is asked for: a study with a command, its command, the form of
    the framework that reads its flags (its measure mode's forms: measure hf, lightning; else hf for
    a job known to build an HF Trainer, _hf_command.builds_trainer) and
    json (a torchrun launch or a torchtitan TOML is not the job it measured); any other, all that
    apply."""
    if w.command is None:
        return formats_of(w)
    framework = modes.of(w.command).exports or (("hf",) if builds_trainer(w) else ())
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
