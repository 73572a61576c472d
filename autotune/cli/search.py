"""`autotune search` and `autotune validate`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from autotune.api_options import parse_gpus, resolve_device
from autotune.cli._app import command
from autotune.cli._console import console as out_console
from autotune.cli._errors import funnel
from autotune.cli._options import (
    Device,
    DryRun,
    Fresh,
    Gpus,
    Mlflow,
    ModelYaml,
    Out,
    ShowAll,
    Storage,
    TimeoutMin,
    Trials,
    Wandb,
    WarmStart,
)
from autotune.errors import NoSuccessError, printable

if TYPE_CHECKING:
    from rich.console import Console

    from autotune.config import Config
    from autotune.search.run import SearchResult
    from autotune.space import ResolvedSpace


@command(
    "autotune search search_spaces/tiny.yaml --device cpu --trials 4",
    "autotune search my.yaml --gpus 0,1,2,3 --timeout-min 60",
)
def search(
    model_yaml: ModelYaml,
    trials: Trials = None,
    timeout_min: TimeoutMin = None,
    out: Out = Path("trials"),
    device: Device = None,
    fresh: Fresh = False,
    storage: Storage = None,
    gpus: Gpus = None,
    dry_run: DryRun = False,
    warm_start: WarmStart = None,
    mlflow: Mlflow = None,
    wandb: Wandb = None,
    show_all: ShowAll = False,
) -> None:
    """Search the space with real, short benchmark trials; write OUT/<name>/best.yaml."""
    with funnel():
        from autotune.job import load
        from autotune.search.tracking import with_overrides
        from autotune.views import LiveProgress, space_table

        console = out_console()
        device = resolve_device(device)
        cfg, space = load(model_yaml, device)  # the space resolved once, handed on to the search
        cfg = with_overrides(cfg, mlflow=mlflow, wandb=wandb)
        _say_notes(console, cfg)
        if dry_run:
            console.print(space_table(space.describe(), show_all))
            return
        from autotune.search import run_search

        with LiveProgress(console, list(space.searched)) as view:
            result = run_search(
                cfg,
                out_root=out,
                device=device,
                trials=trials,
                timeout_min=timeout_min,
                fresh=fresh,
                storage=storage,
                gpus=parse_gpus(gpus),
                observer=view,
                warm_start_from=warm_start,
                space=space,
            )
        _print_result(
            console, result, list(space.searched) or ["micro_batch_size"], cfg.workload.task
        )


def _shown(cfg: Config) -> dict[str, Any]:
    """The config as validate prints it: a command's secrets masked (redact.mask_command)."""
    from autotune.redact import mask_command

    doc: dict[str, Any] = cfg.model_dump(mode="json")
    if doc.get("command"):
        doc["command"] = mask_command(doc["command"])
    return doc


def _say_notes(console: Console, cfg: Config) -> None:
    """The task's notes on the config (a secret in a command's arguments: Task.notes); a command's
    suspicious but legal mappings (command.task.warnings)."""
    from autotune import tasks

    for note in tasks.task(cfg.workload.task).notes(cfg):
        console.print(f"note: {note}", highlight=False)
    if cfg.command is not None:
        from autotune.command.task import warnings

        for line in warnings(cfg.command, cfg.study.extend_edges):
            console.print(f"warning: {line}", highlight=False, markup=False)


def _say_command(console: Console, cfg: Config, space: ResolvedSpace) -> None:
    """A command's baseline trial as it launches (command.render.preview): its folder, the
    variables it adds, its argv, its config file's keys set; secrets masked."""
    if cfg.command is None:
        return
    import json
    import shlex

    from autotune.command.render import preview

    knobs = space.knobs(space.baseline)
    shown = preview(cfg.command.model_dump(mode="json"), knobs, Path(cfg.base_dir or "."))
    env = [f"{k}={shlex.quote(v)}" for k, v in shown.env.items()]
    words = ["cd", shlex.quote(shown.cwd), "&&", *env, *map(shlex.quote, shown.argv)]
    folder = " ({run_dir}: the trial's folder)" if "{run_dir}" in " ".join(words) else ""
    console.print(f"the baseline's trial runs{folder}:", highlight=False, markup=False)
    for line in _shell_lines(words, console.width):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    for k, v in shown.overrides.items():
        console.print(
            f"  {shown.config_path}: {k} = {json.dumps(v)}", highlight=False, markup=False
        )
    from autotune.command.task import step_tokens_said
    from autotune.errors import ConfigError

    try:
        said = step_tokens_said(cfg.command, knobs)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if said is not None:
        console.print(f"the baseline's step: {said}", highlight=False, markup=False)


def _shell_lines(words: list[str], width: int) -> list[str]:
    """Shell words as lines of at most `width` columns where the words allow, each but the last
    ending in ` \\`: pasted, they run as one command line."""
    lines, line = [], " "
    for word in words:
        if line.strip() and len(line) + len(word) + 3 > width:
            lines.append(f"{line} \\")
            line = "   "
        line = f"{line} {word}"
    return [*lines, line]


def _print_result(console: Console, result: SearchResult, searched: list[str], task: str) -> None:
    """The search's end: the top trials, the confirmation, what was chosen and where it was
    written."""
    from autotune.report._terminal import chosen_interval, confirmation_view
    from autotune.views import top_trials

    if result.best is None and result.history.launched == 0:
        raise NoSuccessError(
            f"no trial was launched ({result.stop_reason}): every point tried was known not to "
            "run here or taken by another worker, or the time ran out first; nothing was "
            "measured, so runs/ holds no log"
        )
    if result.best is None:
        raise NoSuccessError(
            f"no trial succeeded ({result.history.launched} launched); see "
            f"{result.study_dir}/runs/*/worker.log"
        )
    top_trials(console, result.history, searched, task)
    if result.confirmation:
        confirmation_view(console, result.confirmation)
        console.print(
            f"chosen: trial {result.confirmation.chosen}: {result.confirmation.why}",
            highlight=False,
        )
        console.print(chosen_interval(result.confirmation), highlight=False)
    from autotune.study.bound import statement
    from autotune.study.disturbed import disturbed

    # the last word, the sentence every form of the report says (study/bound.py), then whether it
    # rests on measurements taken while the host was busy (study/disturbed.py)
    said = statement(result.history, result.confirmation)
    if said:
        console.print(said["text"], highlight=False)
    if busy := disturbed(result.history, result.confirmation):
        console.print(busy["text"], style="yellow", highlight=False)
    from autotune import tasks
    from autotune.study.peaks import alloc_offer

    if offer := alloc_offer(result.history, tasks.task(task)):
        console.print(f"note: {offer}", highlight=False)
    console.print(
        f"{result.stop_reason}; {result.new_trials} new trial(s). Best: "
        f"{_chosen_label(result)}, written to {result.best_yaml}"
    )


def _chosen_label(result: SearchResult) -> str:
    """The chosen trial as the end line names it: your setting, where the race kept it."""
    from autotune.study.chosen import is_yours

    number = result.chosen_number
    if is_yours(number, result.history):
        return f"your setting (trial {number}, the baseline)"
    return f"trial {number}"


@command("autotune validate search_spaces/tiny.yaml --all")
def validate(model_yaml: ModelYaml, show_all: ShowAll = False) -> None:
    """Check MODEL_YAML; print the resolved config and space.

    The space lists the knobs that can act here (--all: every one)."""
    with funnel():
        from autotune import tasks
        from autotune.job import load
        from autotune.views import config_yaml, space_table

        console = out_console()
        cfg, space = load(model_yaml)
        described = space.describe()
        console.print(config_yaml(_shown(cfg), described, show_all), highlight=False)
        console.print(space_table(described, show_all))
        _say_command(console, cfg, space)
        _say_notes(console, cfg)
        if tasks.task(cfg.workload.task).estimates_memory:
            from autotune.hardware import detect
            from autotune.launch.runner import model_spec
            from autotune.views import memory_table

            gpus = [g["memory_gib"] for g in detect()["gpus"]]
            table = memory_table(
                model_spec(cfg.model), space, cfg.workload.world_size, min(gpus) if gpus else None
            )
            if table is not None:
                console.print(table)
        console.print(Text.assemble(("ok", "green"), f": {printable(str(model_yaml))} is valid"))
