"""Weights & Biases: each trial a run in the study's group, through WeightsAndBiasesCallback."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.config.study import WandbConfig
from autotune.search.tracking._trial import LoggedTrial

if TYPE_CHECKING:
    import optuna


class WandbSink:
    """Logs one LoggedTrial a call (in the tracking thread: wandb.init may wait on the server)."""

    name = "wandb"

    def __init__(self, cfg: WandbConfig, study_name: str, study_dir: Path) -> None:
        self.cfg = cfg
        self.group = study_name
        self.dir = Path(cfg.dir) if cfg.dir else study_dir
        _start_service(cfg)

    def __call__(self, study: optuna.Study, trial: LoggedTrial) -> None:
        from optuna_integration import WeightsAndBiasesCallback

        callback = WeightsAndBiasesCallback(
            metric_name=trial.metric_names, wandb_kwargs=self._init_kwargs(trial), as_multirun=True
        )
        callback(study, trial.view)

    def _init_kwargs(self, trial: LoggedTrial) -> dict[str, Any]:
        """wandb.init's arguments for this trial's run: its state and reason in config and tags."""
        import wandb

        given = {"project": self.cfg.project, "entity": self.cfg.entity, "mode": self.cfg.mode}
        self.dir.mkdir(parents=True, exist_ok=True)
        return {
            **{k: v for k, v in given.items() if v is not None},
            "dir": str(self.dir),
            "group": self.group,
            "job_type": "trial",
            "config": dict(trial.tags),
            "tags": [trial.tags["state"], trial.tags["status"]],
            # quiet, and no capture of the terminal (the live view draws there); the parent's system
            # metrics say nothing of the trial, which runs in its own process
            "settings": wandb.Settings(silent=True, console="off", x_disable_stats=True),
        }


def _start_service(cfg: WandbConfig) -> None:
    """W&B logs through a service process of its own (wandb-core), started here, before the first
    trial and counted as autotune's: after each trial autotune ends every child it did not start
    (orphans.sweep)."""
    import wandb

    from autotune.launch import orphans

    orphans.keep_started(lambda: wandb.setup(wandb.Settings(mode=cfg.mode) if cfg.mode else None))
