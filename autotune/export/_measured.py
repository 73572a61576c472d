"""The command a command study measured, as export writes it: command_render's own rendering of the
chosen knobs (the trial's launcher left out), with relative paths and the shell's `python`."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune import command_render, redact
from autotune.command_render import text_of
from autotune.errors import ConfigError
from autotune.export._winner import ENV_KNOBS, Winner

# `{python}` was the trial's interpreter, autotune's own (sys.executable): a command pasted
# elsewhere runs the shell's
PYTHON = "python"
RUN_DIR_NOTE = "# {run_dir} (each trial's own folder) is . here: the command's folder"


@dataclass
class Measured:
    """The chosen trial's command: what it ran, where, and the config file export writes for it."""

    argv: list[str]
    env: dict[str, str]  # the environment knobs' variables, the command's env and its env mappings
    cwd: str  # the command's folder, relative to the study's (best.yaml's folder)
    config: Path | None  # best.config<suffix> beside best.yaml (None: the command reads no file)
    overrides: dict[str, Any]  # the config file's dotted keys the knobs set
    names_run_dir: bool  # the command names {run_dir}, which is `.` here


def _filled(command: dict[str, Any], tokens: dict[str, str]) -> dict[str, Any]:
    """The command with these placeholders already replaced, so render leaves them as given."""

    def fill(text: str) -> str:
        for token, value in tokens.items():
            text = text.replace(token, value)
        return text

    env = {k: fill(v) for k, v in (command.get("env") or {}).items()}
    return {**command, "argv": [fill(a) for a in command["argv"]], "env": env}


def measured(w: Winner) -> Measured:
    """The command the chosen trial ran, rendered by command_render.render for its knobs, with its
    folder relative to the study's, `{config}` the exported config file's path relative to that
    folder, `{python}` as `python`. Writes best.config<suffix> beside best.yaml when the command
    reads a config file."""
    assert w.command is not None
    study = w.path.parent.resolve()
    # absent: best.yaml's folder; relative: to that folder (read() makes it absolute already)
    base_dir = study / (w.command.get("base_dir") or w.base_dir or ".")
    # the command's folder as render resolves it; the config file's path is written relative to it
    cwd = (base_dir / (w.command.get("cwd") or ".")).resolve()
    config, tokens = None, {"{python}": PYTHON}
    if w.command.get("config_file"):
        config = study / f"best.config{Path(w.command['config_file']).suffix}"
        tokens["{config}"] = os.path.relpath(config, cwd)
    command = _filled(w.command, tokens)
    rendered = command_render.render(command, w.knobs, None, base_dir, launcher=False)
    if config is not None and rendered.config_path is not None:
        try:
            command_render.write_config(Path(rendered.config_path), config, rendered.overrides)
        except (ValueError, yaml.YAMLError) as err:  # unreadable, or a key it cannot take (named)
            raise ConfigError(f"{w.path}: command.config_file: {err}") from None
    written = [*w.command["argv"], *(w.command.get("env") or {}).values()]
    return Measured(
        argv=rendered.argv,
        env={**w.env, **rendered.env},
        cwd=os.path.relpath(cwd, study),
        config=config,
        overrides=rendered.overrides,
        names_run_dir=any("{run_dir}" in text for text in written),
    )


def shell_word(text: str, masked: str) -> str:
    """One argument or value as a shell word: its literal parts quoted (shlex), each `{env:NAME}`
    the variable's expansion, a secret masked in best.yaml the expansion of `masked`, which stops
    the pasted command with a message while unset (`${NAME:?...}`), never a literal ***."""
    parts = re.split(r"(\{env:[A-Za-z_][A-Za-z0-9_]*\}|\*\*\*)", text)  # the split keeps them
    words = []
    for part in parts:
        if not part:
            continue
        if part == redact.MASK:
            words.append(f'"${{{masked}:?a secret masked in best.yaml: export {masked}}}"')
        elif (ref := redact.ENV_REFERENCE.fullmatch(part)) is not None:
            words.append(f'"${{{ref.group(1)}}}"')
        else:
            words.append(shlex.quote(part))
    return "".join(words) or "''"


def secret_lines(m: Measured) -> list[str]:
    """What the forms say of the command's secrets: `{env:NAME}` taken from your environment, a
    value masked in best.yaml (never stored) to be given back by hand."""
    texts = [*m.argv, *m.env.values()]
    refs = sorted({r.group(1) for t in texts for r in redact.ENV_REFERENCE.finditer(t)})
    masked = [
        f"command.argv[{i}] as $SECRET_ARG_{i}" for i, a in enumerate(m.argv) if redact.MASK in a
    ]
    masked += [f"command.env.{k} as ${k}" for k, v in m.env.items() if redact.MASK in v]
    lines = (
        [f"# from your environment: {', '.join(refs)} ({{env:NAME}} in the study's YAML)"]
        if refs
        else []
    )
    if masked:
        lines.append(
            f"# masked in best.yaml (a secret is never stored): {', '.join(masked)}; "
            "export it first"
        )
    return lines


def config_lines(w: Winner, m: Measured) -> list[str]:
    """What the config file export wrote holds: the user's file with the winner's keys set."""
    if m.config is None:
        return []
    source = (w.command or {}).get("config_file")
    keys = ", ".join(f"{key}={text_of(value)}" for key, value in m.overrides.items()) or "none"
    from autotune.export._form import one_line

    line = f"# {m.config.name} (beside best.yaml): {source} with the winner's keys set: {keys}"
    return [one_line(line)]


def unmapped(w: Winner) -> list[str]:
    """autotune's knobs with a value of their own that reach the command neither through a mapping
    nor the environment (a knob of your own always has its mapping)."""
    mapped = set((w.command or {}).get("knobs") or {})
    return [
        f"{name}={text_of(value)} (not mapped onto your command: add it to command.knobs)"
        for name, value in w.knobs.items()
        if value is not None and name not in mapped and name not in ENV_KNOBS and w.differs(name)
    ]
