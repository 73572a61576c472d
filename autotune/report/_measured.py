"""What the HTML page shows beyond `collect`: read from the study itself (each trial's raw step
samples, the latency limits, the GPUs a trial holds), computed before anything is drawn."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any, TypedDict

from autotune.documents import study_attrs
from autotune.documents.record import RecordError, TrialRecord
from autotune.documents.record import telemetry_of as stored_telemetry
from autotune.report._data import Report, Row
from autotune.status import Status

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

# The phases of a trial process, in the order they happen (workloads/trial.py phases_s); "checks" is
# the numerics guard's: the loss check in the trial (phases_s "check") and its reference trial, a
# process of its own (phases_s "reference", outside the trial's wall time); "other" is the wall time
# no phase accounts for. "confirmation": a confirmation process, whose phases the study does not
# keep (its wall time only)
PHASES = ("start", "build", "compile", "checks", "warmup", "measure", "other", "confirmation")
SPREAD_QUANTILES = (0.1, 0.9)  # error bars: the 10th and 90th percentile of the measured steps


class Phases(TypedDict):
    """One process's bar of the time chart: a trial's (phases_of) or a confirmation sample's."""

    number: int | str  # the trial; "c3.1" for trial 3's second confirmation sample
    state: str
    seconds: dict[str, float]  # by phase (PHASES)
    wall_s: float | None  # a confirmation sample's, where the study stored it


class Measured(TypedDict):
    """What the page shows beyond collect (measured)."""

    spread: dict[int, tuple[float, float]]  # tokens/s at the slow and fast end of a trial's steps
    phases: list[Phases]  # each process's bar, the trials' in their order, then the confirmation's
    limits: dict[str, float]  # the study's latency limits (study.limits)
    gpus: int  # the GPUs of one trial


def measured(data: Report, study: optuna.Study | None) -> Measured:
    """Per-trial spread and phases, the study's latency limits and the GPUs of one trial."""
    config = (study_attrs.config(study) or {}) if study is not None else {}
    return {
        "spread": _spread(data, study) if study is not None else {},
        "phases": sorted(
            (p for r in data.trials if (p := phases_of(r)) is not None),
            key=lambda p: p["number"],
        )
        + confirmation_phases(data),
        "limits": {
            k: v
            for k, v in ((config.get("study") or {}).get("limits") or {}).items()
            if v is not None
        },
        "gpus": int((config.get("workload") or {}).get("world_size") or 1),
    }


def _spread(data: Report, study: optuna.Study) -> dict[int, tuple[float, float]]:
    """tokens/s per GPU at the slow and fast end of each ok trial's measured steps (its median
    scaled by median step time / step-time quantile): the error bar of a single measurement."""
    tokens = {r.number: r.figure for r in data.trials if r.state == Status.OK}
    spread = {}
    for t in study.get_trials(deepcopy=False):
        if t.number not in tokens:
            continue
        steps = _steps(t)
        if len(steps) < 2:
            continue
        median = statistics.median(steps)
        cuts = statistics.quantiles(
            steps, n=20, method="inclusive"
        )  # 5% steps: [1] is p10, [17] is p90
        fast_step, slow_step = cuts[1], cuts[17]
        spread[t.number] = (
            tokens[t.number] * median / slow_step,
            tokens[t.number] * median / fast_step,
        )
    return spread


def _steps(trial: FrozenTrial) -> list[float]:
    try:
        return [
            s for s in TrialRecord.of(trial).step_times if isinstance(s, (int, float)) and s > 0
        ]
    except RecordError:
        return []


def telemetry_of(study: optuna.Study, number: int) -> tuple[int, dict[str, Any]] | None:
    """A trial's recorded telemetry (power, clocks over its measured window), None where it has
    none."""
    trial = next((t for t in study.get_trials(deepcopy=False) if t.number == number), None)
    tele = stored_telemetry(trial) if trial is not None else None
    return (number, tele) if isinstance(tele, dict) and tele.get("series") else None


def confirmation_phases(data: Report) -> list[Phases]:
    """The confirmation's processes as bars of the time chart ("c3.1": trial 3's second sample):
    each one's stored wall time, else its trial's search process's (report/_summary.cost)."""
    conf = data.confirmation
    walls = {r.number: r.wall_s for r in data.trials if r.wall_s}
    out: list[Phases] = []
    for st in conf.arms if conf else []:
        runs = st.runs
        stored = st.walls_s or []
        for i in range(runs):
            wall = stored[i] if i < len(stored) else walls.get(st.trial, 0.0)
            seconds = {p: 0.0 for p in PHASES}
            seconds["confirmation"] = float(wall or 0.0)
            label = f"c{st.trial}.{i}"
            out.append(
                {"number": label, "state": "confirmation", "seconds": seconds, "wall_s": wall}
            )
    return out


def phases_of(row: Row) -> Phases | None:
    """One trial's seconds by phase (warm-up without the compile it contains; a process that kept
    no phases, a timeout's, all "other"), None for a trial never started."""
    raw = row.phases_s or {}
    if not row.wall_s:
        return None
    seconds = {p: float(raw.get(p, 0.0)) for p in PHASES if p != "other"}
    reference = float(raw.get("reference", 0.0))
    seconds["checks"] = float(raw.get("check", 0.0)) + reference
    seconds["warmup"] = max(0.0, seconds["warmup"] - seconds["compile"])
    seconds["other"] = max(0.0, row.wall_s + reference - sum(seconds.values()))
    wall = row.wall_s + reference
    return {"number": row.number, "state": row.state, "seconds": seconds, "wall_s": wall}
