"""A command study's HF form: the flags of the command it measured that are TrainingArguments
fields (by transformers' own field list, imported only here) as TrainingArguments(...) and
HfArgumentParser flags; the others kept as the script's own arguments."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import shlex
from typing import Any

from autotune import knobs as catalogue
from autotune import modes
from autotune.command.measure_only import flag_groups, measure_only
from autotune.errors import ConfigError
from autotune.export._form import Form, call, env_block
from autotune.export._measured import (
    RUN_DIR_NOTE,
    config_lines,
    declared_lines,
    lightning_lines,
    measure_only_line,
    measured,
    secret_lines,
)
from autotune.export._winner import Winner

__all__ = ["flag_groups", "hf_command", "reads_training_arguments"]  # flag_groups: re-exported

NO_TRANSFORMERS = (
    "# transformers is not importable here, so which flags are TrainingArguments fields is not "
    "checked: the command's flags as they are"
)


def training_fields() -> tuple[dict[str, dataclasses.Field[Any]], str] | None:
    """TrainingArguments' fields by name and transformers' version; None where it is not
    importable (imported here, not at the top: `autotune export` of other forms stays fast)."""
    try:
        import transformers
    except ImportError:
        return None
    fields = {f.name: f for f in dataclasses.fields(transformers.TrainingArguments)}
    return fields, transformers.__version__


def field_of(group: list[str], fields: dict[str, dataclasses.Field[Any]]) -> str | None:
    """The TrainingArguments field a flag sets, as HfArgumentParser spells it: `--name`, its dashed
    alias, `--name=value`, or `--no_name` (a bool field that defaults to True); None: not one."""
    if not group[0].startswith("--"):
        return None
    name = group[0][2:].partition("=")[0].replace("-", "_")
    if name in fields:
        return name
    negated = fields.get(name.removeprefix("no_")) if name.startswith("no_") else None
    return negated.name if negated is not None and negated.default is True else None


def _plain(value: Any, is_dict: bool) -> Any:
    """A parsed value as a keyword argument: an enum's value (optim is OptimizerNames), a dict
    field's JSON text as the dict TrainingArguments would make of it."""
    if isinstance(value, enum.Enum):
        return value.value
    if is_dict and isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:  # not JSON: TrainingArguments takes the text as it is
            return value
    return value


def typed(w: Winner, groups: list[list[str]], names: list[str]) -> dict[str, Any]:
    """The TrainingArguments values these flags give, as HfArgumentParser reads them (not
    TrainingArguments itself, whose checks want the job's GPU: --tf32 true needs an Ampere)."""
    from transformers import HfArgumentParser, TrainingArguments

    # transformers types its parameter NewType("DataClassType", Any), which no class is
    parser = HfArgumentParser(TrainingArguments, exit_on_error=False)  # type: ignore[arg-type]
    tokens = [t for g in groups for t in g]
    try:
        parsed, _ = parser.parse_known_args(tokens)
    except argparse.ArgumentError as err:
        raise ConfigError(f"{w.path}: command: {shlex.join(tokens)}: {err}") from None
    dict_fields = set(getattr(TrainingArguments, "_VALID_DICT_FIELDS", ()))
    return {n: _plain(getattr(parsed, n), n in dict_fields) for n in dict.fromkeys(names)}


def _marked(lines: list[str], names: set[str]) -> list[str]:
    """The call's keyword lines of measurement-only fields, each marked as such at its end."""
    mark = "  # for the measurement only: remove for your real run"
    return [
        line + mark if line.strip().partition("=")[0] in names and line.endswith(",") else line
        for line in lines
    ]


def _arguments(w: Winner, groups: list[list[str]]) -> list[str]:
    """The TrainingArguments call and flags of the fields among the flags, then the script's own;
    the flags for the measurement only marked (command/measure_only.py)."""
    only = measure_only(w.command or {}, groups)
    found = training_fields()
    if found is None:
        return [NO_TRANSFORMERS, *measure_only_line(only), shlex.join(t for g in groups for t in g)]
    fields, version = found
    ours = [g for g in groups if field_of(g, fields) is not None]
    own = [g for g in groups if field_of(g, fields) is None]
    lines = [
        f"# the command's flags that are TrainingArguments fields (transformers {version})",
        *measure_only_line(only),
    ]
    if ours:
        kwargs = typed(w, ours, [str(field_of(g, fields)) for g in ours])
        marked = {str(field_of(g, fields)) for g in ours if g in only}
        lines += [
            *_marked(call("TrainingArguments", kwargs), marked),
            "# the same as command-line flags (HfArgumentParser), as the command has them",
            shlex.join(t for g in ours for t in g),
        ]
    else:
        lines.append("# none: no flag of the command is a TrainingArguments field")
    if own:
        lines += [
            "# your script's own arguments (no TrainingArguments field), as the command has them",
            shlex.join(t for g in own for t in g),
        ]
    return lines


def hf_command(w: Winner) -> Form:
    """The HF form of a command study: what the chosen trial's command gave TrainingArguments."""
    m = measured(w)
    ran = f"trial {w.trial}'s" if w.trial is not None else "the chosen trial's"
    lines = [
        f"# {ran} command ({m.argv[0]} ...; the command form has it whole) as TrainingArguments",
        *env_block(m.env),
        *lightning_lines(w),
        *_arguments(w, flag_groups(m.argv)),
        *config_lines(w, m),
        *secret_lines(m),
        *declared_lines(w),
        *([RUN_DIR_NOTE] if m.names_run_dir else []),
    ]
    return Form("hf", "\n".join(lines) + "\n")


def reads_training_arguments(command: dict[str, Any]) -> bool:
    """Whether a command is an HF Trainer job: measured by the HF callback (measure hf), or one of
    autotune's knobs mapped onto a TrainingArguments flag (--per_device_train_batch_size, --bf16).
    A knob of the job's own does not tell: a plain script's --optim is a TrainingArguments name."""
    if "hf" in modes.of(command).exports:
        return True
    mappings = (command.get("knobs") or {}).items()
    flags = [m["flag"] for n, m in mappings if n in catalogue.BY_NAME and m.get("flag")]
    found = training_fields() if flags else None
    return found is not None and any(field_of([f], found[0]) is not None for f in flags)
