"""task command in the parent: the command section's rules against the catalogue and the space, the
trial's parameters, its command prepared (rendered, its secrets handed over apart), the figure read
from what the trial measured, and what a trial that could not measure the job says; the section's
suspicious but legal mappings (warnings). The plug-in that tasks.TASKS holds (tasks/_command.py)
calls these; the trial's side is command/trial.py."""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.command.hook.unmeasured import HOOK_MEASURES, SECOND_TRAINER
from autotune.documents.record import TrialRecord
from autotune.protocol import CommandParams, Rendered, TaskParams, TrialResult, TrialSpec
from autotune.status import Status

if TYPE_CHECKING:
    from autotune.config import Config
    from autotune.config.command import CommandConfig, KnobMapping, Scalar
    from autotune.knobs import Knob

TASK = "command"
# the trial ends a job past its deadline this long before autotune would (the job's own stop, then
# its end, before the trial's hard limit)
COMMAND_MARGIN_S = 15.0
# autotune's knobs a command may map; those that set environment variables reach it without a
# mapping
MAPPABLE = (
    "micro_batch_size",
    "grad_accum_steps",
    "precision",
    "compile",
    "activation_checkpointing",
)


def check_config(cfg: Config) -> None:
    """The command's knob mappings against the catalogue and the space: a searched knob reaches
    the command, a knob of another task or of autotune's with values of its own is refused."""
    from autotune import knobs as catalogue

    if cfg.command is None:
        raise ValueError("command: required with task command (argv, and how each knob reaches it)")
    mine = [k.name for k in catalogue.CATALOGUE if TASK in k.tasks]
    for name, mapping in cfg.command.knobs.items():
        _check_mapping(name, mapping, mine, catalogue.BY_NAME)
    for name in mine:
        _check_reaches(name, cfg, catalogue.BY_NAME[name])
    for name, mapping in cfg.command.knobs.items():
        values = mapping.values if mapping.values is not None else getattr(cfg.space, name)
        _check_map(name, mapping, values)
    from autotune.redact import keep_command

    keep_command(cfg.command.argv, cfg.command.env)  # masked in every text shown from now on


def step_tokens_said(cmd: CommandConfig, knobs: dict[str, Any]) -> str | None:
    """The tokens of a step as command.tokens_per_step gives them for these knobs (validate shows
    the baseline's), None without it; ValueError where they are no whole number above 0."""
    from autotune.modes.log import PER_STEP, per_step_names, per_step_tokens

    if cmd.tokens_per_step is None:
        return None
    expression = str(cmd.tokens_per_step)
    tokens = per_step_tokens(expression, knobs)
    used = ", ".join(f"{n}={knobs[n]}" for n in dict.fromkeys(per_step_names(expression)))
    if tokens <= 0 or tokens != int(tokens):
        raise ValueError(
            f"{PER_STEP}: {expression} is {tokens:g} for the baseline ({used}); a step's tokens "
            "are a whole number above 0"
        )
    return f"{PER_STEP}: {expression} = {int(tokens):,} tokens a step ({used or 'no knob'})"


def notes(cfg: Config) -> list[str]:
    """A secret written into the command's arguments: masked where autotune writes, so check
    cannot run it again; {env:NAME} can."""
    return _secret_notes(cfg.command) if cfg.command is not None else []


def user_knobs(cfg: Config) -> dict[str, list[Scalar]]:
    """The command's own knobs (command.knobs with values), in their order."""
    if cfg.command is None:
        return {}
    return {n: list(m.values) for n, m in cfg.command.knobs.items() if m.values is not None}


def trial_params(command: CommandConfig | None, timeout_s: float) -> TaskParams:
    """The command section as JSON (the trial renders it; tasks.Command.prepare first), when
    the job is ended: a little before the trial's hard limit (COMMAND_MARGIN_S), and that limit
    in minutes for the remedies. Empty without a command section."""
    if command is None:
        return CommandParams()
    from autotune import remedy

    return CommandParams(
        command=command.model_dump(mode="json"),
        timeout_s=max(5.0, timeout_s - COMMAND_MARGIN_S),
        trial_timeout_min=float(remedy.minutes(timeout_s)),
    )


def prepare(spec: TrialSpec, run_dir: Path) -> tuple[TrialSpec, dict[str, str]]:
    """The command with this trial's knob values (command.render.render), its config file
    written into the trial's folder: the trial process only launches what it is given. The spec
    (spec.json, then the record in study.db) holds the command with its secrets masked
    (redact.mask_command); the values masked, and those `{env:NAME}` filled, reach the trial
    process in its environment alone (protocol.ENV_SECRETS), which puts them back."""
    import dataclasses
    import json
    import os

    from autotune import redact
    from autotune.command import render as command_render
    from autotune.errors import ConfigError
    from autotune.protocol import ENV_SECRETS

    params = spec.params
    assert isinstance(params, CommandParams)
    rendered = command_render.render(
        params.command, spec.knobs, run_dir, Path(spec.base_dir or ".")
    )
    try:
        real = command_render.resolve(rendered, os.environ)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    shown = dataclasses.replace(
        rendered, argv=redact.mask_argv(rendered.argv), env=redact.mask_env(rendered.env)
    )
    hidden = _hidden(shown, real)
    secrets = _secrets(shown, real)
    redact.keep(secrets)
    masked = dataclasses.replace(
        params, command=redact.mask_command(params.command), rendered=shown
    )
    handed = {**hidden, "mask": secrets}  # the trial masks these in its result (protocol.hide)
    env = {ENV_SECRETS: json.dumps(handed)} if hidden["argv"] or hidden["env"] else {}
    return dataclasses.replace(spec, params=masked), env


def metrics(record: TrialRecord, result: TrialResult) -> None:
    """The figure: the job's tokens over time in its measured window (command/window.py), not
    a median of its steps' rates; padding (the share of computed tokens that were padding), the
    tokens of the measured steps, how the window was measured; a job that ignored the stop
    request is said in the reason."""
    from autotune.documents.record import Metric

    out, metrics = result.output, record.metrics
    assert metrics is not None  # a measured trial's
    window = out.get("window") or {}
    if window.get("tokens_per_s"):
        per_gpu = metrics[Metric.TOKENS_PER_GPU]
        world = metrics[Metric.TOKENS] / per_gpu if per_gpu else 1
        metrics[Metric.TOKENS_PER_GPU] = window["tokens_per_s"]
        metrics[Metric.TOKENS] = window["tokens_per_s"] * world
        metrics[Metric.WINDOW] = window
    metrics[Metric.PADDING_PCT] = out.get("padding_pct")
    # the measured-memory line's inputs (study/peaks.py)
    metrics[Metric.TOKENS_PER_MICRO_BATCH] = out.get("tokens_per_micro_batch")
    resident = out.get("resident_mem_bytes")
    metrics[Metric.RESIDENT_GIB] = resident / 2**30 if isinstance(resident, int) else None
    reserved = result.peak_mem_reserved_bytes
    metrics[Metric.PEAK_RESERVED_GIB] = reserved / 2**30 if reserved is not None else None
    tokens = out.get("tokens") or []
    metrics["tokens_per_step_median"] = statistics.median(tokens) if tokens else None
    stop = (result.applied or {}).get("stop", "")
    if stop.startswith(("ignored", SECOND_TRAINER)):  # a second Trainer kept it running: named
        record.reason = f"measured; the command {stop}"
    if window and not window.get("settled") and record.status == Status.OK:  # said where it is read
        said = f"window {window.get('said', 'not settled')}"
        record.reason = f"{record.reason}; {said}" if record.reason else said


# What a command trial says when it could not measure the job at all, whatever its knobs
# (command/trial.py, command/said.py): an average since the start refused, no step reported (the
# reporter or callback missing, a log pattern that never matched), a command that cannot start.
UNMEASURED = (
    "matched an average since the start",
    "without reporting a step",
    HOOK_MEASURES,  # its Trainer trained in a child of the first process: none is measured
    "(command.first_step_s: raise it if slow)",
    "the command reported 0 of ",
    "the command could not start",
)


def unmeasured(status: str, reason: str) -> bool:
    """Whether a failed command trial failed for a reason of its measurement, not of its knobs:
    every trial of the study would fail the same way (search/drive.py stops at its baseline)."""
    failed = status in (Status.CRASH, Status.TIMEOUT, Status.INVALID_CONFIG)
    return failed and any(said in reason for said in UNMEASURED)


def _secret_notes(command: CommandConfig) -> list[str]:
    """What `search` says of a command's secrets written into its YAML: where each argument holding
    one is (masked in study.db and best.yaml, so `check` cannot run it), and the remedy."""
    from autotune import redact

    shown = redact.mask_argv(command.argv)
    where = [f"command.argv[{i}]" for i, (a, b) in enumerate(zip(command.argv, shown)) if a != b]
    if not where:
        return []
    return [
        f"{', '.join(where)} {'holds a secret' if len(where) == 1 else 'hold secrets'}: masked in "
        "study.db and best.yaml, so `autotune check` cannot run it again; write it as {env:NAME} "
        "(filled from your environment, never stored)"
    ]


def _hidden(shown: Rendered, real: Rendered) -> dict[str, dict[str, str]]:
    """What the trial process puts back into the command it was given (shown): each argument and
    variable that differs from the command as it runs (real), by index and by name. A variable
    masked and inherited from autotune's environment is dropped from both."""
    argv = {str(i): a for i, (a, b) in enumerate(zip(real.argv, shown.argv)) if a != b}
    env = {k: v for k, v in real.env.items() if shown.env.get(k) != v}
    return {"argv": argv, "env": env}


def _secrets(shown: Rendered, real: Rendered) -> list[str]:
    """The secrets of the command as it runs (real), whole and each part masked or filled in it
    (redact.removed: the token of `Bearer X`), long enough to be masked in any text
    (redact.MIN_KEPT)."""
    from autotune import redact

    pairs = [(a, b) for a, b in zip(real.argv, shown.argv) if a != b]
    pairs += [
        (v, shown.env.get(k, redact.MASK)) for k, v in real.env.items() if shown.env.get(k) != v
    ]
    found = {part for a, b in pairs for part in (a, *redact.removed(a, b))}
    return sorted((s for s in found if len(s) >= redact.MIN_KEPT), key=len, reverse=True)


def _check_mapping(
    name: str, mapping: KnobMapping, mine: list[str], by_name: dict[str, Knob]
) -> None:
    where = f"command.knobs.{name}"
    if name in by_name and name not in mine:
        raise ValueError(
            f"{where}: {name} is a knob of task {', '.join(by_name[name].tasks)}, not of command; "
            f"give your own knob another name (autotune's for a command: {', '.join(mine)})"
        )
    if name in mine and mapping.values is not None:
        raise ValueError(
            f"{where}.values: {name} is autotune's knob; its values come from space.{name}"
        )
    if name in mine and name not in MAPPABLE:
        raise ValueError(f"{where}: {name} sets environment variables itself; remove its mapping")
    if name not in mine and mapping.values is None:
        raise ValueError(
            f"{where}.values: a knob of your own lists its values, e.g. values: [adamw_torch, "
            "adafactor]"
        )


def declared(name: str, cfg: Config) -> bool:
    """Whether space gives autotune's knob one value that no mapping renders: a declaration of what
    the job does itself (its script hard-codes a batch of 20), recorded in every trial's knobs (so
    tokens, memory and the report use it) and never rendered into the command."""
    value = getattr(cfg.space, name)
    return (
        name in MAPPABLE
        and name not in _section(cfg).knobs
        and isinstance(value, list)
        and len(value) == 1
        and not _knob_env(name, cfg)
    )


def _check_reaches(name: str, cfg: Config, knob: Knob) -> None:
    """A knob of autotune's that the study varies must reach the command; one value without a
    mapping is what the job does itself (`declared`)."""
    mapped = name in _section(cfg).knobs or bool(knob.env) or _knob_env(name, cfg)
    value = getattr(cfg.space, name)
    if mapped or value == "auto" or value == [knob.default] or declared(name, cfg):
        if name == "grad_accum_steps" and not mapped and cfg.workload.global_batch_size is not None:
            raise ValueError(
                "command.knobs.grad_accum_steps: needed with workload.global_batch_size (the "
                "accumulation is derived from the micro-batch and must reach the command), e.g. "
                "{flag: --gradient_accumulation_steps}"
            )
        return
    raise ValueError(
        f"space.{name}: {value} set, but command.knobs.{name} does not say how it reaches the "
        f"command; add e.g. command.knobs.{name}: {{flag: --{name}}} (one value without a "
        "mapping declares what your script sets itself)"
    )


def _knob_env(name: str, cfg: Config) -> bool:
    """The knob reaches the job as a variable its framework reads (the mode's knob_env: measure
    lightning's PL_TRAINER_*, command/render.py); a value the mode has no text for is refused."""
    from autotune import modes

    mode = modes.MODES[_section(cfg).measure]
    if name not in mode.knob_env:
        return False
    values = getattr(cfg.space, name)
    if mode.knob_values is not None and isinstance(values, list):
        mode.knob_values(name, values)
    return True


def _section(cfg: Config) -> CommandConfig:
    """The command section, there with task command (Command.check_config refuses a config without
    it before asking the rules that read it)."""
    assert cfg.command is not None, "task command's config has a command section"
    return cfg.command


def _check_map(name: str, mapping: KnobMapping, values: list[Any] | str) -> None:
    """A value map covers every value the study may give the knob (a value missing from it would be
    rendered as `FLAG VALUE`, which a map is there to avoid)."""
    if not mapping.map or values == "auto":
        return
    from autotune.command.render import text_of

    keys = {text_of(k) for k in mapping.map}
    missing = [v for v in values if text_of(v) not in keys]
    if missing:
        raise ValueError(
            f"command.knobs.{name}.map: no entry for {text_of(missing[0])} (a value the study "
            f"gives {name}); "
            f"add {text_of(missing[0])}: [...] or drop it from the values"
        )


# an argument that names a flag (-x, --name), not a negative number
FLAG = re.compile(r"--?[A-Za-z]")


def warnings(cmd: CommandConfig, extend_edges: bool) -> list[str]:
    """Suspicious but legal mappings, one line each (validate and search print them): a flag's map
    entry that renders arguments without a flag (an entry replaces `FLAG VALUE` whole: `fp32:
    float32` beside `flag: --dtype` passes `float32` alone); a micro-batch's or accumulation's map
    without one pattern (render.pattern) where the search steps past the list (extend_edges), so
    no value past it is measured."""
    from autotune import knobs as catalogue
    from autotune.command.render import flag_of, pattern

    out = []
    for name, m in cmd.knobs.items():
        if m.flag is not None and (bare := _flagless(m)):
            (key, args), *more = bare.items()
            also = f", as {', '.join(k for k, _ in more)} {'do' if len(more) > 1 else 'does'}"
            out.append(
                f"command.knobs.{name}.map: {key} renders `{' '.join(args)}` without a flag"
                f"{also if more else ''} (a map entry replaces "
                f"`{' '.join(flag_of(m.flag, 'VALUE'))}` whole); write "
                f"{key}: [{', '.join(flag_of(m.flag, args[0]) + args[1:])}] to keep the flag"
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
