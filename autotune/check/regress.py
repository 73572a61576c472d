"""autotune check: re-measure a chosen configuration, one more repeat at a time while the verdict is
inconclusive, and decide with its noise whether it regressed (failing closed)."""

from __future__ import annotations

import datetime as dt
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from autotune import tasks
from autotune.check import conditions, record
from autotune.check import junit as junit_report
from autotune.check.bench import baseline_belongs, baseline_samples, load_best
from autotune.check.record import reset_baseline as reset_baseline  # the API
from autotune.check.repeats import (
    OnRepeat,
    Repeater,
    Repeats,
    interrupted,
    interruption,
    unmeasured,
)
from autotune.check.stats import (  # noqa: F401  (the API)
    Decision,
    decide,
    default_tolerance,
    series_drift,
)
from autotune.check.verdict import AT_MAX, DISTURBED, PASSES, SETTLED, Verdict
from autotune.documents import nightly
from autotune.documents.best_file import Best
from autotune.errors import ConfigError

# Versions listed beside the verdict when they differ: the usual causes of a change.
VERSION_KEYS = ("driver", "cuda", "cudnn", "torch", "nccl")
# --max-repeats by default: three times --repeats, at most DEFAULT_MAX_REPEATS (and never fewer than
# --repeats): on a GPU a repeat is a cold start of minutes, so the extra ones are bounded.
DEFAULT_MAX_REPEATS = 20
MAX_REPEATS_LIMIT = 1000  # as --repeats (api_options.BOUNDS)


def max_repeats_of(repeats: int, max_repeats: int | None) -> int:
    """The most repeats a check starts: --max-repeats (0: --repeats, no extra repeat), by default
    3 x --repeats up to DEFAULT_MAX_REPEATS; ConfigError when fewer than --repeats."""
    if max_repeats is None:
        return max(repeats, min(3 * repeats, DEFAULT_MAX_REPEATS))
    if max_repeats == 0:
        return repeats
    if not repeats <= max_repeats <= MAX_REPEATS_LIMIT:
        raise ConfigError(
            f"--max-repeats: {max_repeats} is not allowed with --repeats {repeats}; use 0 (no "
            f"extra repeats) or a number from {repeats} to {MAX_REPEATS_LIMIT}"
        )
    return max_repeats


def _series(best_path: Path, best: Best, verdict: Verdict) -> list[nightly.Night]:
    """This configuration's nights since the last --reset-baseline: history.jsonl's verdicts, then
    this one; only the levels (Night.is_level: neither disturbed nor inconclusive)."""
    recorded, name = best.doc.check_baseline, best.doc.name
    since = (recorded.series_from if recorded else None) or ""
    read, skipped = nightly.read(best_path.parent / nightly.FILE)
    verdict.history_skipped = skipped  # named beside the verdict; the other nights still count
    nights = [n for n in read if n.name == name and n.checked_at >= since]
    tonight = {"name": name, **asdict(verdict)}
    if nightly.problem(tonight) is None:
        nights.append(nightly.Night.of(tonight))
    return [n for n in nights if n.is_level]


def check(
    best_path: Path,
    *,
    model_yaml: Path | None = None,
    repeats: int = 5,
    max_repeats: int | None = None,
    tolerance_pct: float | None = None,
    junit: Path | None = None,
    update: bool = False,
    max_load: float = conditions.HOST_LOAD_LIMIT,
    on_repeat: OnRepeat | None = None,
) -> Verdict:
    """Measure the configuration of best.yaml and decide against its recorded baseline; the gate
    fails closed (stats.decide: pass only when the ratio's 95% interval rules out a slowdown past
    the tolerance).

    Args:
        best_path: the best.yaml written by `autotune search`.
        model_yaml: a MODEL_YAML whose model and workload replace best.yaml's (the same ones).
        repeats: the repeats measured first, each in a fresh process.
        max_repeats: the most repeats started, failed ones too: while the verdict is inconclusive,
            one more at a time up to it (None: max_repeats_of's default; 0: none beyond
            `repeats`); ConfigError when fewer than `repeats`.
        tolerance_pct: the slowdown tolerated (None: default_tolerance of the baseline's noise);
            also the smallest step of the nightly series (series_drift) flagged.
        junit: write a JUnit report there (refused before any repeat when it is someone's file).
        update: record a pass or faster as the new baseline (never a disturbed, inconclusive or
            failed check, nor samples that spread more than the gate can use:
            Verdict.update_refused says why, and the exit code is 3).
        max_load: the host's load per core past which the check is disturbed, and with it a
            repeat whose processes waited for a CPU past conditions.CPU_WAIT_LIMIT_PCT
            (conditions.disturbances; 0: neither is judged).
        on_repeat: hears of each repeat as it ends (views.repeat_line says it).

    Returns:
        The Verdict: pass, faster, regression, inconclusive, or unreliable when the machine was
        disturbed (whatever the numbers said). It is appended to history.jsonl. UnmeasuredError
        when every first repeat failed; CheckInterrupted (a KeyboardInterrupt) on Ctrl-C, SIGTERM
        or SIGHUP, after the JUnit report says interrupted.

    Example:
        >>> verdict = check(Path("trials/gpt2/best.yaml"), repeats=5)  # doctest: +SKIP
        >>> verdict.status, verdict.exit_code, verdict.reason  # doctest: +SKIP
    """
    cap, t0 = max_repeats_of(repeats, max_repeats), time.monotonic()
    best = load_best(best_path)
    if junit:
        junit_report.check_target(junit, best_path, best.doc, model_yaml)  # before any repeat
    run = Repeater.of(best_path, best, model_yaml)  # another GPU: refused as such
    baseline_belongs(best_path, best)
    m = Repeats()
    try:
        verdict = _settle(run, m, (repeats, cap), tolerance_pct, max_load, on_repeat)
    except BaseException as err:
        if (by := interruption(err)) is None:
            raise
        # CI reads the report: an interrupted night is said as such, never left unwritten
        stop = interrupted(by, m, cap, "during the check", _untouched(junit))
        if junit:
            details = "\n".join(m.failures + [f"measured: {x:,.0f} tokens/s" for x in m.samples])
            secs = time.monotonic() - t0
            junit_report.write(junit, best.doc.name, secs, "interrupted", stop.message, details)
        raise stop from err
    if verdict is None:  # CI reads the report: the repeats' reasons go in it, then exit 3 as ever
        failed, secs = unmeasured(m), time.monotonic() - t0
        if junit:
            reasons = "\n".join(m.failures)
            junit_report.write(junit, best.doc.name, secs, "unmeasured", str(failed), reasons)
        raise failed
    _judged(best_path, best, verdict, m, tolerance_pct, max_load)
    if update and verdict.status in PASSES:
        verdict.update_refused = record.update(
            best_path, best, m, verdict.checked_at, tolerance_pct
        )
        verdict.updated = not verdict.update_refused
    record_history(best_path, verdict, best.doc.name)
    if junit:
        junit_report.write_verdict(junit, best.doc.name, verdict, time.monotonic() - t0)
    return verdict


def _untouched(junit: Path | None) -> str:
    """What an interrupted check leaves: nothing decided or written but its JUnit report."""
    said = f"; {junit} says interrupted" if junit else ""
    return (
        "nothing decided, nothing recorded (the baseline and history.jsonl are as they were)" + said
    )


def _judged(
    best_path: Path,
    best: Best,
    verdict: Verdict,
    m: Repeats,
    tolerance_pct: float | None,
    max_load: float,
) -> None:
    """The verdict judged beyond this night's numbers: the nightly series (a lasting step down is a
    regression), then what disturbed the repeats (unreliable, whatever the numbers read)."""
    explicit = tolerance_pct or 0.0  # an explicit tolerance bounds the nightly series' steps too
    verdict.disturbed = m.disturbed(max_load)
    verdict.series = series_drift(_series(best_path, best, verdict), min_shift_pct=explicit)
    if verdict.series:
        # a lasting step down across nights fails the gate as one night's would
        verdict.status = "regression"
    if verdict.disturbed:
        _unreliable(verdict)


def _settle(
    run: Repeater,
    m: Repeats,
    planned: tuple[int, int],
    tolerance_pct: float | None,
    max_load: float,
    on_repeat: OnRepeat | None,
) -> Verdict | None:
    """The first planned[0] repeats, then one more at a time while the verdict is inconclusive,
    until it is settled, planned[1] repeats were started (failed ones count) or the host was
    disturbed (more repeats beside other work would not be trusted either). The conditions are
    sampled before each repeat and after the last, into m. None: every first repeat failed."""
    first, cap = planned
    i = 0
    while True:
        m.conditions.append(run.sample())  # before repeat i, or after the last one
        if i >= first:
            if not m.samples:
                return None
            verdict = _verdict(run.best, m, tolerance_pct, (i - first + 1, cap - first + 1))
            stopped = (
                SETTLED
                if verdict.status != "inconclusive"
                else AT_MAX
                if i >= cap
                else DISTURBED
                if m.disturbed(max_load)
                else ""
            )
            if stopped:
                verdict.repeats_run, verdict.max_repeats, verdict.stopped = i, cap, stopped
                return verdict
        run.one(m, i, planned, on_repeat)
        i += 1


def _unreliable(verdict: Verdict) -> None:
    """Measured beside other work: whatever the numbers read, pass or regression, it cannot be
    trusted (exit 3)."""
    verdict.reason = (
        f"the numbers cannot be trusted either way (undisturbed they would read {verdict.status}"
        + (f": {verdict.reason})" if verdict.reason else ")")
    )
    verdict.status, verdict.settle = "unreliable", ""


def _verdict(
    best: Best, m: Repeats, tolerance_pct: float | None, look: tuple[int, int] = (1, 1)
) -> Verdict:
    """The decision on the repeats against the recorded baseline (the tolerance given, else from its
    noise), and the task's second gate (generate: time per output token): a regression of either
    fails, an inconclusive one of either is inconclusive, pass needs both."""
    base, source = baseline_samples(best.doc)
    how = f"{tolerance_pct:g}% (--tolerance)" if tolerance_pct is not None else ""
    if tolerance_pct is None:
        tolerance_pct, how = default_tolerance(base)
    d = decide(base, m.samples, tolerance_pct, look=look)  # look k of at most n: stats.look_level
    # the Task plug-ins read best.yaml as it is written (a mapping)
    written = best.doc.model_dump(exclude_unset=True)
    tpot = tasks.task(best.workload.task).check_gate(
        written, m.details, tolerance_pct, lambda b, c, t: decide(b, c, t, look=look)
    )
    status, reason, settle = both_gates(d, tpot)
    fp = best.doc.fingerprint.model_dump()  # the versions beside the numbers: as the library says
    changes = {
        k: (fp.get(k), m.fingerprint.get(k))
        for k in VERSION_KEYS
        if fp.get(k) != m.fingerprint.get(k)
    }
    verdict = Verdict(
        status,
        d.ratio,
        d.ci,
        tolerance_pct,
        statistics.median(base),
        statistics.median(m.samples),
        base,
        list(m.samples),
        source,
        changes,
        list(m.failures),
        m.fingerprint,
        dt.datetime.now(dt.timezone.utc).isoformat(),
        list(m.details),
        tpot=tpot,
        tolerance_source=how,
        conditions=m.conditions,
        reason=reason,
        settle=settle,
    )
    upgraded = best.doc.upgraded
    verdict.upgraded = upgraded.knobs_added if upgraded else None
    return verdict


def both_gates(tokens: Decision, tpot: dict[str, Any] | None) -> tuple[str, str, str]:
    """The status, reason and settle of tokens/s's decision and the task's second gate (generate:
    time per output token, None elsewhere): a regression of either fails, else an inconclusive one
    of either is inconclusive, else tokens/s's pass or faster stands (pass needs both)."""
    for status in ("regression", "inconclusive"):
        if tokens.status == status:
            return tokens.status, tokens.reason, tokens.settle
        if tpot and tpot["status"] == status:
            return status, f"time per output token: {tpot['reason']}", tpot["settle"]
    return tokens.status, tokens.reason, tokens.settle


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
