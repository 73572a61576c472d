"""One check's repeats: each measured in a fresh process through runner.measure (into
checks/<time>/NN beside best.yaml), with the conditions sampled beside it and how long its processes
waited for a CPU (conditions.CpuWatch); and what a Ctrl-C or SIGTERM leaves of them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.check import conditions
from autotune.check.bench import bench_of, current_hardware
from autotune.documents.best_file import Best
from autotune.documents.record import Metric, TrialRecord
from autotune.errors import (
    CheckInterrupted,
    ConfigError,
    ExitCode,
    HungUp,
    Terminated,
    UnmeasuredError,
)
from autotune.launch.runner import Bench, measure
from autotune.protocol import reason_line
from autotune.status import Status


@dataclass
class Repeats:
    """What the repeats measured: per-process tokens/s, per-process details (telemetry means, the
    CPU account), the failed repeats, the fingerprint, the conditions beside the repeats
    (conditions.sample: before each repeat, then after the last), how long each measured repeat's
    processes waited for a CPU (conditions.CpuWatch.account, None where unread) and how many
    repeats were started."""

    samples: list[float] = field(default_factory=list)
    details: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    conditions: list[dict[str, Any]] = field(default_factory=list)
    cpu: list[dict[str, Any] | None] = field(default_factory=list)
    started: int = 0

    def disturbed(self, max_load: float, ended: bool = True) -> list[str]:
        """What disturbed the repeats so far (conditions.disturbances; max_load 0: the host not
        judged); ended False: the last conditions were sampled before a repeat yet to start."""
        return conditions.disturbances(self.conditions, max_load, self.cpu, ended=ended)


OnRepeat = Callable[[dict[str, Any]], None]


def unmeasured(m: Repeats) -> UnmeasuredError:
    """Exit 3, the first repeat's reason named (the JUnit report lists them all)."""
    n, first = len(m.failures), m.failures[0]
    return UnmeasuredError(f"could not measure: all {n} repeats failed; {first}")


@dataclass
class Repeater:
    """One check's repeats, each measured in a fresh process through runner.measure, into
    checks/<time>/NN beside best.yaml."""

    best: Best
    bench: Bench
    runs: Path
    env: dict[str, str] | None

    @classmethod
    def of(cls, best_path: Path, best: Best, model_yaml: Path | None) -> Repeater:
        """The bench of best.yaml, on the hardware it was measured on (ConfigError otherwise)."""
        fp, apply = best.doc.fingerprint, best.doc.apply
        here = current_hardware(fp.device)
        if here != fp.gpu_model:
            raise ConfigError(
                f"{best_path}: fingerprint.gpu_model: measured on {fp.gpu_model!r}, this machine "
                f"has {here!r}; a check compares only the same hardware (nothing compared)"
            )
        runs = best_path.parent / "checks" / dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        bench = bench_of(best, best_path, model_yaml)
        return cls(best, bench, runs, apply.env if apply else None)

    def sample(self) -> dict[str, Any]:
        """The conditions now (between repeats, when none of ours runs)."""
        return conditions.sample(self.best.doc.fingerprint.device)

    def one(self, m: Repeats, i: int, planned: tuple[int, int], on_repeat: OnRepeat | None) -> None:
        """Repeat i measured and kept in m, its processes' waits for a CPU watched; on_repeat hears
        of it with the repeats planned (asked, at most), the conditions sampled before it and its
        CPU account."""
        run_dir = self.runs / f"{i:02d}"
        m.started = i + 1
        # the repeat's supervisor and trial name its spec file (launch/process.py)
        with conditions.CpuWatch(str(run_dir.resolve() / "spec.json"), i) as watch:
            record = measure(self.bench, self.best.doc.knobs, run_dir, number=i, env=self.env)
        cpu = watch.account()
        _keep(m, i, record, cpu)
        if on_repeat:
            on_repeat(
                {
                    "repeat": i,
                    "repeats": planned[0],
                    "max_repeats": planned[1],
                    "conditions": m.conditions[-1],
                    "cpu": cpu,
                    **_said(record),
                }
            )


def _keep(m: Repeats, i: int, record: TrialRecord, cpu: dict[str, Any] | None) -> None:
    """One repeat's record kept: its sample, details and CPU account, or its failure."""
    if record.status != Status.OK:
        m.failures.append(f"repeat {i}: {record.status}: {reason_line(record.reason)}")
        return
    assert record.tokens_per_gpu is not None  # an ok record measured its throughput
    m.samples.append(record.tokens_per_gpu)
    m.cpu.append(cpu)
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
            "cpu": cpu,
        }
    )
    m.fingerprint = m.fingerprint or record.fingerprint or {}


def _said(record: TrialRecord) -> dict[str, Any]:
    """What on_repeat hears of a repeat: its tokens/s, or its failure."""
    if record.status == Status.OK:
        return {Metric.TOKENS_PER_GPU: record.tokens_per_gpu, "failure": None}
    return {
        Metric.TOKENS_PER_GPU: None,
        "failure": f"{record.status}: {reason_line(record.reason)}",
    }


def interruption(err: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C, SIGTERM or SIGHUP behind err (cli/_errors.py raises KeyboardInterrupt,
    Terminated or HungUp where a signal lands; a library may wrap it in another error), else
    None."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def interrupted(
    by: KeyboardInterrupt, m: Repeats, most: int, when: str, outcome: str
) -> CheckInterrupted:
    """check's words for an interruption of its repeats, its exit code the signal's (130, 143 or
    129): when it came, what had been measured, what (nothing) was decided or recorded."""
    if isinstance(by, CheckInterrupted):
        return by
    code, how = (
        (ExitCode.HANGUP, "hung up (SIGHUP)")
        if isinstance(by, HungUp)
        else (ExitCode.TERMINATED, "terminated (SIGTERM)")
        if isinstance(by, Terminated)
        else (ExitCode.INTERRUPTED, "interrupted (Ctrl-C)")
    )
    started = f"{m.started} of at most {most} repeats started, {len(m.samples)} measured"
    return CheckInterrupted(f"{how} {when}, {started}: {outcome}", code)
