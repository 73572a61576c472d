"""One trial, in its own process: `python -m autotune.workloads.worker SPEC.json RESULT.json`.

Needs torch only (plus the standard library). Reads the trial spec (plain JSON), builds the model and
synthetic tokens on the device, runs warm-up optimizer steps (torch.compile happens there), then timed
optimizer steps, and writes the raw result as JSON. The parent classifies and summarises it.

Test-only fault switch, AUTOTUNE_FAULT (documented in README.md):
    KIND or KIND@KNOB>=VALUE or KIND@KNOB=VALUE, KIND one of
    oom (raise an out-of-memory error), hang (sleep forever), crash (abort the process),
    nan (make the loss NaN), error (raise a Python exception),
    slow:PCT (make every measured step PCT percent slower: a host wait of PCT% of the step inside
    the timed region, after a device synchronisation so that CUDA events see it too).
    The @ condition limits the fault to trials whose knob matches, e.g. oom@micro_batch_size>=16.
"""

from __future__ import annotations

import time

_T_ENTER = time.time()  # before importing torch: the start phase ends when torch is ready

import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402


class InvalidConfig(Exception):
    """This combination of knobs cannot run here (the reason says why)."""


class NonFiniteLoss(Exception):
    """The loss became NaN or inf."""


def _die_with_parent() -> None:
    """Linux: if the autotune process is killed (even with -9), this trial dies too and frees the GPU."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


def fault_for(knobs: dict[str, Any]) -> str | None:
    """The fault kind AUTOTUNE_FAULT asks for in a trial with these knobs, or None."""
    spec = os.environ.get("AUTOTUNE_FAULT", "").strip()
    if not spec:
        return None
    kind, _, cond = spec.partition("@")
    if cond:
        op = ">=" if ">=" in cond else "="
        knob, _, want = cond.partition(op)
        have = knobs.get(knob.strip())
        if op == ">=":
            if have is None or float(have) < float(want):
                return None
        elif str(have).lower() != want.strip().lower():
            return None
    return kind.strip()


def _set_precision(torch: Any, precision: str, device: str) -> Any:
    """Set matmul precision; return the autocast dtype (None for fp32/tf32). fp8 runs under bf16 autocast."""
    if device == "cuda" and precision in ("bf16", "fp8") and not torch.cuda.is_bf16_supported():
        raise InvalidConfig(f"{precision} needs bf16, which this GPU does not support")
    if precision == "fp8":
        if device != "cuda" or torch.cuda.get_device_capability(torch.cuda.current_device()) < (8, 9):
            raise InvalidConfig("fp8 needs an NVIDIA GPU of compute capability 8.9 or newer (Ada, Hopper, Blackwell)")
        try:
            import torchao.float8  # noqa: F401
        except Exception as err:
            raise InvalidConfig(f"fp8 needs torchao (pip install 'autotune[fp8]'): {err}") from None
    if device == "cpu" and precision == "tf32":
        raise InvalidConfig("tf32 needs an NVIDIA GPU (Ampere or newer); on the CPU it is fp32")
    mode = "tf32" if precision == "tf32" else "ieee"  # fp32 means true fp32: TF32 off
    torch.backends.cuda.matmul.fp32_precision = mode
    torch.backends.cudnn.conv.fp32_precision = mode
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}.get(precision)


SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}


def _attention_context(torch: Any, attention: str, device: str, dtype: Any) -> Any:
    """A context that forces the SDPA backend; InvalidConfig when that backend cannot run here."""
    if attention not in SDPA_BACKENDS:
        return contextlib.nullcontext
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, SDPA_BACKENDS[attention])
    probe = torch.randn(1, 2, 16, 64, device=device, dtype=dtype or torch.float32)
    try:
        with sdpa_kernel([backend]):
            torch.nn.functional.scaled_dot_product_attention(probe, probe, probe, is_causal=True)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[0][:200]
        raise InvalidConfig(f"attention {attention}: the SDPA backend is not available here: {first}") from None
    return lambda: sdpa_kernel([backend])


def run(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    from autotune.workloads.model import Transformer

    t_torch = time.time()
    knobs, m, wl = spec["knobs"], spec["model"], spec["workload"]
    device = spec["device"]
    if device == "cuda" and not torch.cuda.is_available():
        raise InvalidConfig("device cuda asked for, but torch sees no CUDA GPU")
    group = Ranks.start(torch, device)  # None with one rank
    fault = fault_for({**knobs, "rank": group.rank if group else 0})
    if fault == "hang":
        time.sleep(10**6)
    if fault == "crash":
        print("AUTOTUNE_FAULT=crash: aborting the trial process", file=sys.stderr, flush=True)
        os.abort()
    if fault == "error":
        raise RuntimeError("AUTOTUNE_FAULT=error: a deliberate exception in the trial")

    amp_dtype = _set_precision(torch, knobs["precision"], device)
    torch.manual_seed(wl["seed"])  # the same initial weights on every rank
    dev = torch.device(device, group.local_rank) if group and device == "cuda" else torch.device(device)

    attention_ctx = _attention_context(torch, knobs.get("attention", "auto"), device, amp_dtype)
    mbs, accum = knobs["micro_batch_size"], knobs["grad_accum_steps"]
    gen = torch.Generator(device=dev).manual_seed(wl["seed"] + (group.rank if group else 0))  # each rank its own data
    n_batches = min(accum, 4)  # a few distinct micro-batches, made once on the device: no data loading is timed
    if m.get("hf_config") or m.get("entrypoint"):
        from autotune.workloads import external

        try:
            if m.get("hf_config"):
                built = external.build_hf(m, knobs, device, n_batches, gen)
            else:
                built = external.build_entrypoint(m, knobs, device, n_batches, spec.get("base_dir"))
        except external.Unsupported as err:
            raise InvalidConfig(str(err)) from None
        model, batches, applied = built.model, built.batches, built.applied
        flop_params, n_params, mfu_dims, tokens_per_sample = (built.flop_params, built.n_params, built.mfu_dims,
                                                              built.tokens_per_sample)
    else:
        pad = knobs.get("pad_vocab_multiple")
        ckpt = knobs.get("activation_checkpointing", "none")
        m = {**m, "attention": knobs.get("attention", "auto"),
             "padded_vocab": -(-m["vocab_size"] // pad) * pad if pad else m["vocab_size"],
             "checkpoint_every": {"none": 0, "full": 1, "selective": 2}[ckpt]}
        model = Transformer(m).to(dev)
        flop_params = model.flop_params()
        n_params = sum(p.numel() for p in model.parameters())
        mfu_dims = {"n_layers": m["n_layers"], "d_model": m["d_model"], "seq_len": m["seq_len"]}
        tokens_per_sample = m["seq_len"]
        pool = torch.randint(0, m["vocab_size"], (n_batches, mbs, m["seq_len"] + 1), device=dev, generator=gen)
        batches = [(b[:, :-1], b[:, 1:]) for b in pool]
        applied = {"vocab": [m["vocab_size"], m["padded_vocab"]], "checkpointed_blocks": model.checkpointed_blocks()}
    fp8_linears = 0
    if knobs["precision"] == "fp8":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        config = Float8LinearConfig.from_recipe_name(knobs.get("fp8_recipe") or "tensorwise")
        # The output head stays in bf16 (its logits feed the loss; float8 there costs accuracy).
        keep = ("head", "lm_head")
        convert_to_float8_training(model, config=config, module_filter_fn=lambda mod, fqn: fqn.split(".")[-1] not in keep)
        fp8_linears = sum(1 for mod in model.modules() if type(mod).__name__ == "Float8Linear")
    parallel_applied, sync = {}, None
    if group:
        model, parallel_applied, sync = group.parallelize(torch, model, knobs, amp_dtype)
    fused = bool(knobs.get("fused_optimizer"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                  **({"fused": True} if fused else {}))
    scaler = torch.amp.GradScaler(device) if knobs["precision"] == "fp16" else None
    mode = knobs["compile"]
    compile_mode = None if mode in (False, True, "default") else mode
    step_model = torch.compile(model, mode=compile_mode) if mode else model
    attention = knobs.get("attention", "auto")
    applied = {
        "attention": attention if attention in SDPA_BACKENDS or attention == "eager" else "auto (PyTorch's SDPA choice)",
        **applied,
        "optimizer": f"AdamW(fused={bool(optimizer.defaults.get('fused'))})",
        "compile_mode": (compile_mode or "default") if mode else None,
        "fp8_linears": fp8_linears,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        **parallel_applied,
    }

    autocast = (
        (lambda: torch.autocast(device_type=device, dtype=amp_dtype)) if amp_dtype else contextlib.nullcontext
    )
    poison = float("nan") if fault == "nan" else 1.0
    slow = float(fault.partition(":")[2]) / 100 if fault and fault.startswith("slow:") else 0.0

    def slowdown(t0: float) -> None:
        """The test-only slowdown: wait slow x the step's own time, inside the timed region."""
        if slow:
            if device == "cuda":
                torch.cuda.synchronize()
            time.sleep(slow * (time.perf_counter() - t0))
    if device == "cuda":
        torch.cuda.synchronize()
    t_built = time.time()

    def step() -> torch.Tensor:
        total = torch.zeros((), device=dev)
        for i in range(accum):
            inputs, targets = batches[i % len(batches)]
            if fault == "oom":
                raise torch.OutOfMemoryError("AUTOTUNE_FAULT=oom: simulated out of memory")
            with sync(i == accum - 1) if sync else contextlib.nullcontext():  # gradients cross ranks once a step
                with autocast(), attention_ctx():
                    loss = step_model(inputs, targets) * poison / accum
                (scaler.scale(loss) if scaler else loss).backward()
            total += loss.detach()
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return total

    def check(losses: list[torch.Tensor], phase: str) -> list[float]:
        values = torch.stack(losses).float().cpu().tolist()  # one sync, after the timed region
        if not all(map(_finite, values)):
            raise NonFiniteLoss(f"loss became {values[-1]} during {phase} (losses {values})")
        return values

    warmup_times = []
    for _ in range(wl["warmup_steps"]):
        t0 = time.perf_counter()
        loss = step()
        check([loss], "warm-up")  # syncs, so the wall time below is the whole step
        warmup_times.append(time.perf_counter() - t0)
    t_warm = time.time()

    losses: list[torch.Tensor] = []
    if group:
        group.barrier()
    window_start = time.time()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(wl["measure_steps"])]
        for start, end in events:
            start.record()
            t0 = time.perf_counter()
            losses.append(step())
            slowdown(t0)
            end.record()
        torch.cuda.synchronize()
        step_times = [start.elapsed_time(end) / 1000.0 for start, end in events]
        peak_mem, peak_kind = torch.cuda.max_memory_allocated(), "cuda_max_memory_allocated"
        reserved = torch.cuda.max_memory_reserved()
    else:
        step_times = []
        for _ in range(wl["measure_steps"]):
            t0 = time.perf_counter()
            losses.append(step())
            slowdown(t0)
            step_times.append(time.perf_counter() - t0)
        peak_mem, peak_kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "cpu_max_rss"
        reserved = None
    window_end = time.time()
    loss_values = check(losses, "measured steps")
    ranks = None
    if group:  # one trial, one result: each step takes as long as its slowest rank
        group.check_in_sync(torch, model)
        ranks = group.gather({"step_times_s": step_times, "peak_mem_bytes": peak_mem, "reserved": reserved})
        step_times = [max(per_rank) for per_rank in zip(*(r["step_times_s"] for r in ranks))]
        peak_mem = max(r["peak_mem_bytes"] for r in ranks)
        reserved = max(r["reserved"] or 0 for r in ranks) or None
        ranks = [{"rank": i, "step_times_s": r["step_times_s"], "peak_mem_bytes": r["peak_mem_bytes"]}
                 for i, r in enumerate(ranks)]
        group.stop()

    median_step = statistics.median(step_times)
    return {
        "status": "ok",
        "step_times_s": step_times,
        "warmup_step_times_s": warmup_times,
        "losses": loss_values,
        "tokens_per_step": mbs * accum * tokens_per_sample,
        "n_params": n_params,
        "flop_params": flop_params,
        "mfu_dims": mfu_dims,
        "peak_mem_bytes": peak_mem,
        "peak_mem_kind": peak_kind,
        "peak_mem_reserved_bytes": reserved,
        "measure_window": [window_start, window_end],
        "phases_s": {
            "start": t_torch - spec.get("launched_at", _T_ENTER),
            "build": t_built - t_torch,
            "warmup": t_warm - t_built,
            # The first step's excess over a measured step: torch.compile's time when compile is on.
            "compile": max(0.0, warmup_times[0] - median_step) if knobs["compile"] else 0.0,
            "measure": window_end - window_start,
        },
        "env": _env(torch, device),
        "applied": applied,
        "ranks": ranks,
        "rank": group.rank if group else 0,
    }


class Ranks:
    """This process as one rank of a torchrun group: process group, data-parallel wrapping, gathering."""

    def __init__(self, torch: Any, device: str) -> None:
        import torch.distributed as dist

        self.dist = dist
        self.rank, self.local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.backend = "nccl" if device == "cuda" else "gloo"
        self.device = device
        if device == "cuda":
            torch.cuda.set_device(self.local_rank)
            dist.init_process_group("nccl", device_id=torch.device("cuda", self.local_rank))
            # autotune's own bookkeeping (barrier, gathering timings) goes over gloo: an NCCL_ALGO that NCCL
            # refuses for AllGather (Tree on NCCL 2.28) then fails the training's collectives, not ours.
            self.side = dist.new_group(backend="gloo")
        else:
            dist.init_process_group("gloo")
            self.side = None

    @classmethod
    def start(cls, torch: Any, device: str) -> Ranks | None:
        return cls(torch, device) if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None

    def parallelize(self, torch: Any, model: Any, knobs: dict[str, Any], amp_dtype: Any) -> tuple[Any, dict[str, Any], Any]:
        """Wrap for ddp or fsdp; return the model, what was applied, and sync(last_micro_step) -> context."""
        parallel = knobs.get("parallel") or "ddp"
        applied: dict[str, Any] = {"world_size": self.world, "backend": self.backend, "nccl_env": self.nccl_env()}
        if parallel == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            opts = {"bucket_cap_mb": knobs.get("bucket_cap_mb") or 25,
                    "gradient_as_bucket_view": bool(knobs.get("gradient_as_bucket_view")),
                    "static_graph": bool(knobs.get("static_graph"))}
            if opts["static_graph"] and knobs["grad_accum_steps"] > 1:
                # PyTorch's static_graph with no_sync() (gradient accumulation) asserts, or silently stops
                # reducing gradients after the first step (pytorch/pytorch, huggingface/accelerate#3679):
                # a fast number that trains nothing must never win.
                raise InvalidConfig("DDP static_graph with gradient accumulation (no_sync) is broken in PyTorch: "
                                    "gradients stop being synchronised; use static_graph false or grad_accum_steps 1")
            ddp = DistributedDataParallel(model, device_ids=[self.local_rank] if self.device == "cuda" else None, **opts)
            applied["parallel"] = {"strategy": "ddp", **opts}
            return ddp, applied, lambda last: contextlib.nullcontext() if last else ddp.no_sync()
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        if knobs["precision"] == "fp16":
            raise InvalidConfig("fsdp with fp16 needs a sharded gradient scaler, which autotune does not run; "
                                "use bf16 with fsdp")
        reshard = knobs.get("reshard_after_forward")
        reshard = True if reshard is None else bool(reshard)
        policy = MixedPrecisionPolicy(param_dtype=amp_dtype, reduce_dtype=torch.float32) if amp_dtype \
            else MixedPrecisionPolicy()
        blocks = getattr(model, "blocks", None)
        if blocks is None:  # another model (hf_config, entrypoint): its longest list of modules, the layers
            lists = [mod for mod in model.modules() if isinstance(mod, torch.nn.ModuleList) and len(mod) > 1]
            blocks = max(lists, key=len) if lists else []
        for block in blocks:
            fully_shard(block, mp_policy=policy, reshard_after_forward=reshard)
        fully_shard(model, mp_policy=policy, reshard_after_forward=reshard)
        applied["parallel"] = {"strategy": "fsdp", "reshard_after_forward": reshard, "sharded_blocks": len(blocks),
                               "param_dtype": str(amp_dtype or torch.float32).replace("torch.", ""),
                               "reduce_dtype": "float32"}

        @contextlib.contextmanager
        def sync(last: bool) -> Any:
            model.set_requires_gradient_sync(last)
            yield

        return model, applied, sync

    def nccl_env(self) -> dict[str, str | None] | str:
        """The NCCL environment this rank ran with (NCCL_NVLS_ENABLE only read, never set)."""
        return {k: os.environ.get(k) for k in NCCL_ENV} if self.backend == "nccl" else "not applicable to gloo"

    def barrier(self) -> None:
        self.dist.barrier(group=self.side)

    def gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world
        self.dist.all_gather_object(out, obj, group=self.side)
        return out

    def check_in_sync(self, torch: Any, model: Any) -> None:
        """DDP keeps every rank's weights identical; if they differ after the measured steps, gradients were
        not synchronised and the throughput is not that of data-parallel training: fail the trial."""
        if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
            return  # FSDP: each rank holds its own shard
        with torch.no_grad():
            local = sum(float(p.detach().float().abs().sum()) for p in model.parameters())
        sums = self.gather(local)
        if max(sums) - min(sums) > 1e-6 * max(abs(x) for x in sums):
            raise InvalidConfig(f"ranks' weights differ after the measured steps (|w| sums {sums}): gradients "
                                "were not synchronised, so this is not data-parallel training")

    def stop(self) -> None:
        self.dist.destroy_process_group()


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")


def _env(torch: Any, device: str) -> dict[str, Any]:
    env: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": device}
    if device == "cuda":
        env["device_name"] = torch.cuda.get_device_name(torch.cuda.current_device())
        env["cudnn"] = torch.backends.cudnn.version()
        with contextlib.suppress(Exception):
            env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return env


def _is_oom(err: BaseException) -> bool:
    import torch

    if isinstance(err, torch.OutOfMemoryError):
        return True
    text = str(err).lower()
    return "out of memory" in text or "can't allocate memory" in text


# Words of NCCL's message when it cannot honour NCCL_ALGO/NCCL_PROTO (a setting, not a fault); the parent
# reads its log lines with the same table.
NCCL_REFUSAL_MARKS = ("NCCL_ALGO", "NCCL_PROTO", "no algorithm/protocol available")
# The NCCL environment a rank records as applied (NCCL_NVLS_ENABLE only read, never set).
NCCL_ENV = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_NVLS_ENABLE")


def _nccl_refusal(err: BaseException) -> str | None:
    """NCCL's own message when it refused a setting (NCCL_ALGO/NCCL_PROTO it cannot use), else None."""
    text = str(err)
    if "ncclInvalidUsage" not in text and not any(mark in text for mark in NCCL_REFUSAL_MARKS):
        return None
    last = text.split("Last error:", 1)[1].strip() if "Last error:" in text else text.strip().splitlines()[0]
    return "NCCL refused this setting: " + " ".join(last.split())[:400]


def write_json(path: str, doc: dict[str, Any]) -> None:
    """Write JSON atomically: a reader (the parent) never sees half a file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def crash_reason(err: BaseException) -> str:
    """`Type: first line of the message`, for a rank's failure file."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0][:300] if text else ''}"


def fail_rank(result_path: str, rank: int, result: dict[str, Any]) -> None:
    """A failing rank of a torchrun group: write its reason beside the result (result.rankR.json), then exit 1
    at once, so that torchrun ends the other ranks (a normal shutdown can block in the process group's
    teardown with collectives in flight)."""
    write_json(str(Path(result_path).with_name(f"result.rank{rank}.json")),
               {**result, "rank": rank, "reason": f"rank {rank}: {result['reason']}", "at_ns": time.time_ns()})
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def main(argv: list[str]) -> int:
    _die_with_parent()
    spec_path, result_path = argv
    with open(spec_path) as f:
        spec = json.load(f)
    rank, ranks = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    try:
        result = run(spec)
    except InvalidConfig as err:
        result = {"status": "invalid_config", "reason": str(err)}
    except NonFiniteLoss as err:
        result = {"status": "nonfinite_loss", "reason": str(err)}
    except Exception as err:
        if _is_oom(err):
            result = {"status": "oom", "reason": str(err).strip().splitlines()[0][:500]}
        elif (refusal := _nccl_refusal(err)) is not None:
            result = {"status": "invalid_config", "reason": refusal}
        elif ranks > 1:  # this rank's own traceback stays in the log; its reason goes to the parent
            import traceback

            traceback.print_exc()
            result = {"status": "crash", "reason": crash_reason(err)}
        else:
            raise  # traceback goes to the log; the parent classifies the exit as a crash
    if ranks > 1:
        if result["status"] != "ok":
            fail_rank(result_path, rank, result)
        if rank != 0:
            return 0
    write_json(result_path, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
