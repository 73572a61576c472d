"""The command section of the YAML (task command): your own training command, how each knob is
rendered into it (command/render.py), and how its steps are measured."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from autotune.errors import excerpt

Scalar = Union[bool, int, float, str]
MAX_USER_VALUES = 64  # values of one knob of your own; more is a range, and belongs in its own knob
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Section(BaseModel):
    """config.study._Section's rules (unknown keys rejected, YAML's types taken as they are, floats
    finite), restated: config/ imports this section, so this module imports nothing of config/ (a
    test holds the two equal)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class KnobMapping(_Section):
    """How one knob reaches the command: exactly one of flag, env or key; `map` renders chosen
    values otherwise. A knob of your own (not one of autotune's) lists its `values` here."""

    flag: Optional[str] = Field(
        default=None, description="A command-line flag: the trial passes `FLAG VALUE`."
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
    measure: Literal["report", "hf", "lightning", "log"] = Field(
        default="report",
        description=(
            "report: the job reports its steps (autotune.reporting, or the HF Trainer / Lightning "
            "callbacks in autotune.callbacks); hf / lightning: an unmodified HF Trainer or "
            "Lightning job, autotune adds its callback to the job's Trainer itself (lightning: "
            "the precision and grad_accum_steps knobs reach it as PL_TRAINER_* variables, for "
            "arguments the script does not pass); log: lines of its output matching log_pattern."
        ),
    )
    log_pattern: Optional[str] = Field(
        default=None,
        description="measure log: a regular expression with the named group tokens_per_s (a line a "
        "step's rate), step_time_s with tokens, or tokens_total (a running count of tokens); e.g. "
        "'tps: (?P<tokens_per_s>[0-9][0-9,.]*(e[+-]?[0-9]+)?)'. An average since the start is "
        "refused.",
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

    @model_validator(mode="after")
    def _measure(self) -> CommandConfig:
        if self.measure == "log" and not self.log_pattern:
            raise ValueError(
                "command.log_pattern: needed with measure log (a regex with a named group "
                "tokens_per_s)"
            )
        if self.measure != "log" and self.log_pattern:
            raise ValueError(
                "command.log_pattern: only with measure log; remove it or set measure: log"
            )
        if self.log_pattern:
            _check_pattern(self.log_pattern)
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
        return self

    @model_validator(mode="after")
    def _files(self, info: ValidationInfo) -> CommandConfig:
        base = (info.context or {}).get("base_dir")
        if base is not None:  # a config loaded from a file: its folder is known
            _check_files(self, Path(base))
        return self


# an argument that names a flag (-x, --name), not a negative number
FLAG = re.compile(r"--?[A-Za-z]")


def warnings(cmd: CommandConfig, extend_edges: bool) -> list[str]:
    """Suspicious but legal mappings, one line each (validate and search print them): a flag's map
    entry that renders arguments without a flag (an entry replaces `FLAG VALUE` whole: `fp32:
    float32` beside `flag: --dtype` passes `float32` alone); a micro-batch's or accumulation's map
    without one pattern (render.pattern) where the search steps past the list (extend_edges), so
    no value past it is measured."""
    from autotune import knobs as catalogue
    from autotune.command.render import pattern

    out = []
    for name, m in cmd.knobs.items():
        if m.flag is not None and (bare := _flagless(m)):
            (key, args), *more = bare.items()
            also = f", as {', '.join(k for k, _ in more)} {'do' if len(more) > 1 else 'does'}"
            out.append(
                f"command.knobs.{name}.map: {key} renders `{' '.join(args)}` without a flag"
                f"{also if more else ''} (a map entry replaces `{m.flag} VALUE` whole); write "
                f"{key}: [{m.flag}, {', '.join(args)}] to keep the flag"
            )
        knob = catalogue.BY_NAME.get(name)
        stepped = extend_edges and knob is not None and bool(knob.edge or knob.derived)
        if stepped and len(m.map or {}) > 1 and (why := pattern({"map": m.map})[1]):
            out.append(
                f"command.knobs.{name}.map: {why}; the search measures no {name} past your "
                "list's edge that the map has no entry for (study.extend_edges)"
            )
    return out


def _flagless(m: KnobMapping) -> dict[str, list[str]]:
    """A flag mapping's map entries whose arguments name no flag: {value: its arguments}."""
    from autotune.command.render import text_of

    bare = {}
    for key, out in (m.map or {}).items():
        args = [text_of(a) for a in (out if isinstance(out, list) else [out]) if a is not None]
        if args and not any(FLAG.match(a) for a in args):
            bare[text_of(key)] = args
    return bare


def _check_files(cmd: CommandConfig, base_dir: Path) -> None:
    """The working directory exists; the config file reads, and each key mapping can be set in
    it."""
    from autotune.command.render import read_config, set_key

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


# Words of an average since the start (the HF Trainer's train_samples_per_second, avg, mean, ...):
# the trial refuses a line whose figure has one before it (command/log.AVERAGE, which the
# trial process keeps apart: it imports no config); here the pattern's own text is read for them,
# so `validate` refuses it before any trial. Letters, not \b, bound them: avg_tokens_per_s is one.
AVERAGE = re.compile(
    r"(train_\w*per_second|(?<![a-z])(avg|average|mean|overall|cumulative)(?![a-z])"
    r"|since[\W_]*(the[\W_]*)?start|(?<![a-z])running[\W_]*(avg|average|mean|rate|tps|throughput"
    r"|tokens|speed))",
    re.I,
)
AVERAGE_REACH = 40  # characters of the pattern before a figure's group, as the trial reads a line
FIGURES = ("tokens_per_s", "step_time_s", "tokens")  # the groups of a step's figure
RATE_NAME = re.compile(r"tok|tps|per_s|throughput|step_time|samples|rate|speed", re.I)
NAMED = re.compile(r"\(\?P<(\w+)>")


def _check_pattern(pattern: str) -> None:
    try:
        groups = re.compile(pattern).groupindex
    except re.error as err:
        raise ValueError(
            f"command.log_pattern: {excerpt(pattern)} is not a regular expression: {err}"
        ) from None
    named = set(groups)
    if "tokens_total" not in named and (said := _averaged(pattern)) is not None:
        raise ValueError(
            f"command.log_pattern: {excerpt(pattern)} reads an average since the start ({said}), "
            "not a step's figure; allowed: a figure per step (tokens_per_s, or step_time_s with "
            "tokens), a running count of tokens as the group tokens_total, or measure: hf / "
            "lightning (autotune's callback, no edit)"
        )
    if not {"tokens_per_s", "tokens_total"} & named and not {"step_time_s", "tokens"} <= named:
        raise ValueError(
            f"command.log_pattern: {excerpt(pattern)} has no named group tokens_per_s, "
            "tokens_total, or "
            "step_time_s with tokens; e.g. 'tps: (?P<tokens_per_s>[0-9][0-9,.]*)'"
        )


def _averaged(pattern: str) -> str | None:
    """Where the pattern's text says its figure is an average since the start: a figure-like
    group named so (avg_tokens_per_s), or such a word in the text before its first group (where
    the trial looks in a line) or just around a figure's group; None where nothing says so."""
    for name in NAMED.findall(pattern):
        if AVERAGE.search(name) and RATE_NAME.search(name):
            return f"the group {name}"
    starts = [(m.start(), m.end(), m.group(1)) for m in NAMED.finditer(pattern)]
    nearby = [(0, starts[0][0], starts[0][2])] if starts else []
    for start, end, name in starts:
        if name in FIGURES:
            close = _group_end(pattern, end)
            nearby += [(start - AVERAGE_REACH, start, name), (close, close + 12, name)]
    for begin, end, name in nearby:
        # the other groups' names are no words of the line: (?P<mean_loss> is no "mean"
        text = NAMED.sub("(", pattern[max(0, begin) : end])
        if found := AVERAGE.search(text):
            return f"{found.group(0)!r} by the group {name}"
    return None


def _group_end(pattern: str, start: int) -> int:
    """The index after the `)` that closes the group whose text starts at `start`."""
    depth, i = 1, start
    while i < len(pattern) and depth:
        if pattern[i] == "\\":
            i += 1
        elif pattern[i] == "(":
            depth += 1
        elif pattern[i] == ")":
            depth -= 1
        i += 1
    return i
