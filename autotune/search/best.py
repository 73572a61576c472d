"""best.yaml written from a study: the chosen configuration (study/chosen.py), its metrics, where
and how it was measured, how to apply it. The file's schema and reader are documents/best_file.py
(what check and export read)."""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from autotune import knobs as catalogue
from autotune import modes, tasks
from autotune.documents import base_dir
from autotune.documents.best_file import (
    SCHEMA_VERSION,
    BestFile,
    knob_set,
    measured_digest,
    write_yaml,
)
from autotune.documents.confirmation import Outcome
from autotune.documents.record import Metric, TrialRecord, knobs_of
from autotune.redact import mask_command
from autotune.study import bound
from autotune.study.chosen import chosen, chosen_value, interval, is_yours
from autotune.study.history import History, completed_value, current_confirmation, value_of
from autotune.study.load import mask_url

if TYPE_CHECKING:
    from autotune.config import Config


def write_best(cfg: Config, study: optuna.Study, h: History, study_dir: Path, storage: str) -> Path:
    """trials/<name>/best.yaml: the best measured configuration, its metrics, where and how it was
    measured."""
    best, chosen_stats, why = chosen(study, h)
    base, conf = h.baseline, current_confirmation(study, h)
    # what best.yaml says of the confirmation, in one answer
    outcome = conf.outcome(base.number if base else None) if conf else None
    record = TrialRecord.of(best)
    knobs, fp = record.knobs, record.fingerprint or {}
    value = chosen_value(best, chosen_stats)
    gain = bound.gain_of(bound.statement(h, conf))  # the last word's (one rule)
    yours = is_yours(best.number, h)
    # your setting kept: 1x the baseline, which it is (not its confirmed median over its search's)
    base_value = value if yours else value_of(base) if base else None
    doc = {
        "schema_version": SCHEMA_VERSION,
        "knob_set": knob_set(knobs),
        "name": cfg.name,
        "chosen": _chosen_doc(best.number, why, record.extra.get("beyond_list"), outcome, yours),
        "knobs": knobs,
        "metrics": {
            **_metrics(record, value, completed_value(best), base_value),
            **_gain_metrics(gain),
        },
        "confirmation": _confirmed(outcome),
        "baseline": _baseline(base, outcome.baseline_samples if outcome else []),
        "fingerprint": fp,
        **_front(study, tasks.objective(cfg.study.objective)),
        "apply": {
            "env": catalogue.env_of(knobs),
            "knobs": knobs,
            "notes": catalogue.apply_notes(knobs, fp["device"], cfg.workload.task),
        },
        "measurement": _measurement(cfg, best, record),
        "model": cfg.model.model_dump(mode="json") if cfg.model is not None else None,
        **(
            {"command": mask_command(cfg.command.model_dump(mode="json"))}
            if cfg.command is not None
            else {}
        ),
        # relative to study_dir as named (trials/ may lead to a scratch disk): moves with it
        "base_dir": base_dir.stored(cfg.base_dir, study_dir),
        "workload": cfg.workload.model_dump(mode="json"),
        "study": {
            "storage": mask_url(storage),
            "trials_launched": h.launched,
            "trials_completed": len(h.completed),
        },
    }
    doc["measured"] = measured_digest(doc)
    BestFile.model_validate(doc)  # what is written is what check will read
    path = study_dir / "best.yaml"
    write_yaml(path, doc)
    return path


def _confirmed(outcome: Outcome | None) -> list[dict[str, Any]] | None:
    """best.yaml's confirmation: each arm's samples, interval, failures and process walls; the
    candidates, then the baseline's own arm where it raced beside them (`baseline: true`: check
    compares with its samples where it is the chosen)."""
    if outcome is None:
        return None
    return [
        {
            "trial": st.trial,
            **({"baseline": True} if own else {}),
            "changed_knobs": st.changed_knobs,
            "median": st.median,
            **interval(st.samples),
            "samples": st.samples,
            "search_value": st.search_value,
            "failures": st.failures,
            "walls_s": st.walls_s,
            "compile_s": st.compile_s,
            "compile_cache": st.compile_cache,
            "left_the_race": st.dropped.as_dict() if st.dropped else None,
        }
        for st, own in outcome.arms
    ]


def _chosen_doc(
    number: int, why: str, beyond: dict[str, int] | None, outcome: Outcome | None, yours: bool
) -> dict[str, Any]:
    """best.yaml's chosen: the trial, why, whether it is your setting (the baseline's), the values
    it ran past the user's list, and the runner-up of the confirmation with what it costs."""
    doc: dict[str, Any] = {"trial": number, "why": why}
    if yours:
        doc["your_setting"] = True
    if beyond:
        doc["beyond_list"] = beyond
    if outcome and outcome.runner_up:
        doc["runner_up"] = outcome.runner_up.as_dict()
    return doc


def _baseline(base: optuna.trial.FrozenTrial | None, again: list[float]) -> dict[str, Any]:
    """best.yaml's baseline: its trial, knobs and search figure, and its samples where the
    confirmation re-measured it beside the candidates."""
    return {
        "trial": base.number if base else None,
        "knobs": knobs_of(base) if base else None,
        Metric.TOKENS_PER_GPU: round(completed_value(base), 1) if base else None,
        "confirmed_samples": again or None,
        "confirmed_median": statistics.median(again) if again else None,
    }


def _gain_metrics(gain: dict[str, Any] | None) -> dict[str, Any]:
    """best.yaml's gain where both sides were confirmed: the ratio of confirmed medians (it replaces
    the one over the baseline's single search measurement), its 95% interval (None where the last
    word states none: study/bound.py) and its basis."""
    if gain is None or gain["basis"] != bound.CONFIRMED:
        return {}
    ci = gain["ci95"]
    return {
        "speedup_vs_baseline": round(gain["ratio"], 4),
        "speedup_ci95": None if ci is None else [round(x, 4) for x in ci],
        "speedup_within_noise": gain["within_noise"],
        "speedup_basis": "confirmed median / the baseline's confirmed median, the same rounds",
    }


def _metrics(
    record: TrialRecord, value: float, searched: float, base: float | None
) -> dict[str, Any]:
    """best.yaml's metrics: the chosen value (confirmed median, else the search's), the others
    scaled to it."""
    m, scale = record.metrics or {}, value / searched
    return {
        Metric.TOKENS_PER_GPU: round(value, 1),
        Metric.TOKENS: round(m[Metric.TOKENS] * scale, 1),
        "search_tokens_per_s_per_gpu": round(searched, 1),
        Metric.MFU: None if m[Metric.MFU] is None else round(m[Metric.MFU] * scale, 4),
        Metric.PEAK_MEM_GIB: None
        if m[Metric.PEAK_MEM_GIB] is None
        else round(m[Metric.PEAK_MEM_GIB], 3),
        Metric.PEAK_MEM_KIND: m[Metric.PEAK_MEM_KIND],
        "step_time_median_s": m[Metric.STEP_TIME]["median_s"],
        "step_time_spread_pct": round(m[Metric.STEP_TIME]["spread_pct"], 2),
        "speedup_vs_baseline": round(value / base, 3) if base else None,
        # generate: latency and roofline of the chosen trial's search measurement; any workload:
        # tokens/J
        **{
            k: m[k]
            for k in (
                Metric.TTFT_MS,
                Metric.TPOT_MEDIAN_MS,
                Metric.TPOT_P99_MS,
                Metric.ROOFLINE,
                Metric.TOKENS_PER_JOULE,
                Metric.PADDING_PCT,
            )
            if m.get(k) is not None
        },
    }


def _front(study: optuna.Study, objective: tasks.Objective) -> dict[str, Any]:
    """An objective of several values (pareto): Optuna's front of the completed trials, each with
    its values by metric, the lowest second value first (pareto: p99 time per output token)."""
    if objective.single:
        return {}
    return {
        "front": [
            {"trial": t.number, **objective.named(t.values), "knobs": knobs_of(t)}
            for t in sorted(study.best_trials, key=lambda t: t.values[1])
        ]
    }


def _measurement(
    cfg: Config, best: optuna.trial.FrozenTrial, record: TrialRecord
) -> dict[str, Any]:
    """How the chosen trial was measured: steps, limit, its raw step times, the timer, when."""
    cuda = (record.fingerprint or {}).get("device") == "cuda"
    return {
        "warmup_steps": cfg.workload.warmup_steps,
        "measure_steps": cfg.workload.measure_steps,
        "trial_timeout_min": cfg.study.trial_timeout_min,
        "step_times_s": record.step_times,
        "timing": _timing(cfg, cuda),
        "measured_at": best.datetime_complete.isoformat() if best.datetime_complete else None,
    }


def _timing(cfg: Config, cuda: bool) -> str:
    """What timed the chosen trial's steps: a study of a job's output (measure log), the figures
    its pattern read from the job's own lines; else the clock around each optimizer step."""
    command = cfg.command
    if command is None or modes.of({"measure": command.measure}).reads != "output":
        return f"{'CUDA events' if cuda else 'time.perf_counter'} around each optimizer step"
    groups = list(re.compile(command.log_pattern or "").groupindex)
    said = f"the job's own log lines: {', '.join(groups)}"
    if "tokens_total" in groups:  # command/log.py's steps_of
        said += " (a running count: its differences over the lines' arrival times)"
    if command.tokens_per_step is not None:  # a figure of the step's time alone
        said += f", tokens from command.tokens_per_step ({command.tokens_per_step})"
    return said
