"""The report's sentences, written once and drawn by every format (terminal, Markdown, HTML): the
chosen configuration, what the search left out, which knobs mattered, what the search cost and
the projection of a full run. Each function returns plain lines; the formats only lay them out."""

from __future__ import annotations

from typing import Any

from autotune.documents.confirmation import Confirmation
from autotune.protocol import reason_line
from autotune.report import _effects
from autotune.report._data import Chosen, Group, KnobEffect, Report, TimeSpent
from autotune.report._excluded import loss_summary
from autotune.report._table import fmt, padding_text
from autotune.status import Status

STEP_SPREAD = "step spread: (p90 - p10) / median of a trial's measured step times"
MAX_LISTED = 10  # trial numbers named in one sentence; the rest are "..."


def started(tm: TimeSpent) -> str:
    """How the trial processes started, after the phases: "; 5 of 6 forked from the fork server"
    (torch imported once), "; 2 of 3 started ahead" (launch/prestart.py); "" when all cold."""
    ways = [
        f"{tm.get('forked', 0)} of {tm['processes']} forked from the fork server"
        if tm.get("forked")
        else "",
        f"{tm['started_ahead']} of {tm['processes']} started ahead"
        if tm.get("started_ahead")
        else "",
    ]
    return "".join(f"; {way}" for way in ways if way)


def interval_text(c: Chosen) -> str:
    """How the chosen figure was obtained, with its 95% interval or why there is none, and how far
    a cut confirmation got."""
    if not c["confirmed"]:
        return "one search measurement, not confirmed: no interval"
    state = c.get("confirmation") or {}
    cut = (
        f"; {state['rounds_done']} of {state['rounds']} confirmation rounds: cut"
        if state and not state["complete"]
        else ""
    )
    ci = c["ci95"]
    if ci:
        lo, hi = ci
        return (
            f"median of {c['samples']} fresh processes, 95% interval {fmt(lo, 'tok')} to "
            f"{fmt(hi, 'tok')}{cut}"
        )
    return f"median of {c['samples']} fresh processes; {c.get('ci95_why') or 'no interval'}{cut}"


def rounds_text(conf: Confirmation) -> str:
    """'3 of 3 interleaved rounds', '2 interleaved rounds (of at most 3): the race was decided',
    and what to run when the confirmation was cut."""
    done, asked = conf.rounds_done, conf.rounds
    if not conf.complete:
        return (
            f"{done} of {asked} interleaved rounds (cut: run the same search command to finish it)"
        )
    if conf.decided and done < asked:
        return f"{done} interleaved rounds (of at most {asked}): the race was decided"
    return f"{done} of {asked} interleaved rounds"


def chosen_lines(data: Report) -> list[str]:
    """The chosen configuration: figure, gain and its basis, its quality cost, efficiency, every
    knob, runner-up."""
    c = data.chosen
    if not c:
        return ["No configuration chosen yet: no trial has completed."]
    lines = [
        f"{_which(c)}: {trial_of(c)}, {fmt(c['tokens_per_s_per_gpu'], 'tok')} "
        f"tokens/s/GPU ({interval_text(c)}).{padding_said(data)}",
        # the one sentence on the gain (study/bound.py), then whether it rests on measurements
        # taken while the host was busy (study/disturbed.py)
        bound_line(data),
        disturbed_line(data),
        numerics_line(c),
        others_checked(data),
        _costs_to_apply(c, data.mfu_flops),
        unwritten(c),
    ]
    if c["changed"]:
        lines.append(
            "Changed from the baseline: "
            + ", ".join(f"{k} {old} -> {new}" for k, (old, new) in c["changed"].items())
        )
    lines.append("All its knobs: " + ", ".join(f"{k}={v}" for k, v in c["knobs"].items()))
    up = c["runner_up"]
    if up:
        lines.append(runner_up(up))
    if data.edges:
        lines.append(f"Past the edge of your list: {data.edges}.")
    if data.alloc_offer:
        lines.append(f"Memory: {data.alloc_offer}.")
    lines.append(f"Why: {c['why']}")
    return [line for line in lines if line]


def padding_said(data: Report) -> str:
    """' Real tokens only: 26.3% of the tokens computed on were padding.' after the chosen figure
    where its trial's job padded its batches (its row's share: command.measure hf and lightning
    count it), '' else."""
    c = data.chosen
    row = next((r for r in data.trials if c and r.number == c["trial"]), None)
    pct = row.padding_pct if row else None
    if not padding_text(pct):
        return ""
    return f" Real tokens only: {fmt(pct, 'pct')} of the tokens computed on were padding."


def trial_of(c: Chosen) -> str:
    """'trial 5', or 'your setting (trial 0, the baseline)' where the choice is the baseline."""
    base = c["baseline"]
    if base is not None and c["trial"] == base["trial"]:
        return f"your setting (trial {c['trial']}, the baseline)"
    return f"trial {c['trial']}"


def _which(c: Chosen) -> str:
    """'Chosen (best.yaml)' once best.yaml holds it, else what it is until then."""
    if c.get("written"):
        return "Chosen (best.yaml)"
    state = c.get("confirmation") or {}
    return "Leading (confirmation cut)" if state and not state["complete"] else "Leading"


def unwritten(c: Chosen) -> str:
    """What to run where best.yaml does not hold this choice yet ('' once it does)."""
    if c.get("written"):
        return ""
    state = c.get("confirmation") or {}
    if state and not state["complete"]:
        return (
            f"Not in best.yaml yet: its confirmation was cut after {state['rounds_done']} of "
            f"{state['rounds']} rounds; run the same search command to finish it (the study "
            "keeps every sample) and write best.yaml."
        )
    return (
        "Not in best.yaml yet: the search is still running, or stopped before it wrote the file; "
        "run the same search command to write it."
    )


def bound_line(data: Report) -> str:
    """The last word on your setting (study/bound.py: the one sentence every form says): the gain
    of the chosen with its interval, within noise, too noisy to bound, the noise unknown, or how
    much any configuration measured may beat your setting where it is the choice."""
    said = data.bound
    if not said:
        return "No baseline was measured: no gain to state."
    text = str(said["text"])  # a report of an older release stored it uncapitalised, unstopped
    return text if text.endswith(".") else f"{text[:1].upper()}{text[1:]}."


def disturbed_line(data: Report) -> str:
    """That the choice rests on measurements taken while the host was busy (study/disturbed.py),
    and which; '' where none was."""
    said = data.disturbed
    return str(said["text"]) if said else ""


def numerics_line(c: Chosen) -> str:
    """The quality cost beside the speed-up: its numerics check's gap (report/_summary.numerics_of),
    or that none was checked; '' where the arithmetic is the reference's."""
    n = c.get("numerics")
    return f"Numerics: {n['line']}." if n else ""


def others_checked(data: Report) -> str:
    """The numerics checks of arithmetics other than the chosen's (_summary.numerics_checked): a
    faster fp8 trial left behind, or a chosen bf16 beside the fp8 it was measured against, still
    shows what fp8 cost in quality. '' where there are none."""
    mine = (data.chosen["numerics"] or {}).get("changed") if data.chosen else None
    others = [n for n in data.numerics_checked or [] if n["changed"] != mine]
    if not others:
        return ""
    shown = "; ".join(f"trial {n['trial']}, {n['line']}" for n in others)
    return f"Numerics checked, not chosen: {shown}."


def _costs_to_apply(c: Chosen, flops: str | None) -> str:
    """Its efficiency against the peak it divides by, memory and compile time; then the power or
    clock limit its measured steps ran at, where one was seen."""
    from autotune.report._table import mfu_text

    parts = []
    if c.get("mfu") is not None:
        shown = mfu_text(c["mfu"], c.get("mfu_peaks") or [])
        parts.append(f"MFU {shown}" + (f" (FLOPs: {flops})" if flops else ""))
    elif c.get("roofline") is not None:
        parts.append(f"roofline {fmt(c['roofline'], 'mfu')}")
    elif flops:  # no peak to divide by (a CPU): MFU is n/a, never invented; how FLOPs were had
        parts.append(f"MFU n/a (FLOPs: {flops})")
    if c.get("peak_mem_gib") is not None:
        parts.append(f"peak memory {fmt(c['peak_mem_gib'], 'gib')} GiB")
    else:  # a CPU job, a command job that reports none: said so, never a number
        parts.append("peak memory not reported")
    cold = c["compile_s"]
    if cold:
        parts.append(compile_text(cold, c["compile_warm_s"]))
    line = "; ".join(parts)
    cap = (c.get("power_cap") or {}).get("said")
    return line[:1].upper() + line[1:] + "." + (f" {cap[:1].upper()}{cap[1:]}." if cap else "")


def compile_text(cold: float, warm: list[float]) -> str:
    """'compile 131 s cold, 28 to 41 s warm (3 confirmation processes, the study's compile cache)':
    the search trial's first compile and what a later start took."""
    if not warm:
        return f"compile {cold:,.0f} s cold (its search trial)"
    low, high = min(warm), max(warm)
    span = f"{low:,.0f} s" if round(low) == round(high) else f"{low:,.0f} to {high:,.0f} s"
    return (
        f"compile {cold:,.0f} s cold (its search trial), {span} warm ({len(warm)} confirmation "
        "process(es), the study's compile cache)"
    )


def memory_axis_line(data: Report) -> str:
    """Which completed trials have no place on the memory axis (their job reported no peak memory:
    a CPU job, a command's `measure: log`); when none has one, the front is the fastest trial
    alone: no trial traded memory for speed that anyone measured. "" when every trial has one."""
    ok = [r for r in data.trials if r.state == Status.OK]
    missing = [r.number for r in ok if r.peak_mem_gib is None]
    if not missing:
        return ""
    if len(missing) < len(ok):
        shown = ", ".join(map(str, missing[:MAX_LISTED]))
        more = ", ..." if len(missing) > MAX_LISTED else ""
        return (
            f"Peak memory not reported by {len(missing)} trial(s) ({shown}{more}): left off "
            "the memory axis."
        )
    best = data.best
    assert best is not None  # ok is not empty: the best is its first
    return (
        "Throughput against memory: not drawn, no completed trial reported its peak memory (a CPU "
        "job, or a command job that reports none); the memory front is the fastest trial alone: "
        f"trial {best.number}, {fmt(best.tokens_per_s_per_gpu, 'tok')} tokens/s/GPU."
    )


def runner_up(r: dict[str, Any]) -> str:
    """'Runner-up: trial 13 is 0.6% slower (within noise) and compiles in 6 s instead of 131 s.'
    Its compile is said only where one of the two compiled (no "compiles in 0 s instead of 0 s"
    where nothing did)."""
    gap = r.get("gap_pct")
    how = "" if gap is None else f" is {abs(gap):.1f}% {'slower' if gap < 0 else 'faster'}"
    noise = " (within noise)" if r.get("within_noise") else ""
    peak = f"; peak {fmt(r['peak_mem_gib'], 'gib')} GiB" if r.get("peak_mem_gib") else ""
    left = f"; it left the race: {r['dropped']['why']}" if r.get("dropped") else ""
    return f"Runner-up: trial {r['trial']}{how}{noise}{_compiles(r)}{peak}{left}."


def _compiles(r: dict[str, Any]) -> str:
    """' and compiles in 6 s instead of 131 s' where either compiled, '' where neither did."""
    mine, chosen = r.get("compile_s") or 0.0, r.get("chosen_compile_s") or 0.0
    if not mine and not chosen:
        return ""
    if not mine:
        return f" and compiles nothing instead of {chosen:,.0f} s"
    if not chosen:
        return f" and compiles in {mine:,.0f} s where the chosen compiles nothing"
    return f" and compiles in {mine:,.0f} s instead of {chosen:,.0f} s"


def projection_lines(data: Report) -> list[str]:
    p = data.projection
    if not p:
        return []
    hours, gpu_h = p["hours"], p["gpu_hours"]
    return [
        f"A full run of {p['tokens']:,.0f} tokens on {p['gpus']} GPU(s): "
        f"{hours['baseline']:,.1f} h ({gpu_h['baseline']:,.1f} GPU-hours) at the baseline, "
        f"{hours['chosen']:,.1f} h ({gpu_h['chosen']:,.1f} GPU-hours) chosen; saves "
        f"{p['saved_gpu_hours']:,.1f} GPU-hours against the search's "
        f"{p['search_gpu_hours']:,.2f} (net {p['net_gpu_hours']:+,.1f}; {p['basis']})."
    ]


def excluded_lines(group: Group, reason_chars: int = 300) -> list[str]:
    """One group of left-out trials: title and count, the reason, evidence, remedy."""
    trials = ", ".join(map(str, group["trials"]))
    predicted = f", {group['predicted']} predicted without a run" if group["predicted"] else ""
    taught = (
        f" (the rule trial {group['taught_by']} taught)" if group["taught_by"] is not None else ""
    )
    lines = [f"{group['title']}{taught}: {group['count']} trial(s) ({trials}){predicted}."]
    if group["reason"]:
        lines.append(f"Reason: {reason_line(group['reason'], reason_chars)}")
    evidence = group["evidence"]
    if evidence:
        lines.append(f"Loss curves: {loss_summary(evidence)}")
    if group.get("remedy"):
        lines.append(f"Remedy: {group['remedy']}")
    return lines


def effects_lines(data: Report) -> list[str]:
    """Each searched knob's effect, ranked where above the noise, then those within it."""
    eff, noise = data.effects, data.noise
    shown = f"{noise['pct']:.1f}%" if noise["pct"] is not None else "unmeasured"
    lines = [f"Noise: {shown} ({noise['how']})."]
    within = [k for k in data.searched if k not in eff["ranked"]]
    for rank, knob in enumerate(eff["ranked"], 1):
        lines.append(f"{rank}. {_knob_text(knob, eff['knobs'][knob])}")
    for knob in within:
        lines.append(f"-  {_knob_text(knob, eff['knobs'][knob])} (within noise or one value)")
    return lines


def _knob_text(knob: str, e: KnobEffect) -> str:
    """One knob's effect and values; a conditional knob's says the trials it was judged on
    ("among the 12 trials with compile on")."""
    among = e.get("among")
    if not e["values"]:
        return f"{knob}: no completed trial" + (f" with {among['when']}" if among else "")
    top = max(v["best"] for v in e["values"].values())
    size = (
        f"effect {e['effect_pct']:.1f}%, {e['basis']}"
        if e["effect_pct"] is not None
        else "one value ran"
    )
    if among:
        n = among["trials"]
        size += f", among the {n} trial{'s' if n != 1 else ''} with {among['when']}"
    values = "; ".join(_effects.value_text(v, x, top) for v, x in e["values"].items())
    return f"{knob} ({size}): {values}"


def cost_line(data: Report) -> str:
    """Every process the search ran, by kind, and the share spent measuring steps."""
    cost = data.cost
    if not cost["processes"]:
        return "No process has run yet."
    names = {
        "trials": "trial",
        "references": "loss-check reference",
        "confirmation": "confirmation",
    }
    kinds = ", ".join(
        f"{k['processes']} {names[name]} ({k['seconds']:,.0f} s)"
        for name, k in cost["by_kind"].items()
    )
    share = cost["measure_share"]
    measuring = "" if share is None else f"; {100 * share:.0f}% of it measuring steps"
    estimated = (
        "; confirmation time estimated from each trial's search process"
        if cost["confirmation_estimated"]
        else ""
    )
    # GPU-minutes on a GPU; on a CPU the minutes of its processes (no GPU was spent)
    unit = cost.get("unit") or "GPU-minutes"
    minutes = cost.get("minutes", cost["gpu_min"])
    return (
        f"The search cost {minutes:,.1f} {unit} in {cost['processes']} processes: "
        f"{kinds}{measuring}{estimated}."
    )
