"""The arguments of the Python API (autotune/__init__.py) checked at its entry, before anything
runs, as the CLI checks its options: one line naming the argument, its value (bounded) and what is
allowed. A value of a wrong type is an ArgumentTypeError (a TypeError), one of the right type but
out of range an ArgumentValueError (a ValueError); both are ConfigErrors (exit 2). Paths may be str
or any os.PathLike; integers are ints, never bools; callables are called only as the API calls
them."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from autotune.config import Config
    from autotune.search.observer import Observer

from autotune.errors import ConfigError, did_you_mean, excerpt


class ArgumentTypeError(ConfigError, TypeError):
    """An argument of the Python API of a type it does not take."""


class ArgumentValueError(ConfigError, ValueError):
    """An argument of the Python API of the right type but a value it does not take."""


# the bounds the CLI's options declare (cli/_options.py, cli/check.py): one table, both sides
BOUNDS: dict[str, tuple[float, float]] = {
    "trials": (1, 100_000),
    "timeout_min": (0.01, 525_600),
    "repeats": (1, 1000),
    "max_repeats": (0, 1000),
    "tolerance_pct": (0.0, 100.0),
    "max_load": (0.0, 10_000.0),
    # run_nccl, as `autotune nccl` bounds them (cli/nccl.py): sizes in bytes, 0.001 to 16,384 MB
    "warmup": (0, 10_000),
    "iters": (1, 10_000),
    "timeout_s": (0.05, 10_080),
    "size": (4, 16_384_000_000),
}
INTEGERS = ("trials", "repeats", "max_repeats", "warmup", "iters", "size")
SEARCH = (
    "out_root",
    "device",
    "trials",
    "timeout_min",
    "fresh",
    "storage",
    "gpus",
    "warm_start_from",
)
CHECK = (
    "model_yaml",
    "repeats",
    "max_repeats",
    "tolerance_pct",
    "junit",
    "update",
    "max_load",
    "on_repeat",
)
PATHS = ("out_root", "warm_start_from", "model_yaml", "junit", "best_yaml", "study_dir", "out_dir")
FLAGS = ("fresh", "update")
DEVICES = ("cuda", "cpu")
# the arguments that may be None (each means the CLI's default); every other one must be given
OPTIONAL = (
    "trials",
    "timeout_min",
    "device",
    "storage",
    "gpus",
    "warm_start_from",
    "progress",
    "observer",
    "run_check.model_yaml",
    "max_repeats",
    "tolerance_pct",
    "junit",
    "max_load",
    "on_repeat",
    "study_dir",
    "study",
    "sizes",
    "formats",
)


def shown(value: object) -> str:
    """The value as a message quotes it, bounded whatever it is (a huge list, an integer of a
    million digits, an object whose repr raises)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"'an integer of {value.bit_length()} bits'"
    if isinstance(value, (str, int, float, PurePath)):
        return repr(str(value)[:40])
    return excerpt(value, 40)


def resolve_device(device: str | None, name: str = "--device") -> str:
    """cuda or cpu; None: cuda when a GPU is visible."""
    _device(name, device)
    from autotune.hardware import default_device

    return device or default_device()


def _device(name: str, value: object) -> object:
    if value is not None and value not in DEVICES:
        error = ArgumentValueError if isinstance(value, str) else ArgumentTypeError
        raise error(f"{name}: {shown(value)} is not allowed; use cuda or cpu")
    return value


def _gpus(name: str, value: object) -> object:
    """'all', '0,1' or a list of distinct indices (ints or digit strings), as given."""
    if isinstance(value, str):
        gpus: str | list[int | str] = value
    elif isinstance(value, (list, tuple)) and all(
        isinstance(g, (int, str)) and not isinstance(g, bool) for g in value
    ):
        gpus = list(value)
    else:
        raise ArgumentTypeError(
            f"{name}: {shown(value)} is not allowed; use a str such as 0,1,2,3 or all, or a list "
            "of GPU indices"
        )
    if gpus != "all":
        indices(gpus, name)
    return value


def indices(gpus: str | Sequence[int | str], name: str) -> list[str]:
    """'0,1,2' (or a list of indices) -> ["0", "1", "2"]; ArgumentValueError otherwise."""
    listed = [
        str(g).strip()
        for g in (gpus.split(",") if isinstance(gpus, str) else gpus)
        if str(g).strip()
    ]
    if (
        not listed
        or not all(g.isascii() and g.isdigit() and len(g) < 6 for g in listed)
        or len(set(listed)) != len(listed)
    ):
        raise ArgumentValueError(
            f"{name}: {shown(gpus)} is not allowed; use distinct GPU indices such as 0,1,2,3, or "
            "all"
        )
    return [str(int(g)) for g in listed]


def parse_gpus(gpus: str | Sequence[int | str] | None, name: str = "--gpus") -> list[str] | None:
    """0,1,2 (or a list of indices) or all -> ["0", "1", "2"]; None when not given."""
    if gpus is None:
        return None
    _gpus(name, gpus)
    if gpus == "all":
        from autotune.hardware import detect

        found = [str(g["index"]) for g in detect()["gpus"]]
        if not found:
            raise ConfigError(
                f"{name}: all, but pynvml sees no NVIDIA GPU; list CPU workers as {name} 0,1"
            )
        return found
    return indices(gpus, name)


def _bounded(name: str, value: object, integer: bool, label: str = "") -> float:
    """value within BOUNDS[name]; label: the argument named in the message (default name)."""
    lo, hi = BOUNDS[name]
    kind = numbers.Integral if integer else numbers.Real  # numpy's numbers too
    what = "an integer" if integer else "a finite number"
    span = " to ".join(f"{b:.0f}" if float(b).is_integer() else f"{b:g}" for b in (lo, hi))
    message = f"{label or name}: {shown(value)} is not allowed; use {what} from {span}"
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ArgumentTypeError(message)
    number = _number(value, integer)
    if not lo <= number <= hi:  # NaN never is
        raise ArgumentValueError(message)
    return number


def _number(value: numbers.Real, integer: bool) -> float:
    """An int or a finite float; NaN for anything else (float() of a huge int overflows: an int is
    compared as it is)."""
    try:
        number = int(value) if integer and isinstance(value, numbers.Integral) else float(value)
    except (OverflowError, ValueError):
        return math.nan
    return number if integer or math.isfinite(number) else math.nan


def _path(name: str, value: object) -> Path:
    try:
        text = os.fspath(value) if isinstance(value, (str, bytes, os.PathLike)) else None
    except TypeError:
        text = None
    if not isinstance(text, str):
        raise ArgumentTypeError(
            f"{name}: {shown(value)} is not a path (str or pathlib.Path, any os.PathLike of str)"
        )
    if not text or "\x00" in text:
        raise ArgumentValueError(
            f"{name}: {shown(text)} is not a path; give a file or folder name (not empty, no NUL)"
        )
    return Path(text)


def path_of(name: str, value: object) -> Path:
    """A path argument of the API (str or os.PathLike) as a Path; ConfigError otherwise."""
    return _path(name, value)


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{name}: {shown(value)} is not allowed; use True or False")
    return value


def _text(name: str, value: object) -> str:
    """A study's name or a storage URL: a str that is not blank."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name}: {shown(value)} is not a string")
    if not value.strip() or "\x00" in value:
        what = (
            "a storage URL (sqlite:///f.db, journal:PATH, ...)" if name == "storage" else "a name"
        )
        raise ArgumentValueError(f"{name}: {shown(value)} is not allowed; give {what}")
    return value


def takes(function: Callable[..., object], count: int) -> bool:
    """Whether function can be called with `count` positional arguments (True where its signature
    cannot be read, as for some built-ins)."""
    import inspect

    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(*range(count))
    except TypeError:
        return False
    return True


def _function_of(what: str) -> Callable[[str, object], object]:
    """A callback called with one argument (`what`): callable, and callable so."""

    def check(name: str, value: object) -> object:
        if not callable(value):
            raise ArgumentTypeError(
                f"{name}: {shown(value)} is not callable; give a function of {what}"
            )
        if not takes(value, 1):
            raise ArgumentTypeError(
                f"{name}: {shown(value)} cannot be called with one argument; give a function of "
                f"{what}"
            )
        return value

    return check


def _observer(name: str, value: object) -> Observer:
    """An object with every method of autotune.search.observer.Observer, each callable as the
    search calls it (subclass Observer: its methods are no-ops)."""
    import inspect

    from autotune.search.observer import Observer

    for method, member in inspect.getmembers(Observer, inspect.isfunction):
        if method.startswith("_"):
            continue
        count = len(inspect.signature(member).parameters) - 1  # all passed, self apart
        found = getattr(value, method, None)
        if not callable(found) or not takes(found, count):
            raise ArgumentTypeError(
                f"{name}: {shown(value)} has no method {method} taking {count} argument(s); give "
                "an autotune.search.observer.Observer (subclass it: each method is a no-op there)"
            )
    return cast("Observer", value)  # every method of the protocol checked above


def _names(allowed: Callable[[], Sequence[str]]) -> Callable[[str, object], object]:
    """A list (or tuple) of names, each one of allowed(), each once."""

    def check(name: str, value: object) -> list[str]:
        names = list(allowed())
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ArgumentTypeError(
                f"{name}: {shown(value)} is not a list of names; allowed: {', '.join(names)}"
            )
        bad = [v for v in value if v not in names]
        if not value or bad:
            shown_bad = shown(bad[0]) if bad else "[]"
            raise ArgumentValueError(
                f"{name}: {shown_bad} is not allowed; {did_you_mean(bad[0] if bad else '', names)}"
                f"allowed: {', '.join(names)}"
            )
        return list(dict.fromkeys(value))

    return check


def _sizes(name: str, value: object) -> list[float]:
    if not isinstance(value, (list, tuple)) or not value:
        raise ArgumentTypeError(f"{name}: {shown(value)} is not a list of message sizes in bytes")
    return [_bounded("size", s, integer=True, label=name) for s in value]


def _config(name: str, value: object) -> Config:
    from autotune.config import Config

    if not isinstance(value, Config):
        raise ArgumentTypeError(
            f"{name}: {shown(value)} is not a loaded Config; give autotune.load_config(path)"
        )
    return value


def _config_or_path(name: str, value: object) -> Config | Path:
    """run_search's model: a loaded Config, else a path."""
    if not isinstance(value, (str, os.PathLike)):
        from autotune.config import Config

        if isinstance(value, Config):
            return value
    return _path(name, value)


def _bound_of(name: str) -> Callable[[str, object], float]:
    return lambda _, value: _bounded(name, value, integer=name in INTEGERS)


def _algos() -> Sequence[str]:
    from autotune import nccl

    return nccl.ALGOS


def _protos() -> Sequence[str]:
    from autotune import nccl

    return nccl.PROTOS


def _formats() -> Sequence[str]:
    from autotune.export import ALL, FORMS

    return [*FORMS, ALL]


# Every argument of the API, by name ("function.name" where one function's differs): its check,
# which returns it normalised (a path as a Path, an integer as an int). A new argument without an
# entry is a bug that the first call names (check below).
CHECKS: dict[str, Callable[[str, object], object]] = {
    **{name: _path for name in (*PATHS, "best_path", "path")},
    "run_search.model_yaml": _config_or_path,
    "cfg": _config,
    **{name: _flag for name in FLAGS},
    **{name: _bound_of(name) for name in BOUNDS if name != "size"},
    "device": _device,
    "gpus": _gpus,
    "storage": _text,
    "study": _text,
    "progress": _function_of("each finished trial's TrialRecord"),
    "on_repeat": _function_of("each repeat's event (a dict)"),
    "observer": _observer,
    "algos": _names(_algos),
    "protos": _names(_protos),
    "formats": _names(_formats),
    "sizes": _sizes,
}


def check(function: str, name: str, value: object) -> Any:
    """One argument of `function` checked and normalised; ArgumentTypeError or ArgumentValueError
    naming it."""
    key = f"{function}.{name}"
    found = CHECKS.get(key) or CHECKS.get(name)
    if found is None:
        raise AssertionError(f"{key}: an argument of the API without a check in api_options.CHECKS")
    if value is None and (key in OPTIONAL or name in OPTIONAL):
        return None
    return found(name, value)  # None where it is needed: refused as any other wrong type


def arguments(
    function: Callable[..., object], args: tuple[object, ...], kwargs: Mapping[str, object]
) -> dict[str, Any]:
    """Every argument of a call of the API function checked (defaults too), before it runs;
    TypeError as Python's own for a missing or unknown one."""
    import inspect

    try:
        bound = inspect.signature(function).bind(*args, **kwargs)
    except TypeError as err:
        raise TypeError(f"{function.__name__}() {err}") from None
    bound.apply_defaults()
    return {k: check(function.__name__, k, v) for k, v in bound.arguments.items()}


def nccl_options(options: Mapping[str, object]) -> dict[str, Any]:
    """run_nccl's counts, limit, sizes, algorithms and protocols checked as `autotune nccl` checks
    them."""
    return {k: check("run_nccl", k, v) for k, v in options.items()}


def checked(
    function: str, allowed: tuple[str, ...], options: Mapping[str, object]
) -> dict[str, Any]:
    """The options of `function` checked and normalised (paths made Path, gpus listed); ConfigError
    on the first bad one."""
    unknown = [k for k in options if k not in allowed]
    if unknown:
        hint = did_you_mean(unknown[0], allowed)
        raise ConfigError(
            f"{function}: unknown option {unknown[0]!r}; {hint}allowed: {', '.join(allowed)}"
        )
    done = {k: check(function, k, v) for k, v in options.items()}
    if "gpus" in done:
        done["gpus"] = parse_gpus(done["gpus"], "gpus")
    return done


def observer_of(progress: object, observer: object) -> Observer:
    """What run_search reports to: the observer given, progress(record) after each trial, or by
    default one plain line per trial on stderr (views.TrialLog)."""
    if progress is not None and observer is not None:
        raise ArgumentValueError(
            "progress: give progress (a function of each trial's record) or observer, not both"
        )
    if observer is not None:
        return _observer("observer", observer)
    if progress is not None:
        from autotune.search.observer import Progress

        return Progress(check("run_search", "progress", progress))
    import sys

    from autotune.views import TrialLog

    return TrialLog(sys.stderr)
