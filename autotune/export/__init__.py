"""`autotune export`: the winner of a study (best.yaml) ready to paste, in the formats that fit it.

One module a part: _catalogue (the forms, declared once: standard library only, what the CLI's
help, the API's check and the README read), _export (the winner in each form asked for), _winner
(best.yaml read and checked), _form (the Form returned, the per-knob translation and what names a
knob a format cannot express), _measured (a command study's measured command, as command/render.py
renders it), _shell (that command, a torchrun launch), _hf (TrainingArguments and its flags),
_hf_command (a command study's flags as TrainingArguments), _lightning (Trainer), _torchtitan (a job
TOML fragment). Every knob whose value is not autotune's default and has no equivalent in a format
is named in that format's text, never dropped. Importing this package loads the catalogue alone;
the forms load with the first name that needs them (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.export._catalogue import ALL, FORMS, FormEntry, markdown_table

if TYPE_CHECKING:
    from autotune.export._export import FORMATS, export, fitting, formats_of
    from autotune.export._form import Form

__all__ = [
    "ALL",
    "FORMATS",
    "FORMS",
    "Form",
    "FormEntry",
    "export",
    "fitting",
    "formats_of",
    "markdown_table",
]
_LAZY = ("FORMATS", "export", "fitting", "formats_of")


def __getattr__(name: str) -> Any:
    """The forms' names, loaded on first use (the CLI's help reads the catalogue alone)."""
    if name in _LAZY:
        from autotune.export import _export

        return getattr(_export, name)
    if name == "Form":
        from autotune.export._form import Form

        return Form
    raise AttributeError(f"module 'autotune.export' has no attribute {name!r}")
