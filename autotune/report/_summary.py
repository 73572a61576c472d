"""The report's headline, defined once for every format: the chosen configuration with all its
knobs, its figure and gain against the baseline (and on what basis), the runner-up within noise,
what the whole search cost, and the projection of a full run."""

from __future__ import annotations

from typing import Any, TypedDict

from autotune import tasks
from autotune.documents.confirmation import Confirmation
from autotune.documents.record import Metric
from autotune.protocol import Knobs
from autotune.report._data import Chosen, Cost, Report, Row

# How a gain was obtained, named once: a ratio means something only with its basis beside it
BASIS_CONFIRMED = "confirmed median / the baseline's confirmed median of the same rounds"
BASIS_HALF = "confirmed median / the baseline's single search measurement"
BASIS_SEARCH = "single search measurements"


def headline(data: Report, c: dict[str, Any] | None) -> Chosen | None:
    """best.yaml's choice `c` (study/chosen.chosen_summary) with its row's knobs, memory and compile
    time, the baseline it is compared with and the gain's basis; None before a trial completed."""
    if not c:
        return None
    row = next((r for r in data.trials if r.number == c["trial"]), None)
    base = data.baseline
    value = c[Metric.TOKENS_PER_GPU]
    base_value, basis = _baseline_figure(c, base, data.confirmation)
    knobs = dict(c.get("knobs") or (row.knobs if row else {}))
    return {
        "trial": c["trial"],
        "why": c["why"],
        "tokens_per_s_per_gpu": value,
        "confirmed": bool(c["confirmed"]),
        "samples": c.get("samples", 0),
        "ci95": c.get("ci95"),
        "ci95_why": c.get("ci95_why"),
        "search_tokens_per_s_per_gpu": c.get("search_tokens_per_s_per_gpu"),
        "knobs": {k: v for k, v in knobs.items() if v is not None},
        "changed": _changed(knobs, base.knobs) if base else {},
        "baseline": None
        if base is None
        else {"trial": base.number, "tokens_per_s_per_gpu": base_value},
        "speedup_vs_baseline": value / base_value if base_value else None,
        "speedup_basis": basis,
        # the ratio of confirmed medians of the same rounds with its 95% interval (intervals.gain),
        # None where the baseline was not re-measured beside it
        "gain": c.get("gain"),
        # how far the confirmation got: rounds done of rounds asked, complete (None: none ran)
        "confirmation": c.get("confirmation"),
        # whether best.yaml holds this choice yet (collect: the file beside the study)
        "written": data.best_yaml == c["trial"],
        "numerics": numerics_of(knobs, row.loss_check if row else None),
        "speedup_flag": c.get("speedup_flag"),
        **_efficiency(data.task, row, value),
        # its search trial's compile (cold: the study's first of this configuration), and its
        # confirmation processes' (warm: the study's compile cache)
        "compile_s": (row.phases_s or {}).get("compile") if row else None,
        "compile_warm_s": _warm_compiles(data.confirmation, c["trial"]),
        "peak_mem_gib": row.peak_mem_gib if row else None,
        "runner_up": c.get("runner_up"),
    }


def _baseline_figure(
    c: dict[str, Any], base: Row | None, conf: Confirmation | None
) -> tuple[float | None, str]:
    """The baseline's figure the gain divides by, and the gain's basis: its confirmed median where
    the confirmation re-measured it (its own arm, or its candidate's), else its one search
    measurement."""
    if base is None:
        return None, "no baseline measured"
    again = conf.arm(base.number) if conf else None
    if c["confirmed"] and again and again.median:
        return again.median, BASIS_CONFIRMED
    return base.tokens_per_s_per_gpu, BASIS_HALF if c["confirmed"] else BASIS_SEARCH


def _warm_compiles(conf: Confirmation | None, trial: int) -> list[float]:
    """The compile seconds of a trial's confirmation processes (a candidate's, or the baseline's
    own arm's), where they were recorded."""
    st = conf.arm(trial) if conf else None
    seconds = (st.compile_s if st else None) or []
    return [x for x in seconds if isinstance(x, (int, float)) and x > 0]


def numerics_of(knobs: Knobs, check: dict[str, Any] | None) -> dict[str, Any] | None:
    """The chosen configuration's quality cost, where its arithmetic differs from the reference's
    (knobs.numerics: fp8, fp16, a compression hook, a bf16 reduction): its numerics check's gap in
    words (numerics.gap_text) and figures, or why it was not checked. None where the arithmetic is
    the reference's own."""
    from autotune import knobs as catalogue
    from autotune import numerics

    changed = catalogue.numerics(knobs)
    if not changed:
        return None
    what = ", ".join(f"{k} {v}" for k, v in changed.items())
    if not check:
        why = "no numerics check ran (study.loss_check.steps 0, or the task has none)"
        return {"checked": False, "changed": changed, "line": f"{what}: quality not checked, {why}"}
    if not check.get("passed"):
        why = check.get("why") or "its numerics check decided nothing"
        return {"checked": False, "changed": changed, "line": f"{what}: quality not checked, {why}"}
    keys = [*("gap_nats", "floor_nats", "study_floor_nats", "behind_share", "spikes", "steps")]
    keys += ["against", "covered_by"]
    return {
        "checked": True,
        "changed": changed,
        **{k: check.get(k) for k in keys},
        "line": f"{what}: {numerics.gap_text(check)}",
    }


def numerics_checked(rows: list[Row]) -> list[dict[str, Any]]:
    """Each arithmetic a numerics check of the study passed, from the trial that ran it (numerics_of
    with its trial number): what the quality of every fp8 or fp16 trial rests on, the chosen's or
    not. A failed check's trial is in the report's left-out list with its reason."""
    found = []
    for row in rows:
        check = row.loss_check or {}
        if check.get("attempts") and check.get("passed"):
            n = numerics_of(row.knobs or {}, check)
            found += [{"trial": row.number, **n}] if n else []
    return found


def _changed(knobs: Knobs, before: Knobs) -> dict[str, tuple[Any, Any]]:
    """The knobs set differently from the baseline (grad_accum_steps follows the batch)."""
    return {k: (before.get(k), v) for k, v in knobs.items() if before.get(k) != v}


class Efficiency(TypedDict):
    """The chosen configuration's efficiency, scaled to its figure (_efficiency)."""

    mfu: float | None
    mfu_peaks: list[dict[str, Any]]
    roofline: float | None
    power_cap: dict[str, Any] | None


def _efficiency(task: str, row: Row | None, value: float) -> Efficiency:
    """The task's efficiency figure (tasks.Task.columns: MFU for training, the roofline share for
    generation), scaled to the chosen figure; the other is None. `mfu_peaks`: each peak the MFU is
    read against with its figure, scaled alike (the row's, metrics.mfu_peaks: bf16's first, an fp8
    trial's fp8 peak after it); `power_cap`: the power or clock limit its measured steps ran at
    (metrics.power_cap), None where none was seen or nothing sampled."""
    columns = tasks.task(task).columns
    if row is None:
        return {"mfu": None, "mfu_peaks": [], "roofline": None, "power_cap": None}
    search = row.tokens_per_s_per_gpu
    mfu = "MFU" in columns
    return {
        "mfu": _scaled(row.mfu, value, search) if mfu else None,
        "mfu_peaks": [
            {**p, "mfu": _scaled(p["mfu"], value, search)} for p in (row.mfu_peaks if mfu else [])
        ],
        "roofline": _scaled(row.roofline_share, value, search) if "roofline" in columns else None,
        "power_cap": row.power_cap,
    }


def _scaled(measured: float | None, value: float, search: float | None) -> float | None:
    """An efficiency figure of the search measurement, scaled to the chosen figure (as best.yaml
    scales MFU): the page shows one MFU, never the search's beside the confirmed one."""
    if measured is None or not search:
        return None
    return measured * value / search


def cost(rows: list[Row], confirmation: Confirmation | None, gpus: int, device: str | None) -> Cost:
    """Every process the search ran, by kind, and their minutes: GPU-minutes on a GPU (each process
    holds `gpus`), process-minutes on a CPU (gpu_min None: no GPU was spent): trial processes
    (whatever their end: timeouts and pruned ones too), the loss check's reference processes and
    the confirmation's fresh processes."""
    trials = [r for r in rows if r.wall_s]
    n_conf, s_conf, estimated = _confirmation_cost(confirmation, trials)
    kinds = {
        "trials": (len(trials), sum(r.wall_s or 0.0 for r in trials)),
        "references": _references(trials),
        "confirmation": (n_conf, s_conf),
    }
    seconds = sum(s for _, s in kinds.values())
    measuring = sum((r.phases_s or {}).get("measure", 0.0) for r in trials)
    return {
        "processes": sum(n for n, _ in kinds.values()),
        "by_kind": {k: {"processes": n, "seconds": s} for k, (n, s) in kinds.items() if n},
        "seconds": seconds,
        "gpu_min": seconds * gpus / 60 if device != "cpu" else None,
        "minutes": seconds * gpus / 60 if device != "cpu" else seconds / 60,
        "unit": "GPU-minutes" if device != "cpu" else "process-minutes",
        "measure_share": measuring / seconds if seconds else None,
        "confirmation_estimated": estimated,
    }


def _references(trials: list[Row]) -> tuple[int, float]:
    """The loss check's reference processes (phases_s reference: a process of its own)."""
    refs = [(r.phases_s or {}).get("reference", 0.0) for r in trials]
    return sum(1 for s in refs if s), sum(refs)


def _confirmation_cost(conf: Confirmation | None, trials: list[Row]) -> tuple[int, float, bool]:
    """The confirmation's processes and seconds: each sample's wall time where the study stored it,
    else the trial's own search process's wall time for each (then estimated is True)."""
    if not conf:
        return 0, 0.0, False
    walls = {r.number: r.wall_s or 0.0 for r in trials}
    n, seconds, estimated = 0, 0.0, False
    for st in conf.arms:
        runs = st.runs
        stored = [w for w in st.walls_s or [] if isinstance(w, (int, float))]
        n += runs
        seconds += sum(stored) if len(stored) == runs else runs * walls.get(st.trial, 0.0)
        estimated = estimated or len(stored) != runs
    return n, seconds, estimated


def projection(
    chosen: Chosen | None, spent: Cost, tokens: float | None, gpus: int
) -> dict[str, Any] | None:
    """A full run of `tokens` training tokens at the baseline's figure and at the chosen one: its
    hours and GPU-hours, the GPU-hours saved and what the search cost against that saving."""
    if (
        not tokens
        or not chosen
        or not chosen["baseline"]
        or not chosen["baseline"]["tokens_per_s_per_gpu"]
    ):
        return None
    at = {
        "baseline": chosen["baseline"]["tokens_per_s_per_gpu"],
        "chosen": chosen["tokens_per_s_per_gpu"],
    }
    hours = {k: tokens / (v * gpus) / 3600 for k, v in at.items()}
    gpu_h = {k: h * gpus for k, h in hours.items()}
    saved = gpu_h["baseline"] - gpu_h["chosen"]
    search_h = spent.get("minutes", spent["gpu_min"] or 0.0) / 60
    return {
        "tokens": tokens,
        "gpus": gpus,
        "hours": hours,
        "gpu_hours": gpu_h,
        "saved_gpu_hours": saved,
        "search_gpu_hours": search_h,
        "net_gpu_hours": saved - search_h,
        "basis": chosen["speedup_basis"],
    }
