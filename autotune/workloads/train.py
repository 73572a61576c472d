"""The training workload: optimizer steps on synthetic tokens, each knob applied by its own
`apply_*` step.

The trial reads like torchtitan's: apply_precision, apply_attention, build_model, apply_fp8,
parallelize, apply_optimizer, apply_compile, then timing.time_steps over `step`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from autotune.knobs import (
    CE_CHUNKS,
    CHECKPOINT_EVERY,
    SDPA_BACKENDS,
    int_of,
    numerics,
    reference_of,
)
from autotune.protocol import Knobs, TrainParams, TrialSpec
from autotune.sizes import padded_vocab
from autotune.workloads import float8_cache, numerics_check
from autotune.workloads.base import InvalidConfig, Measured, NonFiniteLoss, Work, Workload
from autotune.workloads.compiling import (
    apply_compile,
    apply_compile_dynamic,
    apply_ddp_compile,
    compile_cache_counts,
)
from autotune.workloads.parallel import Sync, check_replicas_in_sync, parallelize
from autotune.workloads.precision import apply_attention, apply_precision
from autotune.workloads.steps import Batch, Context, StepModel
from autotune.workloads.timing import time_steps

if TYPE_CHECKING:
    import torch as torch_types
    from torch import Tensor, nn
    from torch.optim import Optimizer


def _laps(torch: ModuleType, device: str) -> Any:
    """lap(name) records the seconds since the last lap (after the device finished) in lap.parts."""
    import time

    last = [time.perf_counter()]
    parts: dict[str, float] = {}

    def lap(name: str) -> None:
        if device == "cuda":
            torch.cuda.synchronize()
        now = time.perf_counter()
        parts[name] = round(now - last[0], 3)
        last[0] = now

    lap.parts = parts  # type: ignore[attr-defined]
    return lap


def build_model(
    torch: ModuleType,
    spec: TrialSpec,
    dev: torch_types.device,
    gen: torch_types.Generator,
    n_batches: int,
    materialize: bool = True,
    context: Context = contextlib.nullcontext,
) -> tuple[nn.Module, list[Batch], dict[str, Any], Work]:
    """The model and a few micro-batches made once on the device (no data loading is timed).
    materialize False (the built-in model under FSDP2) leaves the model on the meta device: it is
    sharded first and each rank then allocates and initialises only its shards (`materialize`), as
    torchtitan builds. context: the trial's autocast and SDPA backend, under which an hf_config or
    entrypoint model's FLOPs are counted; the built-in model's are the formula (its shapes are
    known: model.flop_params)."""
    m, knobs = spec.model or {}, spec.knobs
    if m.get("hf_config") or m.get("entrypoint"):
        from autotune.workloads import external

        return external.build(spec, dev, gen, n_batches, context)
    from autotune.workloads.model import Transformer, dims_of

    pad, mbs = knobs["pad_vocab_multiple"], int_of(knobs, "micro_batch_size")
    ac = str(knobs["activation_checkpointing"])
    vocab = m["vocab_size"]
    padded = padded_vocab(vocab, pad if isinstance(pad, int) else None)
    chunks = CE_CHUNKS if knobs.get("cross_entropy") == "chunked" else 1
    dims = dims_of(
        spec,
        attention=str(knobs["attention"]),
        padded_vocab=padded,
        checkpoint_every=CHECKPOINT_EVERY[ac],
        checkpoint_ops=ac == "selective_op",
        ce_chunks=chunks,
    )
    with torch.device("meta"):  # torchtitan's build: no memory and no work until the device
        built = Transformer(dims)
    model = materialize_model(built, dev) if materialize else built  # the same module
    seq = dims["seq_len"]
    pool = torch.randint(0, vocab, (n_batches, mbs, seq + 1), device=dev, generator=gen)
    work = Work(
        seq * mbs * int_of(knobs, "grad_accum_steps"),
        sum(p.numel() for p in model.parameters()),
        built.flop_params(),
        {"n_layers": dims["n_layers"], "d_model": dims["d_model"], "seq_len": seq},
    )
    applied = {
        "vocab": [vocab, padded],
        "checkpointed_blocks": built.checkpointed_blocks(),
        "checkpoint": ac,
        "cross_entropy": f"{chunks} chunks" if chunks > 1 else "standard",
        "flops": "6N + 12LdT, PaLM's formula",
    }
    return model, [(b[:, :-1], b[:, 1:]) for b in pool], applied, work


def materialize_model(model: nn.Module, dev: torch_types.device) -> nn.Module:
    """Allocate a meta-device model's parameters (after sharding: only this rank's shards) and
    initialise them."""
    from autotune.workloads.model import Transformer

    model = model.to_empty(device=dev)
    assert isinstance(model, Transformer)  # sharded by FSDP2: a subclass of it
    model.init_weights()
    return model


def apply_fp8(torch: ModuleType, model: nn.Module, knobs: Knobs) -> int:
    """torchao float8 training of every linear but the output head; returns how many linears were
    converted. fp8_all_gather: FSDP2 all-gathers the weights in float8 (tensorwise recipe and fsdp
    only)."""
    if knobs["precision"] != "fp8":
        return 0
    import dataclasses

    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    config = Float8LinearConfig.from_recipe_name(knobs["fp8_recipe"])
    if knobs.get("fp8_all_gather"):
        if knobs.get("parallel") != "fsdp":
            raise InvalidConfig(
                "fp8_all_gather needs parallel fsdp (it all-gathers FSDP2's sharded weights)",
                "fp8_all_gather",
                "parallel",
            )
        if knobs["fp8_recipe"] != "tensorwise":
            raise InvalidConfig(
                f"fp8_all_gather needs the tensorwise recipe, not {knobs['fp8_recipe']} (torchao "
                "casts the sharded weights with one scale per tensor)",
                "fp8_all_gather",
                "fp8_recipe",
            )
        config = dataclasses.replace(config, enable_fsdp_float8_all_gather=True)
    keep = ("head", "lm_head")  # the output head stays in bf16: its logits feed the loss
    convert_to_float8_training(
        model, config=config, module_filter_fn=lambda mod, fqn: fqn.split(".")[-1] not in keep
    )
    if knobs.get("compile"):  # a fresh process of this program is then served by the cache
        float8_cache.install(torch)
    return sum(1 for mod in model.modules() if type(mod).__name__ == "Float8Linear")


def apply_optimizer(torch: ModuleType, model: nn.Module, knobs: Knobs) -> Optimizer:
    """AdamW with nanoGPT's settings; fused=True when the knob says so."""
    fused = {"fused": True} if knobs["fused_optimizer"] else {}
    return torch.optim.AdamW(
        model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, **fused
    )


def finite_losses(torch: ModuleType, losses: list[Tensor], phase: str) -> list[float]:
    """The losses as floats (one synchronisation, after the timed region); NonFiniteLoss if any is
    NaN or inf."""
    values = torch.stack(losses).float().cpu().tolist() if losses else []
    if not all(x == x and abs(x) != float("inf") for x in values):
        raise NonFiniteLoss(
            f"loss became {next(x for x in values if not (x == x and abs(x) != float('inf')))} "
            f"during {phase} (losses {values})"
        )
    return values


class Train(Workload):
    """Optimizer steps: grad_accum_steps micro-steps of forward and backward, then
    optimizer.step()."""

    task = "train"
    # made by build
    dev: torch_types.device
    amp_dtype: torch_types.dtype | None  # autocast's (None: fp32, tf32)
    attention: Context  # the SDPA backend forced (or none)
    batches: list[Batch]
    model: nn.Module  # as built and wrapped (DDP, FSDP2)
    step_model: StepModel  # what a step calls: the model, compiled or not
    sync: Sync | None  # gradients cross ranks on the last micro-step only
    # None once the numerics check freed it (numerics_check.check)
    optimizer: Optimizer | None
    scaler: torch_types.amp.GradScaler | None  # fp16's loss scaler
    fp8_scales: Callable[[], None] | None  # fp8_all_gather: refresh the float8 weights' scales

    def build(self) -> None:
        torch, spec, knobs = self.torch, self.spec, self.spec.knobs
        device = spec.device
        gen = self._device()
        sharded_build = self._sharded_build()
        lap = _laps(torch, device)
        model, self.batches, applied, self._work = build_model(
            torch,
            spec,
            self.dev,
            gen,
            n_batches=min(int_of(knobs, "grad_accum_steps"), 4),
            materialize=not sharded_build,
            context=self._count_context,
        )
        dynamic = apply_compile_dynamic(torch, self.batches, knobs, model)
        lap("model")
        fp8_linears = apply_fp8(torch, model, knobs)
        lap("fp8")
        regional = knobs.get("compile_scope") == "block"
        ddp_graph = apply_ddp_compile(torch, knobs) if self.ranks else None
        # blocks compiled in place before wrapping, as torchtitan orders it (FSDP's hooks stay
        # outside)
        if regional:
            _, compile_mode = apply_compile(torch, model, knobs["compile"], "block")
        lap("compile_wrap")
        self.sync: Sync | None = None
        parallel_applied: dict[str, Any] = {}
        if self.ranks:
            model, parallel_applied, self.sync = parallelize(
                torch, model, knobs, self.amp_dtype, self.ranks
            )
        lap("parallel")
        if sharded_build:
            model = materialize_model(model, self.dev)
            parallel_applied["parallel"]["build"] = (
                "meta device, sharded, then each rank's shards materialised"
            )
        lap("materialize")
        self._train_state(model, fp8_linears)
        if not regional:
            self.step_model, compile_mode = apply_compile(torch, model, knobs["compile"])
        lap("optimizer")
        self.applied = {
            **self._applied(compile_mode, ddp_graph, fp8_linears),
            **applied,
            **parallel_applied,
            "compile_dynamic": dynamic,
            "build_s": lap.parts,
        }  # where the build's seconds went (issue 15: an 8B build under 10 s)

    def _device(self) -> torch_types.Generator:
        """Precision, the device of this rank, the attention backend; returns the rank's data
        generator (the same initial weights on every rank, each rank its own data)."""
        torch, spec, knobs = self.torch, self.spec, self.spec.knobs
        device = spec.device
        self.amp_dtype = apply_precision(torch, str(knobs["precision"]), device)
        torch.manual_seed(spec.run.seed)
        rank = self.ranks.rank if self.ranks else 0
        local = self.ranks.local_rank if self.ranks and device == "cuda" else None
        self.dev = torch.device(device, local) if local is not None else torch.device(device)
        self.attention = apply_attention(torch, str(knobs["attention"]), device, self.amp_dtype)
        return torch.Generator(device=self.dev).manual_seed(spec.run.seed + rank)

    def _train_state(self, model: nn.Module, fp8_linears: int) -> None:
        """The model a step trains, its optimizer and loss scaler, fp8's scale refresh
        (fp8_all_gather)."""
        torch, knobs = self.torch, self.spec.knobs
        self.model = self.step_model = model
        self.fp8_scales = None
        if knobs.get("fp8_all_gather") and fp8_linears:
            from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

            self.fp8_scales = lambda: precompute_float8_dynamic_scale_for_fsdp(model)
        self.optimizer = apply_optimizer(torch, model, knobs)
        fp16 = knobs["precision"] == "fp16"
        self.scaler = torch.amp.GradScaler(self.spec.device) if fp16 else None

    def _count_context(self) -> contextlib.ExitStack:
        """The trial's autocast and SDPA backend as one context, for counting a model's FLOPs in the
        build."""
        stack = contextlib.ExitStack()
        if self.amp_dtype:
            stack.enter_context(
                self.torch.autocast(device_type=self.spec.device, dtype=self.amp_dtype)
            )
        stack.enter_context(self.attention())
        return stack

    def _sharded_build(self) -> bool:
        """FSDP2 with the built-in model: sharded on the meta device, then each rank materialises
        its shards only (a tied head would be untied by to_empty after sharding, so tied models are
        built whole first)."""
        m = self.spec.model or {}
        external = m.get("hf_config") or m.get("entrypoint") or m.get("tie_embeddings")
        return bool(self.ranks) and self.spec.knobs.get("parallel") == "fsdp" and not external

    def _applied(
        self, compile_mode: str | None, ddp_graph: str | None, fp8_linears: int
    ) -> dict[str, Any]:
        """What the build applied, for the trial's record (the model's own and the parallel layout's
        join it)."""
        attention = self.spec.knobs["attention"]
        sdpa = attention in SDPA_BACKENDS or attention == "eager"
        fused = bool(self.optimizer and self.optimizer.defaults.get("fused"))
        return {
            "attention": attention if sdpa else "auto (PyTorch's SDPA choice)",
            "optimizer": f"AdamW(fused={fused})",
            "compile_mode": compile_mode,
            "ddp_graph": ddp_graph,
            "fp8_linears": fp8_linears,
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        }

    def step(self) -> Tensor:
        """One optimizer step of grad_accum_steps micro-steps; returns its loss as a device tensor
        (no host synchronisation)."""
        torch, accum = self.torch, int_of(self.spec.knobs, "grad_accum_steps")
        optimizer = self.optimizer
        assert optimizer is not None  # freed only by the numerics check, after the steps
        amp = (
            (lambda: torch.autocast(device_type=self.spec.device, dtype=self.amp_dtype))
            if self.amp_dtype
            else contextlib.nullcontext
        )
        total = torch.zeros((), device=self.dev)
        for i in range(accum):
            inputs, targets = self.batches[i % len(self.batches)]
            self.fault.in_micro_step(torch)
            with (
                self.sync(i == accum - 1) if self.sync else contextlib.nullcontext()
            ):  # gradients cross ranks once a step
                with amp(), self.attention():
                    loss = self.step_model(inputs, targets) * self.fault.loss_scale / accum
                (self.scaler.scale(loss) if self.scaler else loss).backward()
            total += loss.detach()
        if self.scaler:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()
        if self.fp8_scales:  # one all-reduce of every float8 weight's scale for the next all-gather
            self.fp8_scales()
        optimizer.zero_grad(set_to_none=True)
        return total

    def run(self) -> Measured:
        torch, run = self.torch, self.spec.run
        sync = torch.cuda.synchronize if self.spec.device == "cuda" else (lambda: None)

        def warmed_up(loss: Tensor) -> None:
            finite_losses(torch, [loss], "warm-up")

        timing = time_steps(
            torch,
            self.fault.slowed(self.step, sync),
            warmup=run.warmup_steps,
            measure=run.measure_steps,
            device=self.spec.device,
            after_warmup_step=warmed_up,
            before_window=self.ranks.barrier if self.ranks else None,
            progress=self.progress,
        )
        losses = finite_losses(torch, timing.outputs, "measured steps")
        if os.environ.get("AUTOTUNE_PROFILE"):
            self.profile(Path(os.environ["AUTOTUNE_PROFILE"]))
        if self.ranks:
            check_replicas_in_sync(torch, self.model, self.ranks)
        if self.spec.knobs["compile"]:  # read before the numerics check, which compiles nothing
            self.applied["compile_cache"] = compile_cache_counts(torch)
        params = self.spec.params
        assert isinstance(params, TrainParams)
        check = params.loss_check or {}
        asked = check.get("steps") and numerics(self.spec.knobs)  # where no verdict covers it
        if not asked or timing.stopped_early:  # a pruned trial cannot win: no check for it
            return Measured(timing, losses)
        t_check = time.perf_counter()
        settings: numerics_check.Settings = {
            "min_learned": check.get("min_learned"),
            "max_gap_nats": check.get("max_gap_nats"),
            "floor": bool(check.get("floor")),
        }
        found = numerics_check.check(self, int(check["steps"]), settings)
        check_s = time.perf_counter() - t_check
        return Measured(timing, losses, output={"loss_check": found}, check_s=check_s)

    def profile(self, folder: Path, steps: int = 2) -> None:
        """AUTOTUNE_PROFILE=DIR: after the measured steps (untimed), `steps` more under
        torch.profiler, written as a chrome trace per rank (DIR/autotune-<pid>-rank<r>.json): what a
        step spends, beside a plain script's."""
        torch = self.torch
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + (
            [ProfilerActivity.CUDA] if self.spec.device == "cuda" else []
        )
        with profile(activities=acts) as prof:
            for _ in range(steps):
                self.step()
            if self.spec.device == "cuda":
                torch.cuda.synchronize()
        folder.mkdir(parents=True, exist_ok=True)
        rank = self.ranks.rank if self.ranks else 0
        prof.export_chrome_trace(str(folder / f"autotune-{os.getpid()}-rank{rank}.json"))

    def new_optimizer(self) -> Optimizer:
        """A fresh optimizer of the model, as the build makes it (the numerics check's runs)."""
        return apply_optimizer(self.torch, self.model, self.spec.knobs)

    def reference_twin(self, rows: int) -> Train:
        """The numerics check's reference, built in this process: the same model and layout with
        the arithmetic of knobs.reference_of (bf16, the exact all-reduce, an fp32 reduction),
        eager, at the check's micro-batch; it shares this trial's ranks and fault switch."""
        knobs = {**reference_of(self.spec.knobs), "compile": False, "micro_batch_size": rows}
        knobs["grad_accum_steps"] = 1
        spec = dataclasses.replace(self.spec, knobs=knobs, params={})
        twin = Train(self.torch, spec, self.ranks, self.fault)
        twin.build()
        return twin

    def work(self) -> Work:
        return self._work
