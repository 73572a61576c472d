"""Text generation (`task: generate`): prefill a batch of prompts, then decode `gen_len` tokens
each, greedy, with a KV cache, on synthetic token ids (gpt-fast's loop: static cache, CUDA graphs
through torch.compile's reduce-overhead mode, torchao weight quantization).

One measured "step" is one whole generation of the batch; inside it every decode step has its own
pair of CUDA events (no host synchronisation), so the trial reports time to first token (the prefill
of the batch), time per output token (median and p99 over the decode steps) and output tokens/s. A
quantized trial first compares its logits with the unquantized model's on the same prompts (greedy
agreement, KL divergence).

Imported only inside a trial's process: torch (and torchao for weight_quant), nothing else.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from autotune.knobs import KnobValue, int_of
from autotune.protocol import GenerateParams
from autotune.workloads.base import InvalidConfig, Measured, Work, Workload
from autotune.workloads.decoder import Caches, Decoder, HFDecoder, full_logits
from autotune.workloads.precision import apply_attention, apply_precision
from autotune.workloads.quant import (
    apply_weight_quant,
    capture_linears,
    drift,
    layer_errors,
    linear_bytes,
)
from autotune.workloads.timing import time_steps

if TYPE_CHECKING:
    from torch import Tensor, nn
    from transformers import Cache

    from autotune.workloads.model import Transformer

# prefill(prompts, positions) and decode(token, position, caches): the next tokens (greedy) and the
# caches (the built-in model's dynamic ones, a transformers Cache, or None for the static cache)
Decoded = tuple["Tensor", "Caches | Cache | None"]
Prefill = Callable[["Tensor", "Tensor"], Decoded]
Decode = Callable[["Tensor", "Tensor", "Caches | Cache | None"], Decoded]

# sequences and last positions compared against the unquantized model
DRIFT_PROMPTS, DRIFT_POSITIONS = 4, 16


class Generate(Workload):
    """Prefill a batch of prompts, then decode gen_len tokens each with a KV cache, greedy."""

    task = "generate"

    def build(self) -> None:
        torch, spec, knobs = self.torch, self.spec, self.spec.knobs
        m, run = spec.model, spec.run
        if not m or not (m.get("family") or m.get("hf_config")):
            raise InvalidConfig(
                "task generate runs the built-in model (model.family gpt or llama) or an "
                "hf_config model"
            )
        assert run.prompt_len is not None and run.gen_len is not None  # the parent fills them in
        self.model_section = m
        self.prompt_len, self.gen_len = run.prompt_len, run.gen_len
        self.batch = int_of(knobs, "batch_size")
        precision, attention = str(knobs["precision"]), str(knobs["attention"])
        self.dtype = apply_precision(torch, precision, spec.device) or torch.float32
        self.dev = torch.device(spec.device)
        self.attention = apply_attention(torch, attention, spec.device, self.dtype)
        torch.manual_seed(run.seed)
        static = knobs["kv_cache"] == "static"
        model, vocab, d_model = (
            self._hf_model(static) if m.get("hf_config") else self._builtin_model()
        )
        gen = torch.Generator(device=self.dev).manual_seed(run.seed)
        self.prompts = torch.randint(
            0, vocab, (self.batch, self.prompt_len), device=self.dev, generator=gen
        )
        n_params = sum(p.numel() for p in model.parameters())
        quant = None if knobs["weight_quant"] in (None, "none") else str(knobs["weight_quant"])
        how, drift_checked = self._quantize(model, vocab, quant) if quant else (None, None)
        self.model = model
        length = self.prompt_len + self.gen_len
        self.decoder = self._decoder(model, vocab, length, static, attention == "eager")
        mode = knobs["compile"]
        if mode and not static and mode == "reduce-overhead":
            raise InvalidConfig(
                "compile reduce-overhead (CUDA graphs) needs kv_cache static: a growing cache "
                "changes every decode step's shapes",
                "compile",
                "kv_cache",
            )
        self.prefill_fn, self.decode_fn = self._compile(
            mode, static, bool(knobs.get("compile_prefill", False))
        )
        self.bytes_per_decode_step = self._decode_bytes(model, quant, d_model)
        self._work = Work(tokens_per_step=self.batch * self.gen_len, n_params=n_params)
        self.applied = {
            "precision": str(self.dtype).replace("torch.", ""),
            "weight_quant": how,
            "kv_cache": f"{knobs['kv_cache']} ({length} positions)"
            if static
            else "dynamic (torch.cat)",
            "compile_mode": (None if not mode else ("default" if mode is True else mode)),
            "compile_prefill": bool(mode and knobs.get("compile_prefill")),
            "attention": knobs["attention"],
            "drift": drift_checked,
        }

    def _hf_model(self, static: bool) -> tuple[nn.Module, int, int]:
        """An hf_config model in its dtype, decoded with transformers' own cache: (model, vocab,
        d_model)."""
        if static:
            raise InvalidConfig(
                "kv_cache static is the built-in model's (a cache preallocated and written in "
                "place); an hf_config model decodes with kv_cache: dynamic (transformers' "
                "DynamicCache)",
                "kv_cache",
            )
        from autotune.workloads.external import hf_causal_lm

        hf, config = hf_causal_lm(self.model_section["hf_config"], self.spec.knobs, self.dev)
        vocab = config.vocab_size
        # as an nn.Module: transformers wraps its `to` in a decorator mypy cannot call bound
        model: nn.Module = hf
        model = model.to(self.dtype).eval().requires_grad_(False)

        def logits(tokens: Tensor, last: int) -> Tensor:
            return model(input_ids=tokens).logits[:, -last:, :vocab].float()

        self.logits: Callable[[Tensor, int], Tensor] = logits
        return model, vocab, config.hidden_size

    def _builtin_model(self) -> tuple[Transformer, int, int]:
        """The built-in model built on the meta device in its dtype, materialised where it runs (an
        8B model never exists in fp32): (model, vocab, d_model)."""
        from autotune.workloads.model import Transformer, dims_of

        torch, m = self.torch, self.model_section
        attention = str(self.spec.knobs["attention"])
        dims = dims_of(self.spec, attention=attention, padded_vocab=m["vocab_size"])
        with torch.device("meta"):
            model = Transformer(dims).to(self.dtype)
        model = model.to_empty(device=self.dev)
        model.init_weights()
        model = model.eval().requires_grad_(False)
        self.logits = lambda tokens, last: full_logits(torch, model, tokens, last)
        return model, dims["vocab_size"], dims["d_model"]

    def _decoder(
        self, model: nn.Module, vocab: int, length: int, static: bool, eager: bool
    ) -> Decoder | HFDecoder:
        """The built-in model decoded with its own KV cache, an hf_config model with
        transformers'."""
        from autotune.workloads.model import Transformer

        if isinstance(model, Transformer):
            return Decoder(self.torch, model, self.batch, length, self.dtype, static, eager)
        from transformers import PreTrainedModel

        assert isinstance(model, PreTrainedModel)
        return HFDecoder(model, vocab)

    def _decode_bytes(self, model: nn.Module, quant: str | None, d_model: int) -> int:
        """Bytes one decode step must read (the roofline's numerator): the linears' weights as
        stored, the norms, the KV cache of the positions attended to on average, the batch's hidden
        states."""
        torch, knobs = self.torch, self.spec.knobs
        layers = self.decoder.layers
        cached = 2 * layers * self.batch * self.decoder.n_kv * self.decoder.head_dim
        # positions a decode step attends to, on average
        mean_pos = self.prompt_len + (self.gen_len - 1) / 2
        dtype_bytes = torch.finfo(self.dtype).bits // 8
        weights = linear_bytes(model, torch, quant, int(knobs.get("int4_group_size") or 128))
        norms = (torch.nn.LayerNorm, torch.nn.RMSNorm)
        other = sum(
            p.numel() * p.element_size()
            for mod in model.modules()
            if isinstance(mod, norms)
            for p in mod.parameters()
        )
        return int(
            weights + other + cached * mean_pos * dtype_bytes + self.batch * d_model * dtype_bytes
        )

    def _quantize(
        self, model: nn.Module, vocab: int, quant: str
    ) -> tuple[str | None, dict[str, float]]:
        """weight_quant applied, with the drift guard: every linear's input and output recorded on a
        probe before, each layer's error and the whole model's logits compared after; invalid_config
        past study.drift."""
        torch, knobs, run = self.torch, self.spec.knobs, self.spec.run
        # the same probe whatever the batch size: drift is the quantization's, so one rule covers
        # all batches
        probe = torch.randint(
            0,
            vocab,
            (DRIFT_PROMPTS, self.prompt_len),
            device=self.dev,
            generator=torch.Generator(device=self.dev).manual_seed(run.seed + 1),
        )
        last = min(DRIFT_POSITIONS, self.prompt_len)
        out: dict[str, Tensor] = {}

        def reference() -> None:
            out["ref"] = self.logits(probe, last)

        with torch.no_grad(), self.attention():
            seen = capture_linears(torch, model, reference, last)
        how = apply_weight_quant(torch, model, knobs, broken=self.fault.kind == "drift")
        with torch.no_grad(), self.attention():
            errs, new = self._quantized_outputs(model, seen, probe, last)
        checked: dict[str, float] = {
            **drift(torch, out.pop("ref"), new),
            "layer_error_max": max(errs),
            "layer_error_median": statistics.median(errs),
            "layers": len(errs),
            "prompts": int(probe.shape[0]),
            "positions": last,
        }
        params = self.spec.params
        assert isinstance(params, GenerateParams)
        self._check_drift(quant, checked, params.drift or {})
        return how, checked

    def _quantized_outputs(
        self, model: nn.Module, seen: dict[str, tuple[Tensor, Tensor]], probe: Tensor, last: int
    ) -> tuple[list[float], Tensor]:
        """Each quantized layer's output error and the model's logits; a kernel that cannot run
        these inputs here is invalid_config, its knobs the cause (seen on an H200: gemlite 0.5.1's
        GEMM kernel, a prompt's many rows, rejected bf16 activations, 'Both operands must be same
        dtype. Got bf16 and fp16')."""
        knobs = self.spec.knobs
        try:
            return layer_errors(self.torch, model, seen), self.logits(probe, last)
        # the kernel library's own reason (Triton, torchao), whatever its type
        except Exception as err:
            first = (str(err).strip().splitlines() or [type(err).__name__])[-1][:300]
            kernel = (
                f" ({knobs.get('int4_kernel')})"
                if knobs["weight_quant"] == "int4_weight_only"
                else ""
            )
            raise InvalidConfig(
                f"weight_quant {knobs['weight_quant']}{kernel}: the quantized layers fail on a "
                f"{self.prompt_len}-token prompt in {knobs['precision']}: {type(err).__name__}: "
                f"{first}",
                "weight_quant",
                "int4_kernel",
                "precision",
            ) from None

    @staticmethod
    def _check_drift(quant: str, d: dict[str, float], limit: dict[str, float]) -> None:
        """invalid_config: outputs drift, past any limit of study.drift (None: that limit is
        off)."""
        missed = []
        if (
            limit.get("max_layer_error") is not None
            and d["layer_error_max"] > limit["max_layer_error"]
        ):
            missed.append(
                f"largest per-layer output error {d['layer_error_max']:.3f} > "
                f"{limit['max_layer_error']}"
            )
        if limit.get("max_kl_nats") is not None and d["kl_nats"] > limit["max_kl_nats"]:
            missed.append(f"KL {d['kl_nats']:.4f} nats > {limit['max_kl_nats']}")
        if (
            limit.get("min_greedy_agreement") is not None
            and d["greedy_agreement"] < limit["min_greedy_agreement"]
        ):
            missed.append(
                f"greedy agreement {d['greedy_agreement']:.3f} < {limit['min_greedy_agreement']}"
            )
        if missed:
            raise InvalidConfig(
                (
                    f"outputs drift: {quant} against the unquantized model (same weights, same "
                    "prompts): "
                )
                + "; ".join(missed)
                + " (study.drift)",
                "weight_quant",
                "int4_group_size",
            )

    def _compile(self, mode: KnobValue, static: bool, prefill_too: bool) -> tuple[Prefill, Decode]:
        torch, dec = self.torch, self.decoder

        def prefill(tokens: Tensor, pos: Tensor) -> Decoded:
            logits, caches = dec.forward(tokens, pos)
            return logits.argmax(-1), caches

        def decode(token: Tensor, pos: Tensor, caches: Caches | Cache | None) -> Decoded:
            # each decoder is handed back the caches it returned (its own kind)
            logits, grown = dec.forward(token, pos, caches)  # type: ignore[arg-type]
            return logits.argmax(-1), grown

        if not mode:
            return prefill, decode
        mode_arg = None if mode in (True, "default") else mode
        decode_c = torch.compile(decode, mode=mode_arg, dynamic=not static)
        # eager by default: compiled prefill with quantized weights can be far slower
        if not prefill_too:
            return prefill, decode_c
        # the prefill runs once per generation: compiled without CUDA graphs (gpt-fast does the
        # same)
        prefill_mode = None if mode_arg == "reduce-overhead" else mode_arg
        return torch.compile(
            prefill, mode=prefill_mode, dynamic=False if static else None
        ), decode_c

    def generate(self, events: list[Any] | None) -> Any:
        """One generation of the batch; `events` (CUDA) get one event after the prefill and after
        each decode step."""
        torch = self.torch
        cuda = self.dev.type == "cuda"
        stamps = events if events is not None else []

        def mark() -> None:
            stamps.append(_event(torch) if cuda else time.perf_counter())

        mark()
        with torch.no_grad(), self.attention():
            pos = torch.arange(self.prompt_len, device=self.dev)
            token, caches = self.prefill_fn(self.prompts, pos)
            token = token.clone()
            mark()
            for i in range(self.gen_len - 1):
                p = self.prompt_len + i
                if cuda and self.spec.knobs["compile"] == "reduce-overhead":
                    torch.compiler.cudagraph_mark_step_begin()
                token, caches = self.decode_fn(
                    token, torch.arange(p, p + 1, device=self.dev), caches
                )
                token = token.clone()
                mark()
        return token

    def run(self) -> Measured:
        torch, run = self.torch, self.spec.run
        cuda = self.spec.device == "cuda"
        per_gen: list[list[Any]] = []

        def step() -> Any:
            stamps: list[Any] = []
            per_gen.append(stamps)
            return self.generate(stamps)

        try:
            timing = time_steps(
                torch,
                self.fault.slowed(step, torch.cuda.synchronize if cuda else (lambda: None)),
                warmup=run.warmup_steps,
                measure=run.measure_steps,
                device=self.spec.device,
            )
        except RuntimeError as err:
            text = str(err)
            # SDPA's refusal of the forced backend with a mask or cache
            if "No available kernel" in text:
                first = text.strip().splitlines()[0][:300]
                raise InvalidConfig(
                    f"attention {self.spec.knobs['attention']} with kv_cache "
                    f"{self.spec.knobs['kv_cache']}: {first}",
                    "attention",
                    "kv_cache",
                ) from None
            raise
        measured = per_gen[-len(timing.step_s) :]
        ttft, tpot = [], []
        for stamps in measured:
            if cuda:
                gaps = [a.elapsed_time(b) for a, b in zip(stamps, stamps[1:])]  # milliseconds
            else:
                gaps = [(b - a) * 1000 for a, b in zip(stamps, stamps[1:])]
            ttft.append(gaps[0])
            tpot.extend(gaps[1:])
        output = {
            "prompt_len": self.prompt_len,
            "gen_len": self.gen_len,
            "batch_size": self.batch,
            "ttft_ms": statistics.median(ttft),
            "ttft_ms_samples": ttft,
            "tpot_ms_median": statistics.median(tpot) if tpot else None,
            "tpot_ms_p99": _quantile(tpot, 0.99) if tpot else None,
            "tpot_ms_samples": tpot if len(tpot) <= 4096 else None,
            "decode_steps": len(tpot),
            "bytes_per_decode_step": self.bytes_per_decode_step,
        }
        return Measured(timing, [], output)

    def work(self) -> Work:
        return self._work


def _event(torch: ModuleType) -> Any:
    ev = torch.cuda.Event(enable_timing=True)
    ev.record()
    return ev


def _quantile(values: list[float], q: float) -> float:
    """The q-quantile (q in hundredths) with linear interpolation between samples, as numpy's
    default."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]
