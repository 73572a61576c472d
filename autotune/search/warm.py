"""Warm start: a new study begins with another study's measured trials of the same model and
workload, measured on the same hardware and software, so re-tuning after a small change costs a few
trials.

Only trials whose configuration lies in the new space are copied; each keeps its record (metrics,
raw samples, fingerprint) and notes where it came from (`warm_start`). Copied trials count as
measured (never launched again, and the sampler learns from them) but not toward the new study's
budget.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import optuna
from optuna.distributions import CategoricalDistribution

from autotune.config import Config
from autotune.documents import identity, study_attrs, trial_marks
from autotune.documents.record import TrialRecord, fingerprint_of, status_of, trial_of
from autotune.errors import ConfigError
from autotune.hardware import detect
from autotune.space import ResolvedSpace
from autotune.status import Status
from autotune.study.history import NOT_LAUNCHED, History, key
from autotune.study.load import load_study

_MEASURED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


def _check_same(cfg: Config, source: optuna.Study, where: str, device: str) -> None:
    """The source measured the same model and workload on this device kind, GPU model and torch."""
    stored = study_attrs.config(source) or {}
    mine = cfg.model_dump(mode="json")
    # the model and workload must be the same (a field added since at its default is no difference);
    # the space may differ: only the trials that lie in this one are copied
    differs = identity.difference({**stored, "space": {}}, {**mine, "space": {}})
    if differs:
        section = differs.split(".")[0]
        raise ConfigError(f"--warm-start: {where} measured another {section} ({differs})")
    if study_attrs.device(source) != device:
        raise ConfigError(
            f"--warm-start: {where} was measured on {study_attrs.device(source)}, this study "
            f"runs on {device}"
        )
    here_gpu = next((g["name"] for g in detect()["gpus"]), None) if device == "cuda" else None
    here_torch = metadata.version("torch")
    for t in source.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if status_of(t) in NOT_LAUNCHED:
            continue  # a repeat, told as the trial it repeats: it measured nothing (repeats.py)
        fp = fingerprint_of(t)
        if fp.get("torch") != here_torch or (here_gpu and fp.get("gpu_model") != here_gpu):
            raise ConfigError(
                f"--warm-start: {where} trial {t.number} was measured on {fp.get('gpu_model')} "
                f"with torch {fp.get('torch')}; here: {here_gpu or device} with torch {here_torch}"
            )


def source_study(cfg: Config, source_dir: Path, device: str) -> optuna.Study:
    """The study to start from, opened read-only and checked (ConfigError before anything is
    written), and copied into memory: `--fresh --warm-start trials/<name>` then archives the very
    study it starts from."""
    source, _ = load_study(source_dir, None, None)
    _check_same(cfg, source, str(source_dir), device)
    copy = optuna.create_study(
        storage=optuna.storages.InMemoryStorage(),
        study_name=source.study_name,
        directions=source.directions,
    )
    study_attrs.copy_all(source, copy)
    copy.add_trials(source.get_trials(deepcopy=False, states=_MEASURED))  # all copy_trials reads
    return copy


def copy_trials(study: optuna.Study, space: ResolvedSpace, source: optuna.Study) -> int:
    """Copy the source's measured trials that lie in this space into the (new) study; returns how
    many."""
    if any(trial_marks.is_warm_start(t) for t in study.get_trials(deepcopy=False)):
        return 0  # copied when this study began; a resume does not copy again
    dists = {name: CategoricalDistribution(values) for name, values in space.searched.items()}
    seen = History.of(study).seen
    copies = []
    for t in source.get_trials(deepcopy=False, states=_MEASURED):
        record = TrialRecord.of(t)
        knobs = record.knobs
        params = {k: knobs.get(k) for k in space.searched}
        if record.status in ("", Status.DUPLICATE, Status.SKIPPED) or record.predicted:
            continue
        if any(params[k] not in dists[k].choices for k in params) or key(
            space.knobs(params)
        ) != key(knobs):
            continue  # outside the new space (or a knob fixed at another value)
        if key(knobs) in seen:
            continue
        # the record upgraded to this release's knobs (one made before a knob existed lacks it: at
        # its default)
        record.knobs = space.knobs(params)
        trial_marks.set_warm_start(record, f"{source.study_name}#{t.number}")
        attrs = record.to_attrs()
        if t.values is not None and len(t.values) != len(study.directions):
            continue  # measured under another objective (tokens/s alone against the pareto pair)
        copies.append(
            trial_of(
                attrs,
                params=params,
                distributions=dict(dists),  # a dict of BaseDistribution, as Optuna types it
                values=t.values,
                state=t.state,
            )
        )
    study.add_trials(copies)
    return len(copies)
