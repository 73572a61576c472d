"""task command's measure modes (command.measure), one module each, registered in MODES: how a
job is measured. Each owns its config rules, its environment (the hook's Trainer, the knobs its
framework reads from variables), where the trial reads its steps, how the job is asked to stop and
export's fitting forms (_base.Mode). Standard library only: the schema (config/command.py), the
parent, the trial process and the hook in the job's processes import it; it imports nothing of
autotune but errors. A new mode is one module here and its entry in MODES."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.modes import hf, lightning, log, report
from autotune.modes._base import KnobEnv, Mode, Reads, Stop, Trainer

__all__ = ["DEFAULT", "MODES", "KnobEnv", "Mode", "Reads", "Stop", "Trainer", "described", "of"]

MODES: dict[str, Mode] = {m.name: m for m in (report.MODE, hf.MODE, lightning.MODE, log.MODE)}
DEFAULT = report.MODE.name  # a command section without `measure`


def described() -> str:
    """command.measure's description: each registered mode's name and what it is."""
    return "; ".join(f"{m.name}: {m.help}" for m in MODES.values()) + "."


def of(command: Mapping[str, Any] | None) -> Mode:
    """The mode of a command section as the spec and best.yaml hold it (a dict; None: none)."""
    return MODES[(command or {}).get("measure") or DEFAULT]
