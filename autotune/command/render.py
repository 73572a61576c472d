"""A command study's knob values rendered into the user's command: flags, environment variables, and
overrides of a config file the command reads (YAML, TOML or JSON, by dotted key).

One function renders (`render`): the trial that launches the command and `autotune export` both call
it, so the exported command line is the one the trial ran (`validate` shows the baseline's through
it too: `preview`). Each knob's mapping (config.KnobMapping,
as a dict here):

- `flag: --per_device_train_batch_size`: the arguments `[flag, value]` (a bool as true/false);
  a flag with `{}` (`--batch_size={}`, nanoGPT's configurator) is one argument, the value in its
  place;
- `env: MY_VAR`: the variable set to the value;
- `key: training.local_batch_size`: the dotted key of `command.config_file` set to the value
  (typed);
- `map: {bf16: [--bf16, "true"], fp32: []}`: what each value renders as instead (a flag's arguments,
  an environment variable's text, a key's value; null or [] renders nothing). A whole number the map
  has no entry for (a micro-batch past the list's edge: search/edges.py, or the accumulation derived
  from it) renders through the one pattern its whole-number entries follow, their value's digits
  the hole (`{8: [--batch_size=8], 16: [--batch_size=16]}` renders 32 as `--batch_size=32`); where
  they follow none, `unrendered` says why, and the search measures no such value.

A knob whose value is None (it cannot act in this trial) renders nothing. `{run_dir}` in argv or env
is the trial's folder, `{config}` the rendered config file's path and `{python}` the Python that
runs autotune. `{env:NAME}` is filled from autotune's environment as the trial starts (`resolve`):
a secret written so is never stored.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

# the command's own config file, as the schema reads it to check each key mapping
from autotune.config.command import CONFIG_FORMATS, read_config, set_key
from autotune.knobs import KnobValue
from autotune.modes import MODES
from autotune.modes import of as mode_of

# Rendered: the hand-over's own class (the trial process reads it back from the spec)
from autotune.protocol import Knobs, Rendered

# MASK: a secret masked when study.db or best.yaml was written; ENV_REFERENCE: `{env:NAME}`
from autotune.redact import ENV_REFERENCE, MASK, mask_argv, mask_env


class KnobMappingDoc(TypedDict, total=False):
    """One knob's mapping as the spec and best.yaml hold it (config.KnobMapping as JSON): one of
    flag, env or key; `map`: what a value renders as instead: a flag's arguments, a variable's
    text, a key's value (any value of the config file)."""

    flag: str | None
    env: str | None
    key: str | None
    map: dict[KnobValue, object] | None  # keys as YAML gave them, compared as text
    values: list[KnobValue] | None


def text_of(value: object) -> str:
    """A knob value as a flag's argument or a variable's text: true/false for bools."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _mapped(mapping: KnobMappingDoc, value: KnobValue) -> tuple[bool, object]:
    """(found, rendered) of `value` in the mapping's map (keys compared as text: YAML keys are
    strings); a whole number without an entry through the map's pattern (`pattern`)."""
    table = mapping.get("map") or {}
    for key, out in table.items():
        if text_of(key) == text_of(value):
            return True, out
    form, _ = pattern(mapping) if table and _whole(value) else (None, "")
    if form is not None:
        return True, _filled(form, str(value))
    return False, None


WHOLE = re.compile(r"[0-9]+")
Form = tuple[Any, ...]  # a map entry with its value's digits as a hole (_form)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _form(out: object, digits: str) -> Form:
    """A map entry of the value `digits` as a comparable form: each text split where the value's
    own digits stand (not inside a longer number: 1 in 16 is no hole), the value itself a hole
    (a key's typed value); anything else as it is."""
    if isinstance(out, list):
        return ("list", tuple(_form(o, digits) for o in out))
    if isinstance(out, str):
        return ("text", tuple(re.split(rf"(?<![0-9]){digits}(?![0-9])", out)))
    if _whole(out) and str(out) == digits:
        return ("value",)
    return ("same", json.dumps(out, sort_keys=True, default=str))


def _holes(form: Form) -> bool:
    kind, *rest = form
    if kind == "list":
        return any(_holes(f) for f in rest[0])
    return kind == "value" or kind == "text" and len(rest[0]) > 1


def _filled(form: Form, digits: str) -> object:
    kind, *rest = form
    if kind == "list":
        return [_filled(f, digits) for f in rest[0]]
    if kind == "text":
        return digits.join(rest[0])
    return int(digits) if kind == "value" else json.loads(rest[0])


def pattern(mapping: KnobMappingDoc) -> tuple[Form | None, str]:
    """The one form the map's whole-number entries share, their value's digits the hole, that
    renders a whole number without an entry; None and why where two or more entries share
    none."""
    table = mapping.get("map") or {}
    entries = [(text_of(k), out) for k, out in table.items() if WHOLE.fullmatch(text_of(k))]
    forms = {_form(out, digits) for digits, out in entries}
    if len(entries) > 1 and len(forms) == 1 and _holes(form := next(iter(forms))):
        return form, ""
    if len(entries) < 2:
        return None, "fewer than two of its entries are whole numbers to read a pattern from"
    listed = ", ".join(f"{d}: {json.dumps(out)}" for d, out in entries[:3])
    return None, (
        f"its entries ({listed}{', ...' if len(entries) > 3 else ''}) follow no one pattern of "
        "their value (such as 8: [--batch_size=8], 16: [--batch_size=16])"
    )


def unrendered(command: Mapping[str, Any], knobs: Knobs) -> str:
    """Why these knob values cannot reach the command ('' where they all can): a whole number that
    a knob's map has no entry for, its entries following no one pattern (`pattern`), would render
    as `FLAG VALUE`, which the map is there to replace (a micro-batch past the list's edge:
    search/edges.py)."""
    for name, mapping in (command.get("knobs") or {}).items():
        value = knobs.get(name)
        if value is None or not mapping.get("map") or _mapped(mapping, value)[0]:
            continue
        _, why = pattern(mapping)
        v = text_of(value)
        return f"command.knobs.{name}.map has no entry for {v} and {why}; add {v}: [...] to it"
    return ""


def flag_args(mapping: KnobMappingDoc, value: KnobValue) -> list[str]:
    found, out = _mapped(mapping, value)
    flag = mapping.get("flag")
    assert flag is not None, "flag_args renders a flag mapping"
    if not found:
        return flag_of(flag, text_of(value))
    if out is None:
        return []
    return [text_of(a) for a in out] if isinstance(out, list) else [text_of(out)]


def flag_of(flag: str, text: str) -> list[str]:
    """A flag with its value's text: `FLAG VALUE`, two arguments; one whose pattern has `{}`
    (--batch_size={}) is one argument, the value in its place."""
    return [flag.replace("{}", text)] if "{}" in flag else [flag, text]


def env_value(mapping: KnobMappingDoc, value: KnobValue) -> str | None:
    found, out = _mapped(mapping, value)
    if not found:
        return text_of(value)
    return None if out is None or out == [] else text_of(out)


def key_value(mapping: KnobMappingDoc, value: KnobValue) -> tuple[bool, object]:
    """(set it, the value): a mapped null leaves the key as the file has it."""
    found, out = _mapped(mapping, value)
    if not found:
        return True, value
    return out is not None and out != [], out


def render(
    command: dict[str, Any],
    knobs: Knobs,
    run_dir: Path | None,
    base_dir: Path,
    launcher: bool = True,
) -> Rendered:
    """The trial's command (config.CommandConfig as a dict) with these knob values; the rendered
    config file is written into run_dir (no file is written when run_dir is None: the overrides are
    returned)."""
    source = _source(command, base_dir)
    config_path = _config_path(source, run_dir)
    folder = str(run_dir) if run_dir is not None else "."
    rendered = _rendered(command, knobs, folder, config_path, base_dir, launcher)
    if source is not None and run_dir is not None and config_path is not None:
        write_config(source, Path(config_path), rendered.overrides)
    return rendered


def preview(command: dict[str, Any], knobs: Knobs, base_dir: Path) -> Rendered:
    """The trial's command as `validate` shows it before any trial (as the trial launches it):
    `{run_dir}` kept (the trial's folder, made at its launch), `{config}` the copy of the config
    file written there, secrets masked (redact.mask_argv, mask_env); no file written."""
    source = _source(command, base_dir)
    config_path = f"{{run_dir}}/config{source.suffix}" if source is not None else None
    r = _rendered(command, knobs, "{run_dir}", config_path, base_dir, True)
    from autotune.knobs import env_of  # the environment knobs' variables, set by the trial too

    env = mask_env({**env_of(knobs), **r.env})
    return Rendered(mask_argv(r.argv), env, r.cwd, r.config_path, r.overrides)


def _source(command: dict[str, Any], base_dir: Path) -> Path | None:
    """The user's config file, resolved (None: the command reads none)."""
    return (base_dir / command["config_file"]).resolve() if command.get("config_file") else None


def _rendered(
    command: dict[str, Any],
    knobs: Knobs,
    folder: str,
    config_path: str | None,
    base_dir: Path,
    launcher: bool,
) -> Rendered:
    """render's command, its config file's overrides returned (render writes the file)."""
    # placeholders are the user's argv and env; a knob's value is inserted as it is
    argv = [_fill(a, folder, config_path) for a in command["argv"]]
    env = {k: _fill(v, folder, config_path) for k, v in (command.get("env") or {}).items()}
    overrides: dict[str, object] = {}
    env.update(knob_env(command, knobs))
    for name, mapping in (command.get("knobs") or {}).items():
        value = knobs.get(name)
        if value is None:
            continue
        if mapping.get("flag"):
            argv += flag_args(mapping, value)
        elif mapping.get("env"):
            if (text := env_value(mapping, value)) is not None:
                env[mapping["env"]] = text
        else:
            setting, out = key_value(mapping, value)
            if setting:
                overrides[mapping["key"]] = out
    cwd = str((base_dir / (command.get("cwd") or ".")).resolve())
    if launcher:  # the trial's (measure hf / lightning: the callback added), not the export's
        env.update(measure_env(mode_of(command).name, env, cwd))
    return Rendered(argv, env, cwd, config_path, overrides)


def knob_env(command: Mapping[str, Any], knobs: Knobs) -> dict[str, str]:
    """The variables of the trial's unmapped knobs that the job's framework reads itself (the mode's
    knob_env: measure lightning's PL_TRAINER_*, read by Trainer.__init__ for an argument the script
    does not pass)."""
    env = {}
    for name, (variable, table) in mode_of(command).knob_env.items():
        value = knobs.get(name)
        if value is not None and name not in (command.get("knobs") or {}):
            env[variable] = table[str(value)] if table else text_of(value)
    return env


def measure_env(measure: str, env: dict[str, str], cwd: str | None = None) -> dict[str, str]:
    """A mode with a Trainer (measure hf / lightning): the job starts with autotune's callback added
    (hook/launch.py) by a sitecustomize in autotune's hook folder, the one folder autotune adds to
    its PYTHONPATH: after the user's own entries, so that the job imports its own packages (the hook
    reaches autotune's modules without autotune's folder on the path: hook/_site/sitecustomize.py).
    """
    if MODES[measure].trainer is None:
        return {}
    from autotune.command.hook import launch

    site = launch.site_dir()
    before = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    entries = [p for p in before.split(os.pathsep) if p and p != site]
    # Python imports the first sitecustomize on its path: behind a user entry that holds one, ours
    # would never run. Ours goes first then, and runs theirs after it (it chains the next one).
    theirs = any(
        os.path.exists(os.path.join(cwd or ".", p, "sitecustomize.py"))
        or os.path.isdir(os.path.join(cwd or ".", p, "sitecustomize"))
        for p in entries
    )
    path = [site, *entries] if theirs else [*entries, site]
    return {"PYTHONPATH": os.pathsep.join(path), launch.ENV_MEASURE: measure}


def _config_path(source: Path | None, run_dir: Path | None) -> str | None:
    """The config file the command names as {config}: the trial's copy, or the user's own file."""
    if source is None:
        return None
    return str(run_dir / f"config{source.suffix}") if run_dir is not None else str(source)


def _fill(text: str, run_dir: str, config_path: str | None) -> str:
    text = text.replace("{run_dir}", run_dir).replace("{python}", sys.executable)
    return text.replace("{config}", config_path) if config_path is not None else text


def _from_environment(text: str, where: str, environ: Mapping[str, str]) -> str:
    """`{env:NAME}` filled from autotune's environment (the secret is never written anywhere); a
    value masked when best.yaml was written cannot run."""
    if MASK in text:
        raise ValueError(
            f"{where}: its secret was masked ({MASK}) when best.yaml was written and cannot be "
            "run; write it in the search YAML as {env:NAME} (filled from your environment, never "
            "stored) and search again"
        )
    missing = [m.group(1) for m in ENV_REFERENCE.finditer(text) if m.group(1) not in environ]
    if missing:
        raise ValueError(
            f"{where}: {{env:{missing[0]}}} names a variable that is not set; export {missing[0]}"
        )
    return ENV_REFERENCE.sub(lambda m: environ[m.group(1)], text)


def _env_from_environment(name: str, value: str, environ: Mapping[str, str]) -> str | None:
    """A masked variable is inherited from autotune's environment when set there (None: not
    added)."""
    if value == MASK and name in environ:
        return None
    if value == MASK:
        raise ValueError(
            f"command.env.{name}: its secret was masked ({MASK}) when best.yaml was written; "
            f"export {name} in autotune's environment (the job inherits it)"
        )
    return _from_environment(value, f"command.env.{name}", environ)


def resolve(rendered: Rendered, environ: Mapping[str, str]) -> Rendered:
    """The command as it runs: every `{env:NAME}` of its argv and env filled from `environ`; a
    value masked in best.yaml taken from there too, or refused (ValueError naming where and the
    remedy)."""
    argv = [
        _from_environment(a, f"command.argv[{i}]", environ) for i, a in enumerate(rendered.argv)
    ]
    env = {k: _env_from_environment(k, v, environ) for k, v in rendered.env.items()}
    kept = {k: v for k, v in env.items() if v is not None}
    return Rendered(argv, kept, rendered.cwd, rendered.config_path, rendered.overrides)


def apply_overrides(doc: dict[str, Any], overrides: dict[str, object]) -> dict[str, Any]:
    for key, value in overrides.items():
        set_key(doc, key, value)
    return doc


def dumps(doc: dict[str, Any], suffix: str) -> str:
    """The config written back in its own format."""
    kind = CONFIG_FORMATS[suffix.lower()]
    if kind == "json":
        from autotune.documents import strict_json

        return strict_json.dumps(doc, indent=2) + "\n"
    if kind == "toml":
        import tomli_w

        return tomli_w.dumps(doc)
    import yaml

    return yaml.safe_dump(doc, sort_keys=False)


def write_config(source: Path, dest: Path, overrides: dict[str, object]) -> None:
    """The user's config with the trial's overrides, written beside the trial (the source is never
    changed)."""
    doc = apply_overrides(read_config(source), overrides)
    from autotune import atomic

    dest.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(dest, dumps(doc, source.suffix))
