"""What a command trial says of its job in a reason: where its time went by the trial's limit,
why the trial stopped it, a figure it refused, the settings it ran with that contradict the
trial's knobs (settings_said), and the trainings autotune did not measure (a Trainer in a child
of the job's first process, a second Trainer after the stop: hook/unmeasured.py's notes). Standard
library only (the trial's process)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from autotune import knobs as catalogue
from autotune.command.hook.unmeasured import HOOK_MEASURES, SECOND_TRAINER
from autotune.knobs import Knobs
from autotune.status import Status

# The settings a job ran with (the callbacks' job_settings line), compared with the trial's knobs:
# a job that runs other values than the trial set measures a configuration the study never chose
# (TRL's SFTConfig turns bf16 and gradient checkpointing on by default: every trial of a YAML that
# left them alone ran both while autotune recorded fp32 and none). A knob is compared only when the
# trial has it, and a value the job ran only when it maps onto the knob's values; one that does not
# (bf16-true, flash_attention_2, adafactor) is not compared.
SAME_NAME = (
    "micro_batch_size",
    "grad_accum_steps",
    "precision",
    "activation_checkpointing",
    "compile",
)
SDPA = ("auto", "flash", "efficient", "cudnn", "math")  # attention values that run PyTorch's SDPA
# autotune's knob -> the framework's setting that says it, and each value of it -> the knob's values
# it agrees with (the first is the one to declare)
FRAMEWORK_NAMED: dict[str, tuple[str, dict[Any, tuple[Any, ...]]]] = {
    "attention": ("attn_implementation", {"eager": ("eager",), "sdpa": SDPA}),
    "fused_optimizer": ("optim", {"adamw_torch_fused": (True,), "adamw_torch": (False,)}),
}
# a knob of your own named as the framework's setting, its values passed to the job as they are (no
# map): compared as it is
OWN_NAMED = ("optim", "attn_implementation")
# how to render a knob's default (off) value where a mapping renders it as nothing and the script's
# own default then wins (the HF Trainer's flags; its precision flag named by what ran)
OFF_FLAG = {
    "precision": "fp32: [--{ran}, 'false']",
    "activation_checkpointing": "none: [--gradient_checkpointing, 'false']",
    "compile": "false: [--torch_compile, 'false']",
}


def time_went(steps: list[dict[str, Any]], t0: float) -> str:
    """Where a job's time went by the trial's limit: to its first step (its start: imports, data,
    model, the first compile), its other steps, and the wait since its last."""
    now = time.time()
    if not steps:
        return f"its start (imports, data, model, first compile) took all {now - t0:.0f} s"
    first, last = float(steps[0].get("at", now)), float(steps[-1].get("at", now))
    went = f"{first - t0:.0f} s to its first step (start, model, first compile)"
    if len(steps) > 1:
        went += f", {len(steps) - 1} more in {last - first:.0f} s"
    idle = now - last
    if idle > max(1.0, 2 * max(float(s["s"]) for s in steps)):  # no step for longer than two
        went += f", then {idle:.0f} s without a step"
    return went


def stopped_said(stopped: str, steps: int, needed: int, tokens_per_s: float) -> str:
    """The reason of a job the trial stopped before its window (the record's), its figure so far in
    it."""
    if not stopped:
        return ""
    if stopped == Status.PRUNED:
        return ""  # the search's pruner says why (search/prune.py)
    head, _, rest = stopped.partition(": ")
    if head.startswith("timeout"):
        return f"{head}, {tokens_per_s:,.0f} tokens/s: {rest}"
    return f"{stopped} (after {steps} steps, {tokens_per_s:,.0f} tokens/s)"


def child_said(notes: list[dict[str, Any]]) -> str:
    """Where the job trained, when a Trainer trained in a child the hook does not act in (its
    note: hook/unmeasured.py), with what the hook measures and what to do; or ''."""
    children = [n for n in notes if "child" in n and "trained" in n]
    if not children:
        return ""
    n = children[0]
    first = f"pid {n.get('first', '?')}" + (
        f", {n['first_program']}" if n.get("first_program") else ""
    )
    whose = "of the job's first process"
    if str(n.get("ppid")) != str(n.get("first")):
        whose = f"of pid {n.get('ppid', '?')}, started from the job's first process"
    said = f"pid {n.get('pid', '?')}, {n['child']} {whose} ({first}), trained {n['trained']}"
    if len(children) > 1:
        said += f" ({len(children) - 1} more trainings in children)"
    return (
        f"{said}: {HOOK_MEASURES}, which autotune neither adds its callback to nor reads; train in "
        "the job's first process (call trainer.train() there, not in a multiprocessing or "
        "subprocess child), or measure the job from its output (command.measure: log with a "
        "log_pattern)"
    )


def second_said(notes: list[dict[str, Any]], ended: str) -> str:
    """How a job asked to stop was ended when a second Trainer trained after the measured one
    stopped (its note: hook/unmeasured.py), naming both, with what to do; or ''. ended: how the
    trial ended it ("had not exited 30 s after the stop request, ...")."""
    second = [n for n in notes if "second" in n]
    if not second:
        return ""
    n = second[0]
    measured = f"{n.get('measured', 'a training')}, {n.get('steps', '?')} steps"
    began = "trained its Trainer again" if n.get("again") else f"began {n['second']}"
    return (
        f"{SECOND_TRAINER} ({measured}) stopped when asked: pid {n.get('pid', '?')} "
        f"({n.get('program', '?')}) {began}, which autotune does not measure, and the command "
        f"{ended}; autotune measures one Trainer's training: leave the second training out of the "
        "command autotune runs (or skip it when AUTOTUNE_REPORT is set)"
    )


def ended_said(done: bool, late: bool, grace: float, notes: list[dict[str, Any]]) -> str:
    """How a job asked to stop was ended (record.applied.stop): one whose second Trainer trained on
    after the measured one stopped names it (notes: hook/unmeasured.py), one that said it was done
    exits slowly, one that did not ignored the stop request."""
    when = "by the trial's limit" if late else f"{grace:.0f} s after the stop request"
    if second := second_said(notes, f"had not exited {when}, so its process group was ended"):
        return second
    if done:
        return f"reported done but had not exited {when}, so its process group was ended"
    return f"ignored the stop request and had not exited {when}, so its process group was ended"


def average_said(line: str) -> str:
    return (
        "command.log_pattern matched an average since the start, not a step's figure: "
        f"{line!r}; use measure: hf or lightning (autotune's callback, no edit), a per-step "
        "figure, or a "
        "running count as the group tokens_total"
    )


def _yaml(value: object) -> str:
    """A value as the YAML writes it (true, not True)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _agreeing(knob: str, ran: object) -> tuple[Any, ...] | None:
    """The values of autotune's knob that agree with what the job ran (its own setting's name), or
    None when what it ran maps onto none of them (not compared)."""
    if knob in ("micro_batch_size", "grad_accum_steps"):
        plain = isinstance(ran, int) and not isinstance(ran, bool)
        return (ran,) if plain else None
    if knob == "compile":
        if ran is True:  # compiled, its mode unknown (Lightning): every mode agrees
            return (True, *catalogue.BY_NAME[knob].choices())
        return (False,) if ran is False else (True, "default") if ran == "default" else (ran,)
    if knob == "precision" and ran == "bf16":
        return ("bf16", "fp8")  # fp8 trains its linears in float8 under bf16 autocast
    return (ran,) if ran in catalogue.BY_NAME[knob].choices() else None


def _compared(
    settings: Mapping[str, object], knobs: Knobs, mappings: Mapping[str, Any]
) -> list[tuple[str, str, object, tuple[Any, ...]]]:
    """Each knob of the trial's that the job's settings say: (knob, the setting read, what ran,
    the knob's values that agree with it)."""
    found = []
    for knob in SAME_NAME:
        if knob in knobs and knob in settings:
            agree = _agreeing(knob, settings[knob])
            found += [(knob, knob, settings[knob], agree)] if agree is not None else []
    for knob, (setting, table) in FRAMEWORK_NAMED.items():
        ran = settings.get(setting)
        if knob in knobs and isinstance(ran, str) and ran in table:
            found.append((knob, setting, ran, table[ran]))
    for knob in OWN_NAMED:
        mapping = mappings.get(knob) or {}
        own = mapping.get("values") is not None and not mapping.get("map")
        if own and knob in knobs and knob in settings:
            found.append((knob, knob, settings[knob], (settings[knob],)))
    return found


def settings_said(
    settings: Mapping[str, object],
    read_from: Mapping[str, str],
    knobs: Knobs,
    mappings: Mapping[str, Any] | None = None,
) -> str:
    """Why the settings the job ran with contradict the trial's knobs (each knob that differs, what
    ran and where it was read), with the remedy; or ''. mappings: the command's knob mappings (a
    knob of your own is compared only where its values reach the job as they are)."""
    wrong = [
        (knob, setting, ran, agree)
        for knob, setting, ran, agree in _compared(settings, knobs, mappings or {})
        if knobs[knob] not in agree
    ]
    if not wrong:
        return ""
    said = []
    for knob, setting, ran, agree in wrong:
        source = read_from.get(setting, "as the job reported it")
        said.append((knob, f"{knob} {_yaml(ran)} ({source})", _yaml(knobs[knob]), agree))
    knob, ran_text, set_text, agree = said[0]
    why = f"the job ran {ran_text} but the trial set {set_text}: "
    if knob in OWN_NAMED:
        why += (
            f"command.knobs.{knob} does not reach the job's {knob}; pass it where the script "
            "reads it, or take the knob out (the script fixes it)"
        )
    else:
        why += (
            f"map the knob (command.knobs.{knob}: {{flag: ...}}) or declare the value the script "
            f"fixes (space.{knob}: [{_yaml(agree[0])}])"
        )
    for knob, ran_text, set_text, agree in said[1:]:
        why += f"; it also ran {ran_text} where the trial set {set_text}"
        why += f" (space.{knob}: [{_yaml(agree[0])}])" if knob not in OWN_NAMED else ""
    off = [
        OFF_FLAG[k].format(ran=ran)
        for k, _, ran, _ in wrong
        if k in OFF_FLAG and knobs[k] == catalogue.BY_NAME[k].default
    ]
    if off:
        why += (
            "; a value mapped to nothing leaves the script's own default (TRL's SFTConfig turns "
            f"bf16 and gradient checkpointing on): render it, e.g. {', '.join(off)}"
        )
    return why
