"""What a command's own program says of its job, read without running it: the arguments class it
parses or builds (TRL's SFTConfig, TrainingArguments, ...) and whether it builds an HF Trainer.
Parent side (export); standard library only (ast)."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# The arguments classes whose flags and defaults are known, by their package: each a dataclass of
# HfArgumentParser's, TRL's configs extending TrainingArguments with defaults of their own
# (SFTConfig: gradient checkpointing on, learning rate 2e-5)
CLASSES = {
    "transformers": ("TrainingArguments", "Seq2SeqTrainingArguments"),
    "trl": (
        "SFTConfig",
        "DPOConfig",
        "GRPOConfig",
        "KTOConfig",
        "ORPOConfig",
        "CPOConfig",
        "BCOConfig",
        "PPOConfig",
        "RLOOConfig",
        "RewardConfig",
        "GKDConfig",
        "OnlineDPOConfig",
        "PRMConfig",
        "XPOConfig",
        "NashMDConfig",
    ),
}
PACKAGE_OF = {name: package for package, names in CLASSES.items() for name in names}
PARSERS = {"HfArgumentParser": "transformers", "TrlParser": "trl"}
# the `trl <command>` console commands and the config each parses (trl/cli.py, trl/scripts/)
TRL_COMMANDS = {
    "sft": "SFTConfig",
    "dpo": "DPOConfig",
    "grpo": "GRPOConfig",
    "kto": "KTOConfig",
    "rloo": "RLOOConfig",
    "reward": "RewardConfig",
}
MAX_SOURCE_BYTES = 4 << 20  # a script larger than this is not a training script of ours to read


@dataclass(frozen=True)
class JobSource:
    """What the command's program says: its arguments class ("trl.SFTConfig"; None: not known),
    whether it builds an HF or TRL Trainer, and how that was known or why not (for a comment)."""

    arguments: str | None
    trainer: bool
    said: str


def _script(argv: list[str], cwd: Path) -> tuple[Path, str] | None:
    """The Python file the command runs and how the command names it: its first `.py` argument,
    or the module after `-m` found under its folder; None where it names none."""
    for i, word in enumerate(argv):
        if word.endswith(".py"):
            return cwd / word, word
        if word == "-m" and i + 1 < len(argv):
            module = cwd / argv[i + 1].replace(".", os.sep)
            main = module / "__main__.py"
            return (main if main.is_file() else module.with_suffix(".py")), f"-m {argv[i + 1]}"
    return None


def _names(tree: ast.Module) -> dict[str, str]:
    """Each name the source imports, as the dotted name it stands for (`SFTConfig` -> trl.SFTConfig,
    `tr` of `import transformers as tr` -> transformers)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update({a.asname or a.name.split(".")[0]: a.name for a in node.names})
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
    return names


def _named(node: ast.expr, names: dict[str, str]) -> tuple[str, str] | None:
    """(its top package, its name) of a name or attribute the source imported; a known class's
    bare name, not imported by name (a star import), as the package that defines it."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    dotted = ".".join([names[node.id], *parts]) if node.id in names else None
    if dotted is None:
        package = PACKAGE_OF.get(node.id) or PARSERS.get(node.id)
        return (package, node.id) if package and not parts else None
    return dotted.split(".")[0], dotted.rsplit(".", 1)[-1]


def _tuples(tree: ast.Module) -> dict[str, ast.expr]:
    """Names the source binds to a tuple or list (TRL's sft.py: `dataclass_types = (ScriptArguments,
    SFTConfig, ...)`, then `TrlParser(dataclass_types)`)."""
    bound: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Tuple, ast.List)):
            bound.update({t.id: node.value for t in node.targets if isinstance(t, ast.Name)})
    return bound


def _classes(
    node: ast.expr, names: dict[str, str], bound: dict[str, ast.expr] | None = None
) -> Iterator[str]:
    """The known arguments classes an expression names: one, or a tuple or list of them (given
    there, or through a name bound to one: `bound`)."""
    if isinstance(node, ast.Name) and bound and node.id in bound:
        node = bound[node.id]
    for item in node.elts if isinstance(node, (ast.Tuple, ast.List)) else [node]:
        found = _named(item, names)
        if found is not None and PACKAGE_OF.get(found[1]) == found[0]:
            yield f"{found[0]}.{found[1]}"


def _read(path: Path, shown: str) -> ast.Module | str:
    """The script's syntax tree, or why it cannot be read."""
    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            return f"{shown} is over {MAX_SOURCE_BYTES >> 20} MiB: not read"
        return ast.parse(path.read_bytes(), filename=shown)
    except OSError:
        return f"{shown} is not there to read"
    except (SyntaxError, ValueError) as err:
        return f"{shown} does not parse as Python ({type(err).__name__}: {err})"


def _of_source(tree: ast.Module, shown: str) -> JobSource:
    """The classes the script passes to HfArgumentParser or TrlParser, else those it builds; the
    Trainer it names (transformers' or TRL's, by import: Lightning's Trainer is another)."""
    names = _names(tree)
    bound = _tuples(tree)
    parsed: list[str] = []
    built: list[str] = []
    trainer = False
    for node in ast.walk(tree):
        if isinstance(node, (ast.Name, ast.Attribute)):
            found = _named(node, names)
            trainer |= found is not None and found[0] in CLASSES and found[1].endswith("Trainer")
        if not isinstance(node, ast.Call) or (called := _named(node.func, names)) is None:
            continue
        if PARSERS.get(called[1]) == called[0]:
            given = [
                *node.args[:1],
                *(k.value for k in node.keywords if k.arg == "dataclass_types"),
            ]
            parsed += [c for arg in given for c in _classes(arg, names, bound)]
        built += list(_classes(node.func, names))
    chosen = list(dict.fromkeys(parsed or built))
    how = "passes it to its argument parser" if parsed else "builds it"
    if len(chosen) == 1:
        return JobSource(chosen[0], trainer, f"{shown} {how}")
    why = (
        f"{shown} uses several ({', '.join(chosen)})"
        if chosen
        else f"{shown} passes no arguments class autotune knows to HfArgumentParser or TrlParser "
        "and builds none"
    )
    return JobSource(None, trainer, why)


def read(argv: list[str], cwd: Path) -> JobSource:
    """What the command's program says: a `trl <command>` console command's config, else what the
    script's source says (not run: read with ast), else why nothing is known."""
    for i, word in enumerate(argv[:-1]):
        if os.path.basename(word) == "trl" and argv[i + 1] in TRL_COMMANDS:
            said = f"the `trl {argv[i + 1]}` command parses it"
            return JobSource(f"trl.{TRL_COMMANDS[argv[i + 1]]}", True, said)
    found = _script(argv, cwd)
    if found is None:
        return JobSource(None, False, "the command names no Python script (.py, -m) to read")
    script, shown = found
    tree = _read(script, shown)
    return JobSource(None, False, tree) if isinstance(tree, str) else _of_source(tree, shown)
