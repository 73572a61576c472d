"""Training's numerics guardrail (study.loss_check): a faster configuration must not win by training worse.

A trial whose knobs change the arithmetic (knobs.numerics: fp8 or fp16, a DDP gradient compression hook, a
bf16 FSDP reduce-scatter) that measured `ok` has also run `steps` optimizer steps from fresh weights on a
learnable synthetic stream (workloads/train.py, `Train.loss_check`); here its loss curve is compared with its
reference's (knobs.reference_of: bf16, exact all-reduce, fp32 reduction; same initial weights, same data,
same micro-batch). The reference curve is measured once per micro-batch size, parallel layout and reference
precision, in a trial of its own (its timed steps cut to one), and cached in the study's loss-reference/
folder. A gap beyond study.loss_check.max_gap at any step of the second half ends the trial `invalid_config:
loss drifts`, with both curves in its record; the knob values that changed the arithmetic are the cause, a
rule the search learns.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from autotune import tasks
from autotune.record import TrialRecord
from autotune.knobs import numerics, reference_of
from autotune.protocol import write_json
from autotune.runner import Bench, measure

FLOOR = 0.1  # of the reference's first loss: the smallest scale a gap is measured against (gap())
# What a reference curve depends on (it is shared by the trials that agree on these)
_KEY_KNOBS = ("micro_batch_size", "parallel", "precision")


def gap(losses: list[float], reference: list[float]) -> float:
    """The largest relative gap |loss - reference| / scale over the second half of the steps, the scale being the
    reference's loss or a tenth of its first loss, whichever is larger: the synthetic stream is learnable to a
    loss near zero (a 2048-wide model reaches 0.01 within 20 steps), where 0.02 against 0.01 is no drift."""
    half, floor = len(reference) // 2, FLOOR * abs(reference[0]) if reference else 0.0
    pairs = list(zip(losses, reference))[half:]
    return max((abs(a - r) / max(abs(r), floor) for a, r in pairs if max(abs(r), floor)), default=0.0)


def _key(bench: Bench, ref: dict[str, Any], steps: int) -> str:
    doc = {
        "check": 2,  # 2: the check's learning rate follows the fan-in (train.check_lr); 1's curves are stale
        "model": bench.model,
        "world_size": bench.run.world_size,
        "seed": bench.run.seed,
        "steps": steps,
        **{k: ref.get(k) for k in _KEY_KNOBS},
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


def reference(
    bench: Bench, knobs: dict[str, Any], steps: int, run_dir: Path, **measure_kw: Any
) -> tuple[list[float] | None, str]:
    """The reference's loss curve for this configuration (cached, else measured in its own trial), and where it
    came from or why there is none."""
    twin = reference_of(knobs)
    path = bench.home / "loss-reference" / f"{_key(bench, twin, steps)}.json"
    if path.exists():
        try:
            doc = json.loads(path.read_text())
            return list(doc["losses"]), f"reference {path.name} (trial dir {doc.get('run_dir')})"
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
    if record.status != "ok" or not losses:
        return None, f"the reference trial ended {record.status}: {record.reason[:200]}"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"losses": losses, "knobs": twin, "run_dir": str(ref_dir)})
    return losses, f"reference measured in {ref_dir}"


def apply(bench: Bench, knobs: dict[str, Any], record: TrialRecord, run_dir: Path, **measure_kw: Any) -> TrialRecord:
    """The record, judged: unchanged unless it is an ok training trial whose knobs change the arithmetic."""
    check = bench.params.get("loss_check") or {}
    mine = (record.loss_check or {}).get("losses")
    changed = numerics(knobs)
    if not tasks.task(bench.task).loss_check or not check.get("steps") or record.status != "ok" or not changed:
        return record
    if not mine:  # a model without init_weights (an entrypoint's): nothing to compare
        record.loss_check = {"checked": False, "why": "the model has no init_weights() to start the check from"}
        return record
    ref, source = reference(bench, knobs, check["steps"], run_dir, **measure_kw)
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
