"""The report's data: what `collect` gathers of a study, as typed classes (a `Row` a trial, one
`Report` a study), built once by the collector and read by attribute in every renderer.

`Report.to_dict` is the JSON that `autotune report --format json` writes and autotune.read_report
returns, key for key in the order the fields are declared; `Report.of` reads that JSON back. The
sections that are JSON the study stored, passed through as it is (the YAML's model, a trial's
fingerprint, history.jsonl's nights), stay plain dicts; the confirmation is the study's document
(documents/confirmation.py), written in its report form (Confirmation.report_dict)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from autotune.documents.confirmation import Confirmation
from autotune.knobs import Knobs

# A JSON object the report passes through as the study or a record stored it (free-form: the
# YAML's sections, a fingerprint, telemetry, a numerics check's record)
Stored = dict[str, Any]


class ChosenBaseline(TypedDict):
    """The baseline the chosen figure is compared with."""

    trial: int
    tokens_per_s_per_gpu: float | None  # its confirmed median, else its search measurement


class Chosen(TypedDict):
    """The report's headline (report/_summary.headline): best.yaml's choice with its row's
    figures, the gain over the baseline and its basis, what applying it costs."""

    trial: int
    why: str
    tokens_per_s_per_gpu: float  # its confirmed median, else its search measurement
    confirmed: bool
    samples: int  # fresh processes of the confirmation (0: not confirmed)
    ci95: list[float] | tuple[float, float] | None
    ci95_why: str | None
    search_tokens_per_s_per_gpu: float | None
    knobs: Knobs  # every knob set (None left out)
    changed: dict[str, tuple[Any, Any]]  # knob -> (the baseline's value, its value)
    baseline: ChosenBaseline | None
    speedup_vs_baseline: float | None
    speedup_basis: str  # how the gain was had (_summary.BASIS_*)
    gain: Stored | None  # confirmed medians' ratio with its 95% interval (intervals.gain)
    confirmation: Stored | None  # rounds done of rounds asked, complete
    written: bool  # whether best.yaml holds this choice yet
    numerics: Stored | None  # its quality cost (_summary.numerics_of)
    speedup_flag: str | None
    mfu: float | None  # scaled to its figure
    mfu_peaks: list[Stored]
    roofline: float | None
    power_cap: Stored | None
    compile_s: float | None  # its search trial's compile (cold)
    compile_warm_s: list[float]  # its confirmation processes' (the study's compile cache)
    peak_mem_gib: float | None
    runner_up: Stored | None


class Attempt(TypedDict):
    """One attempt of a numerics check: the candidate's and the reference's losses by step."""

    seed: int | None
    candidate: list[float]
    reference: list[float]
    gap_nats: float | None
    why: str | None  # its verdict's


class Evidence(TypedDict):
    """A failed numerics check's loss curves, and the study's noise floor."""

    attempts: list[Attempt]
    against: str | None  # the reference arithmetic
    floor_nats: float | None


class Group(TypedDict):
    """One group of left-out trials: one cause, its trials, reason, evidence and remedy."""

    title: str
    kind: str
    count: int
    predicted: int  # of them predicted without a run
    trials: list[int]
    taught_by: int | None  # the trial whose failure taught the rule
    reason: str
    evidence: Evidence | None
    remedy: str | None


class Noise(TypedDict):
    """The study's measurement noise in percent (None: unmeasured), and how it was had."""

    pct: float | None
    how: str


class TimeSpent(TypedDict):
    """Seconds in trial processes, by phase (collect's _time)."""

    trial_wall_s: float
    phases_s: dict[str, float]
    processes: int
    started_ahead: int  # processes started ahead (launch/prestart.py)
    forked: int  # processes forked by the study's fork server (launch/forkserver.py)


class KindCost(TypedDict):
    processes: int
    seconds: float


class Cost(TypedDict):
    """Every process the search ran, by kind (trials, references, confirmation), and its minutes
    (report/_summary.cost): GPU-minutes on a GPU, process-minutes on a CPU."""

    processes: int
    by_kind: dict[str, KindCost]
    seconds: float
    gpu_min: float | None  # None on a CPU: no GPU was spent
    minutes: NotRequired[float]  # in `unit` (a report written before them: gpu_min, GPU-minutes)
    unit: NotRequired[str]  # GPU-minutes, or process-minutes on a CPU
    measure_share: float | None  # the share spent measuring steps
    confirmation_estimated: bool  # a confirmation time taken from its trial's search process


class ValueEffect(TypedDict):
    """One value of a knob: its trials, best and median figure, its paired effect where any."""

    trials: int
    best: float
    median: float
    paired_pct: NotRequired[float]
    pairs: NotRequired[int]


class KnobEffect(TypedDict):
    """One knob's values and its effect size (report/_effects.py)."""

    values: dict[str, ValueEffect]
    reference: str | None  # its most-run value, the paired effects' reference
    effect_pct: float | None
    basis: str | None  # paired, or best at each value
    among: Stored | None  # a conditional knob's trials (None: every trial)
    above_noise: NotRequired[bool]


class Effects(TypedDict):
    knobs: dict[str, KnobEffect]
    ranked: list[str]  # the knobs above the noise, largest effect first


@dataclass
class Row:
    """One trial's line of the table (report/_table.py row_of): its knobs, figures and outcome.
    The figures are None where the trial did not measure them (MFU on a CPU: n/a, never guessed)."""

    number: int
    state: str  # ok, a failure's kind, running, waiting, unreadable
    knobs: Knobs
    tokens_per_s_per_gpu: float | None
    speedup: float | None  # its figure over the baseline's search measurement
    step_spread_pct: float | None  # (p90 - p10) / median of its measured step times
    half_width_pct: float | None  # its figure's 95% half-width within its process
    reason: str
    predicted: bool  # not run: predicted to fail by a rule an earlier trial taught
    phases_s: dict[str, float] | None
    wall_s: float | None
    prestarted: bool  # its process was started ahead (launch/prestart.py)
    forked: bool  # its process was forked by the study's fork server (launch/forkserver.py)
    fingerprint: Stored | None
    mfu_peaks: list[Stored]  # the peaks its MFU is read against (metrics.mfu_peaks)
    power_cap: Stored | None  # the power or clock limit its steps ran at (metrics.power_cap)
    beyond_list: Stored | None  # the values it ran beyond the user's list (search/edges.py)
    failed_rank: int | None
    loss_check: Stored | None  # the numerics check's record (search/loss_guard.py)
    nccl_used: str | None
    flops: str | None  # how its FLOPs per token were had: counted, or 6N + 12LdT
    mfu: float | None
    peak_mem_gib: float | None
    memory_estimate_gib: float | None
    ttft_ms: float | None
    tpot_ms_median: float | None
    tpot_ms_p99: float | None
    roofline_share: float | None
    tokens_per_joule: float | None
    padding_pct: float | None
    # what its "x baseline" carries when the baseline is unsteady (collect sets it)
    speedup_flag: str | None = None
    # busy: measured while another job disturbed it (search/host.py); quiet: sampled, nothing did;
    # None: not sampled
    host: str | None = None

    @property
    def figure(self) -> float:
        """Its tokens/s per GPU, for a completed row (row_of gives every "ok" row one)."""
        assert self.tokens_per_s_per_gpu is not None, f"trial {self.number} has no figure"
        return self.tokens_per_s_per_gpu


@dataclass
class Report:
    """Everything the report shows of one study."""

    study: str
    device: str | None  # the device its trials ran on (cuda, cpu), as the study recorded it
    task: str  # the workload's task (train, generate, command)
    model: Stored | None  # the YAML's model section, as the study stored it
    workload: Stored | None  # the YAML's workload section, as the study stored it
    searched: list[str]  # the knobs the search varied, the catalogue's order first
    counts: dict[str, int]  # trials by state (ok, failed kinds, running, ...)
    baseline: Row | None  # your setting's row; None where it did not complete
    baseline_steadiness: Stored | None  # how steady the baseline's steps were
    best: Row | None  # the search's best row (its single measurement)
    mfu_flops: str | None  # how MFU's FLOPs per token were had: counted, or 6N + 12LdT
    chosen: Chosen | None  # best.yaml's choice with its row's figures (_summary.headline)
    # the confirmation's rounds and its arms' statistics (the JSON form: Confirmation.report_dict)
    confirmation: Confirmation | None
    step_spread_pct_median: float | None  # the median step-time spread of the completed rows
    trials: list[Row]  # every listed trial: the completed best first, then the others
    failures: dict[str, Stored]  # the trials that did not complete, by kind, with their reasons
    excluded: list[Group]  # what the study ruled out and why (report/_excluded.py)
    noise: Noise  # the run-to-run noise the effects are judged against
    time: TimeSpent  # where the study's time went, by phase
    best_telemetry: Stored | None  # the best trial's power and clocks, with power_cap
    check_history: list[Stored]  # history.jsonl's nights of autotune check, as written
    check_history_skipped: list[str]  # history.jsonl's lines that could not be read
    front: list[Row]  # the rows on the front of speed and latency (generate)
    gpus: int  # the GPUs of one trial (workload.world_size)
    best_yaml: int | None  # the trial best.yaml names (None: no best.yaml beside the study)
    edges: str | None  # what became of the steps past the edge of the list
    bound: Stored | None  # the gain found over your setting, or a bound on any gain
    alloc_offer: str | None  # expandable segments offered to a job that ran out of memory
    numerics_checked: list[Stored]  # the rows' numerics checks
    effects: Effects  # each knob's effect, judged against the noise
    cost: Cost  # the study's GPU time: search and confirmation
    projection: Stored | None  # the chosen configuration's time and saving on a full run
    # the measurements the choice rests on that were taken while the host was busy (None: none;
    # study/disturbed.py)
    disturbed: Stored | None = None

    @classmethod
    def of(cls, data: Report | Stored) -> Report:
        """data as a Report: itself where it is one, else the JSON of one read back (to_dict)."""
        if isinstance(data, Report):
            return data
        given = dict(data)
        for key in ("baseline", "best"):
            given[key] = Row(**given[key]) if given[key] is not None else None
        for key in ("trials", "front"):
            given[key] = [Row(**r) for r in given[key]]
        conf = given["confirmation"]
        if conf is not None and not isinstance(conf, Confirmation):
            given["confirmation"] = Confirmation.from_json(conf)
        return cls(**given)

    def to_dict(self) -> Stored:
        """The plain dict that the JSON form writes (`autotune report --format json`,
        autotune.read_report), its keys in the order of the fields."""
        out = dataclasses.asdict(self)
        out["confirmation"] = self.confirmation.report_dict() if self.confirmation else None
        return out
