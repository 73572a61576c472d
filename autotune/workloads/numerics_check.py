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

import gc
import math
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypedDict

from autotune.knobs import check_rows, int_of, numerics
from autotune.numerics import STALLED, Limits, judge
from autotune.workloads.numerics_steps import DECAY_TO as DECAY_TO
from autotune.workloads.numerics_steps import WARMUP_SHARE as WARMUP_SHARE
from autotune.workloads.numerics_steps import Trainer, base_of, check_lr, run_steps
from autotune.workloads.numerics_steps import lr_share as lr_share
from autotune.workloads.steps import Batch

if TYPE_CHECKING:
    import torch as torch_types
    from torch import Tensor

SOURCE_TOKENS, SUCCESSORS = 32, 2
SOURCE = (
    f"fresh batches of a random Markov chain over {SOURCE_TOKENS} tokens, each followed by one of "
    f"{SUCCESSORS} (entropy {math.log(SUCCESSORS):.2f} nats)"
)
MAX_NAMES = 20  # stalled parameters named in the record


class Settings(TypedDict, total=False):
    """What the check reads of study.loss_check's settings (TrainParams.loss_check); absent or None:
    the default."""

    min_learned: float | None  # numerics.Limits
    max_gap_nats: float | None
    floor: bool  # also run the reference against its arithmetic twin (the study's noise floor)


def markov_batches(
    torch: ModuleType,
    vocab: int,
    rows: int,
    seq_len: int,
    steps: int,
    seed: int,
    dev: torch_types.device,
) -> list[Batch]:
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


def fresh_weights(torch: ModuleType, workload: Trainer, seed: int) -> None:
    """The workload's model re-initialised from this seed (init_weights, as it was built)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        init_weights = base_of(workload.model).init_weights
        assert callable(init_weights)  # check() runs only for a model that has it
        init_weights()


def copy_weights(torch: ModuleType, source: Trainer, target: Trainer) -> None:
    """The target model takes the source's weights and buffers, name by name (fp8's converted
    linears keep their parameters' names)."""
    mine = dict(base_of(source.model).state_dict(keep_vars=True))
    with torch.no_grad():
        for name, value in base_of(target.model).state_dict(keep_vars=True).items():
            if name in mine and mine[name].shape == value.shape:
                value.copy_(mine[name])


def _nonfinite(losses: list[float]) -> str:
    bad = next((i for i, x in enumerate(losses) if not math.isfinite(x)), None)
    return "" if bad is None else f"loss became {losses[bad]} at step {bad + 1} of {len(losses)}"


def _grads(torch: ModuleType, names: list[str], mine: Tensor, theirs: Tensor) -> dict[str, Any]:
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


def _start(cand: Trainer, ref: Trainer, steps: int, seed: int, rows: int) -> list[Batch]:
    """This seed's batches; the candidate's fresh weights, copied into the reference."""
    seq_len = cand.batches[0][0].shape[1]
    assert cand.spec.model is not None  # a training trial builds a model
    vocab = cand.spec.model["vocab_size"]
    batches = markov_batches(cand.torch, vocab, rows, seq_len, steps, seed, cand.dev)
    fresh_weights(cand.torch, cand, seed)
    copy_weights(cand.torch, cand, ref)
    return batches


def attempt(cand: Trainer, ref: Trainer, steps: int, seed: int, rows: int) -> dict[str, Any]:
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


def floor_run(cand: Trainer, ref: Trainer, steps: int, seed: int, rows: int) -> dict[str, Any]:
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


def check(cand: Trainer, steps: int, params: Settings) -> dict[str, Any]:
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


def _free_trial_state(cand: Trainer) -> None:
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


def _out_of_memory(torch: ModuleType, cand: Trainer, err: BaseException) -> str:
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


def _checked(cand: Trainer, steps: int, params: Settings) -> dict[str, Any]:
    """check's attempts and floor, with the reference built here and dropped on the way out."""
    torch = cand.torch
    rows = check_rows(int_of(cand.spec.knobs, "micro_batch_size"))
    ref = cand.reference_twin(rows)
    learned = params.get("min_learned")
    limits = Limits(Limits.min_learned if learned is None else learned, params.get("max_gap_nats"))
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
