"""MLflow: each trial a run, through optuna_integration.MLflowCallback; pruned or failed ends so."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from autotune.config.study import MlflowConfig
from autotune.search.tracking._trial import LoggedTrial

if TYPE_CHECKING:
    import optuna

# How an Optuna state ends its MLflow run (the callback ends every run FINISHED). A pruned trial (a
# configuration that cannot run, or stopped by the pruner) was stopped: KILLED; a machine failure:
# FAILED.
RUN_STATUS = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAIL": "FAILED"}

# MLflow retries a request 7 times with exponential backoff (about 4 minutes, its comment says, to
# ride out rate limits), each try waiting up to 120 s: a server that is down would hold the tracking
# thread minutes per trial, and the trials queue behind it. Fewer, shorter tries here; a user's own
# setting wins (setdefault).
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}


class MlflowSink:
    """Logs one LoggedTrial a call (in the tracking thread: every call may block on the server)."""

    def __init__(self, cfg: MlflowConfig, study_name: str) -> None:
        for name, value in HTTP_DEFAULTS.items():
            os.environ.setdefault(name, value)
        self.uri = cfg.tracking_uri
        self.experiment = cfg.experiment or study_name
        # found or made at the first trial (the server may be down now)
        self.experiment_id: str | None = None

    @property
    def name(self) -> str:
        from autotune.redact import mask

        return f"mlflow ({mask(self.uri)})" if self.uri else "mlflow"

    def __call__(self, study: optuna.Study, trial: LoggedTrial) -> None:
        """One trial logged; autotune's environment as it was before (mlflow.set_tracking_uri
        writes MLFLOW_TRACKING_URI, a password in it, into os.environ, which every later trial
        would inherit)."""
        before = _mlflow_env()
        try:
            self._log(study, trial)
        finally:
            _restore(before)

    def _log(self, study: optuna.Study, trial: LoggedTrial) -> None:
        import mlflow

        callback = self._callback(trial)
        callback(study, trial.view)
        status = RUN_STATUS[trial.state.name]
        if status != "FINISHED":
            run = mlflow.last_active_run()  # the run the callback just ended (this thread's)
            assert run is not None
            mlflow.MlflowClient().set_terminated(run.info.run_id, status)

    def _callback(self, trial: LoggedTrial) -> Any:
        """The integration's callback for this trial's metric names (a pruned trial has none)."""
        import mlflow
        from optuna_integration import MLflowCallback

        if self.uri is not None:
            mlflow.set_tracking_uri(self.uri)
        if self.experiment_id is None:
            self.experiment_id = mlflow.set_experiment(self.experiment).experiment_id
        return MLflowCallback(
            tracking_uri=self.uri,
            metric_name=trial.metric_names,
            create_experiment=False,
            mlflow_kwargs={
                "experiment_id": self.experiment_id,
                "run_name": f"trial {trial.number}",
            },
        )


def _mlflow_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("MLFLOW_")}


def _restore(before: dict[str, str]) -> None:
    """The MLFLOW_* variables as they were: those added since removed, those changed put back."""
    for name in [k for k in os.environ if k.startswith("MLFLOW_") and k not in before]:
        os.environ.pop(name, None)
    os.environ.update(before)
