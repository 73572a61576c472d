"""A command study's HF form: the flags of the command it measured that are fields of the job's
own arguments class (TRL's SFTConfig, TrainingArguments, ...: command/source.py reads which from
its program) as that class's call and HfArgumentParser flags, the others kept as the script's own
arguments; where the class is not known, the flags alone, saying why."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import importlib
import json
import shlex
from typing import Any

from autotune import modes
from autotune.command import source
from autotune.command.measure_only import flag_groups, measure_only
from autotune.errors import ConfigError
from autotune.export._form import Form, call, env_block
from autotune.export._measured import (
    RUN_DIR_NOTE,
    command_dir,
    config_lines,
    declared_lines,
    lightning_lines,
    measure_only_line,
    measured,
    secret_lines,
)
from autotune.export._winner import Winner

__all__ = ["builds_trainer", "flag_groups", "hf_command"]  # flag_groups: re-exported

NO_TRANSFORMERS = (
    "# transformers is not importable here, so which flags are TrainingArguments fields is not "
    "checked: the command's flags as they are"
)
TRAINING_ARGUMENTS = "transformers.TrainingArguments"


def job_source(w: Winner) -> source.JobSource:
    """What the command's program says of its arguments class and Trainer (command/source.py)."""
    assert w.command is not None
    return source.read([str(a) for a in w.command["argv"]], command_dir(w))


def arguments_class(qualified: str) -> tuple[type, str] | None:
    """The class of this dotted name ("trl.SFTConfig") and its package's version ("trl 0.19.1");
    None where the package is not importable here (imported here, not at the top: `autotune
    export` of other forms stays fast)."""
    package, _, name = qualified.partition(".")
    try:
        module = importlib.import_module(package)
    except ImportError:
        return None
    found = getattr(module, name, None)
    version = getattr(module, "__version__", "?")
    return (found, f"{package} {version}") if isinstance(found, type) else None


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


def typed(
    w: Winner, groups: list[list[str]], names: list[str], cls: type | None = None
) -> dict[str, Any]:
    """The values these flags give the job's arguments class (default TrainingArguments), as
    HfArgumentParser reads them (not the class itself, whose checks want the job's GPU: --tf32
    true needs an Ampere)."""
    from transformers import HfArgumentParser, TrainingArguments

    cls = cls or TrainingArguments
    # transformers types its parameter NewType("DataClassType", Any), which no class is
    parser = HfArgumentParser(cls, exit_on_error=False)  # type: ignore[arg-type]
    tokens = [t for g in groups for t in g]
    try:
        parsed, _ = parser.parse_known_args(tokens)
    except argparse.ArgumentError as err:
        raise ConfigError(f"{w.path}: command: {shlex.join(tokens)}: {err}") from None
    dict_fields = set(getattr(cls, "_VALID_DICT_FIELDS", ()))
    return {n: _plain(getattr(parsed, n), n in dict_fields) for n in dict.fromkeys(names)}


def _marked(lines: list[str], names: set[str]) -> list[str]:
    """The call's keyword lines of measurement-only fields, each marked as such at its end."""
    mark = "  # for the measurement only: remove for your real run"
    return [
        line + mark if line.strip().partition("=")[0] in names and line.endswith(",") else line
        for line in lines
    ]


def _typed_by(qualified: str) -> tuple[type, str, str] | None:
    """The class whose fields type the flags, what read them and a note: the job's own class, or
    TrainingArguments for a TRL config where trl is not importable here (each extends it); None
    where transformers is not importable either."""
    found = arguments_class(qualified)
    if found is not None:
        return found[0], f"{found[1]}", ""
    fallback = arguments_class(TRAINING_ARGUMENTS) if qualified != TRAINING_ARGUMENTS else None
    if fallback is None:
        return None
    name = qualified.rsplit(".", 1)[-1]
    note = (
        f"# {qualified.partition('.')[0]} is not importable here: the flags are typed as the "
        f"TrainingArguments fields {name} inherits; its own fields are not known, so its own "
        "flags stay with the script's below"
    )
    return fallback[0], fallback[1], note


def _unknown(job: source.JobSource) -> str:
    """Why the form is the command's flags alone: which class was not known, and why."""
    return (
        f"# the job's arguments class is not known ({job.said}): these are the command's flags "
        "only, not a TrainingArguments(...) call, whose defaults differ from other classes' "
        "(TRL's SFTConfig turns gradient checkpointing on, its learning rate is 2e-5)"
    )


def _arguments(w: Winner, groups: list[list[str]], job: source.JobSource) -> list[str]:
    """The job's arguments class's call and flags of its fields among the flags, then the
    script's own; the flags for the measurement only marked (command/measure_only.py)."""
    only = measure_only(w.command or {}, groups)
    flat = shlex.join(t for g in groups for t in g)
    if job.arguments is None:
        return [_unknown(job), *measure_only_line(only), flat]
    found = _typed_by(job.arguments)
    if found is None:
        return [NO_TRANSFORMERS, *measure_only_line(only), flat]
    cls, version, note = found
    name, typed_as = job.arguments.rsplit(".", 1)[-1], cls.__name__
    fields = {f.name: f for f in dataclasses.fields(cls)}
    ours = [g for g in groups if field_of(g, fields) is not None]
    own = [g for g in groups if field_of(g, fields) is None]
    lines = [
        f"# the command's flags that are {typed_as} fields ({version})",
        *([note] if note else []),
        *measure_only_line(only),
    ]
    if ours:
        kwargs = typed(w, ours, [str(field_of(g, fields)) for g in ours], cls)
        marked = {str(field_of(g, fields)) for g in ours if g in only}
        lines += [
            *_marked(call(name, kwargs), marked),
            "# the same as command-line flags (HfArgumentParser), as the command has them",
            shlex.join(t for g in ours for t in g),
        ]
    else:
        lines.append(f"# none: no flag of the command is a {typed_as} field")
    if own:
        lines += [
            f"# your script's own arguments (no {typed_as} field), as the command has them",
            shlex.join(t for g in own for t in g),
        ]
    return lines


def hf_command(w: Winner) -> Form:
    """The HF form of a command study: what the chosen trial's command gave the job's arguments
    class (its flags alone where the class is not known)."""
    m = measured(w)
    job = job_source(w)
    ran = f"trial {w.trial}'s" if w.trial is not None else "the chosen trial's"
    shown = job.arguments.rsplit(".", 1)[-1] if job.arguments else "its flags"
    lines = [
        f"# {ran} command ({m.argv[0]} ...; the command form has it whole) as {shown}",
        *([f"# its arguments class: {job.arguments} ({job.said})"] if job.arguments else []),
        *env_block(m.env),
        *lightning_lines(w),
        *_arguments(w, flag_groups(m.argv), job),
        *config_lines(w, m),
        *secret_lines(m),
        *declared_lines(w),
        *([RUN_DIR_NOTE] if m.names_run_dir else []),
    ]
    return Form("hf", "\n".join(lines) + "\n")


def builds_trainer(w: Winner) -> bool:
    """Whether a command study's job builds an HF Trainer, so the HF form fits it: measured by the
    HF callback (measure hf), or its program known to (command/source.py: the `trl sft` command, a
    script naming transformers' or TRL's Trainer). A flag's name alone does not tell: nanoGPT's
    --gradient_accumulation_steps is a TrainingArguments name too."""
    assert w.command is not None
    return "hf" in modes.of(w.command).exports or job_source(w).trainer
