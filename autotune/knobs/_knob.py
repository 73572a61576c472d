"""A knob's declaration (Knob) and the value checks the catalogue's entries use. Standard library
only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Optional, Union, get_args, get_origin  # noqa: F401  (the entries' types)

# One knob's value as the YAML, the sampler, the spec and best.yaml hold it (Optional[int] knobs
# take None), and a trial's knobs by name.
KnobValue = bool | int | float | str | None
Knobs = dict[str, KnobValue]

Note = Callable[[Knobs, str], list[str]]


def int_of(knobs: Knobs, name: str) -> int:
    """A whole-number knob's value (micro_batch_size, grad_accum_steps, batch_size), for arithmetic;
    a value of another type (a hand-edited best.yaml past its checks) is a TypeError naming it."""
    value = knobs[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"knob {name}: {value!r} is not a whole number")
    return value


# checkpoint every k-th block
CHECKPOINT_EVERY = {"none": 0, "full": 1, "selective": 2, "selective_op": 1}
# cross_entropy chunked: the tokens' slices, each with its own logits, recomputed in backward
CE_CHUNKS = 8
# ddp_comm_hook powersgd compresses from this step on (PowerSGD's minimum with error feedback)
POWERSGD_START = 2


# workload.task values; each knob says which of them it acts in
TaskName = Literal["train", "generate", "command"]
TASKS: tuple[TaskName, ...] = get_args(TaskName)
BOTH = ("train", "generate")
TRAIN_AND_COMMAND = ("train", "command")
ALL = TASKS  # command: a knob the user maps onto their own command (task command)


@dataclass(frozen=True)
class Not:
    """only_with's value for "any value but this one" (compile_scope acts whenever compile is not
    false)."""

    value: Any

    def __str__(self) -> str:
        return f"not {str(self.value).lower() if isinstance(self.value, bool) else self.value}"


@dataclass(frozen=True)
class Knob:
    """One knob: its values, its default, where it acts and how a trial applies it."""

    name: str
    type: Any  # typing form of one value: Literal[...], int, bool, str, Optional[int], Union[...]
    default: Any  # the value when the YAML leaves the knob out
    help: str  # what it is (the YAML field's description)
    effect: str  # how the trial applies it (docs/yaml.md's table)
    values: str = ""  # docs/yaml.md's 'values' column where the type alone says too little
    tasks: tuple[str, ...] = ("train",)  # the workloads it acts in
    only_with: tuple[str, Any] | None = (
        None  # acts only when this other knob has this value, or not Not.value (else None)
    )
    multi_rank: bool = False  # acts only across ranks: not searched with world_size 1
    nccl: bool = False  # an NCCL setting: meaningless on gloo (CPU)
    # environment variables of the trial's processes it sets ("default" sets none)
    env: tuple[str, ...] = ()
    ranged: bool = False  # also accepts {multiple_of, min, max}
    sizes: bool = False  # positive integers, searched in ascending order
    # stepped toward the study's limits by the loop (search/boundary.py); sizes knobs only
    climb: bool = False
    derived: bool = False  # YAML default `auto`: derived from workload.global_batch_size
    # the value the staged search samples while it screens (cheap to compile, about as fast); the
    # knob's other values are measured for the leader only, at the end (search/stages.py)
    screen: Any = None
    # the message for a value the type admits but the knob does not
    check: Callable[[Any], str | None] | None = None
    # past the edge (search/edges.py): the value a search measures beyond the user's list when the
    # best trial sits at its end: "divisor" (the next that divides the global batch per rank, or
    # doubles without one), "double" (twice, or half below the list)
    edge: Literal["divisor", "double"] | None = None
    # best.yaml: how to apply these values; a mapping where a task applies the knob its own way
    note: Note | dict[str, Note] | None = None
    # the values in tiers by the memory they need, most first: a value needs at least the memory
    # of every value of a later tier, the other knobs alike, so an out-of-memory trial at a later
    # tier's value bounds the earlier tiers' at its size and larger (study/predict.py); values of
    # one tier, and values left out, are not compared
    memory_order: tuple[tuple[Any, ...], ...] = ()
    # whether the values of one memory_order tier need the same memory (precision: tf32 stores what
    # fp32 does, fp16 what bf16 does), so an out-of-memory trial bounds its tier's other values too
    memory_alike: bool = False

    def __post_init__(self) -> None:
        listed = [v for values in self.memory_order for v in values]
        unknown = [v for v in listed if v not in self.choices()]
        if unknown or len(set(listed)) != len(listed):
            raise ValueError(
                f"knob {self.name}: memory_order {self.memory_order!r} names "
                + (f"{unknown!r}, not values of the knob" if unknown else "a value twice")
                + f"; use its values {self.choices()!r}, each at most once"
            )

    def acts_with(self, value: KnobValue) -> bool:
        """Whether this knob acts when its only_with knob has `value`."""
        assert self.only_with is not None
        want = self.only_with[1]
        acts: bool = value != want.value if isinstance(want, Not) else value == want
        return acts

    def needs_at_least(self, value: KnobValue, than: KnobValue) -> bool:
        """Whether `value` needs at least the memory `than` does, the other knobs alike: the same
        value, one of an earlier tier of memory_order, or of the same tier where memory_alike."""
        if value == than:
            return True
        tier = {v: i for i, values in enumerate(self.memory_order) for v in values}
        if value not in tier or than not in tier:
            return False
        return tier[value] < tier[than] or self.memory_alike and tier[value] == tier[than]

    def choices(self) -> tuple[Any, ...]:
        """The closed set of values (a Literal type), else ()."""
        kinds = get_args(self.type) if get_origin(self.type) is Union else (self.type,)
        return tuple(v for k in kinds if get_origin(k) is Literal for v in get_args(k))


# the largest micro-batch, accumulation, bucket (MiB) or padding multiple a knob accepts
MAX_SIZE = 65536


def _positive(value: int) -> str | None:
    if 1 <= value <= MAX_SIZE:
        return None
    return (
        f"{value} is not a size from 1 to {MAX_SIZE}"
        if value >= 1
        else f"{value} is not a positive integer; sizes must be >= 1"
    )


def _pad(value: int | None) -> str | None:
    if value is None or 1 <= value <= MAX_SIZE:
        return None
    return f"{value} is not a positive integer up to {MAX_SIZE}; use null or a multiple such as 64"


def _prefetch(low: int) -> Callable[[Any], str | None]:
    """FSDP2 prefetch depths: low (FSDP2's own default) to MAX_PREFETCH blocks."""

    def check(value: int) -> str | None:
        if low <= value <= MAX_PREFETCH:
            return None
        return (
            f"{value} is not a prefetch depth; use an integer from {low} to {MAX_PREFETCH} "
            "(blocks ahead)"
        )

    return check


# each block prefetched holds its gathered weights: deeper costs memory and no more overlap
MAX_PREFETCH = 8


def _env_value(value: str) -> str | None:
    """A value that becomes an environment variable: printable, one line, of a sane length."""
    if len(value) > 1024 or not value.isprintable():
        return (
            (
                f"{value[:40]!r}... is not a setting ({len(value)} characters; at most 1024, "
                "printable, one line)"
            )
            if len(value) > 40
            else f"{value!r} is not a setting (printable characters, one line)"
        )
    return None


def _channels(value: int | str) -> str | None:
    ok = value == "default" or (
        not isinstance(value, bool) and isinstance(value, int) and 1 <= value <= 64
    )
    return (
        None if ok else f"{value!r} is not a channel count; use default or an integer from 1 to 64"
    )


Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp8"]
CompileMode = Union[
    bool, Literal["default", "max-autotune-no-cudagraphs", "reduce-overhead", "max-autotune"]
]
NcclAlgo = Literal["default", "Ring", "Tree", "CollnetDirect", "CollnetChain", "PAT", "NVLS"]
NcclProto = Literal["default", "Simple", "LL", "LL128"]
WeightQuant = Literal[
    "none", "int8_weight_only", "int4_weight_only", "float8_weight_only", "float8_dynamic"
]
