"""The options of run_search and run_check checked as the CLI checks them, with the same one-line
errors (ConfigError, exit 2): the Python API and the command line take the same values. Paths may be
str or Path."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError, did_you_mean

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


def resolve_device(device: str | None, name: str = "--device") -> str:
    """cuda or cpu; None: cuda when a GPU is visible."""
    if device not in (None, "cuda", "cpu"):
        raise ConfigError(f"{name}: {str(device)[:40]!r} is not allowed; use cuda or cpu")
    from autotune.hardware import default_device

    return device or default_device()


def parse_gpus(gpus: str | Sequence[int | str] | None, name: str = "--gpus") -> list[str] | None:
    """0,1,2 (or a list of indices) or all -> ["0", "1", "2"]; None when not given."""
    if gpus is None:
        return None
    if gpus == "all":
        from autotune.hardware import detect

        found = [str(g["index"]) for g in detect()["gpus"]]
        if not found:
            raise ConfigError(
                f"{name}: all, but pynvml sees no NVIDIA GPU; list CPU workers as {name} 0,1"
            )
        return found
    listed = [
        str(g).strip()
        for g in (gpus.split(",") if isinstance(gpus, str) else gpus)
        if str(g).strip()
    ]
    if (
        not listed
        or not all(g.isascii() and g.isdigit() for g in listed)
        or len(set(listed)) != len(listed)
    ):
        raise ConfigError(
            f"{name}: {str(gpus)[:80]!r} is not allowed; use distinct GPU indices such as "
            "0,1,2,3, or all"
        )
    return [str(int(g)) for g in listed]


def _bounded(name: str, value: Any, integer: bool) -> Any:
    lo, hi = BOUNDS[name]
    kind = int if integer else (int, float)
    ok = (
        isinstance(value, kind)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and lo <= value <= hi
    )
    if not ok:
        what = "an integer" if integer else "a finite number"
        raise ConfigError(
            f"{name}: {str(value)[:40]!r} is not allowed; use {what} from {lo:g} to {hi:g}"
        )
    return value


def _one(name: str, value: Any) -> Any:
    if value is None or name in ("observer", "on_repeat"):
        return value
    if name in PATHS:
        if not isinstance(value, (str, Path)):
            raise ConfigError(f"{name}: {str(value)[:40]!r} is not a path (str or pathlib.Path)")
        return Path(value)
    if name in FLAGS:
        if not isinstance(value, bool):
            raise ConfigError(f"{name}: {str(value)[:40]!r} is not allowed; use True or False")
        return value
    if name == "device":
        return resolve_device(value, "device")
    if name == "gpus":
        return parse_gpus(value, "gpus")
    if name == "storage":
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(
                f"storage: {str(value)[:40]!r} is not a storage URL (sqlite:///f.db, "
                "journal:PATH, ...)"
            )
        return value
    return _bounded(name, value, integer=name in INTEGERS)


def path_of(name: str, value: Any) -> Path:
    """A path argument of the API (str or pathlib.Path) as a Path; ConfigError otherwise."""
    if not isinstance(value, (str, Path)):
        raise ConfigError(f"{name}: {str(value)[:40]!r} is not a path (str or pathlib.Path)")
    return Path(value)


def nccl_options(options: dict[str, Any]) -> dict[str, Any]:
    """run_nccl's counts, limit, sizes, algorithms and protocols checked as `autotune nccl` checks
    them."""
    from autotune import nccl

    counts = ("warmup", "iters", "timeout_s")
    done = {k: _bounded(k, options[k], integer=k in INTEGERS) for k in counts}
    for name, allowed in (("algos", nccl.ALGOS), ("protos", nccl.PROTOS)):
        given = options[name]
        names = isinstance(given, (list, tuple)) and all(isinstance(x, str) for x in given)
        if not names:
            listed = ", ".join(allowed)
            shown = str(given)[:40]
            raise ConfigError(f"{name}: {shown!r} is not a list of names; allowed: {listed}")
        done[name] = nccl.parse_names(name, ",".join(given), allowed)
    sizes = options["sizes"]
    if sizes is not None:
        if not isinstance(sizes, (list, tuple)) or not sizes:
            raise ConfigError(f"sizes: {str(sizes)[:40]!r} is not a list of message sizes in bytes")
        sizes = [_bounded("size", s, integer=True) for s in sizes]
    done["sizes"] = sizes
    return done


def checked(function: str, allowed: tuple[str, ...], options: dict[str, Any]) -> dict[str, Any]:
    """The options of `function` checked and normalised (paths made Path); ConfigError on the first
    bad one."""
    unknown = [k for k in options if k not in allowed]
    if unknown:
        hint = did_you_mean(unknown[0], allowed)
        raise ConfigError(
            f"{function}: unknown option {unknown[0]!r}; {hint}allowed: {', '.join(allowed)}"
        )
    return {k: _one(k, v) for k, v in options.items()}


def observer_of(progress: Any, observer: Any) -> Any:
    """What run_search reports to: the observer given, progress(record) after each trial, or by
    default one plain line per trial on stderr (views.TrialLog)."""
    if progress is not None and observer is not None:
        raise ConfigError(
            "progress: give progress (a function of each trial's record) or observer, not both"
        )
    if observer is not None:
        return observer
    if progress is not None:
        if not callable(progress):
            raise ConfigError(
                f"progress: {str(progress)[:40]!r} is not callable; give a function of a "
                "TrialRecord"
            )
        from autotune.search.observer import Progress

        return Progress(progress)
    import sys

    from autotune.views import TrialLog

    return TrialLog(sys.stderr)
