"""autotune check: re-measure a chosen configuration and decide, with its noise, whether it regressed."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


from autotune import metrics, nightly, paths, regress_conditions, regress_junit, tasks
from autotune.config import ModelConfig, StudyConfig, WorkloadConfig
from autotune.config_command import CommandConfig
from autotune.config_load import load_config
from autotune.errors import ConfigError, ExitCode, UnmeasuredError, excerpt
from autotune.hardware import detect, visible_gpu_index
from autotune.probe import check_entrypoint
from autotune.record import Metric
from autotune.protocol import reason_line
from autotune.runner import Bench, measure, preflight
from autotune.regress_stats import decide, default_tolerance, series_drift  # noqa: F401  (the API)
from autotune.documents.best_file import LAUNCH_ONLY, measured_digest, read_best, record_check_baseline

# Versions listed beside the verdict when they differ: the usual causes of a change.
VERSION_KEYS = ("driver", "cuda", "cudnn", "torch", "nccl")


@dataclass
class Verdict:
    """The check's decision and everything behind it."""

    status: str  # pass | faster | regression | unreliable (a regression measured beside other work)
    ratio: float  # median(check) / median(baseline), tokens/s
    ci: tuple[float, float]  # 95% interval of the ratio (Student t on log tokens/s, see decide)
    tolerance_pct: float
    baseline_median: float
    check_median: float
    baseline_samples: list[float]
    check_samples: list[float]
    baseline_source: str
    version_changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    failed_repeats: list[str] = field(default_factory=list)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    checked_at: str = ""
    repeats: list[dict[str, Any]] = field(default_factory=list)  # per process: tokens/s, clock, power
    updated: bool = False  # --update recorded these samples as the new baseline
    tpot: dict[str, Any] | None = None  # generate: the same decision on the median time per output token
    tolerance_source: str = ""  # how the tolerance was set (--tolerance, or the baseline's noise)
    series: dict[str, Any] | None = None  # a step down across nights (series_drift), None when there is none
    upgraded: dict[str, Any] | None = None  # best.yaml of an older release: the knobs added since (best._upgrade)
    history_skipped: list[str] = field(default_factory=list)  # history.jsonl's lines that are not nights, and why
    history_error: str = ""  # history.jsonl could not be appended to (a full disk): the verdict stands
    conditions: list[dict[str, Any]] = field(default_factory=list)  # host load, GPU processes: beside each repeat
    disturbed: list[str] = field(default_factory=list)  # what disturbed the repeats (regress_conditions)

    @property
    def exit_code(self) -> int:
        codes = {"regression": ExitCode.FAILED, "unreliable": ExitCode.UNMEASURED}
        return codes.get(self.status, ExitCode.OK)

    def summary(self) -> str:
        n = len(self.check_samples) + len(self.baseline_samples)
        line = (
            f"{self.status}: {self.check_median:,.0f} vs baseline {self.baseline_median:,.0f} tokens/s/GPU, "
            f"ratio {self.ratio:.3f} ({_ci_text(self.ratio, self.ci, n)}), tolerance {self.tolerance_pct:g}%"
        )
        if self.disturbed:
            line += "; disturbed: " + "; ".join(self.disturbed)
        if self.series:
            line += (
                f"; the nightly series stepped down {-self.series['shift_pct']:.1f}% from night "
                f"{self.series['night']} ({self.series['checked_at'][:10]})"
            )
        if self.tpot:
            t = self.tpot
            line += (
                f"; time per output token {t['check_median_ms']:.3f} vs baseline {t['baseline_median_ms']:.3f} ms, "
                f"speed ratio {t['ratio']:.3f} ({_ci_text(t['ratio'], t['ci'], n)}): {t['status']}"
            )
        return line


def _ci_text(ratio: float, ci: tuple[float, float], n: int) -> str:
    """'95% CI LO to HI', or why the samples bound nothing (metrics.unbounded)."""
    why = metrics.unbounded(ratio, ci, n)
    return f"95% CI: {why}" if why else f"95% CI {ci[0]:.3f} to {ci[1]:.3f}"


def _series(best_path: Path, best: dict[str, Any], verdict: Verdict) -> list[dict[str, Any]]:
    """This configuration's nights since the last --reset-baseline: history.jsonl's verdicts, then this one."""
    since = (best.get("check_baseline") or {}).get("series_from") or ""
    read, skipped = nightly.read(best_path.parent / nightly.FILE)
    verdict.history_skipped = skipped  # named beside the verdict; the other nights still count
    nights = [doc for doc in read if doc.get("name") == best["name"] and doc["checked_at"] >= since]
    # a night measured beside other work (regress_conditions) is no level of the series
    return [n for n in [*nights, asdict(verdict)] if not n.get("disturbed")]


def baseline_samples(best: dict[str, Any]) -> tuple[list[float], str]:
    """The recorded per-process tokens/s of the configuration: the last --update, else the search's trial."""
    recorded = best.get("check_baseline")
    if recorded:
        samples = list(recorded["tokens_per_s_samples"])
        return samples, f"check --update of {recorded['recorded_at']} ({len(samples)} processes)"
    chosen = next(
        (c for c in best.get("confirmation") or [] if c["trial"] == best["chosen"]["trial"] and c["samples"]), None
    )
    if chosen:
        return list(
            chosen["samples"]
        ), f"the search's confirmation of trial {chosen['trial']} ({len(chosen['samples'])} processes)"
    return [best["metrics"][Metric.TOKENS_PER_GPU]], f"search trial {best['chosen']['trial']} (1 process)"


def _current_hardware(device: str) -> str:
    if device == "cuda":
        gpus = detect()["gpus"]
        index = visible_gpu_index()
        return gpus[index]["name"] if index < len(gpus) else "no NVIDIA GPU"
    return platform.processor() or platform.machine()


def _bench(best: dict[str, Any], best_path: Path, model_yaml: Path | None) -> Bench:
    """How best.yaml's configuration is measured: its model and workload (or MODEL_YAML's), its device and
    trial time limit, the compile cache beside it."""
    fp = best["fingerprint"]
    limit = best["measurement"].get("trial_timeout_min") or StudyConfig.model_fields["trial_timeout_min"].default
    base_dir = paths.beside(best_path, best.get("base_dir"))  # relative to best.yaml's folder
    if model_yaml is not None:
        cfg = load_config(model_yaml)
        dumped = cfg.model.model_dump(mode="json") if cfg.model is not None else None
        here = {**best, "base_dir": base_dir}  # best.yaml's model is where best.yaml says
        _same_measurement(here, dumped, cfg.workload.model_dump(mode="json"), cfg.base_dir)
        model, workload, base_dir, limit = cfg.model, cfg.workload, cfg.base_dir, cfg.study.trial_timeout_min
        command = cfg.command
    else:
        model = (
            ModelConfig.model_validate(best["model"], context={"base_dir": base_dir})
            if best["model"] is not None
            else None
        )
        workload = WorkloadConfig(**best["workload"])
        command = CommandConfig.model_validate(best["command"]) if best.get("command") else None
    # prestart off: every repeat starts cold, with nothing importing beside it, the same way every night
    return Bench.of(
        model,
        workload,
        device=fp["device"],
        timeout_s=60 * limit,
        home=best_path.parent,
        base_dir=base_dir,
        prestart=False,
        command=command,
    )


def _same_measurement(
    best: dict[str, Any], model: dict[str, Any] | None, workload: dict[str, Any], model_base: str | None
) -> None:
    """--model may move the model (another path to the same config.json or module) and how ranks are launched;
    a different model or workload is refused, like another GPU: its numbers do not compare."""

    def content(m: dict[str, Any] | None, base_dir: str | None) -> dict[str, Any] | None:
        if m is None:  # task command: no model section
            return None
        if m.get("hf_config"):  # the same config.json at another path is the same model
            try:
                m = {**m, "hf_config": json.loads(Path(m["hf_config"]).read_text())}
            except (OSError, ValueError):
                pass
        if m.get("entrypoint"):  # the same module name elsewhere may be other code: compare the file
            module, _, func = m["entrypoint"].partition(":")
            _, file = check_entrypoint(module, func, base_dir)
            m = {
                **m,
                "entrypoint": (m["entrypoint"], hashlib.sha256(Path(file).read_bytes()).hexdigest() if file else None),
            }
        return m

    from autotune.identity import non_default  # a field added since at its default is no difference

    pairs = (
        ("model", content(model, model_base) or {}, content(best["model"], best.get("base_dir")) or {}),
        ("workload", workload, best["workload"]),
    )
    for section, mine, theirs in ((name, non_default(name, a), non_default(name, b)) for name, a, b in pairs):
        for key in sorted(set(mine) | set(theirs)):
            if section == "workload" and key in LAUNCH_ONLY:
                continue
            if key == "entrypoint" and mine.get(key) != theirs.get(key):
                raise ConfigError(
                    f"--model: model.entrypoint {mine[key][0]!r} in MODEL_YAML is other code than the one "
                    f"measured (sha256 {str(mine[key][1])[:12]} against {str(theirs[key][1])[:12]}); a "
                    "check compares only the configuration that was measured (nothing compared)"
                )
            if mine.get(key) != theirs.get(key):
                raise ConfigError(
                    f"--model: {section}.{key} is {excerpt(mine.get(key))} in MODEL_YAML but "
                    f"{excerpt(theirs.get(key))} in best.yaml; a check compares only the configuration "
                    "that was measured (nothing compared)"
                )


def load_best(best_path: Path) -> dict[str, Any]:
    """best.yaml read and validated, and everything a check needs checked, before anything is measured."""
    preflight()
    best = read_best(best_path)
    paths.writable_dir(best_path.parent, "BEST_YAML")  # history.jsonl, checks/ and the baseline go beside it
    return best


def baseline_belongs(best_path: Path, best: dict[str, Any]) -> None:
    """The baseline measured what best.yaml now says (measured_digest): an edited model, workload, command or
    knob is refused before anything runs (--reset-baseline records a baseline of the edited
    configuration). A baseline without its digest is refused too (_undigested)."""
    recorded = (best.get("check_baseline") or {}).get("measured") or best.get("measured")
    if recorded is None:
        _undigested(best_path, best)
    elif recorded != measured_digest(best):
        raise ConfigError(
            f"{best_path}: its model, workload, command or knobs were edited after its baseline was measured; "
            "a check compares only the configuration that was measured (nothing measured). Run "
            f"autotune check {best_path} --reset-baseline to record a baseline of this configuration"
        )


def _undigested(best_path: Path, best: dict[str, Any]) -> None:
    """No digest beside the baseline: nothing tells whether it measured what best.yaml says now.
    Refused where one is always written: beside a check baseline (record_check_baseline), and
    beside the search's numbers in a versioned best.yaml (write_best, schema 2); a best.yaml of
    schema 1 predates digests and is checked as it was."""
    where = "check_baseline" if best.get("check_baseline") else "the search's numbers"
    if best.get("check_baseline") or best.get("schema_version", 1) >= 2:
        raise ConfigError(
            f"{best_path}: measured: missing beside {where}, so an edited model, workload, "
            "command or knob cannot be told from what was measured (nothing measured). Run "
            f"autotune check {best_path} --reset-baseline to record a baseline of it"
        )


@dataclass
class Repeats:
    """What measure_best measured: per-process tokens/s, per-process details (telemetry means), the failed
    repeats, the fingerprint, and the conditions beside the repeats (regress_conditions.sample: before each
    repeat, then after the last)."""

    samples: list[float] = field(default_factory=list)
    details: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    conditions: list[dict[str, Any]] = field(default_factory=list)


OnRepeat = Callable[[dict[str, Any]], None]


def measure_best(
    best_path: Path,
    best: dict[str, Any],
    *,
    model_yaml: Path | None = None,
    repeats: int = 5,
    on_repeat: OnRepeat | None = None,
) -> Repeats:
    """Measure the configuration of best.yaml (read by load_best) `repeats` times, each in a fresh process;
    on_repeat hears of each repeat as it ends (views_check.repeat_line says it); UnmeasuredError
    when every repeat failed."""
    m = _repeat(best_path, best, model_yaml, repeats, on_repeat)
    if not m.samples:
        raise _unmeasured(m)
    return m


def _unmeasured(m: Repeats) -> UnmeasuredError:
    """Exit 3, the first repeat's reason named (the JUnit report lists them all)."""
    n, first = len(m.failures), m.failures[0]
    return UnmeasuredError(f"could not measure: all {n} repeats failed; {first}")


def _repeat(
    best_path: Path,
    best: dict[str, Any],
    model_yaml: Path | None,
    repeats: int,
    on_repeat: OnRepeat | None,
) -> Repeats:
    """measure_best's repeats, each one's sample or failure kept, and the conditions around them."""
    fp = best["fingerprint"]
    here = _current_hardware(fp["device"])
    if here != fp["gpu_model"]:
        raise ConfigError(
            f"{best_path}: fingerprint.gpu_model: measured on {fp['gpu_model']!r}, this machine has "
            f"{here!r}; a check compares only the same hardware (nothing compared)"
        )
    bench = _bench(best, best_path, model_yaml)
    runs = best_path.parent / "checks" / dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    m = Repeats()
    for i in range(repeats):
        m.conditions.append(regress_conditions.sample(fp["device"]))
        record = measure(bench, best["knobs"], runs / f"{i:02d}", number=i, env=best.get("apply", {}).get("env"))
        _keep(m, i, record)
        if on_repeat:
            on_repeat({"repeat": i, "repeats": repeats, "conditions": m.conditions[-1], **_said(record)})
    m.conditions.append(regress_conditions.sample(fp["device"]))
    return m


def _keep(m: Repeats, i: int, record: Any) -> None:
    """One repeat's record kept: its sample and details, or its failure."""
    if record.status != "ok":
        m.failures.append(f"repeat {i}: {record.status}: {reason_line(record.reason)}")
        return
    m.samples.append(record.tokens_per_gpu)
    tele = record.telemetry or {}
    m.details.append(
        {
            Metric.TOKENS_PER_GPU: m.samples[-1],
            "step_times_s": record.step_times,
            Metric.TPOT_MEDIAN_MS: record.metric(Metric.TPOT_MEDIAN_MS),
            **{k: tele.get(k) for k in ("sm_clock_mhz_mean", "power_w_mean", "temperature_c_max", "throttle_reasons")},
            "conditions": m.conditions[-1],
        }
    )
    m.fingerprint = m.fingerprint or record.fingerprint


def _said(record: Any) -> dict[str, Any]:
    """What on_repeat hears of a repeat: its tokens/s, or its failure."""
    if record.status == "ok":
        return {Metric.TOKENS_PER_GPU: record.tokens_per_gpu, "failure": None}
    return {Metric.TOKENS_PER_GPU: None, "failure": f"{record.status}: {reason_line(record.reason)}"}


def reset_baseline(
    best_path: Path, *, model_yaml: Path | None = None, repeats: int = 5, on_repeat: OnRepeat | None = None
) -> tuple[list[float], list[str]]:
    """Measure and record the samples as best.yaml's check baseline; compare nothing. Returns samples, failures."""
    best = load_best(best_path)
    m = measure_best(best_path, best, model_yaml=model_yaml, repeats=repeats, on_repeat=on_repeat)
    now = dt.datetime.now(dt.timezone.utc).isoformat()
    record_check_baseline(best_path, best, m.samples, now, m.fingerprint, _tpots(m.details), reset=True)
    return m.samples, m.failures


def check(
    best_path: Path,
    *,
    model_yaml: Path | None = None,
    repeats: int = 5,
    tolerance_pct: float | None = None,
    junit: Path | None = None,
    update: bool = False,
    max_load: float = regress_conditions.HOST_LOAD_LIMIT,
    on_repeat: OnRepeat | None = None,
) -> Verdict:
    """Measure the configuration of best.yaml `repeats` times and decide against its recorded baseline (the
    tolerance: given, else default_tolerance of the baseline) and the nightly series (series_drift); a
    regression measured while the machine was disturbed (regress_conditions.disturbances, max_load) is
    "unreliable" instead. Append the verdict to history.jsonl, write JUnit if asked, and with `update` record
    an undisturbed pass or faster as the new baseline."""
    t0 = time.monotonic()
    best = load_best(best_path)
    baseline_belongs(best_path, best)
    if junit:
        regress_junit.check_target(junit, best_path, best, model_yaml)  # before any repeat
    m = _repeat(best_path, best, model_yaml, repeats, on_repeat)
    if not m.samples:  # CI reads the report: the repeats' reasons go in it, then exit 3 as ever
        err, secs = _unmeasured(m), time.monotonic() - t0
        if junit:
            reasons = "\n".join(m.failures)
            regress_junit.write(junit, best["name"], secs, "unmeasured", str(err), reasons)
        raise err
    explicit = tolerance_pct or 0.0  # an explicit tolerance bounds the nightly series' steps too
    verdict = _verdict(best, m, tolerance_pct)
    verdict.disturbed = regress_conditions.disturbances(m.conditions, max_load)
    verdict.series = series_drift(_series(best_path, best, verdict), min_shift_pct=explicit)
    if verdict.series:
        verdict.status = "regression"  # a lasting step down across nights fails the gate as one night's would
    if verdict.disturbed and verdict.status == "regression":
        verdict.status = "unreliable"  # measured beside other work: no regression can be told from it
    if update and verdict.status != "regression" and not verdict.disturbed:
        record_check_baseline(best_path, best, m.samples, verdict.checked_at, m.fingerprint, _tpots(m.details))
        verdict.updated = True
    record_history(best_path, verdict, best["name"])
    if junit:
        regress_junit.write_verdict(junit, best["name"], verdict, time.monotonic() - t0)
    return verdict


def _verdict(best: dict[str, Any], m: Repeats, tolerance_pct: float | None) -> Verdict:
    """The decision on the repeats against the recorded baseline (the tolerance given, else from its noise)."""
    base, source = baseline_samples(best)
    how = f"{tolerance_pct:g}% (--tolerance)" if tolerance_pct is not None else ""
    if tolerance_pct is None:
        tolerance_pct, how = default_tolerance(base)
    status, ratio, ci = decide(base, m.samples, tolerance_pct)
    tpot = tasks.task(best["workload"].get("task", "train")).check_gate(best, m.details, tolerance_pct, decide)
    if tpot and tpot["status"] == "regression":
        status = "regression"  # generate: slower tokens, or slower per token, fails the check
    fp = best["fingerprint"]
    changes = {k: (fp.get(k), m.fingerprint.get(k)) for k in VERSION_KEYS if fp.get(k) != m.fingerprint.get(k)}
    verdict = Verdict(
        status,
        ratio,
        ci,
        tolerance_pct,
        statistics.median(base),
        statistics.median(m.samples),
        base,
        m.samples,
        source,
        changes,
        m.failures,
        m.fingerprint,
        dt.datetime.now(dt.timezone.utc).isoformat(),
        m.details,
        tpot=tpot,
        tolerance_source=how,
        conditions=m.conditions,
    )
    verdict.upgraded = (best.get("upgraded") or {}).get("knobs_added")
    return verdict


def _tpots(details: list[dict[str, Any]]) -> list[float]:
    return [d["tpot_ms_median"] for d in details if d.get("tpot_ms_median")]


def record_history(best_path: Path, verdict: Verdict, name: str) -> Path:
    """Append the verdict to history.jsonl beside best.yaml (nightly.append: one line, never glued, never
    through a link). A failed write (a full disk) is said on the verdict, which is still printed and decides
    the exit code."""
    path = best_path.parent / nightly.FILE
    try:
        nightly.append(path, {"name": name, **asdict(verdict)})
    except OSError as err:
        verdict.history_error = f"{path}: not written: {err}"
    return path
