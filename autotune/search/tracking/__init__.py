"""Experiment tracking: each trial this process measured, logged to MLflow and W&B as it ends.

Through Optuna's integration callbacks (optuna-integration's MLflowCallback,
WeightsAndBiasesCallback), each run in a background thread of its own (_background.py), so a
tracking server that is down or slow never stops or slows the study. The search passes the Tracker
to study.optimize as a callback: Optuna calls it once for each trial this process told, so each
trial is logged once, by the worker that measured it: another worker's trials are its own to log,
those of an earlier run of a resumed study were logged by that run, and trials imported by a warm
start belong to the study they came from."""

from __future__ import annotations

import importlib.util
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import optuna

from autotune.config import Config
from autotune.config.study import MlflowConfig, TrackingConfig, WandbConfig
from autotune.errors import ConfigError
from autotune.search.tracking._background import Background, log, one_line
from autotune.search.tracking._trial import LoggedTrial, flat_metrics, logged_trial

__all__ = [
    "LoggedTrial",
    "Tracker",
    "check_installed",
    "flat_metrics",
    "logged_trial",
    "start",
    "with_overrides",
]

# What each tracker needs installed, and the extra that installs it.
NEEDS = {"mlflow": ("mlflow", "optuna_integration"), "wandb": ("wandb", "optuna_integration")}


class Sink(Protocol):
    """One tracker (MlflowSink, WandbSink): its name and the call that logs one trial."""

    @property
    def name(self) -> str: ...

    def __call__(self, study: optuna.Study, trial: LoggedTrial) -> None: ...


class Tracker:
    """An Optuna callback: queues each finished trial for every tracker; close() waits flush_s."""

    def __init__(self, sinks: list[Sink], flush_s: float) -> None:
        self.flush_s = flush_s
        self.workers = [Background(sink.name, _viewed(sink)) for sink in sinks]

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """Queue the trial (Optuna's own copy) for each tracker: nothing here waits or raises."""
        for worker in self.workers:
            worker.submit((study, trial))

    def close(self, wait: bool = True) -> None:
        """At the study's end: what is queued gets flush_s seconds in all (none when not `wait`: on
        Ctrl-C), then counts as lost."""
        deadline = time.monotonic() + (self.flush_s if wait else 0.0)
        for worker in self.workers:
            worker.close(deadline)


def _viewed(sink: Sink) -> Callable[[optuna.Study, optuna.trial.FrozenTrial], None]:
    """The sink given the trial's view, made in the tracking thread (a record it cannot read is the
    tracker's failure, counted, never the study's)."""

    def send(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        logged = logged_trial(trial)
        if logged is not None:  # a duplicate or skipped trial: nothing was measured
            sink(study, logged)

    return send


def start(tracking: TrackingConfig, study_name: str, study_dir: Path) -> Tracker:
    """The study's Tracker (with nothing to log to when no tracker is named); ConfigError (exit 2)
    when a named one is not installed."""
    check_installed(tracking)
    # optuna-integration 4.9 deprecated both callbacks (to be removed in 6.0, moving to OptunaHub);
    # they are the ones 5.x ships, pinned below 6 in pyproject.toml. The warning would print at
    # every trial.
    warnings.filterwarnings(
        "ignore", r"(MLflowCallback|WeightsAndBiasesCallback) has been deprecated", FutureWarning
    )
    sinks = [
        _sink(name, tracking, study_name, study_dir) for name in NEEDS if getattr(tracking, name)
    ]
    return Tracker([sink for sink in sinks if sink is not None], tracking.flush_s)


def _sink(name: str, tracking: TrackingConfig, study_name: str, study_dir: Path) -> Sink | None:
    """One tracker, or None (said once) when it cannot start: W&B's service process failing to start
    stops the logging to W&B, never the study."""
    try:
        if name == "mlflow":
            from autotune.search.tracking._mlflow import MlflowSink

            assert tracking.mlflow is not None  # a sink is started for a section given only
            return MlflowSink(tracking.mlflow, study_name)
        from autotune.search.tracking._wandb import WandbSink

        assert tracking.wandb is not None
        return WandbSink(tracking.wandb, study_name, study_dir)
    except Exception as err:  # the library's own failure, whatever it is
        log.warning(
            "tracking: %s: cannot start: %s; the study goes on without it", name, one_line(err)
        )
        return None


def check_installed(tracking: TrackingConfig) -> None:
    """ConfigError (exit 2) naming the extra to install for a named tracker that cannot load."""
    for tracker in NEEDS:
        if getattr(tracking, tracker) is None:
            continue
        missing = " and ".join(m.replace("_", "-") for m in NEEDS[tracker] if not _importable(m))
        if missing:
            raise ConfigError(
                f"study.tracking.{tracker}: needs {missing}, not installed; "
                f"pip install 'autotune-llm[{tracker}]', or remove study.tracking.{tracker}"
            )


def _importable(module: str) -> bool:
    """Installed, found without importing it (mlflow takes seconds)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # imported already, as a lazy module without __spec__ (optuna_integration)
        return True


def with_overrides(cfg: Config, *, mlflow: str | None = None, wandb: str | None = None) -> Config:
    """The config with search's --mlflow URI (study.tracking.mlflow.tracking_uri) and --wandb
    PROJECT (study.tracking.wandb.project) applied; the other fields of a section already in the
    YAML are kept."""
    tracking = cfg.study.tracking
    update: dict[str, Any] = {}
    if mlflow is not None:
        section = tracking.mlflow or MlflowConfig()
        update["mlflow"] = section.model_copy(
            update={"tracking_uri": _validated(MlflowConfig, "tracking_uri", mlflow)}
        )
    if wandb is not None:
        wandb_section = tracking.wandb or WandbConfig()
        update["wandb"] = wandb_section.model_copy(
            update={"project": _validated(WandbConfig, "project", wandb)}
        )
    if not update:
        return cfg
    study = cfg.study.model_copy(update={"tracking": tracking.model_copy(update=update)})
    return cfg.model_copy(update={"study": study})


def _validated(model: type[MlflowConfig] | type[WandbConfig], field: str, value: str) -> str:
    """The value as the YAML's field takes it (--mlflow '' fails as study.tracking.mlflow would)."""
    from pydantic import ValidationError

    try:
        validated: str = getattr(model.model_validate({field: value}), field)
        return validated
    except ValidationError as err:
        flag = "--mlflow" if field == "tracking_uri" else "--wandb"
        raise ConfigError(
            f"{flag}: {value[:80]!r} is not allowed: {err.errors()[0]['msg']}"
        ) from None
