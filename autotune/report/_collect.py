"""What a study found, as plain data (no torch, no GPU): every renderer draws from `collect`'s
result."""

from __future__ import annotations

import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import optuna

from autotune import metrics, nightly
from autotune.record import Metric, RecordError, TrialRecord
from autotune.report._table import pareto, row_of
from autotune.search.best import chosen_summary
from autotune.search.history import History, current_confirmation, value_of
from autotune.space import KNOBS


def collect(study: optuna.Study, study_dir: Path | None = None) -> dict[str, Any]:
    """Everything the report shows, as plain data."""
    trials = study.get_trials(deepcopy=False)
    attrs = study.user_attrs
    config = attrs.get("config", {})
    h = History.of(study)
    completed, baseline = h.completed, h.baseline
    base_value = value_of(baseline) if baseline else None
    rows = [row_of(t, base_value) for t in trials if t.user_attrs.get("status") != "duplicate"]
    ok = sorted((r for r in rows if r["state"] == "ok"), key=lambda r: -r[Metric.TOKENS_PER_GPU])
    others = [r for r in rows if r["state"] != "ok"]
    searched = [k for k in KNOBS if any(k in t.params for t in trials)]

    best = ok[0] if ok else None
    conf = current_confirmation(study, h)
    confirmation = _confirmation(conf)
    steady = _steadiness(baseline)
    flag = _unsteady_flag(steady)
    for r in rows:
        r["speedup_flag"] = flag if r["speedup"] is not None else None
    chosen = chosen_summary(study, h) if conf is None or confirmation is not None else None
    if chosen:
        chosen["speedup_flag"] = flag if chosen["speedup_vs_baseline"] is not None else None
    spreads = sorted(r["step_spread_pct"] for r in ok if r["step_spread_pct"] is not None)
    history, skipped = nightly.read(study_dir / nightly.FILE) if study_dir is not None else ([], [])
    return {
        "study": study.study_name,
        "device": attrs.get("device"),
        "task": (config.get("workload") or {}).get("task") or "train",
        "model": config.get("model"),
        "workload": config.get("workload"),
        "searched": searched,
        "counts": _counts(rows, trials),
        "baseline": next((r for r in ok if baseline and r["number"] == baseline.number), None),
        "baseline_steadiness": steady,
        "best": best,
        "mfu_flops": best and best["flops"],  # how MFU's FLOPs per token were obtained: counted, or 6N + 12LdT
        "chosen": chosen,
        "confirmation": confirmation,
        "step_spread_pct_median": spreads[len(spreads) // 2] if spreads else None,
        "trials": ok + others,
        "failures": _failures(others),
        "importance": _importance(study, completed, searched),
        "knob_effects": _effects(ok, searched),
        "time": _time(rows),
        "best_telemetry": next(
            (t.user_attrs.get("telemetry") or None for t in trials if best and t.number == best["number"]), None
        ),
        "check_history": history,
        "check_history_skipped": skipped,
        "front": pareto_front(rows),
    }


def _unsteady_flag(steady: dict[str, Any] | None) -> str | None:
    """What every "x baseline" carries when the baseline is unsteady (None: it is steady)."""
    if not steady or not steady["unsteady"]:
        return None
    return steady.get("flag") or f"baseline unsteady: spread {steady['spread_pct']:.0f}%"


def _window_steadiness(window: dict[str, Any]) -> dict[str, Any]:
    """A command baseline's steadiness: whether its window settled (workloads/window.py). Its steps'
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
    numbers = [x for x in steps if isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0]
    return metrics.steadiness(numbers) if numbers else None


def _confirmation(conf: dict[str, Any] | None) -> dict[str, Any] | None:
    """What best.yaml chose, re-measured in fresh processes; each interval recomputed from its
    samples (None, with why, where they bound nothing: a study confirmed before that rule printed
    absurd bounds)."""
    keys = ("trial", "median", "samples", "search_value", "failures")
    if not conf or not all(isinstance(st, dict) and set(keys) <= set(st) for st in conf["stats"]):
        return None
    stats = []
    for st in conf["stats"]:
        ci, why = metrics.bounded_interval(st["samples"])
        stats.append({**{k: st[k] for k in keys}, "ci95": ci, "ci95_why": why})
    return {"chosen": conf["chosen"], "why": conf["why"], "rounds_done": conf["rounds_done"], "stats": stats}


def pareto_front(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """generate studies: the measured trials (ok or over_limit) that no other beats on both output
    tokens/s (higher) and p99 time per output token (lower), fastest token first; [] for training.
    """
    pts = [
        r
        for r in rows
        if r["state"] in ("ok", "over_limit")
        and r[Metric.TOKENS_PER_GPU] is not None
        and r.get("tpot_ms_p99") is not None
    ]
    return pareto(pts, up=lambda r: r[Metric.TOKENS_PER_GPU], down=lambda r: r["tpot_ms_p99"])


# Importance is shown where it can mean something: over IMPORTANCE_MIN_TRIALS completed trials or
# more, and
# for a knob only when each of its values ran in IMPORTANCE_MIN_PER_VALUE of them or more. Computed
# from a
# handful of trials it said "compile 0.00" where the one eager trial ran at 0.35x (issue 29).
IMPORTANCE_MIN_TRIALS = 5
IMPORTANCE_MIN_PER_VALUE = 2
IMPORTANCE_RULE = (
    f"{IMPORTANCE_MIN_TRIALS}+ completed trials, each value of a knob in {IMPORTANCE_MIN_PER_VALUE}+ of them"
)


def _importance(study: optuna.Study, completed: list[optuna.trial.FrozenTrial], searched: list[str]) -> dict[str, Any]:
    """Optuna's PED-ANOVA parameter importance over the completed trials (fast, needs no
    scikit-learn), for the knobs IMPORTANCE_RULE allows; `not_meaningful` says why each other varied
    knob has no number yet."""
    seen = {k: Counter(str(t.params[k]) for t in completed if k in t.params) for k in searched}
    varied = [k for k in searched if len(seen[k]) > 1]
    if len(completed) < IMPORTANCE_MIN_TRIALS or not varied:
        why = f"not yet meaningful: needs {IMPORTANCE_RULE} ({len(completed)} completed)"
        return {"values": None, "why": why, "not_meaningful": {}}
    rare = {k: _rare(k, seen[k]) for k in varied if min(seen[k].values()) < IMPORTANCE_MIN_PER_VALUE}
    params = [k for k in varied if k not in rare]
    if not params:
        return {"values": None, "why": f"not yet meaningful: needs {IMPORTANCE_RULE}", "not_meaningful": rare}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            values = optuna.importance.get_param_importances(
                study, params=params, evaluator=optuna.importance.PedAnovaImportanceEvaluator()
            )
    except Exception as err:  # e.g. trials with different parameter sets
        return {"values": None, "why": f"Optuna could not compute it: {err}", "not_meaningful": rare}
    why = f"Optuna PED-ANOVA over {len(completed)} completed trials"
    return {"values": dict(values), "why": why, "not_meaningful": rare}


def _rare(knob: str, counts: Counter[str]) -> str:
    """Why a knob's importance is not yet meaningful: its rarest value and how often it ran."""
    value, n = min(counts.items(), key=lambda kv: kv[1])
    return f"{knob}={value} ran in {n} completed trial(s), needs {IMPORTANCE_MIN_PER_VALUE}"


def _failures(others: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Failed and predicted trials by status: how many, which, one example reason."""
    failures: dict[str, dict[str, Any]] = {}
    for r in others:
        if r["state"] in ("running", "waiting"):
            continue
        entry = failures.setdefault(
            r["state"] + (" (predicted)" if r["predicted"] else ""), {"count": 0, "trials": [], "example": r["reason"]}
        )
        entry["count"] += 1
        entry["trials"].append(r["number"])
    return failures


def _effects(ok: list[dict[str, Any]], searched: list[str]) -> dict[str, dict[str, float]]:
    """The best tokens/s at each value of each searched knob."""
    effects: dict[str, dict[str, float]] = {}
    for knob in searched:
        best_at: dict[str, float] = {}
        for r in ok:
            value = str(r["knobs"].get(knob))
            best_at[value] = max(best_at.get(value, 0.0), r[Metric.TOKENS_PER_GPU])
        effects[knob] = best_at
    return effects


def _counts(rows: list[dict[str, Any]], trials: list[optuna.trial.FrozenTrial]) -> dict[str, int]:
    counts = Counter(r["state"] + (" (predicted)" if r["predicted"] else "") for r in rows)
    counts["duplicate (not launched)"] = sum(1 for t in trials if t.user_attrs.get("status") == "duplicate")
    return dict(sorted((k, v) for k, v in counts.items() if v))


def _time(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Seconds in trial processes, by phase (warm-up shown without the compile estimate it
    contains). The loss check's reference runs in a trial process of its own: its seconds count in
    the wall time too."""
    phases: dict[str, float] = defaultdict(float)
    wall = 0.0
    for r in rows:
        wall += (r["wall_s"] or 0.0) + (r["phases_s"] or {}).get("reference", 0.0)
        for k, v in (r["phases_s"] or {}).items():
            phases[k] += v
    if phases:
        phases["warmup"] -= phases.get("compile", 0.0)
        timed = sum((r["wall_s"] or 0) + r["phases_s"].get("reference", 0.0) for r in rows if r["phases_s"])
        phases["other"] = max(0.0, timed - sum(phases.values()))
    started = [r for r in rows if r["wall_s"]]
    return {
        "trial_wall_s": wall,
        "phases_s": dict(phases),
        "processes": len(started),
        "started_ahead": sum(1 for r in started if r["prestarted"]),
    }
