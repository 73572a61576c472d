"""A failed trial's reason completed with its remedy: what to change, and what the parent knows of
why.

The one funnel for the reasons of measured trials (runner.measure calls `explain`). The trial, or
launch/process.py for a trial that left no result, says what happened; this adds what ate the time
of a timeout, the peak and the knobs that lower memory of an OOM, the clear cause of a crash (an
import, CUDA, NCCL, a signal) quoted from the output without its library noise
(protocol.last_words), the knob values of an invalid configuration. The words that matter come
first, as protocol.reason_line cuts a reason to about 100 characters: the cause, then the remedy,
then the evidence.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import knobs as catalogue
from autotune.documents.record import TrialRecord
from autotune.protocol import PROGRESS_FILE, Knobs, TrialResult
from autotune.status import Status

# launch._classify's words for a trial that left no result (tests/test_reasons.py runs both)
NO_RESULT_IN_TIME = re.compile(r"no result after \d+ s \(trial timeout\); process group killed")
NO_RESULT = re.compile(r"trial process ended without a result \((?P<how>[^)]*)\)(?:: |$)")
QUOTE_CHARS = 200  # of the output's telling line, in a reason
NEEDED_MARGIN = 1.25  # a limit suggested from what a trial needed: steps vary, a check follows
# The knobs whose value lowers a trial's memory (where its task has them), the value that does
# (None: a size, smaller is lower) and the values it lowers (None: any other). The peak is
# activations (micro-batch, checkpointing), the KV cache (batch_size), and weights, gradients and
# optimizer state (sharded by fsdp; weights quantized).
MEMORY_LEVERS = (
    ("micro_batch_size", None, None),
    ("batch_size", None, None),
    ("activation_checkpointing", "full", None),
    ("parallel", "fsdp", None),
    ("weight_quant", "int8_weight_only", ("none",)),
)
# A crash's clear causes, found in its telling line (or how it ended), and their remedies
CRASH_CAUSES = (
    (r"No module named '([\w.]+)'", "make {0!r} importable by {python} (install its package)"),
    (
        r"cannot import name '(\w+)' from '([\w.]+)'",
        "{1} lacks {0}: install the version of {1} that the importing code expects (pip check)",
    ),
    (
        r"no kernel image is available",
        "this torch has no kernels for this GPU: install a build for its architecture",
    ),
    (
        r"device-side assert",
        "a device-side assert (an index out of range, such as a token id past the vocabulary): "
        "CUDA_LAUNCH_BLOCKING=1 names the kernel",
    ),
    (
        r"CUDA error|CUBLAS_STATUS_|CUDNN_STATUS_|cudaError",
        "a CUDA error, not a knob's: CUDA_LAUNCH_BLOCKING=1 names the kernel; nvidia-smi the GPU",
    ),
    (
        r"NCCL error|nccl\w+Error",
        "NCCL failed (not a refusal of a setting): NCCL_DEBUG=INFO says why (nccl.*.log)",
    ),
    (r"\bMemoryError\b", "host memory ran out (not the GPU's): a smaller batch or more host RAM"),
    (
        r"killed by SIGKILL",
        "SIGKILL from outside, most often the kernel's out-of-memory killer (host memory: dmesg)",
    ),
    (
        r"killed by (SIGSEGV|SIGBUS|SIGILL|SIGFPE)",
        "a native library crashed ({0}): PYTHONFAULTHANDLER=1 prints the Python stack calling it",
    ),
)
# a reason that quotes how a process ended (an exception, a signal, an exit code) gets its remedy
QUOTES_A_FAILURE = re.compile(r"\b\w+(?:Error|Exception):|killed by SIG|exit(?:ed with)? code")


@dataclass(frozen=True)
class Context:
    """What the parent knows of a trial beside its record."""

    timeout_s: float  # the trial's limit: 60 x study.trial_timeout_min
    run_dir: Path
    task: str = "train"
    world_size: int = 1
    measure_steps: int = 10
    progress: bool = False  # a one-rank trial wrote its measured steps as they ran (progress.json)
    mapped: dict[str, Any] | None = None  # task command: how knobs reach it (None: all act)
    estimate_gib: float | None = None  # the memory model's peak of the knobs (None: no model)
    # the telling line of the end of the trial's log (worker.log), as a reason quotes it, at most
    # QUOTE_CHARS; "" where the log said nothing (launch/runner.py reads it)
    said: str = ""


def explain(record: TrialRecord, result: TrialResult | None, ctx: Context) -> str:
    """The record's reason with its remedy; the reason as it is for a trial that did not fail.
    result: what the trial wrote itself (None: it left none, launch/process.py's reason says how it
    ended).
    """
    compositions: dict[str, Callable[[TrialRecord, TrialResult | None, Context], str]] = {
        Status.TIMEOUT: _timeout,
        Status.CRASH: _crash,
        Status.OOM: _oom,
        Status.INVALID_CONFIG: _invalid,
        Status.NONFINITE_LOSS: _nonfinite,
    }
    compose = compositions.get(record.status)
    return compose(record, result, ctx) if compose else record.reason


def minutes(seconds: float) -> str:
    """study.trial_timeout_min's value as the YAML has it (0.35, 10)."""
    return f"{round(seconds / 60, 2):g}"


def _timeout(record: TrialRecord, result: TrialResult | None, ctx: Context) -> str:
    now = minutes(ctx.timeout_s)
    m = NO_RESULT_IN_TIME.match(record.reason) if result is None else None
    if m is None:  # the trial's own (task command: its steps, and where the time went)
        if "study.trial_timeout_min" in record.reason:
            return record.reason
        return f"{record.reason}; raise study.trial_timeout_min (now {now})"
    rest, _, warned = record.reason[m.end() :].partition("; NCCL warned: ")
    warned = f"; NCCL warned: {warned}" if warned else ""
    limit = f"the trial's limit, {ctx.timeout_s:.0f} s (study.trial_timeout_min {now})"
    before = rest.removeprefix("; before that ").strip()
    if before:  # a rank failed, the others waited for it: its failure is the cause, not the limit
        return f"{before}; the other ranks then waited for it until {limit}{warned}"
    went, needed = _time_went(record, ctx)
    remedy = "raise study.trial_timeout_min" + (f" to about {needed}" if needed else "")
    if _acts("compile", record.knobs, ctx) and record.knobs.get("compile"):
        remedy += " or take compile out of the space"
    said = ctx.said
    said = f"; its output ends: {said}" if said else ""
    return f"no result within {limit}: {went}; {remedy}{warned}{said}"


def _time_went(record: TrialRecord, ctx: Context) -> tuple[str, int | None]:
    """What ate a timed-out trial's time, from the measured steps it wrote as they ran, and the
    limit it would have needed (minutes; None where that is not known)."""
    compiled = _acts("compile", record.knobs, ctx) and record.knobs.get("compile")
    before = "start, build and warm-up" + (" (compile on: step 1 compiles)" if compiled else "")
    if not ctx.progress:
        return "which phase ate it is not known (a trial reports its phases at its end)", None
    steps = _progress(ctx.run_dir)
    if not steps:
        return f"no measured step reported by then: {before} took it, or a step hung", None
    measured = sum(steps)
    ahead = max(0.0, (record.wall_s or measured) - measured)
    per = measured / len(steps)
    needed = math.ceil((ahead + per * ctx.measure_steps) * NEEDED_MARGIN / 60)
    went = (
        f"{len(steps)} of {ctx.measure_steps} measured steps in {measured:.0f} s "
        f"({per:.3g} s a step), {before} {ahead:.0f} s"
    )
    return went, needed if needed > ctx.timeout_s / 60 else None


def _progress(run_dir: Path) -> list[float]:
    try:
        return [float(s) for s in json.loads((run_dir / PROGRESS_FILE).read_text())["step_times_s"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _crash(record: TrialRecord, result: TrialResult | None, ctx: Context) -> str:
    m = NO_RESULT.match(record.reason) if result is None else None
    # launch/process.py quoted the log's last lines as they were: quote the telling one
    if m is not None:
        said = ctx.said
        head = f"{m['how']}, no result: {said}" if said else f"{m['how']}, no result and no output"
        evidence = f"{m['how']} {said}"
    elif QUOTES_A_FAILURE.search(record.reason):
        head = evidence = record.reason
    else:  # the trial's own account (task command: the contract its job missed), with its remedy
        return record.reason
    return f"{head}; {_crash_remedy(evidence, ctx)}"


def _crash_remedy(evidence: str, ctx: Context) -> str:
    python = "the command's Python" if ctx.mapped is not None else sys.executable
    for pattern, remedy in CRASH_CAUSES:
        if found := re.search(pattern, evidence):
            return remedy.format(*found.groups(), python=python)
    return f"its whole output: {ctx.run_dir / 'worker.log'}"


def _oom(record: TrialRecord, result: TrialResult | None, ctx: Context) -> str:
    rank = re.match(r"rank \d+: ", record.reason)
    head = f"{rank[0] if rank else ''}out of memory"
    peak = _peak(record.reason, ctx)
    peak = f" ({peak})" if peak else ""
    return f"{head}{peak}; lower it with {_levers(record.knobs, ctx)}; {record.reason}"


def _peak(reason: str, ctx: Context) -> str:
    """The memory a trial held when it ran out, from CUDA's message, else the memory model's."""
    size = r"([\d.]+ [KMGT]?i?B)"
    asked = re.search(rf"Tried to allocate {size}", reason)
    held = re.search(rf"this process has {size} memory in use", reason)
    total = re.search(rf"total capacity of {size}", reason)
    more = f"{asked[1]} more asked" if asked else ""
    if held and total:
        return f"{held[1]} in use of {total[1]}" + (f", {more}" if more else "")
    if more:
        return more
    if ctx.estimate_gib is None:
        return ""
    gib = ctx.estimate_gib
    return f"estimated peak {gib:.1f} GiB" if gib >= 1 else f"estimated peak {gib * 1024:.3g} MiB"


def _levers(knobs: Knobs, ctx: Context) -> str:
    """The knob values that lower this trial's memory, each with its value now."""
    have = {**catalogue.defaults(ctx.task), **knobs} if ctx.task in catalogue.TASKS else dict(knobs)
    said = []
    for name, value, lowers in MEMORY_LEVERS:
        now = have.get(name)
        if not _acts(name, have, ctx):
            continue
        if value is None and isinstance(now, int) and now > 1:
            said.append(f"a smaller {name} (now {now})")
        elif value is not None and now != value and (lowers is None or now in lowers):
            said.append(f"{name} {value} (now {now})")
    if said:
        return ", ".join(said[:-1]) + (" or " if len(said) > 1 else "") + said[-1]
    if ctx.mapped is not None:
        return "the job's micro-batch or its activation checkpointing (mapped in command.knobs)"
    return "more GPU memory: it does not fit at the smallest sizes these knobs allow"


def _acts(name: str, knobs: Knobs, ctx: Context) -> bool:
    """Whether the knob reaches this trial: its task has it, a command maps it, a rank group for an
    across-ranks knob."""
    knob = catalogue.BY_NAME.get(name)
    if knob is None or (ctx.mapped is not None and name not in ctx.mapped):
        return False
    return name in knobs and not (knob.multi_rank and ctx.world_size < 2)


def _invalid(record: TrialRecord, result: TrialResult | None, ctx: Context) -> str:
    """An invalid configuration leads with the knob values that cause it, where the reason does not
    name them: the rule the search learns, and what to leave out of the space."""
    missing = [
        f"{k} {_text(v)}"
        for k, v in (record.cause or {}).items()
        if not re.search(rf"\b{re.escape(k)}\b", record.reason)
    ]
    return f"{', '.join(missing)}: {record.reason}" if missing else record.reason


def _nonfinite(record: TrialRecord, result: TrialResult | None, ctx: Context) -> str:
    precision = record.knobs.get("precision")
    if precision == "fp16":
        return f"{record.reason}; fp16 overflows where bf16 (fp32's range) does not: try bf16"
    if precision not in (None, "fp32"):
        return f"{record.reason}; precision fp32 tells whether {precision} is the cause"
    return f"{record.reason}; in fp32 too: the model or its learning rate diverges, not a knob"


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
