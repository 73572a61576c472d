"""What a study measures, named by what differs from the defaults (as vLLM's config hash names its
factors).

A study's identity is its model, workload and space sections with every field or knob left at its
default taken out, so a release that adds a field or a knob at its default changes no stored
identity: a study made before it resumes, warm-starts and checks as it did. Task command adds its
command (COMMAND_FIELDS: what runs and how its steps are read), secrets masked as study.db keeps
them, and the content of its config file (config_file_digest, stored apart: the study's config
keeps the file's name only). A trial's identity is history.key (its knobs less those at their
defaults). Both compare the stored config (every study keeps its `config` user attribute) read by
the current code, so studies made before identities existed are judged the same way.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from autotune import knobs as catalogue
from autotune import modes

# command first: a study of another command cannot warm-start one of this command either, so its
# remedy (--fresh or a new name) is the one named when several sections differ
SECTIONS = ("command", "model", "workload", "space")
# What runs and how its steps are read, each at the default CommandConfig gives it: a field absent
# from an older study's config is at its default. Left out: how long a trial measures (max_steps,
# half_width_pct, first_step_s, stop_grace_s) and what export marks (measure_only), as study.trials
# is no factor.
COMMAND_FIELDS: dict[str, Any] = {
    "argv": [],
    "cwd": None,
    "env": {},
    "config_file": None,
    "measure": modes.DEFAULT,
    "log_pattern": None,
    "knobs": {},
}
# ... and those a factor only where given (absent from the identity of a command without them, as
# from every study made before they existed): a step's tokens when its log line has none
COMMAND_GIVEN = ("tokens_per_step",)


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _field_defaults(section: str) -> dict[str, Any]:
    """The defaults of a config section's optional fields, as JSON (model_dump(mode="json")
    shape)."""
    from pydantic import BaseModel

    from autotune.config import ModelConfig, WorkloadConfig

    sections: dict[str, type[BaseModel]] = {"model": ModelConfig, "workload": WorkloadConfig}
    model = sections[section]
    out = {}
    for name, info in model.model_fields.items():
        if not info.is_required():
            out[name] = _json(info.get_default(call_default_factory=True))
    return out


def non_default(section: str, doc: dict[str, Any]) -> dict[str, Any]:
    """model or workload: the fields that differ from their defaults."""
    defaults = _field_defaults(section)
    return {k: v for k, v in sorted(doc.items()) if k not in defaults or _json(v) != defaults[k]}


def _space_factors(space: dict[str, Any], task: str) -> dict[str, Any]:
    """The knobs of the task given a value other than their default (absent, the default, or a
    one-value list of it all resolve to the default)."""
    out = {}
    for name, value in sorted(space.items()):
        knob = catalogue.BY_NAME.get(name)
        if knob is not None and task not in knob.tasks:
            continue
        if value is None or (
            knob is not None and _json(value) in (_json(knob.default), _json([knob.default]))
        ):
            continue
        out[name] = value
    return out


def _command_factors(command: dict[str, Any] | None) -> dict[str, Any]:
    """The command section's identity (COMMAND_FIELDS), its secrets masked as study.db stores them
    (redact.mask_command, which leaves a masked value as it is): a secret is neither kept nor
    compared, so a rotated token is the same command. A knob mapping's fields at None are left out;
    no command (another task): {}."""
    from autotune.redact import mask_command

    if not command:
        return {}
    masked = mask_command(command)
    out = {name: masked.get(name, default) for name, default in COMMAND_FIELDS.items()}
    out |= {name: masked[name] for name in COMMAND_GIVEN if masked.get(name) is not None}
    out["knobs"] = {
        name: {k: v for k, v in sorted(dict(mapping or {}).items()) if v is not None}
        for name, mapping in sorted(dict(out["knobs"] or {}).items())
    }
    return out


def factors(config: dict[str, Any]) -> dict[str, Any]:
    """The identity of a config (Config.model_dump(mode="json"), or a study's stored `config`)."""
    workload = dict(config.get("workload") or {})
    task = workload.get("task") or "train"
    return {
        "command": _command_factors(config.get("command")),
        "model": non_default("model", dict(config.get("model") or {})),
        "workload": non_default("workload", workload),
        "space": _space_factors(dict(config.get("space") or {}), task),
    }


def config_file_digest(config: dict[str, Any], base_dir: str | None) -> str | None:
    """A short hash of the content of the command's config file (command.config_file, relative to
    the YAML's folder), or None where there is none or it cannot be read (config/ refuses that
    before a search): the same name with other content is another command."""
    name = (config.get("command") or {}).get("config_file")
    if not name:
        return None
    try:
        data = (Path(base_dir or ".") / name).read_bytes()
    except OSError:
        return None
    return hashlib.sha256(data).hexdigest()[:16]


def digest(config: dict[str, Any]) -> str:
    """A short hash of factors(config)."""
    return hashlib.sha256(_json(factors(config)).encode()).hexdigest()[:16]


def difference(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """The first factor that differs between two configs' identities ('space.precision: [fp32]
    there, [fp32, bf16] here'), or None when they are the same."""
    a, b = factors(old), factors(new)
    for section in SECTIONS:
        if section == "command":
            if (said := _command_difference(a[section], b[section])) is not None:
                return said
            continue
        for key in sorted(set(a[section]) | set(b[section])):
            there, here = a[section].get(key, "default"), b[section].get(key, "default")
            if _json(there) != _json(here):
                return f"{section}.{key}: {_short(there)} there, {_short(here)} here"
    return None


def _command_difference(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """The first part of the command that differs ('command.argv[3]: "--bs" there, "--batch"
    here'). An environment variable is named, never its value (it may hold a secret the masking
    does not know); argv is shown masked as study.db keeps it."""
    if not a or not b:  # none on a side: another task, which workload.task names
        return None
    for name in (*COMMAND_FIELDS, *COMMAND_GIVEN):
        there: Any = a.get(name)  # _command_factors gives every field, COMMAND_GIVEN's if given
        here: Any = b.get(name)
        if _json(there) == _json(here):
            continue
        if name == "argv":
            i = next((i for i, (x, y) in enumerate(zip(there, here)) if x != y), None)
            i = min(len(there), len(here)) if i is None else i
            old = _short(_json(there[i])) if i < len(there) else "nothing"
            new = _short(_json(here[i])) if i < len(here) else "nothing"
            return f"command.argv[{i}]: {old} there, {new} here"
        if name == "env":
            changed = sorted(k for k in set(there) | set(here) if there.get(k) != here.get(k))
            how = [
                f"{k} {'added' if k not in there else 'removed' if k not in here else 'changed'}"
                for k in changed
            ]
            return f"command.env: {', '.join(how[:3])}{', ...' if len(how) > 3 else ''}"
        if name == "knobs":
            knob = next(
                k
                for k in sorted(set(there) | set(here))
                if _json(there.get(k)) != _json(here.get(k))
            )
            return (
                f"command.knobs.{knob}: {_short(there.get(knob, 'absent'))} there, "
                f"{_short(here.get(knob, 'absent'))} here"
            )
        old, new = ("default" if v is None else _short(v) for v in (there, here))
        return f"command.{name}: {old} there, {new} here"
    return None


def _short(value: object) -> str:
    text = value if isinstance(value, str) else _json(value)
    return text if len(text) <= 60 else text[:57] + "..."
