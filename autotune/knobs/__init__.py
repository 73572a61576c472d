"""The knob catalogue: every knob declared once (values, default, where it acts, how a trial applies
it).

Everything else reads this table: the YAML schema (`config_space.SpaceConfig` is built from it),
space resolution (`space.py`), the trial's defaults (`protocol.TrialSpec.knobs`), best.yaml's apply
notes and environment, and docs/yaml.md's knob table (`markdown_table`, pinned by a test). Adding a
knob is one entry here plus the code in the trial that applies it.

Standard library only: the trial's process imports it too.
"""

from __future__ import annotations

from typing import Any

from autotune.knobs._catalogue import CATALOGUE
from autotune.knobs._knob import (
    BOTH,
    CE_CHUNKS,
    CHECKPOINT_EVERY,
    MAX_PREFETCH,
    MAX_SIZE,
    POWERSGD_START,
    TASKS,
    Knob,
    Knobs,
    KnobValue,
    Not,
    Note,
    TaskName,
    int_of,
)
from autotune.knobs._notes import QUANT_CONFIGS, SDPA_BACKENDS

__all__ = [
    "BOTH",
    "BY_NAME",
    "CATALOGUE",
    "CE_CHUNKS",
    "CHECKPOINT_EVERY",
    "CHECK_ROWS",
    "MAX_PREFETCH",
    "MAX_SIZE",
    "NAMES",
    "POWERSGD_START",
    "QUANT_CONFIGS",
    "SDPA_BACKENDS",
    "TASKS",
    "Knob",
    "KnobValue",
    "Knobs",
    "Not",
    "Note",
    "TaskName",
    "apply_notes",
    "check_rows",
    "defaults",
    "int_of",
    "env_of",
    "markdown_table",
    "needs_at_least",
    "AS_CATALOGUE",
    "numerics",
    "reference_of",
    "values_text",
]


def numerics(knobs: Knobs) -> dict[str, Any]:
    """The knob values of a training trial that change its arithmetic against the reference (bf16,
    exact gradient all-reduce, fp32 reduction): what study.loss_check compares and, past its limit,
    the cause."""
    out: dict[str, Any] = {}
    if knobs.get("precision") in ("fp8", "fp16"):
        out["precision"] = knobs["precision"]
        if knobs["precision"] == "fp8":
            out["fp8_recipe"] = knobs.get("fp8_recipe")
    if knobs.get("ddp_comm_hook") not in (None, "none"):
        out["ddp_comm_hook"] = knobs["ddp_comm_hook"]
    if knobs.get("fsdp_reduce_dtype") == "bf16":
        out["fsdp_reduce_dtype"] = "bf16"
    return out


def reference_of(knobs: Knobs) -> dict[str, Any]:
    """The same trial without what `numerics` names: bf16 for fp8/fp16, no comm hook, fp32
    reduction."""
    ref = {**knobs}
    if knobs.get("precision") in ("fp8", "fp16"):
        ref.update(precision="bf16", fp8_recipe=None, fp8_all_gather=None)
    if knobs.get("ddp_comm_hook") not in (None, "none"):
        ref.update(ddp_comm_hook="none", powersgd_rank=None)
    if knobs.get("fsdp_reduce_dtype") == "bf16":
        ref["fsdp_reduce_dtype"] = "fp32"
    return ref


# The numerics check's micro-batch: at most CHECK_ROWS sequences whatever the trial's (eager,
# untimed: the check costs seconds, not a trial's micro-batch of activations)
CHECK_ROWS = 4


def check_rows(micro_batch_size: int) -> int:
    """The numerics check's sequences a step: the trial's micro-batch, capped at CHECK_ROWS (the
    check runs eager; a micro-batch no larger than the trial's own)."""
    return min(CHECK_ROWS, micro_batch_size)


BY_NAME: dict[str, Knob] = {k.name: k for k in CATALOGUE}
NAMES: tuple[str, ...] = tuple(BY_NAME)

# A knob of your own (task command) named as a framework's setting, as the catalogue knob it sets:
# its values as that knob's, for the memory they need (Knob.memory_order). The HF Trainer's
# attn_implementation: eager holds the whole attention matrix; sdpa is PyTorch's own choice of
# kernel (attention auto); flash_attention_2 the flash kernel (issue 61: eager where sdpa ran out).
AS_CATALOGUE: dict[str, tuple[str, dict[KnobValue, KnobValue]]] = {
    "attn_implementation": (
        "attention",
        {"eager": "eager", "sdpa": "auto", "flash_attention_2": "flash"},
    ),
}


def needs_at_least(name: str, value: KnobValue, than: KnobValue) -> bool:
    """Whether knob `name` at `value` needs at least the memory it needs at `than`, the other knobs
    alike (Knob.memory_order; a knob of your own named in AS_CATALOGUE as the knob it sets; any
    other knob only at the same value)."""
    if value == than:
        return True
    if name in BY_NAME:
        return BY_NAME[name].needs_at_least(value, than)
    target, values = AS_CATALOGUE.get(name, ("", {}))
    if value not in values or than not in values:
        return False
    return BY_NAME[target].needs_at_least(values[value], values[than])


def defaults(task: str = "train") -> dict[str, Any]:
    """Every knob of the task at its default: what a trial assumes for a knob its spec leaves
    out."""
    return {k.name: k.default for k in CATALOGUE if task in k.tasks}


def env_of(knobs: Knobs) -> dict[str, str]:
    """Environment variables that apply these knob values (best.yaml's apply.env); "default" sets
    nothing."""
    return {
        var: str(knobs[k.name])
        for k in CATALOGUE
        if k.env and knobs.get(k.name, "default") not in ("default", None)
        for var in k.env
    }


def apply_notes(knobs: Knobs, device: str, task: str = "train") -> list[str]:
    """How to reproduce these knob values in a script of the task (best.yaml's apply.notes), knob by
    knob."""
    lines = []
    for k in CATALOGUE:
        note = k.note.get(task) if isinstance(k.note, dict) else k.note
        if note is not None and k.name in knobs:
            lines += note(knobs, device)
    return lines


def values_text(knob: Knob) -> str:
    if knob.values:
        return knob.values
    if knob.type is bool:
        return "`false`, `true`" if knob.default is False else "`true`, `false`"
    return ", ".join(f"`{v}`" for v in knob.choices())


def _default_text(knob: Knob) -> str:
    if knob.derived:
        return "`auto`"
    value = knob.default
    return (
        f"`{'null' if value is None else str(value).lower() if isinstance(value, bool) else value}`"
        if not isinstance(value, int) or isinstance(value, bool)
        else str(value)
    )


def markdown_table() -> str:
    """docs/yaml.md's knob table, made from the catalogue (a test fails when its copy there
    differs)."""
    rows = [
        "| knob | values | default when absent | applies to | effect in the trial (recorded in "
        "the trial's `applied`) |",
        "|---|---|---|---|---|",
    ]
    for k in CATALOGUE:
        where = ", ".join(k.tasks)
        if k.only_with:
            owner, value = k.only_with
            where += (
                f" with `{owner}` not `{str(value.value).lower()}`"
                if isinstance(value, Not)
                else f" with `{owner}: {value}`"
            )
        if k.multi_rank:
            where += ", world_size > 1" + (" on GPUs" if k.nccl else "")
        rows.append(
            f"| `{k.name}` | {values_text(k)} | {_default_text(k)} | {where} | {k.effect} |"
        )
    return "\n".join(rows) + "\n"
