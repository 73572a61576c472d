"""The winner of a study as export reads it from best.yaml: its knobs, environment, metrics, ranks
and, for a command study, the command. A train or generate study's file is read, validated and typed
by documents.best_file.read_best; a command study's (it has a `command:` section) is checked here,
section by section: export also takes one written by hand, without the sections check needs
(chosen, fingerprint, measurement) or with the command's base_dir in its command section."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune import knobs as catalogue
from autotune import yamlio
from autotune.errors import ConfigError, excerpt
from autotune.protocol import Knobs

if TYPE_CHECKING:
    from autotune.config.command import CommandConfig
    from autotune.documents.best_file import Best

# The knobs that act through environment variables: every format sets them as environment lines
# (apply.env).
ENV_KNOBS = frozenset(k.name for k in catalogue.CATALOGUE if k.env)


@dataclass(frozen=True)
class Winner:
    """What every format needs of best.yaml."""

    path: Path
    name: str
    task: str
    knobs: Knobs
    env: dict[str, str]  # apply.env: the environment knobs' variables
    metrics: dict[str, Any]
    world_size: int = 1
    nnodes: int = 1
    rdzv_endpoint: str | None = None
    device: str = "cuda"
    # task command: the study's command section (config.CommandConfig)
    command: dict[str, Any] | None = None
    # the study YAML's folder: a command's cwd and config_file are relative to it
    base_dir: str | None = None
    # a command's own knobs, not autotune's
    user_knobs: frozenset[str] = field(default_factory=frozenset)
    seq_len: int | None = None  # the model's sequence length (torchtitan counts a batch in tokens)
    trial: int | None = None  # the chosen trial's number (chosen.trial): whose command is exported

    def differs(self, name: str) -> bool:
        """Whether the knob's value is worth naming: not autotune's default (a knob of your own:
        always)."""
        knob = catalogue.BY_NAME.get(name)
        return knob is None or self.knobs[name] != knob.default

    def set_by_script(self) -> dict[str, Any]:
        """A command study's knobs of autotune's that reach its command neither by a mapping, the
        environment, nor (measure lightning) a PL_TRAINER_* variable: one value declared in space:
        for what the job does itself (command/task.declared), in every trial's knobs, never
        rendered. A value at autotune's default is left unsaid."""
        if self.command is None:
            return {}
        from autotune import modes

        reached = (
            set(self.command.get("knobs") or {}) | ENV_KNOBS | set(modes.of(self.command).knob_env)
        )
        return {
            name: value
            for name, value in self.knobs.items()
            if name in catalogue.BY_NAME
            and name not in reached
            and value is not None
            and self.differs(name)
        }


def read(path: Path) -> Winner:
    """best.yaml at path as a Winner; ConfigError (exit 2, one line) naming what is wrong."""
    from autotune import tasks
    from autotune.documents.best_file import missing_best, read_best

    if not path.is_file():
        raise ConfigError(missing_best(path))
    doc = yamlio.read(path, "BEST_YAML")
    if isinstance(doc, dict) and "command" in doc:
        _check_command_study(path, doc)
        _check_env(path, doc.get("apply"))
        return _command_winner(path, doc)

    return _winner(path, read_best(path, tasks.check_workload))


def _winner(path: Path, best: Best) -> Winner:
    """A train or generate study's winner, from best.yaml as read_best typed it."""
    doc, workload = best.doc, best.workload
    env = doc.apply.env if doc.apply else None
    return Winner(
        path=path,
        name=doc.name,
        task=workload.task,
        knobs=dict(doc.knobs),
        env=dict(env) if env is not None else catalogue.env_of(doc.knobs),
        metrics=doc.metrics.model_dump(exclude_unset=True),  # as written
        world_size=workload.world_size,
        nnodes=workload.nnodes,
        rdzv_endpoint=workload.rdzv_endpoint,
        device=doc.fingerprint.device,
        base_dir=best.base_dir,  # relative to best.yaml's folder in the file (write_best)
        user_knobs=frozenset(n for n in doc.knobs if n not in catalogue.BY_NAME),
        seq_len=best.model.seq_len if best.model else None,
        trial=doc.chosen.trial,
    )


def _command_winner(path: Path, doc: dict[str, Any]) -> Winner:
    """A command study's winner, from best.yaml as _check_command_study checked it."""
    from autotune.documents.base_dir import absolute

    workload, command = doc["workload"], doc["command"]
    schema = doc.get("schema_version", 1)  # checked (check_layout)
    if command.get("base_dir") is not None:  # relative to best.yaml's folder
        command = {**command, "base_dir": absolute(path, command["base_dir"], schema)}
    base_dir = doc.get("base_dir") if isinstance(doc.get("base_dir"), str) else None
    env = (doc.get("apply") or {}).get("env")
    return Winner(
        path=path,
        name=str(doc.get("name", "")),
        task=str(workload.get("task", "train")),
        knobs=dict(doc["knobs"]),
        env=dict(env) if env is not None else catalogue.env_of(doc["knobs"]),
        metrics=dict(doc.get("metrics") or {}),
        world_size=workload.get("world_size", 1),
        nnodes=workload.get("nnodes", 1),
        rdzv_endpoint=workload.get("rdzv_endpoint"),
        device=(doc.get("fingerprint") or {}).get("device", "cuda"),
        command=command,
        base_dir=absolute(path, base_dir, schema),  # relative to best.yaml's folder (write_best)
        user_knobs=frozenset(n for n in doc["knobs"] if n not in catalogue.BY_NAME),
        seq_len=(doc.get("model") or {}).get("seq_len"),
        trial=_chosen_trial(doc.get("chosen")),
    )


def _chosen_trial(chosen: Any) -> int | None:
    trial = chosen.get("trial") if isinstance(chosen, dict) else None
    return trial if isinstance(trial, int) and not isinstance(trial, bool) else None


def _check_command_study(path: Path, doc: dict[str, Any]) -> None:
    """A command study's best.yaml: the sections export reads, each of the right kind; the command
    as the YAML schema says (config.CommandConfig); its schema_version and knobs as check reads
    them (best_file.check_layout: a schema this release reads, each value of a knob's type, a knob
    of the command's own one of its values); autotune's knobs as the catalogue says."""
    from autotune.documents.best_file import check_layout
    from autotune.documents.best_knobs import check_knob_values, user_knobs

    for key in ("knobs", "workload", "command"):
        if not isinstance(doc.get(key), dict):
            raise ConfigError(
                f"{path}: {key}: missing or not a mapping; is this a best.yaml written by "
                "autotune search?"
            )
    _check_ranks(path, doc["workload"])
    command = _check_command(path, doc["command"])
    check_layout(path, doc, user_knobs(command))
    check_knob_values(path, doc["knobs"])  # as read_best checks them
    _check_metrics(path, doc.get("metrics"))


def _check_metrics(path: Path, metrics: Any) -> None:
    """The numbers export prints, as best.yaml's reader types them (documents.best_file.Metrics):
    none (a file written by hand), or tokens/s per GPU and the others each a number."""
    from pydantic import ValidationError

    from autotune.config.load import describe_error
    from autotune.documents.best_file import Metrics

    if metrics is None:
        return
    try:
        Metrics.model_validate(metrics)
    except ValidationError as err:
        raise ConfigError(f"{path}: {describe_error(err, 'metrics')}") from None


def _check_ranks(path: Path, workload: dict[str, Any]) -> None:
    for key in ("world_size", "nnodes"):
        value = workload.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{path}: workload.{key}: {excerpt(value)} is not a positive integer")


def _check_env(path: Path, apply: Any) -> None:
    env = apply.get("env") if isinstance(apply, dict) else None
    if apply is None or env is None:
        return
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise ConfigError(
            f"{path}: apply.env: {excerpt(env)} is not a mapping of variable names to strings"
        )
    from autotune.config.command import NAME  # what a shell assigns and exports

    bad = [name for name in env if not NAME.fullmatch(name)]
    if bad:
        allowed = f"a name is {NAME.pattern}"
        name = excerpt(bad[0])
        problem = f"{name} is not an environment variable name ({allowed})"
        raise ConfigError(f"{path}: apply.env: {problem}")


def _check_command(path: Path, command: dict[str, Any]) -> CommandConfig:
    from pydantic import ValidationError

    from autotune.config.command import CommandConfig

    base_dir = command.get("base_dir")
    if base_dir is not None and not isinstance(base_dir, str):
        raise ConfigError(f"{path}: command.base_dir: {excerpt(base_dir)} is not a folder")
    try:
        return CommandConfig.model_validate({k: v for k, v in command.items() if k != "base_dir"})
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{path}: command{'.' + where if where else ''}: {message}") from None
