"""The resolved search space: which knobs are searched or fixed, the batch rule, and Optuna suggestions."""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

    from autotune.config import Config

# Knobs in the order they are shown and suggested. grad_accum_steps is derived when "auto".
KNOBS = ("micro_batch_size", "precision", "grad_accum_steps", "compile", "attention", "pad_vocab_multiple",
         "activation_checkpointing", "fused_optimizer", "fp8_recipe", "cuda_alloc_conf", "nccl_algo",
         "parallel", "bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "reshard_after_forward",
         "nccl_proto", "nccl_nchannels")

# The communication library's knobs: environment variables of the ranks, meaningless on gloo (CPU).
NCCL_KNOBS = ("nccl_algo", "nccl_proto", "nccl_nchannels")
# Knob -> (knob, value) under which alone it acts. Elsewhere it is None in the trial's knobs (points that
# differ only there are one measurement), and it is not searched when that value is not in the space.
ONLY_WITH = {"fp8_recipe": ("precision", "fp8"),
             "bucket_cap_mb": ("parallel", "ddp"), "gradient_as_bucket_view": ("parallel", "ddp"),
             "static_graph": ("parallel", "ddp"), "reshard_after_forward": ("parallel", "fsdp")}
# Knobs that only act across ranks: not searched when world_size is 1.
COMM_KNOBS = ("parallel", *(k for k, (owner, _) in ONLY_WITH.items() if owner == "parallel"), *NCCL_KNOBS)

# Knob -> environment variables of the trial's processes ("default" sets nothing). Never NCCL_NVLS_ENABLE:
# that one is left exactly as the user's environment has it.
ENV_KNOBS = {"cuda_alloc_conf": ("PYTORCH_CUDA_ALLOC_CONF",), "nccl_algo": ("NCCL_ALGO",),
             "nccl_proto": ("NCCL_PROTO",), "nccl_nchannels": ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")}


@dataclass(frozen=True)
class ResolvedSpace:
    """The space as trials see it: searched knobs (two or more values), fixed knobs, and why."""

    searched: dict[str, list[Any]]
    fixed: dict[str, Any]
    notes: dict[str, str] = field(default_factory=dict)
    global_batch_size: int | None = None
    world_size: int = 1
    baseline: dict[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        n = 1
        for values in self.searched.values():
            n *= len(values)
        return n

    def knobs(self, params: dict[str, Any]) -> dict[str, Any]:
        """Every knob's value for a trial with these searched params (derived knobs filled in)."""
        knobs = {**self.fixed, **params}
        if self.global_batch_size is not None:
            knobs["grad_accum_steps"] = self.global_batch_size // (knobs["micro_batch_size"] * self.world_size)
        if self.world_size == 1:
            knobs["parallel"] = None  # one rank: no data parallelism to choose
        for name, (owner, value) in ONLY_WITH.items():
            if knobs[owner] != value:
                knobs[name] = None
        return {k: knobs[k] for k in KNOBS}

    def points(self) -> list[dict[str, Any]]:
        """Every point of the space as searched params (the grid)."""
        names = list(self.searched)
        return [dict(zip(names, combo)) for combo in itertools.product(*self.searched.values())]

    def distance(self, a: dict[str, Any], b: dict[str, Any]) -> int:
        """Steps between two points: index distance on numeric knobs (ordered), 0/1 on the others."""
        d = 0
        for name, values in self.searched.items():
            if a[name] == b[name]:
                continue
            numeric = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
            d += abs(values.index(a[name]) - values.index(b[name])) if numeric else 1
        return d

    def nearest(self, params: dict[str, Any], candidates: list[dict[str, Any]], rng: Any) -> dict[str, Any]:
        """The candidate closest to params (ties broken by rng): where the sampler wanted to look."""
        best = min(self.distance(params, c) for c in candidates)
        return rng.choice([c for c in candidates if self.distance(params, c) == best])

    def suggest(self, trial: optuna.trial.Trial) -> dict[str, Any]:
        """Ask Optuna for a value of each searched knob (all knobs are categorical)."""
        return {name: trial.suggest_categorical(name, values) for name, values in self.searched.items()}

    def env(self, knobs: dict[str, Any]) -> dict[str, str]:
        """Environment variables that apply these knob values (the 'how to apply' of best.yaml)."""
        return {var: str(knobs[k]) for k, names in ENV_KNOBS.items()
                for var in names if knobs.get(k, "default") not in ("default", None)}

    def describe(self) -> dict[str, Any]:
        return {
            "searched": self.searched,
            "fixed": self.fixed,
            "notes": self.notes,
            "size": self.size,
            "baseline": self.baseline,
        }


def resolve_space(cfg: Config, device: str | None = None) -> ResolvedSpace:
    """Apply the global-batch rule and the world-size rule; raise ValueError naming the YAML path.

    device "cpu" with world_size > 1 runs the gloo backend: the NCCL knobs are then fixed at default, noted
    as not applicable (their values were validated all the same)."""
    space = cfg.space
    wl = cfg.workload
    values: dict[str, list[Any]] = {k: list(getattr(space, k)) for k in KNOBS if k != "grad_accum_steps"}
    notes: dict[str, str] = {}

    if wl.global_batch_size is not None:
        if space.grad_accum_steps != "auto":
            raise ValueError(
                f"space.grad_accum_steps: {space.grad_accum_steps} cannot be set when workload.global_batch_size "
                f"({wl.global_batch_size}) is: it is derived; use grad_accum_steps: auto"
            )
        per_rank = wl.global_batch_size // wl.world_size
        fits = [m for m in values["micro_batch_size"] if per_rank % m == 0]
        dropped = [m for m in values["micro_batch_size"] if per_rank % m]
        if not fits:
            raise ValueError(
                f"space.micro_batch_size: no value in {values['micro_batch_size']} divides "
                f"global_batch_size / world_size = {per_rank}; use divisors of {per_rank}"
            )
        if dropped:
            notes["micro_batch_size"] = f"dropped {dropped}: they do not divide {per_rank} sequences per rank"
        values["micro_batch_size"] = fits
        notes["grad_accum_steps"] = f"derived: {per_rank} / micro_batch_size"
        accum: list[int] = []
    else:
        accum = [1] if space.grad_accum_steps == "auto" else list(space.grad_accum_steps)
        values["grad_accum_steps"] = accum

    defaults = type(space)()
    if wl.world_size == 1:
        for k in COMM_KNOBS:
            default = getattr(defaults, k)
            if values[k] != default:
                notes[k] = f"not searched: world_size is 1, so {values[k]} cannot matter"
            values[k] = default
    elif device == "cpu":
        for k in NCCL_KNOBS:
            if values[k] != ["default"]:
                notes[k] = f"not applicable to gloo (device cpu has no NCCL): {values[k]} not searched"
            values[k] = ["default"]
    for k, (owner, value) in ONLY_WITH.items():
        if value not in values[owner] and len(values[k]) > 1:
            notes.setdefault(k, f"not searched: {owner} {value} is not in the space, so {values[k]} cannot matter")
            values[k] = values[k][:1]

    searched = {k: v for k, v in values.items() if len(v) > 1}
    fixed = {k: v[0] for k, v in values.items() if len(v) == 1}
    baseline = _resolve_baseline(cfg.baseline, values)
    return ResolvedSpace(
        searched=searched,
        fixed=fixed,
        notes=notes,
        global_batch_size=wl.global_batch_size,
        world_size=wl.world_size,
        baseline=baseline,
    )


def _resolve_baseline(given: dict[str, Any], values: dict[str, list[Any]]) -> dict[str, Any]:
    """The baseline's searched params; an absent knob takes its default if in the space, else the first value."""
    from autotune.config import SpaceConfig

    defaults = SpaceConfig()
    for key, value in given.items():
        if key not in KNOBS:
            raise ValueError(f"baseline.{key}: unknown knob; allowed: {', '.join(KNOBS)}")
        if key == "grad_accum_steps" and key not in values:
            raise ValueError(f"baseline.grad_accum_steps: {value!r} is derived from global_batch_size; remove it")
        if not any(v == value and type(v) is type(value) for v in values[key]):
            raise ValueError(f"baseline.{key}: {value!r} is outside the space; allowed: {values[key]}")
    baseline = {}
    for key, allowed in values.items():
        if len(allowed) < 2:
            continue
        if key in given:
            baseline[key] = given[key]
        else:
            default = getattr(defaults, key)
            default = default[0] if isinstance(default, list) else default
            baseline[key] = default if default in allowed else allowed[0]
    return baseline


def config_fingerprint(cfg: Config) -> str:
    """Hash of what defines the measurements (model, workload, space): a study may only be resumed with the same."""
    payload = {
        "model": cfg.model.model_dump(mode="json"),
        "workload": cfg.workload.model_dump(mode="json"),
        "space": cfg.space.model_dump(mode="json"),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
