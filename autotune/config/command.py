"""The command section of the YAML (task command): your own training command, how each knob is
rendered into it (command/render.py), and how its steps are measured (the mode's rules: modes/);
the command's own config file read, each key mapping set in it."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Optional, Union

from pydantic import (
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    StrictInt,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

# every section's rules: unknown keys refused, YAML's types taken as they are, floats finite
from autotune.config.study import _Section
from autotune.errors import excerpt
from autotune.modes import DEFAULT, MODES, described

Scalar = Union[bool, int, float, str]
MAX_USER_VALUES = 64  # values of one knob of your own; more is a range, and belongs in its own knob
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class KnobMapping(_Section):
    """How one knob reaches the command: exactly one of flag, env or key; `map` renders chosen
    values otherwise. A knob of your own (not one of autotune's) lists its `values` here."""

    flag: Optional[str] = Field(
        default=None,
        description="A command-line flag: the trial passes `FLAG VALUE`; a flag with `{}` "
        "(--batch_size={}) is one argument, the value in its place.",
    )
    env: Optional[str] = Field(
        default=None, description="An environment variable set to the value."
    )
    key: Optional[str] = Field(
        default=None,
        description=(
            "A dotted key (training.local_batch_size) of command.config_file set to the value."
        ),
    )
    map: Optional[dict[Any, Any]] = Field(
        default=None,
        description=(
            "What a value renders as instead: a flag's arguments (a list; [] or null: none), a "
            "variable's text, a key's value (null: the key as the file has it)."
        ),
    )
    values: Optional[list[Scalar]] = Field(
        default=None,
        description=(
            "A knob of your own: its values (two or more are searched, the first is its default). "
            "Absent for autotune's knobs, whose values come from the space section."
        ),
    )

    @model_validator(mode="after")
    def _one_target(self) -> KnobMapping:
        given = [k for k in ("flag", "env", "key") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of flag, env or key (got {', '.join(given) or 'none'})"
            )
        if self.flag is not None and not self.flag.startswith("-"):
            raise ValueError(
                f"flag {excerpt(self.flag)} does not start with '-'; e.g. "
                "--per_device_train_batch_size"
            )
        if self.flag is not None and self.flag.count("{}") > 1:
            raise ValueError(
                f"flag {excerpt(self.flag)} has {self.flag.count('{}')} {{}}; a flag with one "
                "{} renders one argument, the value in its place (--batch_size={}), one without "
                "renders two (--batch_size VALUE)"
            )
        if self.env is not None and not NAME.fullmatch(self.env):
            raise ValueError(f"env {excerpt(self.env)} is not an environment variable name")
        if self.key is not None and not all(NAME.fullmatch(p) for p in self.key.split(".")):
            raise ValueError(
                f"key {excerpt(self.key)} is not a dotted key such as training.local_batch_size"
            )
        if self.values is not None and not 1 <= len(self.values) <= MAX_USER_VALUES:
            raise ValueError(f"values: give 1 to {MAX_USER_VALUES} values (got {len(self.values)})")
        if self.values is not None and len({repr(v) for v in self.values}) != len(self.values):
            raise ValueError(f"values: {excerpt(self.values)} repeats a value")
        return self


class CommandConfig(_Section):
    """task command: the study's unit is your own training command, launched once a trial with its
    knob values."""

    argv: list[str] = Field(
        min_length=1,
        description=(
            "The command, an argument list (never a shell string): [python, train.py, "
            "--max_steps, '1000']. `{run_dir}` is the trial's folder, `{config}` the rendered "
            "config file, `{python}` "
            "the Python that runs autotune, `{env:NAME}` the variable NAME of autotune's "
            "environment (for a secret: never stored)."
        ),
    )
    cwd: Optional[str] = Field(
        default=None, description="Working directory, relative to the YAML's folder (default)."
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables added for every trial (a value may be `{env:NAME}`). "
        "A secret (a name such as HF_TOKEN, a password in a URL) is masked in study.db and "
        "best.yaml.",
    )
    config_file: Optional[str] = Field(
        default=None,
        description=(
            "A YAML, TOML or JSON file the command reads; each trial gets a copy with its `key` "
            "mappings set, named in argv as {config}. Relative to the YAML's folder."
        ),
    )
    # one of MODES (checked by _mode as a Literal of their names would be: the list is the registry)
    measure: str = Field(
        default=DEFAULT,
        json_schema_extra=lambda schema: schema.update(enum=list(MODES)),  # those registered now
        description=described(),  # each mode's own help (autotune/modes)
    )
    log_pattern: Optional[str] = Field(
        default=None,
        description="measure log: a regular expression with the named group tokens_per_s (a line a "
        "step's rate), step_time_s with tokens, or tokens_total (a running count of tokens); e.g. "
        "'tps: (?P<tokens_per_s>[0-9][0-9,.]*(e[+-]?[0-9]+)?)'. An average since the start is "
        "refused.",
    )
    tokens_per_step: Optional[Union[StrictInt, str]] = Field(
        default=None,
        description="measure log: the tokens of a step whose line says none (a log_pattern with "
        "step_time_s or step_time_ms and no tokens group): a number, or an arithmetic expression "
        "of the trial's knobs, e.g. '{micro_batch_size} * {grad_accum_steps} * 1024' (+ - * / "
        "// and parentheses; a knob as {name}: autotune's numeric knobs, command.knobs' own).",
    )
    max_steps: int = Field(
        default=60,
        ge=1,
        le=100_000,
        description="The most optimizer steps a trial asks of the job (warm-up included): it "
        "measures until the figure's 95% interval is within half_width_pct, or this many steps.",
    )
    half_width_pct: float = Field(
        default=3.0,
        gt=0,
        le=100,
        description="The 95% interval of a trial's figure (tokens over time), in percent, that "
        "ends its measurement early; wider after max_steps is recorded as not settled.",
    )
    first_step_s: Optional[float] = Field(
        default=None,
        gt=0,
        le=86_400,
        description="Seconds the job may take to its first step (start, model, first compile); "
        "none by then ends the trial, quoting the output lines closest to log_pattern. Default: "
        "the trial's limit.",
    )
    stop_grace_s: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description=(
            "Seconds the job has to exit once its steps are measured (it was asked to stop); then "
            "its process group is ended."
        ),
    )
    knobs: dict[str, KnobMapping] = Field(
        default_factory=dict,
        description="Knob name -> how it reaches the command (flag, env or key).",
    )
    measure_only: list[str] = Field(
        default_factory=list,
        max_length=MAX_USER_VALUES,
        description=(
            "Flags of argv that exist only for the measurement (--max_steps, --logging_steps): "
            "`autotune export` marks them, with its values, as to remove for your real run. The "
            "HF Trainer's and Lightning's own (max_steps, logging_steps, save_strategy, "
            "report_to, disable_tqdm, limit_train_batches, ...) are recognised by name."
        ),
    )

    @field_validator("argv")
    @classmethod
    def _argv(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the first argument is empty; give the program, e.g. python")
        return value

    @field_validator("measure_only")
    @classmethod
    def _measure_only(cls, value: list[str]) -> list[str]:
        bad = [flag for flag in value if not flag.startswith("-") or not flag.strip("-")]
        if bad:
            raise ValueError(
                f"{excerpt(bad[0])} is not a flag; give flags of argv, e.g. --max_steps"
            )
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [name for name in value if not NAME.fullmatch(name)]
        if bad:
            allowed = f"a name is {NAME.pattern}"
            raise ValueError(f"{excerpt(bad[0])} is not an environment variable name ({allowed})")
        return value

    @field_validator("measure", mode="before")
    @classmethod
    def _mode(cls, value: object) -> object:
        if isinstance(value, str) and value in MODES:
            return value
        names = [repr(name) for name in MODES]
        expected = f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
        raise PydanticCustomError(
            "literal_error", "Input should be {expected}", {"expected": expected}
        )

    @model_validator(mode="after")
    def _measure(self) -> CommandConfig:
        MODES[self.measure].rules(dict(self))
        keyed = [n for n, m in self.knobs.items() if m.key is not None]
        if keyed and not self.config_file:
            raise ValueError(
                f"command.knobs.{keyed[0]}: a key mapping needs command.config_file (the file it "
                "sets)"
            )
        if self.config_file and "{config}" not in " ".join(self.argv):
            raise ValueError(
                "command.argv: name the rendered config file as {config}, e.g. [--config, "
                "'{config}']"
            )
        bad = next((n for n in self.knobs if not NAME.fullmatch(n)), None)
        if bad is not None:
            raise ValueError(
                f"command.knobs: {excerpt(bad)} is not a knob name (letters, digits, _)"
            )
        if self.tokens_per_step is not None:
            _check_per_step_knobs(str(self.tokens_per_step), self.knobs)
        return self

    @model_serializer(mode="wrap")
    def _dumped(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        """tokens_per_step only where given: a command without it dumps as before the field was
        added (best.yaml, the study's stored config, its identity unchanged)."""
        doc = handler(self)
        if isinstance(doc, dict) and doc.get("tokens_per_step") is None:
            doc.pop("tokens_per_step", None)
        return doc

    @model_validator(mode="after")
    def _files(self, info: ValidationInfo) -> CommandConfig:
        base = (info.context or {}).get("base_dir")
        if base is not None:  # a config loaded from a file: its folder is known
            _check_files(self, Path(base))
        return self


def _check_per_step_knobs(expression: str, mappings: dict[str, KnobMapping]) -> None:
    """command.tokens_per_step names only the trial's knobs whose values are numbers: autotune's
    (micro_batch_size, grad_accum_steps) and the command's own with numeric values."""
    from autotune import knobs as catalogue
    from autotune.modes.log import PER_STEP, per_step_names

    def numeric(values: list[Any]) -> bool:
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)

    mine = {k.name: [k.default] for k in catalogue.CATALOGUE if "command" in k.tasks}
    known = {**mine, **{n: list(m.values) for n, m in mappings.items() if m.values is not None}}
    allowed = ", ".join(f"{{{n}}}" for n, values in known.items() if numeric(values))
    for name in per_step_names(expression):
        if name not in known:
            raise ValueError(
                f"{PER_STEP}: {{{name}}} is no knob of the trial; allowed: {allowed} (numbers "
                "and + - * / // ( ) between them)"
            )
        if not numeric(known[name]):
            raise ValueError(
                f"{PER_STEP}: {{{name}}} is no number (its values: "
                f"{excerpt(known[name])}); allowed: {allowed}"
            )


def _check_files(cmd: CommandConfig, base_dir: Path) -> None:
    """The working directory exists; the config file reads, and each key mapping can be set in
    it."""
    if not (base_dir / (cmd.cwd or ".")).is_dir():
        raise ValueError(
            f"command.cwd: no such folder: {excerpt(cmd.cwd)} (relative to the YAML's folder "
            f"{base_dir})"
        )
    if not cmd.config_file:
        return
    path = base_dir / cmd.config_file
    try:
        doc = read_config(path)
    except (OSError, ValueError) as err:
        raise ValueError(
            f"command.config_file: {excerpt(cmd.config_file)} cannot be read: {err}"
        ) from None
    for name, mapping in cmd.knobs.items():
        if mapping.key is not None:
            try:
                set_key(doc, mapping.key, None)
            except ValueError as err:
                raise ValueError(f"command.knobs.{name}.key: {err} in {cmd.config_file}") from None


CONFIG_FORMATS = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml"}
MAX_CONFIG_BYTES = 8 << 20  # a config file larger than this is refused, never read whole


def _bounded_text(path: Path) -> str:
    """A regular file's text (a FIFO, device or folder is refused before it is opened), at most
    MAX_CONFIG_BYTES."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("not a regular file (a FIFO, device or folder is never read)")
    if info.st_size > MAX_CONFIG_BYTES:
        raise ValueError(f"{info.st_size:,} bytes; at most {MAX_CONFIG_BYTES:,} are read")
    with open(path, encoding="utf-8") as handle:
        text = handle.read(MAX_CONFIG_BYTES + 1)
    if len(text) > MAX_CONFIG_BYTES:
        raise ValueError(f"over {MAX_CONFIG_BYTES:,} characters; at most that many are read")
    return text


def read_config(path: Path) -> dict[str, Any]:
    """A config file as a dict, by its suffix (ValueError naming the file)."""
    kind = CONFIG_FORMATS.get(path.suffix.lower())
    text = _bounded_text(path)
    if kind == "json":
        doc = json.loads(text)
    elif kind == "toml":
        import tomllib

        doc = tomllib.loads(text)
    elif kind == "yaml":
        import yaml

        doc = yaml.safe_load(text)
    else:
        raise ValueError(f"{path.name}: a config file is {', '.join(CONFIG_FORMATS)}")
    if not isinstance(doc, dict):
        raise ValueError(f"{path.name}: not a mapping at its top level")
    return doc


def set_key(doc: dict[str, Any], dotted: str, value: object) -> None:
    """doc[a][b][c] = value for "a.b.c"; a missing table is made, a non-table on the way is an
    error."""
    *parents, last = dotted.split(".")
    node = doc
    for i, part in enumerate(parents):
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ValueError(
                f"{'.'.join(parents[: i + 1])} is a value, not a table, so {dotted} cannot be set"
            )
    node[last] = value
