"""Reading a config: YAML to a Config its schema validated (autotune.config's models), and any
validation error as one line naming the YAML path, the bad value and what is allowed. The rules
beyond the schema (the model's code, the space) are autotune/job.py's pass."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from autotune import knobs as catalogue
from autotune import yamlio
from autotune.config import Config
from autotune.errors import ConfigError, did_you_mean, excerpt


def _section_type(annotation: object) -> tuple[type[BaseModel] | None, bool]:
    """The section model an annotation holds (Optional[X], dict[str, X] or X), and whether a key
    comes first."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    args = typing.get_args(annotation)
    keyed = typing.get_origin(annotation) is dict
    found = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
    return (found[0], keyed) if found else (None, False)


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys of the section at `loc` (e.g. ('model',) -> family, n_layers, ...; ('command',
    'knobs', 'x') -> flag, env, key, ...)."""
    model: type[BaseModel] = Config
    parts = list(loc)
    while parts:
        part = str(parts.pop(0))
        inner, keyed = (
            _section_type(model.model_fields[part].annotation)
            if part in model.model_fields
            else (None, False)
        )
        if inner is None or (keyed and not parts):
            break
        if keyed:
            parts.pop(0)  # the dict's key (a knob name)
        model = inner
    return list(model.model_fields)


def _path(loc: tuple[Any, ...]) -> str:
    """The YAML path of an error, without pydantic's union branch names (`bool`, `literal['a']`,
    `int`)."""
    return (
        ".".join(
            str(p)
            for p in loc
            if isinstance(p, int)
            or re.fullmatch(r"[A-Za-z_]\w*", str(p))
            and str(p) not in ("int", "bool", "str", "float", "none", "list")
        )
        or "top level"
    )


def describe_error(err: ValidationError, section: str | None = None) -> str:
    """One line: the YAML path (under `section` when the model validated one section), the bad value
    (a bounded excerpt), what is allowed."""
    first = err.errors(include_url=False)[0]
    if section:
        first = {**first, "loc": (section, *first["loc"])}
    msg = first["msg"].removeprefix("Value error, ")
    loc = _path(first["loc"])
    if first["type"] == "extra_forbidden":
        allowed = _allowed_keys(first["loc"][:-1])
        return (
            f"{loc}: unknown key; {did_you_mean(first['loc'][-1], allowed)}allowed here: "
            f"{', '.join(allowed)}"
        )
    # our own validators name the path
    if re.match(r"^(model|workload|space|study|baseline)[.:]", msg):
        return msg
    got = first.get("input")
    knob = (
        catalogue.BY_NAME.get(str(first["loc"][1]))
        if len(first["loc"]) > 2 and first["loc"][0] == "space"
        else None
    )
    # a knob value of the wrong kind
    if knob is not None and first["type"] not in ("value_error", "missing"):
        return (
            f"space.{knob.name}: {excerpt(got)} is not allowed; allowed: "
            f"{catalogue.values_text(knob).replace('`', '')}"
        )
    shown = "" if first["type"] == "missing" or isinstance(got, dict) else f" (got {excerpt(got)})"
    return f"{loc}: {msg}{shown}"


def schema(data: object, source: str, base_dir: Path | None) -> Config:
    """The mapping as the schema (autotune.config) reads it; nothing resolved yet."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: the file must hold a mapping of keys (name, model, space, ...)"
        )
    try:
        cfg = Config.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as err:
        raise ConfigError(f"{source}: {describe_error(err)}") from None
    cfg._base_dir = str(base_dir) if base_dir is not None else None
    return cfg


def read(path: Path) -> Config:
    """MODEL_YAML read and its schema checked (nothing resolved, no user code probed:
    autotune/job.py checks it whole)."""
    return schema(_read(path), str(path), path.parent.resolve())


def _read(path: Path) -> Any:
    """MODEL_YAML's mapping; a `space:` given as a path (a .yaml file) is read relative to the file,
    then to the cwd; an hf_config path is made absolute (beside the YAML first, then the cwd)."""
    data = yamlio.read(path, "MODEL_YAML")
    if isinstance(data, dict) and isinstance(data.get("space"), str):
        data = {**data, "space": _read_space(path, data["space"])}
    model = data.get("model") if isinstance(data, dict) else None
    if isinstance(model, dict) and isinstance(model.get("hf_config"), str):
        ref = Path(model["hf_config"])
        # beside the YAML first, then the cwd; stored absolute for the trials
        if not ref.is_absolute():
            ref = next(
                (c for c in (path.parent / ref, Path.cwd() / ref) if c.is_file()), path.parent / ref
            )
        data = {**data, "model": {**model, "hf_config": str(ref.resolve())}}
    return data


def _read_space(path: Path, given: str) -> dict[str, Any]:
    """The space file named in MODEL_YAML; its content is never quoted in a message (it may be any
    file)."""
    ref = Path(given)
    if ref.suffix not in (".yaml", ".yml"):
        raise ConfigError(
            f"{path}: space: {excerpt(given)} is not a .yaml file; give the space inline or as a "
            ".yaml path"
        )
    candidates = [ref] if ref.is_absolute() else [path.parent / ref, Path.cwd() / ref]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise ConfigError(
            f"{path}: space: no such file: {excerpt(given)} (looked beside the YAML and in the cwd)"
        )
    space = yamlio.read(found, f"{path}: space")
    if not isinstance(space, dict):
        raise ConfigError(f"{path}: space: {found} holds no mapping of knobs (knob: values)")
    return space
