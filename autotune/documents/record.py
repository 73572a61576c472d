"""A trial's record: one typed, versioned class, written by the runner and read back by every reader
(the loop, history, predict, confirm, best, warm start, replay, report, views and check), and the
metric names, declared once.

A record is stored as the Optuna trial's user attributes (`to_attrs`), as optuna's FrozenTrial keeps
its own. `from_attrs` reads any version: a record written before records were versioned (schema 1,
no `schema` key) is the same layout, read as it is; its knobs lack those added since, which
`history.key` and the readers take at their defaults (documents/identity.py). A record of a newer
schema than this release knows is refused (RecordError).

The module owns the record's keys on an Optuna trial: `store` writes a record, `trial_of` makes a
finished trial of one, and the readers below (`knobs_of`, `status_of`, ...) read one key without
building the whole record (History.of reads every trial before each decision).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

from autotune.protocol import Knobs
from autotune.redact import mask_doc
from autotune.status import Status

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

# 1: before versioning (2026-12-01 and earlier). 2: `schema` written, the same fields. 3: `host`,
# the host's conditions around the trial's process (search/host.py).
SCHEMA_VERSION = 3


class Metric:
    """The names of a record's metrics (its `metrics` mapping), declared once."""

    # the objective: tokens/s per GPU, the median step's (task command: all tokens over all time)
    TOKENS_PER_GPU = "tokens_per_s_per_gpu"
    TOKENS = "tokens_per_s"  # all GPUs together
    MFU = "mfu"  # model FLOPs utilisation against the dense BF16 peak (None: n/a, never guessed)
    FLOPS_PER_TOKEN = "flops_per_token"
    STEP_TIME = "step_time"  # {median_s, spread_pct, ...} of the measured steps
    # from the process's launch to the end of its first step (its start, build and first warm-up
    # step: what a fork server and a warm compile cache shorten)
    FIRST_STEP_S = "first_step_s"
    PEAK_MEM_GIB = "peak_mem_gib"
    PEAK_MEM_KIND = "peak_mem_kind"  # cuda_max_memory_allocated | cpu_max_rss | nvml_used
    # what the allocator reserved at its peak (the job's max_memory_reserved, where reported)
    PEAK_RESERVED_GIB = "peak_mem_reserved_gib"
    # command: tokens of the longest micro-batch the job computed on, padding included (the
    # measured-memory line's abscissa: study/peaks.py)
    TOKENS_PER_MICRO_BATCH = "tokens_per_micro_batch"
    # command: the most the job held allocated at a step's end (weights, gradients kept, optimizer
    # state: the peak's part no micro-batch adds; the measured-memory line's intercept)
    RESIDENT_GIB = "resident_mem_gib"
    N_PARAMS = "n_params"
    # autotune.memory's estimate before launch (uncalibrated)
    MEMORY_ESTIMATE_GIB = "memory_estimate_gib"
    TOKENS_PER_JOULE = "tokens_per_joule"
    TTFT_MS = "ttft_ms"  # generate: time to first token (the batch's prefill)
    TPOT_MEDIAN_MS = "tpot_ms_median"  # generate: time per output token
    TPOT_P99_MS = "tpot_ms_p99"
    # generate: decode bytes / step time over the GPU's peak HBM bandwidth
    ROOFLINE = "roofline_share"
    PADDING_PCT = "padding_pct"  # command: the share of the tokens computed on that were padding
    WINDOW = "window"  # command: the measured window (warm-up, steps, half-width, settled, said)


class RecordError(ValueError):
    """A stored record this release cannot read."""


@dataclass
class TrialRecord:
    """What one trial measured or why it did not: its knobs, status, metrics, raw samples, what it
    applied, where it ran. `extra` keeps the attributes the study itself sets on a trial (claimed,
    worker, heartbeat, gpu, overlapped_with, duplicate_of, warm_start, failed_rank, ...), written
    and read back as they are."""

    number: int
    knobs: Knobs
    status: str
    reason: str = ""
    # recorded from what the study knows, never launched (study/predict.py)
    predicted: bool = False
    wall_s: float | None = None
    prestarted: bool = False
    # its process was forked by the study's fork server (launch/forkserver.py): no import of its own
    forked: bool = False
    metrics: dict[str, Any] | None = None
    raw: dict[str, Any] | None = None  # step_times_s, warmup_step_times_s, losses
    phases_s: dict[str, Any] | None = None
    applied: dict[str, Any] | None = None
    fingerprint: dict[str, Any] | None = None
    telemetry: dict[str, Any] | None = None
    ranks: list[Any] | None = None
    cause: dict[str, Any] | None = None  # invalid_config: the knob values that cannot run here
    nccl: dict[str, Any] | None = None
    loss_check: dict[str, Any] | None = None
    run_dir: str | None = None
    device_wait_s: float | None = None
    # the host's load and the other processes on the trial's GPUs, sampled before and after its
    # process, and what disturbed it by check's rule ({before, after, disturbed: [phrase, ...]}:
    # search/host.py); None where nothing was sampled (a record of schema 2 or older, a replay)
    host: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    schema: int = SCHEMA_VERSION

    def metric(self, name: str) -> Any:
        """One metric (Metric's names), None when the trial has none."""
        return (self.metrics or {}).get(name)

    @property
    def tokens_per_gpu(self) -> float | None:
        value: float | None = self.metric(Metric.TOKENS_PER_GPU)
        return value

    @property
    def disturbed(self) -> list[str]:
        """What disturbed its measurement, one phrase each (empty: nothing did, or nothing was
        sampled)."""
        return [str(x) for x in (self.host or {}).get("disturbed") or []]

    @property
    def step_times(self) -> list[float]:
        return list((self.raw or {}).get("step_times_s") or [])

    def to_attrs(self) -> dict[str, Any]:
        """The user attributes stored for this record (number is the trial's own; None fields are
        left out)."""
        attrs = {
            k: v for k, v in asdict(self).items() if k not in ("number", "extra") and v is not None
        }
        attrs["status"] = str(self.status)  # a Status member stored as the plain string it is
        return {**self.extra, **attrs}

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any], number: int) -> TrialRecord:
        """The record stored as these user attributes, of any schema this release reads."""
        schema = attrs.get("schema", 1)
        if not isinstance(schema, int) or schema > SCHEMA_VERSION:
            raise RecordError(
                f"trial {number}: record schema {schema!r} is newer than this autotune reads "
                f"(up to {SCHEMA_VERSION}); upgrade autotune"
            )
        known = {f.name for f in fields(cls)} - {"number", "extra", "schema"}
        values = {k: attrs[k] for k in known if k in attrs}
        extra = {k: v for k, v in attrs.items() if k not in known and k != "schema"}
        values.setdefault("knobs", {})
        values.setdefault("status", "")
        return cls(number=number, schema=SCHEMA_VERSION, extra=extra, **values)

    @classmethod
    def of(cls, trial: FrozenTrial) -> TrialRecord:
        """The record of a stored Optuna trial (a FrozenTrial)."""
        return cls.from_attrs(dict(trial.user_attrs), trial.number)


class Stored(Protocol):
    """A trial as stored: a FrozenTrial, or a running optuna.Trial (its user attributes read
    back)."""

    @property
    def user_attrs(self) -> dict[str, Any]: ...


def store(trial: optuna.Trial, record: TrialRecord) -> None:
    """A trial's record becomes its Optuna user attributes (what report and check read back:
    TrialRecord.of)."""
    for k, v in record.to_attrs().items():
        trial.set_user_attr(k, mask_doc(v))  # a secret the job printed, quoted in a reason


def set_knobs(trial: optuna.Trial, knobs: Knobs) -> None:
    """The configuration a running trial measures, stored before its record is."""
    trial.set_user_attr("knobs", knobs)


def set_status(trial: optuna.Trial, status: str) -> None:
    """A status stored on a running trial without a whole record: skipped, interrupted, a
    repeat."""
    trial.set_user_attr("status", str(status))  # a Status member stored as its plain string


def set_reason(trial: optuna.Trial, reason: str) -> None:
    trial.set_user_attr("reason", reason)


def trial_of(attrs: dict[str, Any], **trial: Any) -> FrozenTrial:
    """A finished trial to add to a study (optuna.trial.create_trial's state, params,
    distributions, value(s)) holding these user attributes (a record's `to_attrs`, with the
    study's marks: documents/trial_marks.py)."""
    import optuna

    return optuna.trial.create_trial(**trial, user_attrs=attrs)


def has_knobs(t: Stored) -> bool:
    """The trial stored its knobs (a mapping): a record as autotune writes it."""
    return isinstance(t.user_attrs.get("knobs"), dict)


def has_record(t: Stored) -> bool:
    """The trial stored knobs, whatever their layout (a status alone is no record)."""
    return "knobs" in t.user_attrs


def knobs_of(t: Stored) -> dict[str, Any]:
    """The knobs the trial ran ({} where it stored none), as stored: the values unchecked (a
    reader compares them with its own, as it read them before)."""
    knobs: dict[str, Any] = t.user_attrs.get("knobs") or {}
    return knobs


def status_of(t: Stored) -> str | None:
    """The stored status (None: none stored yet, or an Optuna trial autotune did not record)."""
    status: str | None = t.user_attrs.get("status")
    return status


def is_repeat(t: Stored) -> bool:
    """A repeat of a measured configuration, recorded without a launch (search/repeats.py)."""
    return status_of(t) == Status.DUPLICATE


def has_status(t: Stored) -> bool:
    return "status" in t.user_attrs


def reason_of(t: Stored) -> str:
    """Why the trial ended as it did ("" where none is stored)."""
    return str(t.user_attrs.get("reason") or "")


def is_predicted(t: Stored) -> bool:
    """Recorded from what the study knew, never launched (study/predict.py)."""
    return bool(t.user_attrs.get("predicted"))


def _mapping(t: Stored, name: str) -> dict[str, Any]:
    value: dict[str, Any] = t.user_attrs.get(name) or {}
    return value


def cause_of(t: Stored) -> dict[str, Any]:
    """invalid_config: the knob values that cannot run here ({}: none stored)."""
    return _mapping(t, "cause")


def loss_check_of(t: Stored) -> dict[str, Any]:
    """The numerics check's verdict ({}: none ran)."""
    return _mapping(t, "loss_check")


def metrics_of(t: Stored) -> dict[str, Any]:
    return _mapping(t, "metrics")


def fingerprint_of(t: Stored) -> dict[str, Any]:
    return _mapping(t, "fingerprint")


def telemetry_of(t: Stored) -> dict[str, Any] | None:
    """The GPUs' telemetry over the trial (None: none sampled)."""
    tele: dict[str, Any] | None = t.user_attrs.get("telemetry") or None
    return tele
