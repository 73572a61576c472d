"""best.yaml as `autotune check` reads it: what was measured (the bench it rebuilds, or --model's,
refused where it measures something else), the baseline it compares with, and whether that baseline
belongs to what best.yaml says now (measured_digest)."""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path
from typing import Any

from autotune import paths
from autotune.config.load import load_config
from autotune.config.study import StudyConfig
from autotune.documents.best_file import LAUNCH_ONLY, Best, BestFile, read_best
from autotune.errors import ConfigError, excerpt
from autotune.hardware import detect, visible_gpu_index
from autotune.launch.probe import check_entrypoint
from autotune.launch.runner import Bench, preflight


def baseline_samples(doc: BestFile) -> tuple[list[float], str]:
    """The recorded per-process tokens/s of the configuration: the last --update, else the search's
    confirmation of it, else its trial."""
    recorded = doc.check_baseline
    if recorded:
        samples = list(recorded.tokens_per_s_samples)
        return samples, f"check --update of {recorded.recorded_at} ({len(samples)} processes)"
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
        model, workload, command = cfg.model, cfg.workload, cfg.command
        base_dir, limit = cfg.base_dir, cfg.study.trial_timeout_min
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
    best = read_best(best_path)
    # history.jsonl, checks/ and the baseline go beside it
    paths.writable_dir(best_path.parent, "BEST_YAML")
    return best


def baseline_belongs(best_path: Path, best: Best) -> None:
    """The baseline measured what best.yaml now says (measured_digest): an edited model, workload,
    command or knob is refused before anything runs (--reset-baseline records a baseline of the
    edited configuration). A baseline without its digest is refused too (_undigested)."""
    doc, baseline = best.doc, best.doc.check_baseline
    recorded = (baseline.measured if baseline else None) or doc.measured
    if recorded is None:
        _undigested(best_path, doc)
    elif recorded != doc.digest():
        raise ConfigError(
            f"{best_path}: its model, workload, command or knobs were edited after its baseline "
            "was measured; a check compares only the configuration that was measured (nothing "
            f"measured). Run autotune check {best_path} --reset-baseline to record a baseline of "
            "this configuration"
        )


def _undigested(best_path: Path, doc: BestFile) -> None:
    """No digest beside the baseline: nothing tells whether it measured what best.yaml says now.
    Refused where one is always written: beside a check baseline (record_check_baseline), and
    beside the search's numbers in a versioned best.yaml (write_best, schema 2); a best.yaml of
    schema 1 predates digests and is checked as it was."""
    where = "check_baseline" if doc.check_baseline else "the search's numbers"
    if doc.check_baseline or doc.schema_version >= 2:
        raise ConfigError(
            f"{best_path}: measured: missing beside {where}, so an edited model, workload, "
            "command or knob cannot be told from what was measured (nothing measured). Run "
            f"autotune check {best_path} --reset-baseline to record a baseline of it"
        )
