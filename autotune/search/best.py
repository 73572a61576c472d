"""best.yaml: the chosen configuration, its metrics, where and how it was measured, how to apply it; read back by check."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

import optuna
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune import knobs as catalogue
from autotune import metrics, paths
from autotune import yamlio
from autotune.errors import ConfigError
from autotune.record import Metric, TrialRecord
from autotune.search.history import History, current_confirmation, value_of
from autotune.redact import mask_command
from autotune.search.storage import mask_url

if TYPE_CHECKING:
    from autotune.config import Config


# best.yaml's layout. 1: before it was versioned (2026-12-01 and earlier; every knob of its release listed);
# 2: schema_version and knob_set (the hash of the knob names written) added; 3: base_dir relative to
# best.yaml's folder (an absolute one, as 2 wrote, reads as before) and a command's secrets masked,
# so that an older release refuses a file whose relative base_dir it would resolve against its
# working folder.
# Older files are upgraded on read (read_best): the knobs added since, at their defaults.
SCHEMA_VERSION = 3


LAUNCH_ONLY = ("nnodes", "rdzv_endpoint", "launcher")  # how ranks are started may change; what they run may not


def measured_digest(doc: dict[str, Any]) -> str:
    """A short hash of what best.yaml's numbers measured: its model, workload (but how ranks are launched), the
    command (task command) and the knobs off their defaults. Recorded beside each baseline: a baseline is
    compared only with the configuration it measured, so a hand-edited best.yaml is not set against another
    model's numbers."""
    import hashlib
    import json

    from autotune.identity import non_default

    defaults = {k.name: k.default for k in catalogue.CATALOGUE}
    what = {
        "model": non_default("model", doc.get("model") or {}) if doc.get("model") else None,
        "workload": {k: v for k, v in non_default("workload", doc["workload"]).items() if k not in LAUNCH_ONLY},
        "command": doc.get("command"),
        "knobs": {k: v for k, v in doc["knobs"].items() if v is not None and (k not in defaults or v != defaults[k])},
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def knob_set(knobs: dict[str, Any]) -> str:
    """A short hash of the knob names a release writes: on read, the same hash says that the knobs a file lacks
    were added since (upgraded), another says the list was edited (refused)."""
    import hashlib

    return hashlib.sha256(",".join(sorted(knobs)).encode()).hexdigest()[:12]


def write_yaml(path: Path, doc: dict[str, Any]) -> None:
    """best.yaml for people (no anchors), written atomically (yamlio.write)."""
    yamlio.write(path, doc)


def _chosen(study: optuna.Study, h: History) -> tuple[optuna.trial.FrozenTrial, dict[str, Any] | None, str]:
    """The chosen trial, its confirmation statistics (None: not confirmed) and why it was chosen."""
    conf = current_confirmation(study, h)
    if conf:
        best = next(t for t in h.completed if t.number == conf["chosen"])
        stats = next(st for st in conf["stats"] if st["trial"] == best.number)
        return (
            best,
            stats,
            (
                f"confirmation ({conf['rounds_done']} interleaved rounds of the top "
                f"{len(conf['candidates'])}): {conf['why']}"
            ),
        )
    best = h.best()
    assert best is not None
    return best, None, f"highest median tokens/s per GPU of {len(h.completed)} completed trials (not confirmed)"


def write_best(cfg: Config, study: optuna.Study, h: History, study_dir: Path, storage: str) -> Path:
    """trials/<name>/best.yaml: the best measured configuration, its metrics, where and how it was measured."""
    best, chosen_stats, why = _chosen(study, h)
    base, conf = h.baseline, current_confirmation(study, h)
    record = TrialRecord.of(best)
    knobs, fp = record.knobs, record.fingerprint or {}
    value = _value(best, chosen_stats)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "knob_set": knob_set(knobs),
        "name": cfg.name,
        "chosen": {"trial": best.number, "why": why},
        "knobs": knobs,
        "metrics": _metrics(record, value, value_of(best), value_of(base) if base else None),
        "confirmation": None
        if not conf
        else [
            {
                "trial": st["trial"],
                "changed_knobs": st["changed_knobs"],
                "median": st["median"],
                **_interval(st["samples"]),
                "samples": st["samples"],
                "search_value": st["search_value"],
                "failures": st["failures"],
            }
            for st in conf["stats"]
        ],
        "baseline": {
            "trial": base.number if base else None,
            "knobs": base.user_attrs["knobs"] if base else None,
            Metric.TOKENS_PER_GPU: round(value_of(base), 1) if base else None,
        },
        "fingerprint": fp,
        **_front(study),
        "apply": {
            "env": catalogue.env_of(knobs),
            "knobs": knobs,
            "notes": catalogue.apply_notes(knobs, fp["device"], cfg.workload.task),
        },
        "measurement": _measurement(cfg, best, record),
        "model": cfg.model.model_dump(mode="json") if cfg.model is not None else None,
        **(
            {"command": mask_command(cfg.command.model_dump(mode="json"))}
            if cfg.command is not None
            else {}
        ),
        "base_dir": paths.relative_to(cfg.base_dir, study_dir),  # moves with it (paths.beside)
        "workload": cfg.workload.model_dump(mode="json"),
        "study": {"storage": mask_url(storage), "trials_launched": h.launched, "trials_completed": len(h.completed)},
    }
    doc["measured"] = measured_digest(doc)
    BestFile.model_validate(doc)  # what is written is what check will read
    path = study_dir / "best.yaml"
    write_yaml(path, doc)
    return path


def _value(best: optuna.trial.FrozenTrial, stats: dict[str, Any] | None) -> float:
    """The chosen configuration's tokens/s per GPU. With a confirmation, the confirmed median (several fresh
    processes); the search's single measurement of the winner is kept beside it (the best of many, so
    optimistic)."""
    confirmed = stats["median"] if stats else None
    return confirmed or value_of(best)


def _interval(samples: list[float]) -> dict[str, Any]:
    """ci95 (None where the samples bound nothing: metrics.unbounded) and ci95_why."""
    ci, why = metrics.bounded_interval(samples)
    return {"ci95": ci, "ci95_why": why}


def chosen_summary(study: optuna.Study, h: History) -> dict[str, Any] | None:
    """What best.yaml says of the chosen configuration (the report's `chosen`): its trial, why, knobs, the
    confirmed median (else the search's value), its 95% interval, samples, x the baseline. None before any
    trial completed. A script deploys this, not the search's single best measurement."""
    if not h.completed:
        return None
    best, stats, why = _chosen(study, h)
    value = _value(best, stats)
    base = value_of(h.baseline) if h.baseline else None
    return {
        "trial": best.number,
        "why": why,
        "knobs": best.user_attrs["knobs"],
        "confirmed": bool(stats and stats["median"]),
        Metric.TOKENS_PER_GPU: value,
        "search_tokens_per_s_per_gpu": value_of(best),
        **(_interval(stats["samples"]) if stats else {"ci95": None, "ci95_why": "not confirmed"}),
        "samples": len(stats["samples"]) if stats else 0,
        "speedup_vs_baseline": value / base if base else None,
    }


def _metrics(record: TrialRecord, value: float, searched: float, base: float | None) -> dict[str, Any]:
    """best.yaml's metrics: the chosen value (confirmed median, else the search's), the others scaled to it."""
    m, scale = record.metrics or {}, value / searched
    return {
        Metric.TOKENS_PER_GPU: round(value, 1),
        Metric.TOKENS: round(m[Metric.TOKENS] * scale, 1),
        "search_tokens_per_s_per_gpu": round(searched, 1),
        Metric.MFU: None if m[Metric.MFU] is None else round(m[Metric.MFU] * scale, 4),
        Metric.PEAK_MEM_GIB: None if m[Metric.PEAK_MEM_GIB] is None else round(m[Metric.PEAK_MEM_GIB], 3),
        Metric.PEAK_MEM_KIND: m[Metric.PEAK_MEM_KIND],
        "step_time_median_s": m[Metric.STEP_TIME]["median_s"],
        "step_time_spread_pct": round(m[Metric.STEP_TIME]["spread_pct"], 2),
        "speedup_vs_baseline": round(value / base, 3) if base else None,
        # generate: latency and roofline of the chosen trial's search measurement; any workload: tokens/J
        **{
            k: m[k]
            for k in (
                Metric.TTFT_MS,
                Metric.TPOT_MEDIAN_MS,
                Metric.TPOT_P99_MS,
                Metric.ROOFLINE,
                Metric.TOKENS_PER_JOULE,
                Metric.PADDING_PCT,
            )
            if m.get(k) is not None
        },
    }


def _front(study: optuna.Study) -> dict[str, Any]:
    """objective pareto: Optuna's front of the completed trials (tokens/s up, p99 time per output token down)."""
    if len(study.directions) < 2:
        return {}
    return {
        "front": [
            {
                "trial": t.number,
                Metric.TOKENS_PER_GPU: round(t.values[0], 1),
                Metric.TPOT_P99_MS: round(t.values[1], 3),
                "knobs": t.user_attrs["knobs"],
            }
            for t in sorted(study.best_trials, key=lambda t: t.values[1])
        ]
    }


def _measurement(cfg: Config, best: optuna.trial.FrozenTrial, record: TrialRecord) -> dict[str, Any]:
    """How the chosen trial was measured: steps, limit, its raw step times, the timer, when."""
    cuda = (record.fingerprint or {}).get("device") == "cuda"
    return {
        "warmup_steps": cfg.workload.warmup_steps,
        "measure_steps": cfg.workload.measure_steps,
        "trial_timeout_min": cfg.study.trial_timeout_min,
        "step_times_s": record.step_times,
        "timing": "CUDA events around each optimizer step" if cuda else "time.perf_counter around each optimizer step",
        "measured_at": best.datetime_complete.isoformat() if best.datetime_complete else None,
    }


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
    tpot_ms_samples: Optional[list[Annotated[float, Field(gt=0)]]] = None  # generate: per-process median TPOT
    series_from: Optional[str] = None  # the last --reset-baseline: the nightly series is read from then on


_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class _Apply(_Part):
    env: dict[
        Annotated[str, Field(pattern=_ENV_NAME, max_length=256)],
        Annotated[str, Field(max_length=4096, pattern=r"^[^\x00]*$")],
    ] = Field(default_factory=dict)


class BestFile(_Part):
    """best.yaml, section by section: write_best validates what it writes with it, and `autotune check`
    what it reads (read_best), before anything is measured. Sections not listed are kept as they are."""

    schema_version: int = Field(default=1, ge=1)  # 1: written before best.yaml was versioned
    knob_set: Optional[str] = None  # the hash of the knob names written (knob_set)
    name: str = Field(min_length=1)
    chosen: _Chosen
    knobs: dict[str, Any]
    metrics: _Metrics
    fingerprint: _Fingerprint
    model: Optional[dict[str, Any]]  # None: task command (the command builds its model)
    command: Optional[dict[str, Any]] = None  # task command: the command section (config.CommandConfig)
    workload: dict[str, Any]
    measurement: _Measurement
    confirmation: Optional[list[_Candidate]] = None
    check_baseline: Optional[_CheckBaseline] = None
    base_dir: Optional[str] = None
    apply: Optional[_Apply] = None
    baseline: Optional[dict[str, Any]] = None  # the baseline trial: number, knobs, tokens/s
    front: Optional[list[dict[str, Any]]] = None  # objective pareto: the front of the completed trials
    measured: Optional[str] = None  # measured_digest of what the search's numbers measured
    study: Optional[dict[str, Any]] = None  # the storage (masked), trials launched and completed


def read_best(path: Path) -> dict[str, Any]:
    """A best.yaml written by `autotune search`, every part check uses validated (the model and workload as
    the YAML schema says, each knob as its catalogue entry says); ConfigError (exit 2) naming the bad part."""
    from autotune.config import ModelConfig, WorkloadConfig
    from autotune.config_command import CommandConfig
    from autotune.config_load import describe_error

    doc = yamlio.read(path, "BEST_YAML")
    if not isinstance(doc, dict) or "knobs" not in doc or "fingerprint" not in doc:
        raise ConfigError(f"{path}: knobs, fingerprint: missing; is this a best.yaml written by autotune search?")
    try:
        BestFile.model_validate(doc)
        if doc["model"] is not None:
            base_dir = paths.beside(path, doc.get("base_dir"))  # relative to best.yaml's folder
            ModelConfig.model_validate(doc["model"], context={"base_dir": base_dir})
        if doc.get("command") is not None:
            CommandConfig.model_validate(doc["command"])
        WorkloadConfig.model_validate(doc["workload"])
    except ValidationError as err:
        section = next((k for k in ("model", "workload") if err.title == f"{k.capitalize()}Config"), None)
        raise ConfigError(f"{path}: {describe_error(err, section)}") from None
    _upgrade(path, doc)
    _check_knobs(path, doc["knobs"], doc["workload"].get("task", "train"), user_knobs(doc))
    if "micro_batch_size" in doc["knobs"]:
        _check_batch(path, doc["knobs"], doc["workload"])
    return doc


def _check_batch(path: Path, knobs: dict[str, Any], workload: dict[str, Any]) -> None:
    """The knobs keep the workload's global batch (micro-batch x accumulation x ranks), as the search did."""
    gbs, world = workload.get("global_batch_size"), workload.get("world_size", 1)
    if gbs is not None and knobs["micro_batch_size"] * knobs["grad_accum_steps"] * world != gbs:
        raise ConfigError(
            f"{path}: knobs: micro_batch_size {knobs['micro_batch_size']} x grad_accum_steps "
            f"{knobs['grad_accum_steps']} x world_size {world} is not workload.global_batch_size {gbs}"
        )


def _old_behaviour(knobs: dict[str, Any], missing: list[str], world: int) -> dict[str, Any]:
    """The missing knobs' values a search would have written: the default, or None where the knob cannot act
    (one rank: no parallel; an only_with knob whose owner has another value), as Space.knobs decides."""
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
    """A best.yaml of an older release, read as this one: the knobs added since are filled in as a search would
    have written them (_old_behaviour), and doc["upgraded"] says which (check prints it). A knob this release
    does not know is left for _check_knobs to refuse."""
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
    return {n: m["values"] for n, m in mappings.items() if isinstance(m, dict) and m.get("values") is not None}


def _check_knobs(path: Path, knobs: dict[str, Any], task: str, own: dict[str, list[Any]]) -> None:
    """Every knob of the workload's task (and of the command's own), each value one its knob accepts (None:
    not acting in this trial)."""
    from autotune.config import SpaceConfig
    from autotune.config_load import describe_error

    names = {k.name for k in catalogue.CATALOGUE if task in k.tasks} | set(own)
    if set(knobs) != names:
        wrong = sorted(set(knobs) ^ names)
        raise ConfigError(
            f"{path}: knobs: {wrong[0]} is {'missing' if wrong[0] in names else 'not a knob'}; "
            f"best.yaml lists every knob of task {task}"
        )
    for name, values in own.items():
        if knobs[name] not in values:
            raise ConfigError(f"{path}: knobs.{name}: {knobs[name]!r} is not one of its values {values}")
    given = {k: [v] for k, v in knobs.items() if v is not None and k not in own}
    try:
        SpaceConfig.model_validate(given)
    except ValidationError as err:
        raise ConfigError(f"{path}: knobs.{describe_error(err, 'space').removeprefix('space.')}") from None


def _yaml_value(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def record_check_baseline(
    path: Path,
    doc: dict[str, Any],
    samples: list[float],
    recorded_at: str,
    fingerprint: dict[str, Any],
    tpot_ms: list[float] | None = None,
    reset: bool = False,
) -> None:
    """check --update / --reset-baseline: these samples become the recorded baseline in best.yaml (atomically);
    doc is best.yaml as read_best read it. reset: the nightly series starts again from here (an --update keeps
    the series: a slow drift absorbed by nightly updates is what the series is read for)."""
    since = recorded_at if reset else (doc.get("check_baseline") or {}).get("series_from")
    # written back in this release's layout (an upgraded file keeps its filled-in knobs, not the note)
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
