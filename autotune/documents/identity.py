"""What a study measures, named by what differs from the defaults (as vLLM's config hash names its
factors).

A study's identity is its model, workload and space sections with every field or knob left at its
default taken out, so a release that adds a field or a knob at its default changes no stored
identity: a study made before it resumes, warm-starts and checks as it did. A trial's identity is
history.key (its knobs less those at their defaults). Both compare the stored config (every study
keeps its `config` user attribute) read by the current code, so studies made before identities
existed are judged the same way.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from autotune import knobs as catalogue

SECTIONS = ("model", "workload", "space")


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


def factors(config: dict[str, Any]) -> dict[str, Any]:
    """The identity of a config (Config.model_dump(mode="json"), or a study's stored `config`)."""
    workload = dict(config.get("workload") or {})
    task = workload.get("task") or "train"
    return {
        "model": non_default("model", dict(config.get("model") or {})),
        "workload": non_default("workload", workload),
        "space": _space_factors(dict(config.get("space") or {}), task),
    }


def digest(config: dict[str, Any]) -> str:
    """A short hash of factors(config)."""
    return hashlib.sha256(_json(factors(config)).encode()).hexdigest()[:16]


def difference(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """The first factor that differs between two configs' identities ('space.precision: [fp32]
    there, [fp32, bf16] here'), or None when they are the same."""
    a, b = factors(old), factors(new)
    for section in SECTIONS:
        for key in sorted(set(a[section]) | set(b[section])):
            there, here = a[section].get(key, "default"), b[section].get(key, "default")
            if _json(there) != _json(here):
                return f"{section}.{key}: {_short(there)} there, {_short(here)} here"
    return None


def _short(value: object) -> str:
    text = value if isinstance(value, str) else _json(value)
    return text if len(text) <= 60 else text[:57] + "..."
