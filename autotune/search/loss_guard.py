"""Training's numerics guardrail (study.loss_check): a faster configuration must not win by training
worse.

A trial whose knobs change the arithmetic (knobs.numerics: fp8 or fp16, a DDP gradient
compression hook, a bf16 FSDP reduce-scatter) that measured `ok` has also run `steps` optimizer
steps from fresh weights on a learnable synthetic stream (workloads/train.py,
`Train.loss_check`); here its loss curve is compared with its reference's (knobs.reference_of:
bf16, exact all-reduce, fp32 reduction; same initial weights, same data, same check micro-batch:
at most knobs.CHECK_ROWS sequences, eager). The reference curve is measured once per check
micro-batch, parallel layout and reference precision, in an eager trial of its own at that
micro-batch (its timed steps cut to one: no compile), and cached in the study's loss-reference/
folder; the seconds it took are the trial's `reference` phase. A gap beyond
study.loss_check.max_gap at any step of the second half ends the trial `invalid_config: loss
drifts`, with both curves in its record; the knob values that changed the arithmetic are the
cause, a rule the search learns."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from autotune import tasks
from autotune.record import TrialRecord
from autotune.knobs import check_rows, numerics, reference_of
from autotune.protocol import write_json
from autotune.runner import Bench, measure

FLOOR = 0.1  # of the reference's first loss: the smallest scale a gap is measured against (gap())
# What a reference curve depends on (it is shared by the trials that agree on these and on the
# check's rows)
_KEY_KNOBS = ("parallel", "precision")


def gap(losses: list[float], reference: list[float]) -> float:
    """The largest relative gap |loss - reference| / scale over the second half of the steps, the
    scale being the reference's loss or a tenth of its first loss, whichever is larger: the
    synthetic stream is learnable to a loss near zero (a 2048-wide model reaches 0.01 within 20
    steps), where 0.02 against 0.01 is no drift."""
    half, floor = len(reference) // 2, FLOOR * abs(reference[0]) if reference else 0.0
    pairs = list(zip(losses, reference))[half:]
    return max(
        (abs(a - r) / max(abs(r), floor) for a, r in pairs if max(abs(r), floor)), default=0.0
    )


def _key(bench: Bench, ref: dict[str, Any], steps: int) -> str:
    doc = {
        "check": 3,  # 3: eager, at most CHECK_ROWS sequences a step (2: the trial's micro-batch; 1: fixed lr)
        "model": bench.model,
        "world_size": bench.run.world_size,
        "seed": bench.run.seed,
        "steps": steps,
        "rows": check_rows(ref["micro_batch_size"]),
        **{k: ref.get(k) for k in _KEY_KNOBS},
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclasses.dataclass
class Reference:
    """The reference's loss curve (None: there is none), where it came from or why there is none,
    and the seconds its trial took (0: read from the cache)."""

    losses: list[float] | None
    source: str
    seconds: float = 0.0


def reference_knobs(knobs: dict[str, Any]) -> dict[str, Any]:
    """The reference trial's knobs: reference_of(knobs), eager (compile is no numerics knob, and the
    check runs eager in every trial) at the check's micro-batch, one micro-step: nothing to
    compile, a short step."""
    twin = reference_of(knobs)
    twin.update(
        compile=False, micro_batch_size=check_rows(knobs["micro_batch_size"]), grad_accum_steps=1
    )
    return twin


def reference(
    bench: Bench, knobs: dict[str, Any], steps: int, run_dir: Path, **measure_kw: Any
) -> Reference:
    """The reference's loss curve for this configuration (cached, else measured in its own trial)."""
    twin = reference_knobs(knobs)
    path = bench.home / "loss-reference" / f"{_key(bench, twin, steps)}.json"
    if path.exists():
        try:
            doc = json.loads(path.read_text())
            return Reference(
                list(doc["losses"]), f"reference {path.name} (trial dir {doc.get('run_dir')})"
            )
        except (OSError, ValueError, KeyError, TypeError):
            pass  # damaged: measured again
    ref_bench = dataclasses.replace(
        bench,
        run=dataclasses.replace(bench.run, warmup_steps=1, measure_steps=1),
        params={**bench.params, "loss_check": {**bench.params["loss_check"], "reference": True}},
        prestart=False,
    )
    ref_dir = run_dir / "loss-reference"
    record = measure(ref_bench, twin, ref_dir, **measure_kw)
    losses = (record.loss_check or {}).get("losses")
    seconds = record.wall_s or 0.0
    if record.status != "ok" or not losses:
        return Reference(
            None, f"the reference trial ended {record.status}: {record.reason[:200]}", seconds
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"losses": losses, "knobs": twin, "run_dir": str(ref_dir)})
    return Reference(losses, f"reference measured in {ref_dir}", seconds)


def apply(
    bench: Bench, knobs: dict[str, Any], record: TrialRecord, run_dir: Path, **measure_kw: Any
) -> TrialRecord:
    """The record, judged: unchanged unless it is an ok training trial whose knobs change the
    arithmetic."""
    check = bench.params.get("loss_check") or {}
    mine = (record.loss_check or {}).get("losses")
    changed = numerics(knobs)
    if (
        not tasks.task(bench.task).loss_check
        or not check.get("steps")
        or record.status != "ok"
        or not changed
    ):
        return record
    if not mine:  # a model without init_weights (an entrypoint's): nothing to compare
        record.loss_check = {
            "checked": False,
            "why": "the model has no init_weights() to start the check from",
        }
        return record
    found_ref = reference(bench, knobs, check["steps"], run_dir, **measure_kw)
    ref, source = found_ref.losses, found_ref.source
    if found_ref.seconds and record.phases_s is not None:
        record.phases_s["reference"] = round(found_ref.seconds, 3)
    if ref is None:
        record.loss_check = {"checked": False, "losses": mine, "why": source}
        return record
    found, limit = gap(mine, ref), check.get("max_gap", 0.05)
    record.loss_check = {
        "checked": True,
        "losses": mine,
        "reference": ref,
        "gap": round(found, 4),
        "max_gap": limit,
        "source": source,
    }
    if found > limit:
        what = ", ".join(f"{k} {v}" for k, v in changed.items())
        twin = reference_of(knobs)
        against = ", ".join(f"{k} {twin.get(k)}" for k in changed if k != "fp8_recipe")
        record.status = "invalid_config"
        record.reason = (
            f"loss drifts: {what} against {against} from the same weights on the same data, "
            f"{found:.1%} apart in the second half of {check['steps']} steps (limit {limit:.0%}, "
            f"study.loss_check); last loss {mine[-1]:.3f} against {ref[-1]:.3f}"
        )
        record.cause = changed
    return record
