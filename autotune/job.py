"""A job's YAML checked whole: its schema (config/load.py), its model's files and code (probed in a
throwaway process: launch/probe.py), then its space resolved for the device (space.py); ConfigError
with one line naming the YAML path on any problem. What a search, a check and the API read."""

from __future__ import annotations

from pathlib import Path

from autotune.config import Config
from autotune.config import load as config_load
from autotune.errors import ConfigError
from autotune.launch.probe import check_model_code
from autotune.space import ResolvedSpace, resolve_space


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
    cfg = config_load.read(Path(path))
    return cfg, validate(cfg, device, str(path))


def load_config(path: str | Path) -> Config:
    """Read MODEL_YAML and check it whole (load); the space resolved is not kept."""
    return load(path)[0]


def parse_config(data: object, source: str = "<config>", base_dir: Path | None = None) -> Config:
    """Validate an already-loaded mapping: its schema, then the space's rules (validate);
    ConfigError with a one-line message on any problem."""
    cfg = config_load.schema(data, source, base_dir)
    validate(cfg, None, source)
    return cfg
