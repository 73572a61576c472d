"""The export forms, declared once: each one's name, what it prints and the function that makes it.
Standard library only, so that the CLI's help, the API's argument check and the README's table read
the list without importing the forms themselves (pydantic, the command's rendering)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FormEntry:
    """One form of `autotune export --format`."""

    name: str
    help: str  # what it prints, in a clause
    module: str  # the module of autotune/export that makes it
    function: str  # that module's function: Winner -> Form


FORMS: dict[str, FormEntry] = {
    f.name: f
    for f in (
        FormEntry(
            "command",
            "your command as the chosen trial ran it (its flags, variables and config file), run "
            "from beside best.yaml",
            "_shell",
            "command",
        ),
        FormEntry(
            "torchrun",
            "a torchrun launch with the chosen environment; every other knob named as a setting "
            "of your script",
            "_shell",
            "torchrun",
        ),
        FormEntry(
            "hf",
            "transformers TrainingArguments (a command study: its measured flags as the job's own "
            "arguments class, SFTConfig, ...)",
            "_hf",
            "hf",
        ),
        FormEntry(
            "lightning",
            "the Lightning Trainer's arguments and your script's lines",
            "_lightning",
            "lightning",
        ),
        FormEntry("torchtitan", "a torchtitan job TOML fragment", "_torchtitan", "torchtitan"),
        FormEntry("json", "the knobs, environment and metrics as JSON", "_export", "as_json"),
    )
}
ALL = "all"  # --format all: every format that applies, not only those that fit the study


def markdown_table() -> str:
    """The README's table of the forms (tests/test_export.py holds the README to it)."""
    rows = [f"| `{f.name}` | {f.help} |" for f in FORMS.values()]
    return "\n".join(["| `--format` | prints |", "|---|---|", *rows]) + "\n"
