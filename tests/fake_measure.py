"""A fake measurement for the search loop's tests (run_search's measure_fn): each configuration's
speed comes from a deterministic landscape, in the test's own process, no trial process started.

What a trial process would have written (its TrialResult: step times, losses, the numerics check's
curves) is made here; the record is the runner's own (runner.record_of), so the loop stores what a
real trial's record holds: metrics, raw samples, phases, fingerprint. The fake obeys AUTOTUNE_FAULT
as a trial process does (workloads/faults.py: the same switch, the same @ conditions). A process
cannot hang or be pruned here: tests of those run real trials (test_cli.py, test_prune.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from autotune.documents.record import TrialRecord
from autotune.knobs import check_rows, numerics
from autotune.launch.process import Outcome
from autotune.launch.runner import Bench, record_of
from autotune.numerics import Limits, judge
from autotune.protocol import TrialResult
from autotune.workloads.faults import fault_for

# The numerics check's candidate faults (workloads/faults.py) that break its learning; small_grads
# with fp16's GradScaler trains as bf16 does.
BREAKS_THE_CHECK = ("drift", "frozen_layer", "no_grad_scaler")
CHECK_S = 0.5  # the check phase's seconds, as the trial records it


def speed(knobs: dict[str, Any]) -> float:
    """Tokens/s per GPU of the tiny model on the CPU, one figure a configuration: a larger
    micro-batch is faster (less Python per token), a reduced precision a little faster, compile
    faster still. Distinct for every point of tiny's space, so the ranking is known."""
    mbs = float(knobs.get("micro_batch_size") or 1)
    fast = {"bf16": 1.10, "fp16": 1.05}.get(str(knobs.get("precision")), 1.0)
    return 1000.0 * (1 + math.log2(mbs) / 4) * fast * (1.2 if knobs.get("compile") else 1.0)


@dataclass
class Call:
    """One measurement asked of the fake: which trial, its knobs, its folder and what the bench
    asked of it (params: the numerics check, when asked)."""

    number: int
    knobs: dict[str, Any]
    run_dir: Path
    params: dict[str, Any]


@dataclass
class FakeMeasure:
    """runner.measure's signature, measuring from `landscape`; every call kept in `calls`, in
    order. noise: each sample's step times spread this share around the landscape's figure, drawn
    from the knobs and the call's index (the same run gives the same numbers)."""

    landscape: Callable[[dict[str, Any]], float] = speed
    noise: float = 0.02
    calls: list[Call] = field(default_factory=list)

    def __call__(
        self,
        bench: Bench,
        knobs: dict[str, Any],
        run_dir: Path,
        *,
        number: int = 0,
        on_poll: Callable[[], None] | None = None,
        **_: Any,
    ) -> TrialRecord:
        # the parameters it was given, as the spec's JSON holds them (those set)
        given = {k: v for k, v in asdict(bench.params).items() if v is not None}
        self.calls.append(Call(number, dict(knobs), run_dir, given))
        run_dir.mkdir(parents=True, exist_ok=True)  # a measurement leaves its folder, as a real one
        if on_poll is not None:
            on_poll()  # the loop's heartbeat and live view, as while a trial process runs
        record = record_of(number, knobs, self._outcome(bench, knobs), bench)
        record.run_dir, record.device_wait_s = str(run_dir), 0.0
        return record

    def _outcome(self, bench: Bench, knobs: dict[str, Any]) -> Outcome:
        """How the trial process would have ended, AUTOTUNE_FAULT's way where it asks."""
        fault = fault_for(knobs) or ""
        if fault in ("hang", "oom", "nan", "crash", "error"):
            return _failed(fault)
        slow = 1 + float(fault.partition(":")[2]) / 100 if fault.startswith("slow:") else 1.0
        rng = random.Random(f"{sorted(knobs.items())}:{len(self.calls)}")
        tokens = int(knobs.get("micro_batch_size") or 1) * int(knobs.get("grad_accum_steps") or 1)
        tokens *= int((bench.model or {}).get("seq_len") or 1)
        step = tokens / self.landscape(knobs) * slow
        n = max(1, bench.run.measure_steps)
        steps = [step * (1 + self.noise * rng.uniform(-1, 1)) for _ in range(n)]
        res = TrialResult(
            "ok",
            step_times_s=steps,
            warmup_step_times_s=[3 * step] * bench.run.warmup_steps,
            losses=[4.85 - 0.01 * i for i in range(n)],
            tokens_per_step=tokens,
            n_params=17376,  # the tiny model's
            peak_mem_bytes=300 * 2**20,
            peak_mem_kind="cpu_max_rss",
            phases_s={"start": 1.0, "build": 1.0, "warmup": 3 * step, "measure": sum(steps)},
            # the torch installed (a warm start compares it), never imported here
            env={"torch": metadata.version("torch"), "cuda": None, "device": bench.device},
            applied={"optimizer": "fake"},
        )
        check = getattr(bench.params, "loss_check", None)
        if check:  # asked for by the search (search/loss_guard.py: trial_bench)
            res.output["loss_check"] = _check(check, knobs, fault in BREAKS_THE_CHECK)
            res.phases_s["check"] = CHECK_S
        return Outcome("ok", "", res, wall_s=10.0)


def _failed(fault: str) -> Outcome:
    """A trial process that failed as the fault makes it: the trial's own result (oom, NaN loss),
    or none (crash: launch/process.py's words for a process that ended without one)."""
    if fault == "hang":
        raise NotImplementedError("the fake measurement cannot hang: test hangs on real trials")
    if fault == "oom":
        res = TrialResult("oom", "AUTOTUNE_FAULT=oom: simulated out of memory")
        return Outcome("oom", res.reason, res, wall_s=5.0)
    if fault == "nan":
        res = TrialResult("nonfinite_loss", "loss became nan at measured step 1 (fake)")
        return Outcome("nonfinite_loss", res.reason, res, wall_s=5.0)
    why = "killed by SIGABRT" if fault == "crash" else "exit code 1"
    return Outcome("crash", f"trial process ended without a result ({why}): (fake)", wall_s=5.0)


def _curve(start: float, end: float, steps: int, rate: float = 0.3) -> list[float]:
    return [end + (start - end) * math.exp(-rate * i) for i in range(steps)]


def _check(params: dict[str, Any], knobs: dict[str, Any], broken: bool) -> dict[str, Any]:
    """The numerics check's output as workloads/numerics_check.check writes it: up to two attempts
    (a failed one is repeated once), judged by the same verdict, and the floor when asked for. The
    reference falls from ln(128) towards ln(2); a broken candidate learns a fifth of that."""
    steps = int(params["steps"])
    limits = Limits(
        **{k: params[k] for k in ("min_learned", "max_gap_nats") if params.get(k) is not None}
    )
    reference = _curve(4.85, 0.69, steps)
    out: dict[str, Any] = {
        "steps": steps,
        "rows": check_rows(knobs["micro_batch_size"]),
        "changed": numerics(knobs),
        "attempts": [],
    }
    for seed in (1, 2):
        losses = _curve(4.85, 4.0, steps) if broken else [x + 0.01 for x in reference]
        found: dict[str, Any] = {"seed": seed, "losses": losses, "reference": reference}
        found.update(stalled=[], n_stalled=0, grad_ratio_min=0.9)
        found["verdict"] = judge(found, limits).as_dict()
        out["attempts"].append(found)
        if found["verdict"]["passed"] is not False:
            break
    if params.get("floor"):
        out["floor"] = {"twin": "fp32", "losses": [x + 0.002 for x in reference]}
    return out
