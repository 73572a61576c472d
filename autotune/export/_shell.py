"""The winner as shell lines: the command study's own command with its knob values (rendered by
command_render.render, as the trial rendered it), and a torchrun launch for a script of your own."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from autotune import command_render
from autotune.command_render import text_of
from autotune.errors import ConfigError
from autotune.export._form import Form, env_block, launcher, missing_lines
from autotune.export._winner import ENV_KNOBS, Winner


def _with_config(command: dict[str, Any], config: Path) -> dict[str, Any]:
    """The command with `{config}` already the exported config's path: render puts the source file's there when it
    writes no file (run_dir None), and export's file is best.config<suffix> beside best.yaml."""
    argv = [a.replace("{config}", str(config)) for a in command["argv"]]
    env = {k: v.replace("{config}", str(config)) for k, v in (command.get("env") or {}).items()}
    return {**command, "argv": argv, "env": env}


def _render(w: Winner) -> tuple[command_render.Rendered, Path | None]:
    """The rendered command, and the config file written for it (None: the command reads none)."""
    assert w.command is not None
    base_dir = Path(w.command.get("base_dir") or w.base_dir or w.path.parent)  # absent: best.yaml's folder
    config = None
    if w.command.get("config_file"):
        config = w.path.parent / f"best.config{Path(w.command['config_file']).suffix}"
    command = _with_config(w.command, config) if config is not None else w.command
    rendered = command_render.render(command, w.knobs, None, base_dir, launcher=False)
    if config is not None and rendered.config_path is not None:
        try:
            command_render.write_config(Path(rendered.config_path), config, rendered.overrides)
        except (ValueError, yaml.YAMLError) as err:  # unreadable, or a key it cannot take (command_render names it)
            raise ConfigError(f"{w.path}: command.config_file: {err}") from None
    return rendered, config


def _unmapped(w: Winner) -> list[str]:
    """autotune's knobs with a value of their own that reach the command neither through a mapping nor the
    environment (a knob of your own always has its mapping)."""
    mapped = set((w.command or {}).get("knobs") or {})
    return [
        f"{name}={text_of(value)} (not mapped onto your command: add it to command.knobs)"
        for name, value in w.knobs.items()
        if value is not None and name not in mapped and name not in ENV_KNOBS and w.differs(name)
    ]


def command(w: Winner) -> Form:
    """`cd <cwd> && VAR=... argv`: the study's command with the winner's flags, variables and config file."""
    rendered, config = _render(w)
    env = {**w.env, **rendered.env}
    assignments = [f"{name}={shlex.quote(value)}" for name, value in env.items()]
    line = " ".join(["cd", shlex.quote(rendered.cwd), "&&", *assignments, shlex.join(rendered.argv)])
    missing = _unmapped(w)
    lines = [
        "# the study's command with the winner's knob values",
        *([f"# {config.name}: {(w.command or {}).get('config_file')} with the winner's keys set"] if config else []),
        line,
        *missing_lines("command", missing),
    ]
    return Form("command", "\n".join(lines) + "\n", missing)


def torchrun(w: Winner) -> Form:
    """torchrun's prefix and the environment; every other knob is a setting of your script, named."""
    missing = [
        f"{name}={text_of(value)} (a setting of your script: torchrun only launches it)"
        for name, value in w.knobs.items()
        if value is not None and name not in ENV_KNOBS and w.differs(name)
    ]
    lines = [
        *env_block(w.env),
        "# your script's own flags are your script's (see the hf, lightning and torchtitan forms)",
        shlex.join(launcher(w)) + " your_script.py",
        *(["# on every node"] if w.nnodes > 1 else []),
        *missing_lines("torchrun", missing),
    ]
    return Form("torchrun", "\n".join(lines) + "\n", missing)
