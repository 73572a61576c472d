"""Reading a config: YAML to a validated Config (autotune.config's models), and any validation error
as one line naming the YAML path, the bad value and what is allowed."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from autotune import knobs as catalogue
from autotune import yamlio
from autotune.config import Config, ModelConfig
from autotune.errors import ConfigError, did_you_mean, excerpt
from autotune.space import ResolvedSpace, resolve_space


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


def parse_config(data: object, source: str = "<config>", base_dir: Path | None = None) -> Config:
    """Validate an already-loaded mapping: its schema, then the space's rules (validate);
    ConfigError with a one-line message on any problem."""
    cfg = _schema(data, source, base_dir)
    validate(cfg, None, source)
    return cfg


def _schema(data: object, source: str, base_dir: Path | None) -> Config:
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


def validate(cfg: Config, device: str | None = None, source: str = "<config>") -> ResolvedSpace:
    """The one pass over the rules beyond the schema: the model's files and code (check_model_code,
    the user-code probe), then the space resolved for `device` (resolve_space: what the task asks
    of the sections, tasks.check_config; the batch rule, each knob's own rules, the size limit, the
    baseline); ConfigError naming the YAML path. A search resolves its space here once and hands it
    on (load, run_search's `space`)."""
    try:
        if cfg.model is not None:
            base_dir = cfg.base_dir
            check_model_code(cfg.model, Path(base_dir) if base_dir is not None else None)
        return resolve_space(cfg, device)
    except ValueError as err:
        raise ConfigError(f"{source}: {err}") from None


def load(path: str | Path, device: str | None = None) -> tuple[Config, ResolvedSpace]:
    """MODEL_YAML read, its schema checked and its space resolved once for `device`."""
    data = _read(Path(path))
    cfg = _schema(data, str(path), Path(path).parent.resolve())
    return cfg, validate(cfg, device, str(path))


def load_config(path: str | Path) -> Config:
    """Read MODEL_YAML and check it whole (load); the space resolved is not kept."""
    return load(path)[0]


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


def check_model_code(model: ModelConfig, base_dir: Path | None) -> None:
    """hf_config and entrypoint fail here, before any trial: missing file, bad JSON, import errors
    (ValueError naming model.<field>). The entrypoint is imported in a throwaway process
    (launch/probe.py): the parent never runs user code. validate's pass only: the schema never
    starts the probe, so reading a best.yaml does not."""
    import importlib.util
    import json

    from autotune.launch.probe import check_entrypoint, check_hf_config

    if model.family is not None:  # the built-in model: autotune's own code
        return
    if model.hf_config is not None:
        path = Path(model.hf_config)
        if not path.is_file():
            raise ValueError(f"model.hf_config: no such file: {model.hf_config!r}")
        try:
            if path.stat().st_size > yamlio.MAX_BYTES:
                raise ValueError(f"{path.stat().st_size:,} bytes; a config.json is a few kB")
            data = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError) as err:
            raise ValueError(
                f"model.hf_config: {model.hf_config!r} is not valid JSON: {err}"
            ) from None
        if not isinstance(data, dict) or "model_type" not in data:
            raise ValueError(
                f"model.hf_config: {model.hf_config!r} has no model_type; is it a transformers "
                "config.json?"
            )
        if importlib.util.find_spec("transformers") is None:
            raise ValueError(
                "model.hf_config: needs transformers, which is not installed; pip install "
                "'autotune[hf]'"
            )
        if (problem := check_hf_config(str(path))) is not None:
            raise ValueError(f"model.hf_config: {model.hf_config!r}: {problem}")
        return
    module_name, sep, func = (model.entrypoint or "").partition(":")
    if not sep or not module_name or not func.isidentifier():
        raise ValueError(
            f"model.entrypoint: {model.entrypoint!r} is not of the form 'package.module:function'"
        )
    problem, _ = check_entrypoint(
        module_name, func, str(base_dir) if base_dir is not None else None
    )
    if problem:
        raise ValueError(f"model.entrypoint: {problem}")
