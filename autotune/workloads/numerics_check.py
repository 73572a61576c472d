"""The numerics check in the trial's own process (study.loss_check; the verdict is
autotune/numerics.py's).

After its measured steps (untimed, eager: the trial's compiled code is set aside, so no other shape
is compiled), a training trial whose knobs change the arithmetic (knobs.numerics) trains its own
model from fresh weights for `steps` optimizer steps, and so does its reference (knobs.reference_of:
bf16, the exact all-reduce, an fp32 reduction): a second model built in this process with those
initial weights copied in, as torchao's float8 tests build theirs. No other process is launched.

Both see the same fresh batches each step, drawn from a fixed random Markov chain: SOURCE_TOKENS
tokens of the vocabulary, each followed by one of SUCCESSORS others, so the loss falls from
ln(vocabulary) towards ln(SUCCESSORS) and levels off, and nothing can be memorised. Each step's loss
and every parameter's gradient norm are kept on the device and read once a run. An attempt that
fails is repeated once from other weights and other batches; asked to (params.loss_check.floor), the
reference also runs once against its arithmetic twin (fp32-class arithmetic, or another reduction
order): the study's noise floor."""

from __future__ import annotations

import contextlib
import gc
import math
from types import ModuleType
from typing import TYPE_CHECKING, Any

from autotune.knobs import check_rows, numerics
from autotune.numerics import STALLED, Limits, judge
from autotune.workloads.parallel import repeated_blocks

if TYPE_CHECKING:
    from torch import nn

SOURCE_TOKENS, SUCCESSORS = 32, 2
SOURCE = (
    f"fresh batches of a random Markov chain over {SOURCE_TOKENS} tokens, each followed by one of "
    f"{SUCCESSORS} (entropy {math.log(SUCCESSORS):.2f} nats)"
)
MAX_NAMES = 20  # stalled parameters named in the record

# The check's learning rate: Adam's first steps move every weight by about lr in the sign of its
# gradient, which changes a linear's output by about lr * sqrt(fan_in) / init_std of its scale (the
# update is coherent over the fan-in). At 3e-4 that is 1.8 for Llama-3-8B's MLP (fan-in 14,336; std
# 0.02) and the 8B check's bf16 reference itself jumped between 2 and 23 nats on the H200
# (2026-12-01), so no precision could be compared with it; capped at CHECK_UPDATE, 0.25 (what 3e-4
# gives a fan-in of 256; CPU curves of 256- to 2048-wide models at 0.16 to 0.45 fall smoothly), with
# the schedule below. The same reasoning as muP's 1/width learning rate for Adam (Yang et al. 2021,
# Tensor Programs V).
CHECK_UPDATE, INIT_STD = 0.25, 0.02
# Real training clips the global gradient norm (GPT-3, Llama, nanoGPT, torchtitan: at 1.0); without
# it, a 1.3B GPT's 30-step check jumped from 1.3 to 15.4 nats at one step and back, on both curves,
# and one such step in a mean had flipped the gap's sign (issue 49)
CLIP_NORM = 1.0
# The check's schedule: a linear warm-up over WARMUP_SHARE of its steps, then linear decay to
# DECAY_TO of the peak (a quarter's warm-up, no decay: a 1B Llama bumped 1.2 nats at steps 5-11;
# docs/BENCHMARKS.md 2026-12-05, benchmarks/check_schedule.py)
WARMUP_SHARE, DECAY_TO = 0.5, 0.1
# the test-only spike (fault reference_spike): the output layer negated, 30 times as large
SPIKE_FACTOR = -30.0


def check_lr(torch: ModuleType, model: nn.Module) -> float:
    """The loss check's peak learning rate: 3e-4, lowered for wide layers (CHECK_UPDATE above)."""
    fan_in = max(
        (m.in_features for m in model.modules() if isinstance(m, torch.nn.Linear)), default=1
    )
    return min(3e-4, CHECK_UPDATE * INIT_STD / fan_in**0.5)


def markov_batches(
    torch: ModuleType, vocab: int, rows: int, seq_len: int, steps: int, seed: int, dev: Any
) -> list[Any]:
    """`steps` (inputs, targets) pairs of `rows` sequences from the chain of this seed, on the
    device (drawn on the CPU: the same on every rank and every device)."""
    gen = torch.Generator().manual_seed(seed)
    n = min(SOURCE_TOKENS, vocab)
    tokens = torch.randperm(vocab, generator=gen)[:n]
    successors = torch.randint(0, n, (n, SUCCESSORS), generator=gen)
    state = torch.randint(0, n, (steps, rows), generator=gen)
    picks = torch.randint(0, SUCCESSORS, (seq_len, steps, rows), generator=gen)
    walk = [state]
    for pick in picks:
        state = successors[state, pick]
        walk.append(state)
    seqs = tokens[torch.stack(walk, dim=-1)].to(dev)
    return [(s[:, :-1], s[:, 1:]) for s in seqs]


def base_of(model: nn.Module) -> Any:
    return getattr(model, "module", model)  # DDP wraps; FSDP2 and per-block compile do not


def fresh_weights(torch: ModuleType, workload: Any, seed: int) -> None:
    """The workload's model re-initialised from this seed (init_weights, as it was built)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        base_of(workload.model).init_weights()


def copy_weights(torch: ModuleType, source: Any, target: Any) -> None:
    """The target model takes the source's weights and buffers, name by name (fp8's converted
    linears keep their parameters' names)."""
    mine = dict(base_of(source.model).state_dict(keep_vars=True))
    with torch.no_grad():
        for name, value in base_of(target.model).state_dict(keep_vars=True).items():
            if name in mine and mine[name].shape == value.shape:
                value.copy_(mine[name])


def _local(grad: Any) -> Any:
    return grad.to_local() if hasattr(grad, "to_local") else grad  # FSDP2: this rank's shard


class Run:
    """One run of the check's steps: the losses and the per-step gradient norms, still on the
    device."""

    def __init__(self, torch: ModuleType) -> None:
        self.torch, self.losses, self.norms = torch, [], []

    def add(self, loss: Any, params: list[Any]) -> None:
        torch = self.torch
        zero = torch.zeros((), device=loss.device)
        norms = [
            torch.linalg.vector_norm(_local(p.grad)).float() if p.grad is not None else zero
            for p in params
        ]
        self.losses.append(loss.detach().float())
        self.norms.append(torch.stack(norms) if norms else zero.reshape(1))

    def read(self) -> tuple[list[float], Any]:
        """(losses, median gradient norm of each parameter over the finite steps): one
        synchronisation."""
        torch = self.torch
        losses = torch.stack(self.losses).cpu().tolist()
        norms = torch.stack(self.norms).cpu()
        norms = torch.where(
            torch.isfinite(norms), norms, torch.nan
        )  # fp16: steps the scaler skipped
        return losses, torch.nanmedian(norms, dim=0).values


def _optimizer(w: Any, steps: int) -> tuple[Any, Any]:
    """The check's AdamW (the trial's settings) at check_lr's peak, on lr_share's schedule."""
    torch = w.torch
    opt = w.new_optimizer()
    for group in opt.param_groups:
        group["lr"] = check_lr(torch, w.model)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_share(i, steps))


def lr_share(step: int, steps: int) -> float:
    """The share of the peak learning rate at this step (0-based) of the check's `steps`: the
    linear warm-up over WARMUP_SHARE of them, then the linear decay to DECAY_TO by the last."""
    warmup = max(1, round(steps * WARMUP_SHARE))
    if step < warmup:
        return (step + 1) / warmup
    done = (step + 1 - warmup) / max(1, steps - warmup)
    return 1.0 - (1.0 - DECAY_TO) * min(1.0, done)


def run_steps(w: Any, batches: list[Any], *, amp: Any, candidate: bool, split: int = 1) -> Run:
    """The check's optimizer steps of one model over the batches. fp16 keeps its GradScaler (unless
    the fault takes it away); only the candidate meets the fault's drift or frozen layer; both meet
    its small gradients, only the reference its spike. split: micro-batches a step (another
    reduction order)."""
    torch, fault = w.torch, w.fault
    params = list(w.model.parameters())
    frozen = _first_block(w) if candidate and fault.freezes_a_layer else []
    opt, schedule = _optimizer(w, len(batches))
    fp16 = amp is torch.float16 and not (candidate and fault.drops_grad_scaler)
    scaler = torch.amp.GradScaler(w.spec.device) if fp16 else None
    run = Run(torch)
    spike = fault.spike_step(candidate, len(batches))
    try:
        for i, (inputs, targets) in enumerate(batches):
            fault.in_check_step(torch, candidate)
            with _spiked(w, i == spike):
                loss = _forward_backward(w, inputs, targets, amp, scaler, split)
            if scaler:
                scaler.unscale_(opt)
            for p in frozen:  # the test-only frozen layer: its gradients never arrive
                p.grad = None
            run.add(loss, params)  # the gradients as they came, before the clip
            clip_gradients(torch, params)
            _optimizer_step(opt, scaler)
            if candidate and w.fp8_scales:
                w.fp8_scales()
            opt.zero_grad(set_to_none=True)
            schedule.step()
            if candidate and fault.drifts:
                _round_to_one_bit(torch, params)
    finally:  # its moments freed now, not at the next collection (two models share the memory)
        opt.zero_grad(set_to_none=True)
        opt.state.clear()
    return run


@contextlib.contextmanager
def _spiked(w: Any, spike: bool) -> Any:
    """The test-only spike (fault reference_spike): this step's output layer turned round and 30
    times as large (its logits confidently wrong, as in an unstable step), then as it was; the
    step's gradient is taken there."""
    head = getattr(base_of(w.model), "head", None) if spike else None
    if head is None:
        yield
        return
    with w.torch.no_grad():
        head.weight.mul_(SPIKE_FACTOR)
    try:
        yield
    finally:
        with w.torch.no_grad():
            head.weight.div_(SPIKE_FACTOR)


def clip_gradients(torch: ModuleType, params: list[Any]) -> None:
    """The global gradient norm clipped to CLIP_NORM, as torchtitan's dist_utils.clip_grad_norm_
    does it: the total norm of every gradient (an FSDP2 shard's DTensor made whole first), then
    each gradient scaled by torch's own clip_grads_with_norm_. Non-finite norms (fp16's skipped
    steps) are left to the GradScaler."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    total = torch.nn.utils.get_total_norm(grads)
    if hasattr(total, "full_tensor"):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, CLIP_NORM, total)


def _optimizer_step(opt: Any, scaler: Any) -> None:
    if scaler is None:
        opt.step()
        return
    scaler.step(opt)
    scaler.update()


def _first_block(w: Any) -> list[Any]:
    """The parameters of the model's first repeated block (the frozen-layer fault's)."""
    blocks = repeated_blocks(w.torch, base_of(w.model))
    return list(blocks[0].parameters()) if blocks else []


def _round_to_one_bit(torch: ModuleType, params: list[Any]) -> None:
    """The test-only broken precision (fault drift): every weight rounded to one bit after each
    step."""
    with torch.no_grad():
        for p in params:
            p.copy_(p.sign() * p.abs().mean())


def _forward_backward(w: Any, inputs: Any, targets: Any, amp: Any, scaler: Any, split: int) -> Any:
    """One step's forward and backward in `split` micro-batches; its loss (unscaled)."""
    torch = w.torch
    total = torch.zeros((), device=inputs.device)
    scale = w.fault.check_grad_scale
    parts = list(zip(inputs.chunk(split), targets.chunk(split)))
    for i, (x, y) in enumerate(parts):
        autocast = (
            torch.autocast(device_type=w.spec.device, dtype=amp)
            if amp
            else contextlib.nullcontext()
        )
        sync = w.sync(i == len(parts) - 1) if w.sync else contextlib.nullcontext()
        with sync, autocast, w.attention():
            loss = w.step_model(x, y) / len(parts)
        scaled = loss * scale
        (scaler.scale(scaled) if scaler else scaled).backward()
        total += loss.detach()
    return total


def _nonfinite(losses: list[float]) -> str:
    bad = next((i for i, x in enumerate(losses) if not math.isfinite(x)), None)
    return "" if bad is None else f"loss became {losses[bad]} at step {bad + 1} of {len(losses)}"


def _grads(torch: ModuleType, names: list[str], mine: Any, theirs: Any) -> dict[str, Any]:
    """The stalled parameters (median gradient norm under STALLED of the reference's) and the
    ratios' spread."""
    live = theirs > 0
    ratio = torch.where(live, mine / torch.where(live, theirs, 1.0), torch.nan)
    stalled = [n for n, r in zip(names, ratio.tolist()) if r < STALLED]  # NaN (no reference) is not
    finite = ratio[torch.isfinite(ratio)]
    return {
        "stalled": stalled[:MAX_NAMES],
        "n_stalled": len(stalled),
        "grad_ratio_min": round(float(finite.min()), 4) if finite.numel() else None,
        "grad_ratio_median": round(float(finite.median()), 4) if finite.numel() else None,
    }


def _start(cand: Any, ref: Any, steps: int, seed: int, rows: int) -> list[Any]:
    """This seed's batches; the candidate's fresh weights, copied into the reference."""
    seq_len = cand.batches[0][0].shape[1]
    vocab = cand.spec.model["vocab_size"]
    batches = markov_batches(cand.torch, vocab, rows, seq_len, steps, seed, cand.dev)
    fresh_weights(cand.torch, cand, seed)
    copy_weights(cand.torch, cand, ref)
    return batches


def attempt(cand: Any, ref: Any, steps: int, seed: int, rows: int) -> dict[str, Any]:
    """The candidate and its reference from the same initial weights (this seed's) over the same
    batches."""
    torch = cand.torch
    batches = _start(cand, ref, steps, seed, rows)
    with torch.compiler.set_stance("force_eager"):
        mine = run_steps(cand, batches, amp=cand.amp_dtype, candidate=True)
    theirs = run_steps(ref, batches, amp=ref.amp_dtype, candidate=False)
    (losses, my_norms), (reference, their_norms) = mine.read(), theirs.read()
    names = [n for n, _ in base_of(cand.model).named_parameters()]
    out = {
        "seed": seed,
        "losses": losses,
        "reference": reference,
        **_grads(torch, names, my_norms, their_norms),
    }
    if bad := _nonfinite(losses):
        out["nonfinite"] = bad
    if bad := _nonfinite(reference):
        out["reference_nonfinite"] = bad
    return out


def floor_run(cand: Any, ref: Any, steps: int, seed: int, rows: int) -> dict[str, Any]:
    """The reference's arithmetic twin from the first attempt's weights and batches: fp32 (TF32
    matmuls on a GPU) where the reference runs reduced precision, else the same arithmetic in two
    micro-batches a step."""
    torch = cand.torch
    batches = _start(cand, ref, steps, seed, rows)
    reduced = ref.amp_dtype is not None
    cuda = cand.spec.device == "cuda"
    twin = ("fp32 with TF32 matmuls" if cuda else "fp32") if reduced else "two micro-batches a step"
    before = torch.backends.cuda.matmul.fp32_precision
    if reduced and cuda:
        torch.backends.cuda.matmul.fp32_precision = "tf32"
    try:
        run = run_steps(
            ref,
            batches,
            amp=None if reduced else ref.amp_dtype,
            candidate=False,
            split=1 if reduced else 2,
        )
    finally:
        torch.backends.cuda.matmul.fp32_precision = before
    losses, _ = run.read()
    return {"twin": twin, "losses": losses}


def check(cand: Any, steps: int, params: dict[str, Any]) -> dict[str, Any]:
    """The check of this trial (its record's loss_check): up to two attempts, the floor when asked
    for, and its peak memory on a GPU (peak_gib). The check holds a second model (the reference)
    beside the trial's: where that runs out of memory after the trial's own steps fit, the
    configuration is not what failed, so a single-process trial records the check as not run (why:
    the memory it reached) and keeps its measurement; a rank of several re-raises (its peers wait
    in a collective)."""
    torch = cand.torch
    if not callable(getattr(base_of(cand.model), "init_weights", None)):
        return {"checked": False, "why": "the model has no init_weights() to start the check from"}
    _free_trial_state(cand)
    cuda = cand.spec.device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(cand.dev)
    try:
        out = _checked(cand, steps, params)
    except torch.OutOfMemoryError as err:
        if cand.ranks:
            raise
        out = {"checked": False, "why": _out_of_memory(torch, cand, err)}
    finally:
        _free_memory(torch, cuda)
    if cuda:
        out["peak_gib"] = round(torch.cuda.max_memory_allocated(cand.dev) / 2**30, 2)
    return out


def _free_trial_state(cand: Any) -> None:
    """The trial's own optimizer moments and gradients freed before the check builds its
    reference."""
    if cand.optimizer is not None:
        cand.optimizer.zero_grad(set_to_none=True)
        cand.optimizer.state.clear()
    cand.optimizer = None
    _free_memory(cand.torch, cand.spec.device == "cuda")


def _free_memory(torch: ModuleType, cuda: bool) -> None:
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()


def _out_of_memory(torch: ModuleType, cand: Any, err: BaseException) -> str:
    """Why the check did not run: it ran out of memory where the trial's own steps fit."""
    where = ""
    if cand.spec.device == "cuda":
        peak = torch.cuda.max_memory_allocated(cand.dev) / 2**30
        total = torch.cuda.get_device_properties(cand.dev).total_memory / 2**30
        where = f" at {peak:.1f} of {total:.1f} GiB"
    return (
        f"the check ran out of memory{where}: it trains a second model (the reference) beside "
        "this one, while the trial's own steps fit; the next trial of this arithmetic checks it "
        f"again ({str(err).splitlines()[0][:120]})"
    )


def _checked(cand: Any, steps: int, params: dict[str, Any]) -> dict[str, Any]:
    """check's attempts and floor, with the reference built here and dropped on the way out."""
    torch = cand.torch
    rows = check_rows(cand.spec.knobs["micro_batch_size"])
    ref = cand.reference_twin(rows)
    limits = Limits(
        **{k: params[k] for k in ("min_learned", "max_gap_nats") if params.get(k) is not None}
    )
    out: dict[str, Any] = {
        "steps": steps,
        "rows": rows,
        "source": SOURCE,
        "changed": numerics(cand.spec.knobs),
    }
    out["lr"] = check_lr(torch, cand.model)
    out["attempts"] = []
    for seed in (cand.spec.run.seed + 1, cand.spec.run.seed + 2):
        found = attempt(cand, ref, steps, seed, rows)
        found["verdict"] = judge(found, limits).as_dict()
        out["attempts"].append(found)
        if found["verdict"]["passed"] is not False:
            break
    if params.get("floor"):
        out["floor"] = floor_run(cand, ref, steps, cand.spec.run.seed + 1, rows)
    return out
