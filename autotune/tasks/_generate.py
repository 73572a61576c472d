"""task generate: prefill and greedy decode with a KV cache; latency limits, the decode roofline,
TPOT's gate."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any, ClassVar

from autotune.documents.record import TrialRecord
from autotune.protocol import GenerateParams, TaskParams, TrialResult
from autotune.status import Status
from autotune.tasks._base import Decide, Task
from autotune.tasks._objective import PARETO, TOKENS_PER_S, Objective

if TYPE_CHECKING:
    from autotune.config import Config, WorkloadConfig
    from autotune.config.command import CommandConfig
    from autotune.config.space import SpaceConfig

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")  # fp8 weights are weight_quant's


class Generate(Task):
    name: ClassVar[str] = "generate"
    fields: ClassVar[tuple[str, ...]] = ("prompt_len", "gen_len")
    size_knob: ClassVar[str] = "batch_size"
    batch_knobs: ClassVar[tuple[str, ...]] = ("batch_size",)
    objectives: ClassVar[tuple[Objective, ...]] = (TOKENS_PER_S, PARETO)
    latency_limits: ClassVar[bool] = True
    columns: ClassVar[tuple[str, ...]] = ("TTFT ms", "TPOT ms", "TPOT p99 ms", "roofline")

    def check_workload(self, wl: WorkloadConfig) -> None:
        missing = [k for k in self.fields if getattr(wl, k) is None]
        if missing:
            raise ValueError(
                f"workload.{missing[0]}: required with task generate (a positive integer)"
            )
        if wl.global_batch_size is not None:
            raise ValueError(
                "workload.global_batch_size: not used with task generate; search space.batch_size"
            )
        if wl.world_size != 1:
            raise ValueError(
                f"workload.world_size: {wl.world_size}; task generate runs on one GPU (1)"
            )

    def check_config(self, cfg: Config) -> None:
        wl, m = cfg.workload, cfg.model
        # tasks.check_config asked for the model and check_workload for both lengths first
        assert m is not None and wl.prompt_len is not None and wl.gen_len is not None
        if cfg.study.objective == PARETO.name and (wl.gen_len or 0) < 2:
            raise ValueError(
                "study.objective: pareto needs decode steps to time: workload.gen_len >= 2 (is "
                f"{wl.gen_len})"
            )
        if m.entrypoint is not None:
            raise ValueError(
                "model.entrypoint: task generate runs the built-in model (model.family) or an "
                "hf_config model; an entrypoint returns a training model (forward -> loss)"
            )
        assert m.seq_len is not None  # required with family and hf_config (ModelConfig)
        if wl.prompt_len + wl.gen_len > m.seq_len:
            raise ValueError(
                f"model.seq_len: {m.seq_len} is shorter than workload.prompt_len + gen_len "
                f"({wl.prompt_len} + {wl.gen_len}); the cache holds both: use seq_len >= "
                f"{wl.prompt_len + wl.gen_len}"
            )

    def batch_rule(
        self,
        space: SpaceConfig,
        wl: WorkloadConfig,
        values: dict[str, list[Any]],
        notes: dict[str, str],
    ) -> None:
        """batch_size is searched as listed; the precisions are the model's dtypes."""
        bad = [p for p in values["precision"] if p not in PRECISIONS]
        if bad:
            raise ValueError(
                f"space.precision: {bad[0]} is not a precision of task generate; allowed: "
                f"{', '.join(PRECISIONS)} (fp8 weights: weight_quant float8_weight_only or "
                "float8_dynamic)"
            )

    def trial_params(
        self,
        drift: dict[str, Any] | None,
        loss_check: dict[str, Any] | None,
        *,
        command: CommandConfig | None = None,
        timeout_s: float = 3600.0,
    ) -> TaskParams:
        return GenerateParams(drift or None)

    def metrics(self, record: TrialRecord, result: TrialResult, limits: dict[str, float]) -> None:
        """TTFT, time per output token and the decode roofline; a trial past study.limits is
        over_limit."""
        from autotune import metrics
        from autotune.hardware import hbm_bandwidth

        measured = record.metrics
        assert measured is not None  # a measured trial's
        measured.update(
            metrics.generation(result.output, hbm_bandwidth(result.env.get("device_name")))
        )
        over = metrics.over_limits(measured, limits)
        if over and record.status == Status.OK:
            record.status, record.reason = Status.OVER_LIMIT, "; ".join(over)

    def check_gate(
        self,
        best: dict[str, Any],
        details: list[dict[str, Any]],
        tolerance_pct: float,
        decide: Decide,
    ) -> dict[str, Any] | None:
        """`decide` on decode speed (1 / median time per output token, per process) against the
        recorded baseline (check --update's samples, else the search's trial), with its reason and
        what would settle it; None without numbers. Its regression fails the check, its
        inconclusive makes a pass inconclusive (regress._verdict)."""
        check_ms = [d["tpot_ms_median"] for d in details if d.get("tpot_ms_median")]
        recorded = (best.get("check_baseline") or {}).get("tpot_ms_samples")
        base_ms = (
            list(recorded)
            if recorded
            else (
                [best["metrics"]["tpot_ms_median"]] if best["metrics"].get("tpot_ms_median") else []
            )
        )
        if not base_ms or not check_ms:
            return None
        d = decide([1 / x for x in base_ms], [1 / x for x in check_ms], tolerance_pct)
        return {
            "status": d.status,
            "ratio": d.ratio,
            "ci": d.ci,
            "reason": d.reason,
            "settle": d.settle,
            "baseline_median_ms": statistics.median(base_ms),
            "check_median_ms": statistics.median(check_ms),
            "baseline_samples_ms": base_ms,
            "check_samples_ms": check_ms,
        }
