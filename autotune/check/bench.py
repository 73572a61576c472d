"""best.yaml as `autotune check` reads it: what was measured (the bench it rebuilds, or --model's,
refused where it measures something else), the baseline it compares with, and whether that baseline
belongs to what best.yaml says now (measured_digest)."""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path
from typing import Any

from autotune import paths, tasks
from autotune.config.command import CommandConfig
from autotune.config.study import StudyConfig
from autotune.documents import base_dir as base_dir_of
from autotune.documents.best_file import Best, BestFile, read_best
from autotune.documents.digest import DIGEST_SCHEMA, LAUNCH_ONLY
from autotune.errors import ConfigError, excerpt
from autotune.hardware import detect, visible_gpu_index
from autotune.job import load_config
from autotune.launch.probe import check_entrypoint
from autotune.launch.runner import Bench, preflight
from autotune.redact import mask_command


def baseline_samples(doc: BestFile) -> tuple[list[float], str]:
    """The recorded per-process tokens/s of the configuration: the last --reset-baseline or
    --update (a reset starts the nightly series at its own time), else the search's confirmation of
    it, else its trial."""
    recorded = doc.check_baseline
    if recorded:
        samples = list(recorded.tokens_per_s_samples)
        how = "--reset-baseline" if recorded.series_from == recorded.recorded_at else "--update"
        return samples, f"check {how} of {recorded.recorded_at} ({len(samples)} processes)"
    trial = doc.chosen.trial
    chosen = next((c for c in doc.confirmation or [] if c.trial == trial and c.samples), None)
    if chosen:
        return (
            list(chosen.samples),
            f"the search's confirmation of trial {trial} ({len(chosen.samples)} processes)",
        )
    return [doc.metrics.tokens_per_s_per_gpu], f"search trial {trial} (1 process)"


def current_hardware(device: str) -> str:
    if device == "cuda":
        gpus = detect()["gpus"]
        index = visible_gpu_index()
        return gpus[index]["name"] if index < len(gpus) else "no NVIDIA GPU"
    return platform.processor() or platform.machine()


def bench_of(best: Best, best_path: Path, model_yaml: Path | None) -> Bench:
    """How best.yaml's configuration is measured: its model and workload (or MODEL_YAML's), its
    device and trial time limit, the compile cache beside it."""
    limit = (
        best.doc.measurement.trial_timeout_min
        or StudyConfig.model_fields["trial_timeout_min"].default
    )
    model, workload, command, base_dir = best.model, best.workload, best.command, best.base_dir
    if model_yaml is not None:
        cfg = load_config(model_yaml)
        dumped = cfg.model.model_dump(mode="json") if cfg.model is not None else None
        _same_measurement(best, dumped, cfg.workload.model_dump(mode="json"), cfg.base_dir)
        _same_command(best, cfg.command)
        model, workload, command = cfg.model, cfg.workload, cfg.command
        base_dir, limit = cfg.base_dir, cfg.study.trial_timeout_min
    else:
        holds_its_code(best, best_path)
    # prestart off: every repeat starts cold, with nothing importing beside it, the same way every
    # night
    return Bench.of(
        model,
        workload,
        device=best.doc.fingerprint.device,
        timeout_s=60 * limit,
        home=best_path.parent,
        base_dir=base_dir,
        prestart=False,
        command=command,
    )


def holds_its_code(best: Best, best_path: Path) -> None:
    """best.yaml's base_dir holds what its study runs from there (base_dir.missing_code: a
    command's folder, config file and program, a model's entrypoint module), so a copy at another
    depth than the study's folder is refused before anything runs, not measured where it leads."""
    missing = base_dir_of.missing_code(best.base_dir, best.model, best.command)
    if missing is None:
        return
    raise ConfigError(
        f"{best_path}: base_dir: {excerpt(best.doc.base_dir)} is {best.base_dir}, which {missing}; "
        "best.yaml names the study YAML's folder relative to its own, so a copy sits as far below "
        "it as the study's folder (trials/<name>/: perf/<name>/best.yaml), or give the study YAML "
        "with --model (nothing measured)"
    )


def _same_command(best: Best, command: CommandConfig | None) -> None:
    """--model's command runs what best.yaml's ran: the same argv, cwd, environment and measure
    (compared as best.yaml keeps them, secrets masked); only its folder may move with the code."""

    def kept(c: CommandConfig | None) -> dict[str, Any] | None:
        return None if c is None else mask_command(c.model_dump(mode="json"))

    mine, theirs = kept(command), kept(best.command)
    if mine == theirs:
        return
    key = next(
        (
            k
            for k in sorted(set(mine or {}) | set(theirs or {}))
            if (mine or {}).get(k) != (theirs or {}).get(k)
        ),
        "command",
    )
    raise ConfigError(
        f"--model: command.{key} is {excerpt((mine or {}).get(key))} in MODEL_YAML but "
        f"{excerpt((theirs or {}).get(key))} in best.yaml; a check compares only the configuration "
        "that was measured (nothing compared)"
    )


def _same_measurement(
    best: Best,
    model: dict[str, Any] | None,
    workload: dict[str, Any],
    model_base: str | None,
) -> None:
    """--model may move the model (another path to the same config.json or module) and how ranks are
    launched; a different model or workload is refused, like another GPU: its numbers do not
    compare."""

    def content(m: dict[str, Any] | None, base_dir: str | None) -> dict[str, Any] | None:
        if m is None:  # task command: no model section
            return None
        if m.get("hf_config"):  # the same config.json at another path is the same model
            try:
                m = {**m, "hf_config": json.loads(Path(m["hf_config"]).read_text())}
            except (OSError, ValueError):
                pass
        # the same module name elsewhere may be other code: compare the file
        if m.get("entrypoint"):
            module, _, func = m["entrypoint"].partition(":")
            _, file = check_entrypoint(module, func, base_dir)
            m = {
                **m,
                "entrypoint": (
                    m["entrypoint"],
                    hashlib.sha256(Path(file).read_bytes()).hexdigest() if file else None,
                ),
            }
        return m

    from autotune.documents.identity import (
        non_default,  # a field added since at its default is no difference
    )

    pairs = (
        (
            "model",
            content(model, model_base) or {},
            content(best.doc.model, best.base_dir) or {},
        ),
        ("workload", workload, best.doc.workload),
    )
    for section, mine, theirs in (
        (name, non_default(name, a), non_default(name, b)) for name, a, b in pairs
    ):
        for key in sorted(set(mine) | set(theirs)):
            if section == "workload" and key in LAUNCH_ONLY:
                continue
            if key == "entrypoint" and mine.get(key) != theirs.get(key):
                raise ConfigError(
                    f"--model: model.entrypoint {mine[key][0]!r} in MODEL_YAML is other code than "
                    f"the one measured (sha256 {str(mine[key][1])[:12]} against "
                    f"{str(theirs[key][1])[:12]}); a "
                    "check compares only the configuration that was measured (nothing compared)"
                )
            if mine.get(key) != theirs.get(key):
                raise ConfigError(
                    f"--model: {section}.{key} is {excerpt(mine.get(key))} in MODEL_YAML but "
                    f"{excerpt(theirs.get(key))} in best.yaml; a check compares only the "
                    "configuration that was measured (nothing compared)"
                )


def load_best(best_path: Path) -> Best:
    """best.yaml read and validated, and everything a check needs checked, before anything is
    measured."""
    preflight()
    best = read_best(best_path, tasks.check_workload)
    # history.jsonl, checks/ and the baseline go beside it
    paths.writable_dir(best_path.parent, "BEST_YAML")
    paths.no_links(best_path.parent)
    return best


def baseline_belongs(best_path: Path, best: Best) -> None:
    """The baseline measured what best.yaml now says (documents/digest.py): an edited model,
    workload, command, base_dir, environment, device, name, knob or baseline number is refused
    before anything runs, and so is a baseline whose digest is missing (a file of schema 1, or one
    stripped of it) or covers less (schema 2 and 3): nothing tells what it measured.
    --reset-baseline records a baseline of the configuration as it is now."""
    doc, baseline = best.doc, best.doc.check_baseline
    recorded, expected = (
        (baseline.measured, doc.baseline_digest()) if baseline else (doc.measured, doc.digest())
    )
    where = "check_baseline" if baseline else "the search's numbers"
    fix = (
        f"Run autotune check {best_path} --reset-baseline to measure and record a baseline of this "
        "configuration as it is now (or autotune search again for a new best.yaml)"
    )
    if recorded is None:
        raise ConfigError(
            f"{best_path}: measured: missing beside {where}, so an edited model, workload, "
            "command, base_dir or knob cannot be told from what was measured (nothing measured). "
            + fix
        )
    if doc.schema_version < DIGEST_SCHEMA:
        raise ConfigError(
            f"{best_path}: schema_version: {doc.schema_version}: its measured digest covers "
            "neither base_dir, apply.env, the device nor the baseline's numbers, so what would run "
            "cannot be told from what was measured (nothing measured). " + fix
        )
    if recorded != expected:
        raise ConfigError(
            f"{best_path}: its model, workload, command, base_dir, apply.env, device, name, knobs "
            f"or {where} were edited after its baseline was measured; a check compares only the "
            "configuration that was measured (nothing measured). " + fix
        )
