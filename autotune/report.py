"""autotune report: what a study found, read from its Optuna storage (no torch, no GPU).

The data is computed first (`collect`), then rendered: Rich tables, JSON, Markdown, or HTML with plots.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.errors import ConfigError
from autotune.runner import nccl_used
from autotune.space import KNOBS
from autotune.study import current_confirmation, mask_url

PHASES = ("start", "build", "compile", "warmup", "measure")


def open_study(path: Path | None, study_name: str | None, storage: str | None) -> tuple[optuna.Study, Path | None]:
    """The study of trials/<name> (its study.db), or --study NAME --storage URL."""
    if storage is None:
        if path is None:
            raise ConfigError("STUDY_DIR: give trials/<name>, or --study NAME --storage URL")
        db = path / "study.db"
        if not db.is_file():
            raise ConfigError(f"STUDY_DIR: no study.db in {path}; give trials/<name> or --storage URL")
        storage = f"sqlite:///{db.resolve()}"
    from autotune.study import storage_of

    url, storage = storage, storage_of(storage)
    names = [s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)]
    name = study_name or (path.name if path is not None and path.name in names else None)
    if name is None and len(names) == 1:
        name = names[0]
    if name not in names:
        raise ConfigError(f"--study: {name!r} is not in {mask_url(url)}; studies there: {', '.join(names) or 'none'}")
    return optuna.load_study(study_name=name, storage=storage), path


def _row(t: optuna.trial.FrozenTrial, base_value: float | None) -> dict[str, Any]:
    a = t.user_attrs
    m = a.get("metrics") or {}
    state = {TrialState.RUNNING: "running", TrialState.WAITING: "waiting"}.get(t.state, a.get("status", "failed"))
    if t.state == TrialState.FAIL and "status" not in a:
        state = "worker_lost"  # failed outside autotune's objective (e.g. Optuna's own stale-trial handling)
    return {
        "number": t.number,
        "state": state,
        "knobs": a.get("knobs") or t.params,
        "tokens_per_s_per_gpu": m.get("tokens_per_s_per_gpu"),
        "mfu": m.get("mfu"),
        "peak_mem_gib": m.get("peak_mem_gib"),
        "speedup": (t.value / base_value) if (t.value is not None and base_value) else None,
        "step_spread_pct": (m.get("step_time") or {}).get("spread_pct"),
        "reason": a.get("reason", ""),
        "predicted": bool(a.get("predicted")),
        "phases_s": a.get("phases_s"),
        "wall_s": a.get("wall_s"),
        "fingerprint": a.get("fingerprint"),
        "failed_rank": a.get("failed_rank"),
        "nccl_used": nccl_used(a.get("nccl")),
    }


def collect(study: optuna.Study, study_dir: Path | None = None) -> dict[str, Any]:
    """Everything the report shows, as plain data."""
    trials = study.get_trials(deepcopy=False)
    attrs = study.user_attrs
    config = attrs.get("config", {})
    baseline_params = None
    baseline = None
    completed = [t for t in trials if t.state == TrialState.COMPLETE]
    # The baseline is the first enqueued point: trial 0 unless it was interrupted and re-queued.
    for t in trials:
        if t.user_attrs.get("status") not in ("duplicate",):
            baseline_params = t.params
            break
    if baseline_params is not None:
        baseline = next((t for t in completed if t.params == baseline_params), None)
    base_value = baseline.value if baseline else None
    rows = [_row(t, base_value) for t in trials if t.user_attrs.get("status") != "duplicate"]
    ok = sorted((r for r in rows if r["state"] == "ok"), key=lambda r: -r["tokens_per_s_per_gpu"])
    others = [r for r in rows if r["state"] != "ok"]
    searched = [k for k in KNOBS if any(k in t.params for t in trials)]

    failures: dict[str, dict[str, Any]] = {}
    for r in others:
        if r["state"] in ("running", "waiting"):
            continue
        key = r["state"] + (" (predicted)" if r["predicted"] else "")
        entry = failures.setdefault(key, {"count": 0, "trials": [], "example": r["reason"]})
        entry["count"] += 1
        entry["trials"].append(r["number"])

    effects: dict[str, dict[str, float]] = {}
    for knob in searched:
        best_at: dict[str, float] = {}
        for r in ok:
            value = str(r["knobs"][knob])
            best_at[value] = max(best_at.get(value, 0.0), r["tokens_per_s_per_gpu"])
        effects[knob] = best_at

    counts = Counter(r["state"] + (" (predicted)" if r["predicted"] else "") for r in rows)
    counts["duplicate (not launched)"] = sum(1 for t in trials if t.user_attrs.get("status") == "duplicate")
    phases: dict[str, float] = defaultdict(float)
    wall = 0.0
    for r in rows:
        wall += r["wall_s"] or 0.0
        for k, v in (r["phases_s"] or {}).items():
            phases[k] += v
    if phases:  # warm-up includes the compile estimate: show them apart
        phases["warmup"] -= phases.get("compile", 0.0)
        phases["other"] = max(0.0, sum((r["wall_s"] or 0) for r in rows if r["phases_s"]) - sum(phases.values()))
    best = ok[0] if ok else None
    conf = current_confirmation(study, completed)
    confirmation = None
    if conf:  # what best.yaml chose: re-measured in fresh processes, not the search's single best measurement
        confirmation = {"chosen": conf["chosen"], "why": conf["why"], "rounds_done": conf["rounds_done"],
                        "stats": [{k: st[k] for k in ("trial", "median", "ci95", "samples", "search_value", "failures")}
                                  for st in conf["stats"]]}
    spreads = sorted(r["step_spread_pct"] for r in ok if r["step_spread_pct"] is not None)
    history = []
    if study_dir is not None and (study_dir / "history.jsonl").is_file():
        history = [json.loads(line) for line in (study_dir / "history.jsonl").read_text().splitlines() if line.strip()]
    return {
        "study": study.study_name,
        "device": attrs.get("device"),
        "model": config.get("model"),
        "workload": config.get("workload"),
        "searched": searched,
        "counts": dict(sorted((k, v) for k, v in counts.items() if v)),
        "baseline": next((r for r in ok if baseline and r["number"] == baseline.number), None),
        "best": best,
        "confirmation": confirmation,
        "step_spread_pct_median": spreads[len(spreads) // 2] if spreads else None,
        "trials": ok + others,
        "failures": failures,
        "importance": _importance(study, completed, searched),
        "knob_effects": effects,
        "time": {"trial_wall_s": wall, "phases_s": dict(phases)},
        "best_telemetry": _best_telemetry(study, best),
        "check_history": history,
    }


def _importance(study: optuna.Study, completed: list[optuna.trial.FrozenTrial], searched: list[str]) -> dict[str, Any]:
    """Optuna's PED-ANOVA parameter importance over the completed trials (fast, needs no scikit-learn)."""
    params = [k for k in searched if len({t.params.get(k) for t in completed if k in t.params}) > 1]
    if len(completed) < 3 or not params:
        return {"values": None, "why": f"needs 3+ completed trials with a varied knob ({len(completed)} completed)"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            values = optuna.importance.get_param_importances(
                study, params=params, evaluator=optuna.importance.PedAnovaImportanceEvaluator())
    except Exception as err:  # e.g. trials with different parameter sets
        return {"values": None, "why": f"Optuna could not compute it: {err}"}
    return {"values": dict(values), "why": f"Optuna PED-ANOVA over {len(completed)} completed trials"}


def _best_telemetry(study: optuna.Study, best: dict[str, Any] | None) -> dict[str, Any] | None:
    if best is None:
        return None
    tele = study.trials[best["number"]].user_attrs.get("telemetry")
    return tele or None


def to_json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, default=str)


def _fmt(value: Any, kind: str) -> str:
    if value is None:
        return "-" if kind != "mfu" else "n/a"
    return {"tok": f"{value:,.0f}", "mfu": f"{100 * value:.1f}%", "x": f"{value:.2f}x", "gib": f"{value:.2f}",
            "pct": f"{value:.1f}%"}.get(kind, str(value))


def to_markdown(data: dict[str, Any], top: int = 10) -> str:
    """A PR-comment-sized summary."""
    lines = [f"### autotune: {data['study']} ({data['device']})", ""]
    best, base = data["best"], data["baseline"]
    if best:
        lines.append(f"Best in the search: **{_fmt(best['tokens_per_s_per_gpu'], 'tok')} tokens/s/GPU**, MFU {_fmt(best['mfu'], 'mfu')}, "
                     f"{_fmt(best['speedup'], 'x')} the baseline ({_fmt(base and base['tokens_per_s_per_gpu'], 'tok')}); "
                     f"trial {best['number']}: " + ", ".join(f"{k}={best['knobs'][k]}" for k in data["searched"]))
        lines.append("")
    conf = data["confirmation"]
    if conf:
        chosen = next(st for st in conf["stats"] if st["trial"] == conf["chosen"])
        lines.append(f"Chosen (best.yaml): **trial {conf['chosen']}**, confirmed {_confirmed(chosen)}; {conf['why']}")
        lines.append("")
    knobs = data["searched"]
    lines.append("| # | " + " | ".join(knobs) + " | tokens/s/GPU | x baseline | MFU | peak GiB | state |")
    lines.append("|---" * (len(knobs) + 6) + "|")
    for r in data["trials"][:top]:
        lines.append(f"| {r['number']} | " + " | ".join(str(r['knobs'].get(k)) for k in knobs)
                     + f" | {_fmt(r['tokens_per_s_per_gpu'], 'tok')} | {_fmt(r['speedup'], 'x')} | {_fmt(r['mfu'], 'mfu')}"
                     f" | {_fmt(r['peak_mem_gib'], 'gib')} | {r['state']}{' (predicted)' if r['predicted'] else ''} |")
    if data["failures"]:
        lines += ["", "Failed: " + "; ".join(f"{k}: {v['count']}" for k, v in data["failures"].items())]
    imp = data["importance"]["values"]
    if imp:
        lines += ["", "Importance: " + ", ".join(f"{k} {v:.2f}" for k, v in imp.items()) + _noise(data)]
    return "\n".join(lines) + "\n"


def _confirmed(st: dict[str, Any]) -> str:
    if st["median"] is None:
        return "no sample succeeded (" + "; ".join(st["failures"][:2]) + ")"
    lo, hi = st["ci95"]
    return (f"median {_fmt(st['median'], 'tok')} tokens/s/GPU over {len(st['samples'])} fresh processes "
            f"(95% interval {_fmt(lo, 'tok')} to {_fmt(hi, 'tok')}; search {_fmt(st['search_value'], 'tok')})")


def _noise(data: dict[str, Any]) -> str:
    spread = data["step_spread_pct_median"]
    return "" if spread is None else (f" (relative shares; the measured step-to-step spread is {spread:.1f}% "
                                      "median, so smaller differences between trials are noise)")


def render_rich(data: dict[str, Any], console: Any) -> None:
    """Tables for the terminal: trials best first, failures by reason, importance and knob effects, time."""
    from rich.table import Table

    knobs = data["searched"]
    nccl = any(r.get("nccl_used") for r in data["trials"])  # multi-GPU trials on NCCL: what it says it used
    t = Table(title=f"{data['study']} on {data['device']}: {len(data['trials'])} trials, best first")
    for col in ["#", *knobs, "tokens/s/GPU", "x baseline", "MFU", "peak GiB", *(["NCCL used"] if nccl else []),
                "state", "reason"]:
        t.add_column(col, overflow="fold")
    for r in data["trials"]:
        state = r["state"] + (" (predicted)" if r["predicted"] else "")
        t.add_row(str(r["number"]), *[str(r["knobs"].get(k)) for k in knobs], _fmt(r["tokens_per_s_per_gpu"], "tok"),
                  _fmt(r["speedup"], "x"), _fmt(r["mfu"], "mfu"), _fmt(r["peak_mem_gib"], "gib"),
                  *([r.get("nccl_used") or "-"] if nccl else []), state,
                  (r["reason"] or "").splitlines()[0][:60] if r["reason"] else "")
    console.print(t)
    conf = data["confirmation"]
    if conf:
        c = Table(title=f"Confirmation: top {len(conf['stats'])} re-measured in fresh processes, interleaved "
                        f"({conf['rounds_done']} rounds); chosen: trial {conf['chosen']}")
        for col in ("#", "search tokens/s/GPU", "confirmed", "failures"):
            c.add_column(col, overflow="fold")
        for st in conf["stats"]:
            c.add_row(str(st["trial"]) + (" (chosen)" if st["trial"] == conf["chosen"] else ""),
                      _fmt(st["search_value"], "tok"), _confirmed(st), "; ".join(st["failures"]) or "-")
        console.print(c)
        console.print(f"Why: {conf['why']}")
    if data["failures"]:
        f = Table(title="Failed and predicted-infeasible trials, by reason")
        for col in ("reason", "count", "trials", "example"):
            f.add_column(col, overflow="fold")
        for k, v in data["failures"].items():
            f.add_row(k, str(v["count"]), ", ".join(map(str, v["trials"])), (v["example"] or "").splitlines()[0][:100] if v["example"] else "")
        console.print(f)
    imp = data["importance"]
    k = Table(title=f"Which knobs mattered ({imp['why']}{_noise(data)})")
    k.add_column("knob")
    k.add_column("importance")
    k.add_column("best tokens/s/GPU at each value")
    for knob in knobs:
        value = (imp["values"] or {}).get(knob)
        effects = data["knob_effects"].get(knob, {})
        k.add_row(knob, "-" if value is None else f"{value:.2f}",
                  ", ".join(f"{v}: {_fmt(x, 'tok')}" for v, x in effects.items()))
    console.print(k)
    tm = data["time"]
    phases = ", ".join(f"{p} {s:,.0f} s" for p, s in tm["phases_s"].items())
    console.print("Trials by state: " + ", ".join(f"{k} {v}" for k, v in data["counts"].items()))
    console.print(f"Time in trial processes: {tm['trial_wall_s']:,.0f} s ({phases or 'no phase data'})")
    if data["check_history"]:
        last = data["check_history"][-1]
        console.print(f"Checks: {len(data['check_history'])}, last {last['checked_at']}: {last['status']}, ratio {last['ratio']:.3f}")
