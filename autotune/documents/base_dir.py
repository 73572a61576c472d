"""best.yaml's base_dir, the study YAML's folder: stored relative to best.yaml's folder as the user
names it (stored), read back against that folder (absolute), and checked to hold the code the
study runs (missing_code) before a check measures anything. Nothing here imports user code."""

from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder
from pathlib import Path
from typing import TYPE_CHECKING

from autotune import paths
from autotune.errors import excerpt
from autotune.redact import MASK

if TYPE_CHECKING:
    from autotune.config import ModelConfig
    from autotune.config.command import CommandConfig

# The first best.yaml schema whose relative base_dir is read against best.yaml's folder as the path
# to it names it (links kept). Schema 3 and 4 read it against the folder's resolved path, as they
# wrote it: with trials/ a link to a scratch disk, that was the way from the link's target, and a
# copy committed at the same depth named whatever lay that way from the project (issue 63).
NAMED = 5

# argv words that name a script of the project (relative to the command's folder)
SCRIPT_SUFFIXES = (".py", ".sh", ".bash")


def stored(folder: str | None, study_dir: Path) -> str | None:
    """base_dir as best.yaml stores it: folder (the study YAML's, absolute) relative to study_dir as
    the user names it, no link resolved: `../..` from trials/<name> wherever trials/ leads, so a
    copy at the same depth (perf/<name>/best.yaml) names its own checkout. The way up climbs
    study_dir's own parts to the nearest that is folder or holds it (folder may come resolved)."""
    if folder is None:
        return None
    target, named = Path(folder).resolve(), Path(os.path.abspath(study_dir))
    for up, above in enumerate((named, *named.parents)):
        real = above.resolve()
        if target == real or real in target.parents:
            down = str(target.relative_to(real))
            return os.path.normpath(os.path.join(os.curdir, *[os.pardir] * up, down))
    return str(target)  # never reached: the root holds every folder


def absolute(best_yaml: Path, folder: str | None, schema: int) -> str | None:
    """The folder best.yaml names (base_dir), absolute: from schema NAMED on, against best.yaml's
    folder as the path to it names it (links kept); an older file's against that folder's resolved
    path, as it was written (paths.beside); an absolute one as it is."""
    if folder is None or os.path.isabs(folder) or schema < NAMED:
        return paths.beside(best_yaml, folder)
    return os.path.normpath(os.path.join(os.path.abspath(best_yaml.parent), folder))


def kept_schema(schema: int, folder: str | None, newest: int) -> int:
    """The schema a check's write-back gives a file read as `schema`: the newest, but an older
    file's relative base_dir keeps the last schema that reads it against the resolved folder (a
    folder written one way is never read the other)."""
    relative = folder is not None and not os.path.isabs(folder)
    return NAMED - 1 if relative and schema < NAMED else newest


def missing_code(
    base_dir: str | None, model: ModelConfig | None, command: CommandConfig | None
) -> str | None:
    """What base_dir lacks of what the study runs from it, said after "base_dir is FOLDER, which"
    (None: it holds all of it, or the study runs nothing from it). A command: its folder (cwd),
    its config_file and its program (program_of: a script, or a `-m` module unless installed); a
    Python model: its entrypoint's module (unless installed). An hf_config model names its file by
    an absolute path: nothing of it is found through base_dir."""
    if base_dir is None:
        return None
    home = Path(base_dir)
    if command is not None:
        return _command_missing(home, command)
    if model is not None and model.entrypoint:
        module = model.entrypoint.partition(":")[0]
        found = module_found(home, module)
        return None if found else f"has no module {excerpt(module)} (model.entrypoint's)"
    return None


def _command_missing(home: Path, command: CommandConfig) -> str | None:
    if not home.is_dir():
        return "is no folder"
    folder = home / (command.cwd or ".")
    if not folder.is_dir():
        return f"has no folder {excerpt(command.cwd)} (command.cwd)"
    if command.config_file and not (home / command.config_file).is_file():
        return f"has no file {excerpt(command.config_file)} (command.config_file)"
    program = program_of(command.argv)
    if program is None:
        return None
    kind, name = program
    if kind == "script" and not (folder / name).is_file():
        return f"has no {excerpt(name)} (the command's program)"
    if kind == "module" and not module_found(folder, name):
        return f"has no module {excerpt(name)} (the command's -m)"
    return None


def program_of(argv: list[str]) -> tuple[str, str] | None:
    """The file of the project argv runs, relative to the command's folder: ("script", train.py),
    the first word naming a script (SCRIPT_SUFFIXES; argv[0] only as a relative path such as
    ./train, a bare name is looked up on PATH), or ("module", pkg.train) for `-m pkg.train`. None
    where argv names neither before a `-c`, or names it through a placeholder ({run_dir}) or an
    absolute path (no file of base_dir)."""
    if _relative(argv[0]) and os.sep in argv[0]:
        return "script", argv[0]
    for word, after in zip(argv[1:], [*argv[2:], ""]):
        if word == "-c":  # python -c CODE: the code is inline
            return None
        if word == "-m":
            return ("module", after) if _relative(after) else None
        if _relative(word) and word.endswith(SCRIPT_SUFFIXES):
            return "script", word
    return None


def _relative(word: str) -> bool:
    """A word that can name a file relative to the command's folder: no flag, no placeholder, no
    masked secret, not absolute."""
    if not word or word.startswith("-") or os.path.isabs(word):
        return False
    return "{" not in word and MASK not in word


def module_found(folder: Path, module: str) -> bool:
    """module is found in folder (a .py file or a package folder), or installed: found on autotune's
    path without the working folder (PathFinder: nothing imported)."""
    parts = module.split(".")
    here = folder.joinpath(*parts)
    if here.with_suffix(".py").is_file() or here.is_dir():
        return True
    cwd = os.getcwd()
    search = [p for p in sys.path if p not in ("", cwd)]
    return PathFinder.find_spec(parts[0], search) is not None
