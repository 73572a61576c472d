"""The command a command study measured, as export writes it: command/render.py's own rendering of
the chosen knobs (the trial's launcher left out), with relative paths and the interpreter the trial
ran (its record's, runs/NNNN/result.json beside best.yaml)."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune import modes, redact
from autotune.command import render as command_render
from autotune.command.render import text_of
from autotune.errors import ConfigError
from autotune.export._form import one_line
from autotune.export._winner import Winner

RESULT_MAX_BYTES = 64 << 20  # a trial's result.json read for its command: more is no result of ours
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
    program: str = ""  # where argv[0]'s path comes from, for a comment ('' : as written)


def _filled(command: dict[str, Any], tokens: dict[str, str]) -> dict[str, Any]:
    """The command with these placeholders already replaced, so render leaves them as given."""

    def fill(text: str) -> str:
        for token, value in tokens.items():
            text = text.replace(token, value)
        return text

    env = {k: fill(v) for k, v in (command.get("env") or {}).items()}
    return {**command, "argv": [fill(a) for a in command["argv"]], "env": env}


def recorded_argv(w: Winner) -> list[str] | None:
    """The chosen trial's command as its record keeps it (applied.command of runs/NNNN/result.json
    beside best.yaml: argv[0] as the trial resolved it); None where it is not there."""
    import json

    if w.trial is None:
        return None
    path = w.path.parent / "runs" / f"{w.trial:04d}" / "result.json"
    try:
        if not path.is_file() or path.stat().st_size > RESULT_MAX_BYTES:
            return None
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    argv = (doc.get("applied") or {}).get("command") if isinstance(doc, dict) else None
    ok = isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)
    return argv if ok else None


def _program(w: Winner, argv0: str, recorded: list[str] | None) -> tuple[str, str]:
    """argv[0] by the full path the trial ran, and where that was read: the trial's record, else as
    the trial resolves it (`{python}`: autotune's Python; a bare name: on the command's PATH)."""
    import shutil
    import sys

    ran = f"trial {w.trial}'s record"
    if recorded and os.path.isabs(recorded[0]):
        if argv0 == "{python}" or os.path.basename(recorded[0]) == argv0:
            return recorded[0], ran
    if argv0 == "{python}":
        return sys.executable, "{python}: autotune's Python"
    if os.sep in argv0 or "{" in argv0 or redact.MASK in argv0:
        return argv0, ""
    path = (w.command or {}).get("env", {}).get("PATH") or os.environ.get("PATH", os.defpath)
    found = shutil.which(argv0, path=path)
    return (found, "your PATH here (no trial record beside best.yaml)") if found else (argv0, "")


def _base_dir(w: Winner) -> Path:
    """The study YAML's folder, which the command's cwd is relative to: best.yaml's folder as the
    user names it (`cd` in the pasted command climbs the path as named: a shell's cd is logical),
    as base_dir is stored (documents/base_dir.py), links kept."""
    assert w.command is not None
    study = Path(os.path.abspath(w.path.parent))
    # absent: best.yaml's folder; relative: to that folder (read() makes it absolute already)
    return study / (w.command.get("base_dir") or w.base_dir or ".")


def command_dir(w: Winner) -> Path:
    """The folder the command ran in: its cwd, relative to the study YAML's folder."""
    assert w.command is not None
    return Path(os.path.normpath(_base_dir(w) / (w.command.get("cwd") or ".")))


def measured(w: Winner) -> Measured:
    """The command the chosen trial ran, rendered by command.render.render for its knobs, with its
    folder relative to the study's, `{config}` the exported config file's path relative to that
    folder, argv[0] (`python`, `{python}`) by the full path the trial ran (`_program`). Writes
    best.config<suffix> beside best.yaml when the command reads a config file."""
    assert w.command is not None
    study = Path(os.path.abspath(w.path.parent))
    base_dir = _base_dir(w)
    cwd = command_dir(w)  # the config file's path is written relative to it
    argv0 = str(w.command["argv"][0])
    program, source = _program(w, argv0, recorded_argv(w))
    # {python} elsewhere in argv or env is autotune's Python, as render fills it
    python = program if argv0 == "{python}" else _program(w, "{python}", None)[0]
    config, tokens = None, {"{python}": python}
    if w.command.get("config_file"):
        config = study / f"best.config{Path(w.command['config_file']).suffix}"
        tokens["{config}"] = os.path.relpath(config, cwd)
    command = _filled(w.command, tokens)
    command["argv"] = [program, *command["argv"][1:]]
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
        program=one_line(f"# {program}: the program the trial ran ({source})") if source else "",
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
    line = f"# {m.config.name} (beside best.yaml): {source} with the winner's keys set: {keys}"
    return [one_line(line)]


def declared_lines(w: Winner) -> list[str]:
    """What the forms say of autotune's knobs the command does not map: one value declared in
    space: for what the job does itself (a batch its script hard-codes), recorded in every trial,
    never rendered into the command."""
    mine = w.set_by_script()
    if not mine:
        return []
    values = ", ".join(f"{name}={text_of(value)}" for name, value in mine.items())
    return [one_line(f"# set by your script (declared in space:, not rendered here): {values}")]


def lightning_lines(w: Winner) -> list[str]:
    """measure lightning: the PL_TRAINER_* variables the trial set for knobs the command does not
    map (command.render.knob_env), each with its knob: Lightning's defaults for the Trainer
    arguments the script does not pass (one it passes wins)."""
    set_ = command_render.knob_env(w.command or {}, w.knobs)
    if not set_:
        return []
    by_variable = {v: name for name, (v, _) in modes.of(w.command).knob_env.items()}
    said = ", ".join(
        f"{by_variable[v]}={text_of(w.knobs[by_variable[v]])} as {v}={value}"
        for v, value in set_.items()
    )
    return [
        one_line(
            f"# Lightning's PL_TRAINER_* variables, as the trial set them: {said} (the Trainer's "
            "defaults for arguments your script does not pass; one it passes wins)"
        )
    ]


def measure_only_line(groups: list[list[str]], words: list[str] | None = None) -> list[str]:
    """The comment that marks a command's flags for the measurement only (their groups:
    command.measure_only.measure_only; their words as the form writes them, default as given)."""
    if not groups:
        return []
    shown = words if words is not None else [" ".join(g) for g in groups]
    return [
        one_line(
            f"# for the measurement only, not the tuned setting: {', '.join(shown)}; remove them "
            "(or set your own) for your real run (command.measure_only lists a job's own)"
        )
    ]
