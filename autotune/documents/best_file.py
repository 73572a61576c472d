"""best.yaml, the file users keep: its schema (BestFile), its reader (read_best: validated, older
layouts upgraded) and the check's write-back (record_check_baseline). check and export read it from
here; the search writes it (search/best.py). Nothing here imports the search, Optuna or user code at
import time."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune import knobs as catalogue
from autotune import paths, yamlio
from autotune.errors import ConfigError

# best.yaml's layout. 1: before it was versioned (2026-12-01 and earlier; every knob of its release
# listed); 2: schema_version and knob_set (the hash of the knob names written) added; 3: base_dir
# relative to best.yaml's folder (an absolute one, as 2 wrote, reads as before) and a command's
# secrets masked, so that an older release refuses a file whose relative base_dir it would resolve
# against its working folder.
# Older files are upgraded on read (read_best): the knobs added since, at their defaults.
SCHEMA_VERSION = 3


# how ranks are started may change; what they run may not
LAUNCH_ONLY = ("nnodes", "rdzv_endpoint", "launcher")


def measured_digest(doc: dict[str, Any]) -> str:
    """A short hash of what best.yaml's numbers measured: its model, workload (but how ranks are
    launched), the command (task command) and the knobs off their defaults. Recorded beside each
    baseline: a baseline is compared only with the configuration it measured, so a hand-edited
    best.yaml is not set against another model's numbers."""
    import hashlib
    import json

    from autotune.identity import non_default

    defaults = {k.name: k.default for k in catalogue.CATALOGUE}
    what = {
        "model": non_default("model", doc.get("model") or {}) if doc.get("model") else None,
        "workload": {
            k: v
            for k, v in non_default("workload", doc["workload"]).items()
            if k not in LAUNCH_ONLY
        },
        "command": doc.get("command"),
        "knobs": {
            k: v
            for k, v in doc["knobs"].items()
            if v is not None and (k not in defaults or v != defaults[k])
        },
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def knob_set(knobs: dict[str, Any]) -> str:
    """A short hash of the knob names a release writes: on read, the same hash says that the knobs a
    file lacks were added since (upgraded), another says the list was edited (refused)."""
    import hashlib

    return hashlib.sha256(",".join(sorted(knobs)).encode()).hexdigest()[:12]


def write_yaml(path: Path, doc: dict[str, Any]) -> None:
    """best.yaml for people (no anchors), written atomically (yamlio.write)."""
    yamlio.write(path, doc)


class _Part(BaseModel):
    """A section of best.yaml check relies on: checked, other keys kept."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class _Chosen(_Part):
    trial: int = Field(ge=0)


class _Metrics(_Part):
    tokens_per_s_per_gpu: float = Field(gt=0)
    tpot_ms_median: Optional[float] = Field(default=None, gt=0)  # generate: the check gates it too


class _Fingerprint(_Part):
    device: Literal["cuda", "cpu"]
    gpu_model: str = Field(min_length=1)


class _Measurement(_Part):
    warmup_steps: int = Field(ge=1)
    measure_steps: int = Field(ge=2)
    trial_timeout_min: Optional[float] = Field(default=None, gt=0, le=10_080)


class _Candidate(_Part):
    trial: int = Field(ge=0)
    samples: list[Annotated[float, Field(gt=0)]]


class _CheckBaseline(_Part):
    tokens_per_s_samples: list[Annotated[float, Field(gt=0)]] = Field(min_length=1)
    recorded_at: str
    # generate: per-process median TPOT
    tpot_ms_samples: Optional[list[Annotated[float, Field(gt=0)]]] = None
    # the last --reset-baseline: the nightly series is read from then on
    series_from: Optional[str] = None


_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class _Apply(_Part):
    env: dict[
        Annotated[str, Field(pattern=_ENV_NAME, max_length=256)],
        Annotated[str, Field(max_length=4096, pattern=r"^[^\x00]*$")],
    ] = Field(default_factory=dict)


class BestFile(_Part):
    """best.yaml, section by section: write_best validates what it writes with it, and `autotune
    check` what it reads (read_best), before anything is measured. Sections not listed are kept as
    they are."""

    schema_version: int = Field(default=1, ge=1)  # 1: written before best.yaml was versioned
    knob_set: Optional[str] = None  # the hash of the knob names written (knob_set)
    name: str = Field(min_length=1)
    chosen: _Chosen
    knobs: dict[str, Any]
    metrics: _Metrics
    fingerprint: _Fingerprint
    model: Optional[dict[str, Any]]  # None: task command (the command builds its model)
    # task command: the command section (config.CommandConfig)
    command: Optional[dict[str, Any]] = None
    workload: dict[str, Any]
    measurement: _Measurement
    confirmation: Optional[list[_Candidate]] = None
    check_baseline: Optional[_CheckBaseline] = None
    base_dir: Optional[str] = None
    apply: Optional[_Apply] = None
    baseline: Optional[dict[str, Any]] = None  # the baseline trial: number, knobs, tokens/s
    # objective pareto: the front of the completed trials
    front: Optional[list[dict[str, Any]]] = None
    measured: Optional[str] = None  # measured_digest of what the search's numbers measured
    study: Optional[dict[str, Any]] = None  # the storage (masked), trials launched and completed


def read_best(path: Path) -> dict[str, Any]:
    """A best.yaml written by `autotune search`, every part check uses validated (the model and
    workload as the YAML schema says, each knob as its catalogue entry says); ConfigError (exit 2)
    naming the bad part."""
    from autotune.config import ModelConfig, WorkloadConfig
    from autotune.config_command import CommandConfig
    from autotune.config_load import describe_error

    doc = yamlio.read(path, "BEST_YAML")
    if not isinstance(doc, dict) or "knobs" not in doc or "fingerprint" not in doc:
        raise ConfigError(
            f"{path}: knobs, fingerprint: missing; is this a best.yaml written by autotune search?"
        )
    try:
        BestFile.model_validate(doc)
        if doc["model"] is not None:
            base_dir = paths.beside(path, doc.get("base_dir"))  # relative to best.yaml's folder
            ModelConfig.model_validate(doc["model"], context={"base_dir": base_dir})
        if doc.get("command") is not None:
            CommandConfig.model_validate(doc["command"])
        WorkloadConfig.model_validate(doc["workload"])
    except ValidationError as err:
        section = next(
            (k for k in ("model", "workload") if err.title == f"{k.capitalize()}Config"), None
        )
        raise ConfigError(f"{path}: {describe_error(err, section)}") from None
    _upgrade(path, doc)
    _check_knobs(path, doc["knobs"], doc["workload"].get("task", "train"), user_knobs(doc))
    if "micro_batch_size" in doc["knobs"]:
        _check_batch(path, doc["knobs"], doc["workload"])
    return doc


def _check_batch(path: Path, knobs: dict[str, Any], workload: dict[str, Any]) -> None:
    """The knobs keep the workload's global batch (micro-batch x accumulation x ranks), as the
    search did."""
    gbs, world = workload.get("global_batch_size"), workload.get("world_size", 1)
    if gbs is not None and knobs["micro_batch_size"] * knobs["grad_accum_steps"] * world != gbs:
        raise ConfigError(
            f"{path}: knobs: micro_batch_size {knobs['micro_batch_size']} x grad_accum_steps "
            f"{knobs['grad_accum_steps']} x world_size {world} is not workload.global_batch_size "
            f"{gbs}"
        )


def _old_behaviour(knobs: dict[str, Any], missing: list[str], world: int) -> dict[str, Any]:
    """The missing knobs' values a search would have written: the default, or None where the knob
    cannot act (one rank: no parallel; an only_with knob whose owner has another value), as
    Space.knobs decides."""
    full = {**{n: catalogue.BY_NAME[n].default for n in missing}, **knobs}
    if world == 1 and "parallel" in missing:
        full["parallel"] = None
    for k in catalogue.CATALOGUE:
        if (
            k.name in missing
            and k.only_with
            and (full.get(k.only_with[0]) is None or not k.acts_with(full[k.only_with[0]]))
        ):
            full[k.name] = None
    return {n: full[n] for n in missing}


def _upgrade(path: Path, doc: dict[str, Any]) -> None:
    """A best.yaml of an older release, read as this one: the knobs added since are filled in as a
    search would have written them (_old_behaviour), and doc["upgraded"] says which (check prints
    it). A knob this release does not know is left for _check_knobs to refuse."""
    version = doc.get("schema_version", 1)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ConfigError(
            f"{path}: schema_version: {version!r} is newer than this autotune reads (up to "
            f"{SCHEMA_VERSION}); upgrade autotune"
        )
    task, world = doc["workload"].get("task", "train"), doc["workload"].get("world_size", 1)
    knobs = doc["knobs"]
    names = [k.name for k in catalogue.CATALOGUE if task in k.tasks] + list(user_knobs(doc))
    missing = [n for n in names if n not in knobs]
    intact = version == 1 or doc.get("knob_set") == knob_set(knobs)  # version 1 wrote no knob_set
    if missing and intact and not set(knobs) - set(names):
        added = _old_behaviour(knobs, missing, world)
        doc["knobs"] = {n: {**knobs, **added}[n] for n in names}
        doc["upgraded"] = {"from_schema": version, "knobs_added": added}


def user_knobs(doc: dict[str, Any]) -> dict[str, list[Any]]:
    """A command study's own knobs (its command section's knobs with values), name -> values."""
    mappings = (doc.get("command") or {}).get("knobs") or {}
    return {
        n: m["values"]
        for n, m in mappings.items()
        if isinstance(m, dict) and m.get("values") is not None
    }


def _check_knobs(path: Path, knobs: dict[str, Any], task: str, own: dict[str, list[Any]]) -> None:
    """Every knob of the workload's task (and of the command's own), each value one its knob accepts
    (None:
    not acting in this trial)."""
    from autotune.config_load import describe_error
    from autotune.config_space import SpaceConfig

    names = {k.name for k in catalogue.CATALOGUE if task in k.tasks} | set(own)
    if set(knobs) != names:
        wrong = sorted(set(knobs) ^ names)
        raise ConfigError(
            f"{path}: knobs: {wrong[0]} is {'missing' if wrong[0] in names else 'not a knob'}; "
            f"best.yaml lists every knob of task {task}"
        )
    for name, values in own.items():
        if knobs[name] not in values:
            raise ConfigError(
                f"{path}: knobs.{name}: {knobs[name]!r} is not one of its values {values}"
            )
    given = {k: [v] for k, v in knobs.items() if v is not None and k not in own}
    try:
        SpaceConfig.model_validate(given)
    except ValidationError as err:
        raise ConfigError(
            f"{path}: knobs.{describe_error(err, 'space').removeprefix('space.')}"
        ) from None


def _yaml_value(value: Any) -> str:
    return (
        "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )


def record_check_baseline(
    path: Path,
    doc: dict[str, Any],
    samples: list[float],
    recorded_at: str,
    fingerprint: dict[str, Any],
    tpot_ms: list[float] | None = None,
    reset: bool = False,
) -> None:
    """check --update / --reset-baseline: these samples become the recorded baseline in best.yaml
    (atomically); doc is best.yaml as read_best read it. reset: the nightly series starts again from
    here (an --update keeps the series: a slow drift absorbed by nightly updates is what the series
    is read for)."""
    since = recorded_at if reset else (doc.get("check_baseline") or {}).get("series_from")
    # written back in this release's layout (an upgraded file keeps its filled-in knobs, not the
    # note)
    doc = {k: v for k, v in doc.items() if k != "upgraded"}
    doc.update(schema_version=SCHEMA_VERSION, knob_set=knob_set(doc["knobs"]))
    doc = {
        **doc,
        "check_baseline": {
            "tokens_per_s_samples": samples,
            "recorded_at": recorded_at,
            "fingerprint": fingerprint,
            "measured": measured_digest(doc),
            **({"tpot_ms_samples": tpot_ms} if tpot_ms else {}),
            **({"series_from": since} if since else {}),
        },
    }
    write_yaml(path, doc)
