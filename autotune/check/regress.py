"""autotune check: re-measure a chosen configuration and decide, with its noise, whether it
regressed."""

from __future__ import annotations

import datetime as dt
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autotune import metrics, tasks
from autotune.check import conditions
from autotune.check import junit as junit_report
from autotune.check.bench import (
    baseline_belongs,
    baseline_samples,
    bench_of,
    current_hardware,
    load_best,
)
from autotune.check.stats import decide, default_tolerance, series_drift  # noqa: F401  (the API)
from autotune.documents import nightly
from autotune.documents.best_file import Best, record_check_baseline
from autotune.documents.record import Metric
from autotune.errors import ConfigError, ExitCode, UnmeasuredError
from autotune.launch.runner import measure
from autotune.protocol import reason_line

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
    # per process: tokens/s, clock, power
    repeats: list[dict[str, Any]] = field(default_factory=list)
    updated: bool = False  # --update recorded these samples as the new baseline
    # generate: the same decision on the median time per output token
    tpot: dict[str, Any] | None = None
    tolerance_source: str = ""  # how the tolerance was set (--tolerance, or the baseline's noise)
    # a step down across nights (series_drift), None when there is none
    series: dict[str, Any] | None = None
    # best.yaml of an older release: the knobs added since (best._upgrade)
    upgraded: dict[str, Any] | None = None
    # history.jsonl's lines that are not nights, and why
    history_skipped: list[str] = field(default_factory=list)
    # history.jsonl could not be appended to (a full disk): the verdict stands
    history_error: str = ""
    # host load, GPU processes: beside each repeat
    conditions: list[dict[str, Any]] = field(default_factory=list)
    # what disturbed the repeats (check/conditions.py)
    disturbed: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        codes = {"regression": ExitCode.FAILED, "unreliable": ExitCode.UNMEASURED}
        return codes.get(self.status, ExitCode.OK)

    def summary(self) -> str:
        n = len(self.check_samples) + len(self.baseline_samples)
        line = (
            f"{self.status}: {self.check_median:,.0f} vs baseline {self.baseline_median:,.0f} "
            f"tokens/s/GPU, ratio {self.ratio:.3f} ({_ci_text(self.ratio, self.ci, n)}), "
            f"tolerance {self.tolerance_pct:g}%"
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
                f"; time per output token {t['check_median_ms']:.3f} vs baseline "
                f"{t['baseline_median_ms']:.3f} ms, "
                f"speed ratio {t['ratio']:.3f} ({_ci_text(t['ratio'], t['ci'], n)}): {t['status']}"
            )
        return line


def _ci_text(ratio: float, ci: tuple[float, float], n: int) -> str:
    """'95% CI LO to HI', or why the samples bound nothing (metrics.unbounded)."""
    why = metrics.unbounded(ratio, ci, n)
    return f"95% CI: {why}" if why else f"95% CI {ci[0]:.3f} to {ci[1]:.3f}"


def _series(best_path: Path, best: Best, verdict: Verdict) -> list[nightly.Night]:
    """This configuration's nights since the last --reset-baseline: history.jsonl's verdicts, then
    this one."""
    recorded, name = best.doc.check_baseline, best.doc.name
    since = (recorded.series_from if recorded else None) or ""
    read, skipped = nightly.read(best_path.parent / nightly.FILE)
    verdict.history_skipped = skipped  # named beside the verdict; the other nights still count
    nights = [n for n in read if n.name == name and n.checked_at >= since]
    tonight = {"name": name, **asdict(verdict)}
    if nightly.problem(tonight) is None:
        nights.append(nightly.Night.of(tonight))
    # a night measured beside other work (check/conditions.py) is no level of the series
    return [n for n in nights if not n.disturbed]


@dataclass
class Repeats:
    """What measure_best measured: per-process tokens/s, per-process details (telemetry means), the
    failed repeats, the fingerprint, and the conditions beside the repeats
    (conditions.sample:
    before each repeat, then after the last)."""

    samples: list[float] = field(default_factory=list)
    details: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    conditions: list[dict[str, Any]] = field(default_factory=list)


OnRepeat = Callable[[dict[str, Any]], None]


def measure_best(
    best_path: Path,
    best: Best,
    *,
    model_yaml: Path | None = None,
    repeats: int = 5,
    on_repeat: OnRepeat | None = None,
) -> Repeats:
    """Measure the configuration of best.yaml (read by load_best) `repeats` times, each in a fresh
    process; on_repeat hears of each repeat as it ends (views_check.repeat_line says it);
    UnmeasuredError when every repeat failed."""
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
    best: Best,
    model_yaml: Path | None,
    repeats: int,
    on_repeat: OnRepeat | None,
) -> Repeats:
    """measure_best's repeats, each one's sample or failure kept, and the conditions around them."""
    fp, apply = best.doc.fingerprint, best.doc.apply
    here = current_hardware(fp.device)
    if here != fp.gpu_model:
        raise ConfigError(
            f"{best_path}: fingerprint.gpu_model: measured on {fp.gpu_model!r}, this machine "
            f"has {here!r}; a check compares only the same hardware (nothing compared)"
        )
    bench = bench_of(best, best_path, model_yaml)
    runs = best_path.parent / "checks" / dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    env = apply.env if apply else None
    m = Repeats()
    for i in range(repeats):
        m.conditions.append(conditions.sample(fp.device))
        record = measure(bench, best.doc.knobs, runs / f"{i:02d}", number=i, env=env)
        _keep(m, i, record)
        if on_repeat:
            on_repeat(
                {"repeat": i, "repeats": repeats, "conditions": m.conditions[-1], **_said(record)}
            )
    m.conditions.append(conditions.sample(fp.device))
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
            **{
                k: tele.get(k)
                for k in (
                    "sm_clock_mhz_mean",
                    "power_w_mean",
                    "temperature_c_max",
                    "throttle_reasons",
                )
            },
            "conditions": m.conditions[-1],
        }
    )
    m.fingerprint = m.fingerprint or record.fingerprint


def _said(record: Any) -> dict[str, Any]:
    """What on_repeat hears of a repeat: its tokens/s, or its failure."""
    if record.status == "ok":
        return {Metric.TOKENS_PER_GPU: record.tokens_per_gpu, "failure": None}
    return {
        Metric.TOKENS_PER_GPU: None,
        "failure": f"{record.status}: {reason_line(record.reason)}",
    }


def reset_baseline(
    best_path: Path,
    *,
    model_yaml: Path | None = None,
    repeats: int = 5,
    on_repeat: OnRepeat | None = None,
) -> tuple[list[float], list[str]]:
    """Measure and record the samples as best.yaml's check baseline; compare nothing. Returns
    samples, failures."""
    best = load_best(best_path)
    m = measure_best(best_path, best, model_yaml=model_yaml, repeats=repeats, on_repeat=on_repeat)
    now = dt.datetime.now(dt.timezone.utc).isoformat()
    record_check_baseline(
        best_path, best.doc, m.samples, now, m.fingerprint, _tpots(m.details), reset=True
    )
    return m.samples, m.failures


def check(
    best_path: Path,
    *,
    model_yaml: Path | None = None,
    repeats: int = 5,
    tolerance_pct: float | None = None,
    junit: Path | None = None,
    update: bool = False,
    max_load: float = conditions.HOST_LOAD_LIMIT,
    on_repeat: OnRepeat | None = None,
) -> Verdict:
    """Measure the configuration of best.yaml `repeats` times and decide against its recorded
    baseline (the tolerance: given, else default_tolerance of the baseline) and the nightly series
    (series_drift); a regression measured while the machine was disturbed
    (conditions.disturbances, max_load) is "unreliable" instead. Append the verdict to
    history.jsonl, write JUnit if asked, and with `update` record an undisturbed pass or faster as
    the new baseline."""
    t0 = time.monotonic()
    best = load_best(best_path)
    baseline_belongs(best_path, best)
    if junit:
        junit_report.check_target(junit, best_path, best.doc, model_yaml)  # before any repeat
    m = _repeat(best_path, best, model_yaml, repeats, on_repeat)
    if not m.samples:  # CI reads the report: the repeats' reasons go in it, then exit 3 as ever
        err, secs = _unmeasured(m), time.monotonic() - t0
        if junit:
            reasons = "\n".join(m.failures)
            junit_report.write(junit, best.doc.name, secs, "unmeasured", str(err), reasons)
        raise err
    explicit = tolerance_pct or 0.0  # an explicit tolerance bounds the nightly series' steps too
    verdict = _verdict(best, m, tolerance_pct)
    verdict.disturbed = conditions.disturbances(m.conditions, max_load)
    verdict.series = series_drift(_series(best_path, best, verdict), min_shift_pct=explicit)
    if verdict.series:
        # a lasting step down across nights fails the gate as one night's would
        verdict.status = "regression"
    if verdict.disturbed and verdict.status == "regression":
        # measured beside other work: no regression can be told from it
        verdict.status = "unreliable"
    if update and verdict.status != "regression" and not verdict.disturbed:
        record_check_baseline(
            best_path, best.doc, m.samples, verdict.checked_at, m.fingerprint, _tpots(m.details)
        )
        verdict.updated = True
    record_history(best_path, verdict, best.doc.name)
    if junit:
        junit_report.write_verdict(junit, best.doc.name, verdict, time.monotonic() - t0)
    return verdict


def _verdict(best: Best, m: Repeats, tolerance_pct: float | None) -> Verdict:
    """The decision on the repeats against the recorded baseline (the tolerance given, else from its
    noise)."""
    base, source = baseline_samples(best.doc)
    how = f"{tolerance_pct:g}% (--tolerance)" if tolerance_pct is not None else ""
    if tolerance_pct is None:
        tolerance_pct, how = default_tolerance(base)
    status, ratio, ci = decide(base, m.samples, tolerance_pct)
    # the Task plug-ins read best.yaml as it is written (a mapping)
    written = best.doc.model_dump(exclude_unset=True)
    tpot = tasks.task(best.workload.task).check_gate(written, m.details, tolerance_pct, decide)
    if tpot and tpot["status"] == "regression":
        status = "regression"  # generate: slower tokens, or slower per token, fails the check
    fp = best.doc.fingerprint.model_dump()  # the versions beside the numbers: as the library says
    changes = {
        k: (fp.get(k), m.fingerprint.get(k))
        for k in VERSION_KEYS
        if fp.get(k) != m.fingerprint.get(k)
    }
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
    upgraded = best.doc.upgraded
    verdict.upgraded = upgraded.knobs_added if upgraded else None
    return verdict


def _tpots(details: list[dict[str, Any]]) -> list[float]:
    return [d["tpot_ms_median"] for d in details if d.get("tpot_ms_median")]


def record_history(best_path: Path, verdict: Verdict, name: str) -> Path:
    """Append the verdict to history.jsonl beside best.yaml (nightly.append: one line, never glued,
    never through a link). A failed write (a full disk) is said on the verdict, which is still
    printed and decides the exit code."""
    path = best_path.parent / nightly.FILE
    try:
        nightly.append(path, {"name": name, **asdict(verdict)})
    except OSError as err:
        verdict.history_error = f"{path}: not written: {err}"
    return path
