"""What a study found, as plain data (no torch, no GPU): every renderer draws from `collect`'s
result."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune import metrics, tasks
from autotune.documents import nightly, study_attrs
from autotune.documents.record import (
    Metric,
    RecordError,
    TrialRecord,
    has_record,
    status_of,
    telemetry_of,
)
from autotune.report import _effects, _summary
from autotune.report._data import Report, Row, Stored, TimeSpent
from autotune.report._excluded import excluded
from autotune.report._table import pareto, row_of
from autotune.space import KNOBS
from autotune.status import Status
from autotune.study import bound, disturbed, peaks
from autotune.study.chosen import chosen_summary
from autotune.study.history import History, current_confirmation, value_of


def collect(
    study: optuna.Study, study_dir: Path | None = None, train_tokens: float | None = None
) -> Report:
    """Everything the report shows, as plain data with typed sections (report/_data.py).
    train_tokens: the full run the projection is of (None: the YAML's study.train_tokens, else no
    projection)."""
    trials = study.get_trials(deepcopy=False)
    config = study_attrs.config(study) or {}
    h = History.of(study)
    baseline = h.baseline
    base_value = value_of(baseline) if baseline else None
    rows = [row_of(t, base_value) for t in trials if _listed(t)]
    # a completed row has its figure (row_of)
    ok = sorted(
        (r for r in rows if r.state == Status.OK), key=lambda r: -(r.tokens_per_s_per_gpu or 0)
    )
    others = [r for r in rows if r.state != Status.OK]
    searched = searched_knobs(trials)
    conf = current_confirmation(study, h)
    steady = _steadiness(baseline)
    base_row = next((r for r in ok if baseline and r.number == baseline.number), None)
    chosen = chosen_summary(study, h)
    _flag(rows, base_row, chosen, _unsteady_flag(steady))
    history, skipped = _nights(study_dir)
    gpus = int((config.get("workload") or {}).get("world_size") or 1)
    noise = _effects.noise(conf, ok)
    data = Report(
        study=study.study_name,
        device=study_attrs.device(study),
        task=_task_of(config),
        model=config.get("model"),
        workload=config.get("workload"),
        searched=searched,
        counts=_counts(rows, trials),
        baseline=base_row,
        baseline_steadiness=steady,
        best=ok[0] if ok else None,
        mfu_flops=ok[0].flops if ok else None,
        chosen=None,  # the headline, from the rows (_derived)
        confirmation=conf,
        step_spread_pct_median=_median_spread(ok),
        trials=ok + others,
        failures=_failures(others),
        excluded=excluded(study, rows),
        noise=noise,
        time=_time(rows),
        best_telemetry=_telemetry(trials, ok[0].number if ok else None),
        check_history=history,
        check_history_skipped=skipped,
        front=pareto_front(rows),
        gpus=gpus,
        best_yaml=written_choice(study_dir),
        # what became of the steps past the edge of the list for the best (search/edges.py)
        edges=study_attrs.edges_note(study) or None,
        # the gain found over your setting, or a bound on what any configuration measured may gain
        bound=bound.statement(h, conf),
        # expandable segments offered to a variable-length job that ran out of memory or came close
        alloc_offer=peaks.alloc_offer(h, tasks.task(_task_of(config))),
        numerics_checked=_summary.numerics_checked(ok + others),
        effects=_effects.effects(ok, searched, noise["pct"]),
        cost=_summary.cost(ok + others, conf, gpus, study_attrs.device(study)),
        projection=None,  # of the headline (_derived)
        disturbed=disturbed.disturbed(h, conf),
    )
    return _derived(data, chosen, train_tokens or _train_tokens(config))


def _flag(
    rows: list[Row], base: Row | None, chosen: dict[str, Any] | None, flag: str | None
) -> None:
    """Every "x baseline" but the baseline's own carries the flag of an unsteady baseline."""
    for r in rows:
        r.speedup_flag = flag if r.speedup is not None and r is not base else None
    if chosen:
        chosen["speedup_flag"] = flag if chosen["speedup_vs_baseline"] is not None else None


def _median_spread(ok: list[Row]) -> float | None:
    """The median step-time spread of the completed rows (the upper median of an even count)."""
    spreads = sorted(r.step_spread_pct for r in ok if r.step_spread_pct is not None)
    return spreads[len(spreads) // 2] if spreads else None


def _nights(study_dir: Path | None) -> tuple[list[dict[str, Any]], list[str]]:
    """History.jsonl's nights of autotune check beside the study, each as written (the report's
    JSON shows it as is), and the lines that could not be read."""
    nights, skipped = nightly.read(study_dir / nightly.FILE) if study_dir is not None else ([], [])
    return [n.doc for n in nights], skipped


def _listed(t: optuna.trial.FrozenTrial) -> bool:
    """A trial the report lists: not a repeat (told as the trial it repeats), and given a
    configuration. A trial waiting in the queue (one a search left enqueued) or asked and never
    given its point has no knobs to show: it was never measured."""
    if status_of(t) == Status.DUPLICATE or t.state == TrialState.WAITING:
        return False
    return has_record(t) or bool(t.params)


def _train_tokens(config: dict[str, Any]) -> float | None:
    """The YAML's study.train_tokens: the full run the projection is of (None: no projection)."""
    tokens: float | None = (config.get("study") or {}).get("train_tokens")
    return tokens


def _task_of(config: dict[str, Any]) -> str:
    return str((config.get("workload") or {}).get("task") or "train")


def _telemetry(trials: list[optuna.trial.FrozenTrial], number: int | None) -> Stored | None:
    """The search's best trial's telemetry (power, clocks) with `power_cap`: the power or clock
    limit its measured steps ran at (metrics.power_cap, None: none seen); None without."""
    tele = next((telemetry_of(t) for t in trials if t.number == number), None)
    return {**tele, "power_cap": metrics.power_cap(tele)} if isinstance(tele, dict) else None


def _derived(data: Report, chosen: dict[str, Any] | None, tokens: float | None) -> Report:
    """What is computed from the sections: the headline (of study/chosen.chosen_summary's choice,
    with its row) and the projection of a full run."""
    data.chosen = _summary.headline(data, chosen)
    data.projection = _summary.projection(data.chosen, data.cost, tokens, data.gpus)
    return data


def searched_knobs(trials: list[optuna.trial.FrozenTrial]) -> list[str]:
    """The knobs the search varied: the catalogue's in its order, then a command job's own (its
    command.knobs with values), in the order the study first suggested them."""
    names = [k for k in KNOBS if any(k in t.params for t in trials)]
    own = [p for t in trials for p in t.params if p not in KNOBS]
    return names + list(dict.fromkeys(own))


def _unsteady_flag(steady: dict[str, Any] | None) -> str | None:
    """What every "x baseline" carries when the baseline is unsteady (None: it is steady)."""
    if not steady or not steady["unsteady"]:
        return None
    return steady.get("flag") or f"baseline unsteady: spread {steady['spread_pct']:.0f}%"


def _window_steadiness(window: dict[str, Any]) -> dict[str, Any]:
    """A command baseline's steadiness: whether its window settled (command/window.py). Its steps'
    own spread says nothing there: a length-grouped job's rates differ 6x within a cycle, by design.
    """
    return {
        "spread_pct": window.get("half_width_pct"),
        "limit_pct": None,
        "rule": "a command job's window settled (command.half_width_pct, whole cycles)",
        "unsteady": not window.get("settled"),
        "flag": f"baseline unsteady: window {window.get('said', 'not settled')}",
    }


def _steadiness(baseline: optuna.trial.FrozenTrial | None) -> dict[str, Any] | None:
    """metrics.steadiness of the baseline's raw step times (a command's: its window's); None without
    a baseline or readable steps."""
    try:
        record = TrialRecord.of(baseline) if baseline else None
    except RecordError:
        return None
    if record is not None and isinstance(record.metric(Metric.WINDOW), dict):
        return _window_steadiness(record.metric(Metric.WINDOW))
    steps = record.step_times if record is not None else []
    numbers = [
        x for x in steps if isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0
    ]
    return metrics.steadiness(numbers) if numbers else None


def written_choice(study_dir: Path | None) -> int | None:
    """The trial best.yaml beside the study names as chosen; None where there is no such file (a
    search still confirming, or one stopped before it wrote it) or it cannot be read."""
    from autotune import yamlio
    from autotune.errors import AutotuneError

    path = study_dir / "best.yaml" if study_dir is not None else None
    if path is None or not path.is_file():
        return None
    try:
        chosen = (yamlio.read(path, "best.yaml") or {}).get("chosen") or {}
    except (AutotuneError, OSError, AttributeError):
        return None
    trial = chosen.get("trial") if isinstance(chosen, dict) else None
    return trial if isinstance(trial, int) else None


def pareto_front(rows: list[Row]) -> list[Row]:
    """generate studies: the measured trials (ok or over_limit) that no other beats on both output
    tokens/s (higher) and p99 time per output token (lower), fastest token first; [] for training.
    """
    pts = [r for r in rows if r.state in (Status.OK, Status.OVER_LIMIT)]
    return pareto(pts, up=lambda r: r.tokens_per_s_per_gpu, down=lambda r: r.tpot_ms_p99)


def _failures(others: list[Row]) -> dict[str, Stored]:
    """Failed and predicted trials by status: how many, which, one example reason."""
    failures: dict[str, Stored] = {}
    for r in others:
        if r.state in ("running", "waiting"):
            continue
        entry = failures.setdefault(
            r.state + (" (predicted)" if r.predicted else ""),
            {"count": 0, "trials": [], "example": r.reason},
        )
        entry["count"] += 1
        entry["trials"].append(r.number)
    return failures


def _counts(rows: list[Row], trials: list[optuna.trial.FrozenTrial]) -> dict[str, int]:
    counts = Counter(r.state + (" (predicted)" if r.predicted else "") for r in rows)
    duplicates = sum(1 for t in trials if status_of(t) == Status.DUPLICATE)
    counts["duplicate (not launched)"] = duplicates
    return dict(sorted((k, v) for k, v in counts.items() if v))


def _time(rows: list[Row]) -> TimeSpent:
    """Seconds in trial processes, by phase (warm-up shown without the compile estimate it
    contains). The loss check's reference runs in a trial process of its own: its seconds count in
    the wall time too."""
    phases: dict[str, float] = defaultdict(float)
    wall = 0.0
    for r in rows:
        wall += (r.wall_s or 0.0) + (r.phases_s or {}).get("reference", 0.0)
        for k, v in (r.phases_s or {}).items():
            phases[k] += v
    if phases:
        phases["warmup"] -= phases.get("compile", 0.0)
        timed = sum((r.wall_s or 0) + r.phases_s.get("reference", 0.0) for r in rows if r.phases_s)
        phases["other"] = max(0.0, timed - sum(phases.values()))
    started = [r for r in rows if r.wall_s]
    return {
        "trial_wall_s": wall,
        "phases_s": dict(phases),
        "processes": len(started),
        "started_ahead": sum(1 for r in started if r.prestarted),
        "forked": sum(1 for r in started if r.forked),
    }
