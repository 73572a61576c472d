"""The study's own attributes in Optuna's storage: its identity (config digest, device, the
command's config file), its config, its baseline's knobs and the edges' note.

Stored as the study's user attributes under the names and layouts of earlier releases; every reader
and writer goes through the accessors here. The study's confirmation is its own document
(search/confirm.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.protocol import Knobs

if TYPE_CHECKING:
    import optuna

IDENTITY = "config_identity"  # documents/identity.digest of the config
DEVICE = "device"  # the device kind the study measures on ("cuda", "cpu")
# task command: the digest of its config file's content, which the stored config names only
CONFIG_FILE_DIGEST = "command_config_file"
_CONFIG = "config"  # the config as validated (model_dump, credentials masked)
_BASELINE = "baseline_knobs"  # the baseline trial's knobs (history.History.baseline)
_EDGES = "edges"  # the note on the best trial at the list's edges (search/edges.py)


def set_identity(study: optuna.Study, want: dict[str, str]) -> None:
    """The study's identity (IDENTITY, DEVICE and, for task command, CONFIG_FILE_DIGEST)."""
    for name, value in want.items():
        study.set_user_attr(name, value)


def config(study: optuna.Study) -> dict[str, Any] | None:
    """The stored config (None: none stored, as in a study autotune did not make)."""
    stored = study.user_attrs.get(_CONFIG)
    return stored if isinstance(stored, dict) else None


def set_config(study: optuna.Study, config: dict[str, Any]) -> None:
    study.set_user_attr(_CONFIG, config)


def device(study: optuna.Study) -> str | None:
    have: str | None = study.user_attrs.get(DEVICE)
    return have


def config_file_digest(study: optuna.Study) -> str | None:
    content: str | None = study.user_attrs.get(CONFIG_FILE_DIGEST)
    return content


def baseline_knobs(study: optuna.Study) -> Knobs | None:
    """The baseline's knobs as the study stored them (None: a study older than that)."""
    stored = study.user_attrs.get(_BASELINE)
    return stored if isinstance(stored, dict) else None


def keep_baseline(study: optuna.Study, baseline: Knobs) -> None:
    """The baseline the study began with stays its baseline."""
    if _BASELINE not in study.user_attrs:
        study.set_user_attr(_BASELINE, baseline)


def edges_note(study: optuna.Study) -> str:
    note: str = study.user_attrs.get(_EDGES, "")
    return note


def set_edges_note(study: optuna.Study, note: str) -> None:
    """The note, written only where it changed (every worker writes it after each told trial)."""
    if edges_note(study) != note:
        study.set_user_attr(_EDGES, note)


def copy_all(source: optuna.Study, to: optuna.Study) -> None:
    """Every attribute of the source study, as stored, onto the other (a warm start's copy)."""
    for name, value in source.user_attrs.items():
        to.set_user_attr(name, value)
