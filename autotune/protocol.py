"""The trial protocol: what the parent hands a trial process (TrialSpec) and what it gets back
(TrialResult).

Both sides import this module; it needs the standard library only. The two travel as JSON files
(`spec.json`, `result.json`), written atomically, with unknown keys refused on reading, so a change
on one side that the other does not know fails loudly instead of being dropped. Both sides quote a
process's output in a reason alike (`last_words`: what went wrong, library noise skipped).
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import re
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar

from autotune import knobs as catalogue
from autotune import status as _status
from autotune import tracebacks
from autotune.knobs import Knobs as Knobs  # re-exported: the knobs a trial is handed

if TYPE_CHECKING:
    from dataclasses import Field

    from _typeshed import DataclassInstance

# How a trial can end, and which ends say the configuration cannot run here (autotune/status.py).
STATUSES = _status.STATUSES
CONFIG_FAILURES = _status.CONFIG_FAILURES
# The Python module a trial process runs: `python -m autotune.workloads.trial SPEC.json
# RESULT.json`.
TRIAL_MODULE = "autotune.workloads.trial"
# Beside a one-rank trial's result while the search watches it (search/prune.py): the measured steps
# so far, written by the trial, and the file whose appearance asks it to stop.
PROGRESS_FILE, PRUNE_FILE = "progress.json", "prune"
# the study's best figure when the trial started, from the search (task command: a window close to
# it narrows its interval to decide the order: command/window.py)
AGAINST_FILE = "against.json"
# A command trial's secrets (tasks.Command.prepare): the spec holds its command masked; the values
# masked (by argument index and variable name) and the secrets its result must not show ("mask")
# reach the trial process in this variable alone (JSON), never a file.
ENV_SECRETS = "AUTOTUNE_COMMAND_SECRETS"
SECRET_MASK = "***"  # redact.MASK

# AUTOTUNE_FAULT's kinds (workloads/faults.py); the last five break the numerics check
FAULT_KINDS = (
    *("oom", "hang", "crash", "nan", "error", "slow", "drift"),
    *("frozen_layer", "small_grads", "no_grad_scaler", "reference_spike", "check_oom"),
)


def parse_fault(text: str | None) -> tuple[str, float, str, str, str] | None:
    """AUTOTUNE_FAULT as (kind, slow percent, knob, op, value), None when unset; ValueError naming
    the variable when it is not KIND[:PCT][@KNOB=VALUE | @KNOB>=NUMBER]."""
    if not text or not text.strip():
        return None
    spec, _, cond = text.strip().partition("@")
    kind, _, pct = spec.strip().partition(":")
    allowed = (
        f"use KIND[@KNOB=VALUE|@KNOB>=NUMBER], KIND one of {', '.join(FAULT_KINDS)} (slow:PCT)"
    )
    if kind not in FAULT_KINDS or bool(pct) != (kind == "slow"):
        raise ValueError(f"AUTOTUNE_FAULT: {text[:80]!r} is not a fault; {allowed}")
    try:
        slow = float(pct) if pct else 0.0
    except ValueError:
        slow = -1.0
    if not 0 <= slow <= 1e6:  # also NaN
        raise ValueError(
            f"AUTOTUNE_FAULT: slow:{pct[:20]!r} needs a percentage from 0 to 1000000, e.g. slow:20"
        )
    if not cond:
        return kind, slow, "", "", ""
    op = ">=" if ">=" in cond else "="
    knob, _, want = (part.strip() for part in cond.partition(op))
    if knob not in (*catalogue.NAMES, "rank") or not want:
        raise ValueError(
            f"AUTOTUNE_FAULT: condition {cond[:80]!r} names no knob (or rank) and value; {allowed}"
        )
    if op == ">=":
        try:
            float(want)
        except ValueError:
            raise ValueError(f"AUTOTUNE_FAULT: {knob}>={want[:20]!r} needs a number") from None
    return kind, slow, knob, op, want


def reason_line(reason: str | None, limit: int = 160) -> str:
    """The one line of a failure's reason to show: the last line that names an error (a traceback's
    end), else the first line with words in it (not a banner of '=' signs). A library's warning that
    names an error is not one (a reason of an older autotune quoted the output's tail as it was)."""
    lines = [
        line.strip() for line in (reason or "").splitlines() if re.search(r"[A-Za-z]{2}", line)
    ]
    named = [
        line
        for line in lines
        if re.search(r"(Error|Exception|error|refused|out of memory)\b", line)
        and (_exceptional(line) or not _noise(line))
    ]
    line = named[-1] if named else (lines[0] if lines else "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


# Python's own warning categories (the builtins that subclass Warning); a library names its own the
# same way (torch's TracerWarning), so the suffix counts too
WARNING_CATEGORIES = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, Warning)
)
# logging's levels below ERROR: a line led by one is a notice, not the failure
NOTICE_LEVELS = tuple(
    name for name, level in logging.getLevelNamesMapping().items() if level < logging.ERROR
)
# warnings.formatwarning's layout, "FILE:LINE: CATEGORY: MESSAGE" (the source line follows,
# indented), or a category printed alone; the first name before ": " is the category
_WARNING = re.compile(r"^(?:.*?:\d+: )?(?:[\w.]+\.)?([A-Za-z_]\w*): ")
_NOTICE = re.compile(r"^\W{0,3}(?:\S+\s+){0,4}?\[?(?:%s)\]?[:\s]" % "|".join(NOTICE_LEVELS))
# glog's layout (C++ libraries such as torch's c10): "[W1202 10:00:00.1 ...]" or "[W file.cpp:12]"
_GLOG = re.compile(r"^(?:\[[^\]]*\]:)?\[?[IW](?:\d{4} \d\d:\d\d:\d\d| [\w./-]+:\d+\])")
_DEPRECATED = re.compile(
    r"deprecat|will be removed|in a future (?:release|version)|future versions? of", re.I
)
_PROGRESS = re.compile(r"\d+%\||[\u2500-\u259f]{4}|\d+/\d+ \[\d+:\d+|\b(?:it/s|s/it)\]")
_FRAME = re.compile(r'^File ".*", line \d+|\bwarnings\.warn\(')
# a raised exception's line: its class, dotted or not (torch.OutOfMemoryError: ...), its message
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(Error|Exception|Exit|Interrupt)\b(:|$)")


def _warning(line: str) -> bool:
    m = _WARNING.match(line)
    return m is not None and (m[1] in WARNING_CATEGORIES or m[1].endswith("Warning"))


def _exceptional(line: str) -> bool:
    return bool(_EXCEPTION.match(line)) and not _warning(line)


def _noise(line: str) -> bool:
    """A line that says nothing of a failure: blank or a banner, a warning, a notice of a logging
    level below ERROR, a deprecation or future notice, a progress bar, a traceback's frame."""
    return (
        not re.search(r"[A-Za-z]{2}", line)
        or any(p.search(line) for p in (_NOTICE, _GLOG, _DEPRECATED, _PROGRESS, _FRAME))
        or _warning(line)
    )


def told_lines(text: str) -> tuple[list[str], int | None]:
    """The output's lines that are not noise, stripped, and the index among them of the last
    traceback's exception line (None without one). A warning's source line (the indented line
    Python prints after it), a traceback's frames and an unraisable exception's traceback
    ("Exception ignored in", printed at teardown after the failure) are left out too."""
    kept: list[str] = []
    raised, in_traceback, after_warning, ignored = None, False, False, False
    for line in text.splitlines():
        stripped, indented = line.strip(), line[:1].isspace()
        if stripped.startswith("Traceback (most recent call last)"):
            in_traceback, after_warning = True, False
            continue
        if in_traceback and (indented or not stripped):
            continue
        if in_traceback:  # the first line after the frames: the exception raised
            in_traceback = False
            if not ignored:
                raised = len(kept)
                kept.append(stripped)
            ignored = False
            continue
        if after_warning and indented:
            continue
        after_warning = _warning(stripped)
        ignored = stripped.startswith("Exception ignored")
        if _exceptional(stripped) or not (after_warning or ignored or _noise(stripped)):
            kept.append(stripped)
    return kept, raised


def last_words(text: str, limit: int = 300) -> str:
    """What a process's output says went wrong, in one line: the last traceback's exception (with
    the line after it when its message goes on there), else the last exception printed alone, else
    the last line that is not noise (told_lines); '' when there is none. A bare AssertionError
    says where it was raised (tracebacks.raised_at)."""
    kept, raised = told_lines(text)
    if raised is None:
        raised = next((i for i in range(len(kept) - 1, -1, -1) if _exceptional(kept[i])), None)
    if raised is None:
        line = kept[-1] if kept else ""
    else:
        line = kept[raised]
        if line.endswith(":") and raised + 1 < len(kept):  # "... raised:" and the cause below
            line += " " + kept[raised + 1]
    if line == "AssertionError":  # a bare `assert x`: where it failed is all there is to say
        line += f" at {at}" if (at := tracebacks.raised_at(text, line)) else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def unhide(
    argv: list[str], env: dict[str, str], hidden: str | None
) -> tuple[list[str], dict[str, str]]:
    """The command as it runs, from the masked one a spec holds and ENV_SECRETS' value: each hidden
    argument and variable put back; a masked variable not handed over is inherited by the job."""
    doc = json.loads(hidden) if hidden else {}
    args, names = doc.get("argv") or {}, doc.get("env") or {}
    real_argv = [args.get(str(i), a) for i, a in enumerate(argv)]
    real_env = {k: names.get(k, v) for k, v in env.items() if k in names or v != SECRET_MASK}
    return real_argv, real_env


def hide(doc: Any, secrets: list[str]) -> Any:
    """A JSON-like document with these secrets (longest first) masked in every string."""
    if isinstance(doc, dict):
        return {k: hide(v, secrets) for k, v in doc.items()}
    if isinstance(doc, list):
        return [hide(v, secrets) for v in doc]
    for secret in secrets if isinstance(doc, str) else []:
        doc = doc.replace(secret, SECRET_MASK)
    return doc


def write_json(path: str | Path, doc: dict[str, Any]) -> None:
    """Write JSON atomically: a reader never sees half a file."""
    from autotune import atomic

    atomic.write_text(path, json.dumps(doc, indent=1))


_D = TypeVar("_D", bound="DataclassInstance")


def _from_dict(cls: type[_D], doc: dict[str, Any], what: str) -> _D:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise ValueError(
            f"{what}: unknown key {unknown[0]!r}; this autotune knows {', '.join(sorted(known))}"
        )
    return cls(**doc)


class _Document:
    """A dataclass that travels as a JSON file; reading refuses keys it does not know."""

    _what = "document"
    if TYPE_CHECKING:  # every subclass is a dataclass
        __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Self:
        return _from_dict(cls, doc, cls._what)

    @classmethod
    def read(cls, path: str | Path) -> Self:
        return cls.from_json(json.loads(Path(path).read_text()))

    def write(self, path: str | Path) -> None:
        write_json(path, self.to_json())


@dataclass
class Rendered:
    """The command of one trial (task command): arguments, environment additions, working
    directory, the config file. Rendered by the parent (command.render.render), handed to the trial
    in its spec (CommandParams.rendered) and read back there (command/trial.py)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = "."
    # the rendered config file (written by `render` when the command has one)
    config_path: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)  # dotted key -> value set in it


@dataclass
class TrainParams:
    """task train's part of the spec: the numerics check asked of this trial (study.loss_check's
    settings: steps, limits), None when it runs none (search/loss_guard.py decides)."""

    loss_check: dict[str, Any] | None = None


@dataclass
class GenerateParams:
    """task generate's part of the spec: the drift limits of a quantized trial (study.drift)."""

    drift: dict[str, float] | None = None


@dataclass
class CommandParams:
    """task command's part of the spec: the command section (config.CommandConfig as JSON, its
    secrets masked), this trial's command as the parent rendered it (tasks.Command.prepare), when
    the job is ended before the trial's hard limit, and that limit in minutes (for remedies)."""

    command: dict[str, Any] = field(default_factory=dict)
    rendered: Rendered | None = None
    timeout_s: float = 3600.0
    trial_timeout_min: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.rendered, dict):
            self.rendered = _from_dict(Rendered, self.rendered, "spec.params.rendered")


@dataclass
class AllReduceParams:
    """`autotune nccl`'s part of the spec: the message sizes (bytes), and the untimed and timed
    rounds of `inner` back-to-back all-reduces at each."""

    sizes: list[int] = field(default_factory=list)
    warmup: int = 5
    iters: int = 20
    inner: int = 5


TaskParams = TrainParams | GenerateParams | CommandParams | AllReduceParams
# each task's parameters (TrialSpec.params): the spec's JSON holds them as an object
PARAMS: dict[str, type[TaskParams]] = {
    "train": TrainParams,
    "generate": GenerateParams,
    "command": CommandParams,
    "allreduce": AllReduceParams,
}


def loss_check_of(params: TaskParams | dict[str, Any]) -> dict[str, Any] | None:
    """The numerics check these parameters ask of the trial (TrainParams.loss_check), if any."""
    return params.loss_check if isinstance(params, TrainParams) else None


def with_loss_check(
    params: TaskParams | dict[str, Any], check: dict[str, Any] | None
) -> TaskParams | dict[str, Any]:
    """The parameters asking `check` of the trial (None: no check); a task without the numerics
    check keeps its own."""
    return replace(params, loss_check=check) if isinstance(params, TrainParams) else params


def params_of(
    task: str, doc: dict[str, Any] | TaskParams | None = None
) -> TaskParams | dict[str, Any]:
    """The task's parameters from their JSON (unknown keys refused), or its defaults; a task this
    autotune does not know keeps its JSON (the trial names the task: workloads/trial.py)."""
    if not isinstance(doc, dict) and doc is not None:
        return doc
    if task not in PARAMS:
        return doc or {}
    return _from_dict(PARAMS[task], doc or {}, "spec.params")


@dataclass
class RunSettings:
    """How long a trial runs and on how many ranks (the workload section's trial-side part)."""

    warmup_steps: int = 3
    measure_steps: int = 10
    seed: int = 0
    world_size: int = 1
    nnodes: int = 1
    rdzv_endpoint: str | None = None
    launcher: list[str] | None = None
    prompt_len: int | None = None  # generate: prompt tokens per sequence
    gen_len: int | None = None  # generate: tokens decoded per sequence


@dataclass
class TrialSpec(_Document):
    """The input of one trial process."""

    _what = "spec"

    task: str  # which workload runs: train, allreduce
    device: str  # cuda or cpu
    # every knob of the task; absent ones take the catalogue's default
    knobs: Knobs = field(default_factory=dict)
    # the model section, derived sizes filled in (None: the workload has no model)
    model: dict[str, Any] | None = None
    run: RunSettings = field(default_factory=RunSettings)
    base_dir: str | None = None  # where an entrypoint module is found
    # the task's own settings (PARAMS: TrainParams, CommandParams, ...); JSON read back as its class
    params: TaskParams | dict[str, Any] = field(default_factory=dict)
    # the parent's clock when it started the process: the start phase
    launched_at: float | None = None
    # a one-rank trial writes its measured steps so far and stops when asked
    report_progress: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.run, dict):
            self.run = _from_dict(RunSettings, self.run, "spec.run")
        self.params = params_of(self.task, self.params)
        if self.task in catalogue.TASKS:
            self.knobs = {**catalogue.defaults(self.task), **self.knobs}


@dataclass
class TrialResult(_Document):
    """The output of one trial process (rank 0 for a rank group; a failing rank writes its own)."""

    _what = "result"

    status: str  # one of STATUSES
    reason: str = ""  # why it failed; empty when ok
    # invalid_config: the knob values that cannot run here (a rule to learn)
    cause: dict[str, Any] | None = None
    rank: int = 0  # the rank that wrote it
    at_ns: int | None = None  # when a failing rank wrote it: the earliest failure is the cause
    # measured steps, each the slowest rank's
    step_times_s: list[float] = field(default_factory=list)
    warmup_step_times_s: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)  # of the measured steps
    tokens_per_step: int | None = None
    n_params: int | None = None
    flop_params: int | None = None  # N of 6N (None: MFU n/a)
    mfu_dims: dict[str, int] | None = None  # n_layers, d_model, seq_len of the attention term
    # counted in the trial (torch.utils.flop_counter); else the formula
    flops_per_token: float | None = None
    peak_mem_bytes: int | None = None
    peak_mem_kind: str | None = None  # cuda_max_memory_allocated or cpu_max_rss
    peak_mem_reserved_bytes: int | None = None
    measure_window: list[float] | None = None  # wall-clock start and end of the measured steps
    # start, build, warmup, compile, measure, check
    phases_s: dict[str, float] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)  # torch, CUDA, cuDNN, NCCL, device name
    applied: dict[str, Any] = field(default_factory=dict)  # what the trial really did for each knob
    ranks: list[dict[str, Any]] | None = None  # every rank's own step times and peak memory
    # workload-specific results (allreduce: rows)
    output: dict[str, Any] = field(default_factory=dict)
    nccl: dict[str, Any] | None = None  # NCCL's own account, read from its logs by the parent

    def write(self, path: str | Path) -> None:
        """Written with ENV_SECRETS' "mask" masked: a reason quoting a job's token keeps none."""
        secrets = json.loads(os.environ.get(ENV_SECRETS) or "{}").get("mask") or []
        write_json(path, hide(self.to_json(), secrets))

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"result: status {self.status!r} is not one of {', '.join(STATUSES)}")
