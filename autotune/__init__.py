"""autotune: measured auto-tuning of LLM training configurations on NVIDIA GPUs, built on Optuna.

The Python API (what the CLI calls):

    import autotune

    result = autotune.run_search("search_spaces/tiny.yaml", device="cpu")  # SearchResult, best.yaml
    verdict = autotune.run_check(result.best_yaml, repeats=5)  # Verdict: pass, regression, ...
    data = autotune.read_report(result.study_dir)  # the report as plain data
    table = autotune.run_nccl("trials/nccl", device="cuda", gpus=["0", "1"])  # bus bandwidth
    forms = autotune.run_export(result.best_yaml, ["json"])  # the winner, ready to paste

Errors are AutotuneError subclasses carrying a one-line message and an exit code
(autotune.errors). Every argument of these functions is checked before anything runs: a wrong
type raises a TypeError, a wrong value a ValueError (each also a ConfigError, exit 2), one line
naming the argument (api_options.py). Kept import-light on purpose (PEP 562 lazy names): a
trial's process imports `autotune.workloads` and must need torch only, and `import autotune` loads
none of Optuna, pydantic or torch."""

from __future__ import annotations

# the C module, loaded with the interpreter: `signal` itself imports enum, tens of milliseconds
import _signal
import sys as _sys

# The variables this process was started with, read before anything else is imported (a trial
# inherits these, never one a library set since: autotune/launch/environ.py)
from autotune.launch import environ as _environ  # noqa: E402, F401


def _launched_as_the_cli() -> bool:
    """`python -m autotune.cli ...` or the `autotune` console script (sys.orig_argv: Python's own
    command line)."""
    argv: list[str] = list(getattr(_sys, "orig_argv", []))
    if "-m" in argv[:-1]:
        return argv[argv.index("-m") + 1] == "autotune.cli"
    return len(argv) > 1 and argv[1].rsplit("/", 1)[-1] == "autotune"


def _interrupted_early(signum: int, frame: object) -> None:
    """Ctrl-C while the CLI is still importing (this package runs first): one line, exit 130, as
    cli.main's."""
    import os

    _sys.stderr.write("interrupted\n")
    _sys.stderr.flush()
    os._exit(130)


# Installed before anything else is imported (typing and pathlib take tens of milliseconds on a
# loaded machine):
# only when this process is the CLI, never for a program that imports autotune, and never over an
# ignored SIGINT
if _launched_as_the_cli() and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _interrupted_early)

import functools  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from autotune.check.verdict import Verdict
    from autotune.config import Config
    from autotune.documents.record import TrialRecord
    from autotune.export import Form
    from autotune.search.observer import Observer
    from autotune.search.run import SearchResult
    from autotune.space import ResolvedSpace

__all__ = [
    "__version__",
    "load_config",
    "resolve_space",
    "run_search",
    "run_check",
    "read_report",
    "run_nccl",
    "run_export",
    "AutotuneError",
    "ConfigError",
    "ExitCode",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _checked(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Every argument of the API function checked before its body runs (api_options.arguments):
    a wrong type is a TypeError, a wrong value a ValueError (both ConfigErrors, exit 2), one line
    naming the argument, its value and what is allowed; nothing is measured or written first."""

    @functools.wraps(function)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        from autotune.api_options import arguments

        arguments(function, args, kwargs)
        return function(*args, **kwargs)

    return call


@_checked
def run_search(
    model_yaml: str | Path | Config,
    *,
    trials: int | None = None,
    timeout_min: float | None = None,
    out_root: str | Path = "trials",
    device: str | None = None,
    fresh: bool = False,
    storage: str | None = None,
    gpus: str | Sequence[int | str] | None = None,
    warm_start_from: str | Path | None = None,
    progress: Callable[[TrialRecord], Any] | None = None,
    observer: Observer | None = None,
) -> SearchResult:
    """Run or resume the study of MODEL_YAML (a path or a loaded Config), as `autotune search` does
    with the same options (--out is out_root, --warm-start warm_start_from). progress: called
    with each finished trial's TrialRecord; without it (and without an observer) one line per
    trial is written to stderr. The SearchResult's `confirmation` is the study's confirmation, a
    typed document (autotune.documents.confirmation.Confirmation: its arms, rounds and choice;
    None where none ran)."""
    from autotune.api_options import SEARCH, checked, observer_of, path_of
    from autotune.config import Config
    from autotune.hardware import default_device
    from autotune.job import load
    from autotune.search.run import run_search as _run

    if not isinstance(model_yaml, Config):
        model_yaml = path_of("model_yaml", model_yaml)

    given = {
        "out_root": out_root,
        "device": device,
        "trials": trials,
        "timeout_min": timeout_min,
        "fresh": fresh,
        "storage": storage,
        "gpus": gpus,
        "warm_start_from": warm_start_from,
    }
    options = checked(
        "run_search", SEARCH, given
    )  # as the CLI checks them, the same one-line errors
    watcher = observer_of(progress, observer)
    if isinstance(model_yaml, Config):
        return _run(model_yaml, observer=watcher, **options)
    options["device"] = options["device"] or default_device()
    cfg, space = load(model_yaml, options["device"])  # the space resolved once, handed on
    return _run(cfg, observer=watcher, space=space, **options)


@_checked
def run_check(
    best_yaml: str | Path,
    *,
    model_yaml: str | Path | None = None,
    repeats: int = 5,
    max_repeats: int | None = None,
    tolerance_pct: float | None = None,
    junit: str | Path | None = None,
    update: bool = False,
    max_load: float | None = None,
    on_repeat: Callable[..., None] | None = None,
) -> Verdict:
    """Re-measure best.yaml's configuration and decide, as `autotune check` (--model is model_yaml,
    --max-repeats max_repeats, --tolerance tolerance_pct, --max-load max_load: None is the CLI's
    default; check.regress.check says each). on_repeat: called with each repeat as it ends. The
    verdict's exit_code is the CLI's: 0 pass or faster, 1 regression, 3 unreliable, 5
    inconclusive."""
    from autotune.api_options import CHECK, checked, path_of
    from autotune.check.regress import check

    best = path_of("best_yaml", best_yaml)

    given: dict[str, Any] = {
        "model_yaml": model_yaml,
        "repeats": repeats,
        "max_repeats": max_repeats,
        "tolerance_pct": tolerance_pct,
        "junit": junit,
    }
    given.update(update=update, max_load=max_load, on_repeat=on_repeat)
    options = checked("run_check", CHECK, given)
    if options["max_load"] is None:  # the CLI's default (regress_conditions.HOST_LOAD_LIMIT)
        del options["max_load"]
    return check(best, **options)


@_checked
def read_report(
    study_dir: str | Path | None = None, *, study: str | None = None, storage: str | None = None
) -> dict[str, Any]:
    """What a study found, as plain data (the JSON of `autotune report --format json`)."""
    from autotune.report import collect, load_study

    opened, folder = load_study(Path(study_dir) if study_dir is not None else None, study, storage)
    return collect(opened, folder).to_dict()


@_checked
def run_nccl(
    out_dir: str | Path,
    *,
    device: str | None = None,
    gpus: str | Sequence[int | str] | None = None,
    algos: Sequence[str] = ("default",),
    protos: Sequence[str] = ("default",),
    sizes: Sequence[int] | None = None,
    warmup: int = 3,
    iters: int = 10,
    timeout_s: float = 180.0,
) -> dict[str, Any]:
    """All-reduce bus bandwidth per NCCL algorithm and protocol, as `autotune nccl` (sizes: message
    bytes, default 1 MB to 1 GB doubling; gpus default: all, or two gloo ranks on the CPU).
    Writes out_dir/nccl.json and returns it."""
    from autotune import nccl
    from autotune.api_options import nccl_options, parse_gpus, path_of, resolve_device

    out = path_of("out_dir", out_dir)
    given = {"warmup": warmup, "iters": iters, "timeout_s": timeout_s, "sizes": sizes}
    opts = nccl_options({**given, "algos": algos, "protos": protos})
    device = resolve_device(device, "device")
    group = (
        parse_gpus("0,1" if device == "cpu" and gpus in (None, "all") else gpus or "all", "gpus")
        or []
    )
    sizes_of = opts.pop("sizes") or nccl.message_sizes(1, 1024)
    return nccl.sweep(out, device=device, gpus=group, sizes=sizes_of, **opts)


@_checked
def run_export(best_path: str | Path, formats: Sequence[str] | None = None) -> list[Form]:
    """best.yaml's winner in each format asked for, as `autotune export` (formats: a list of
    names of autotune.export.FORMS, each with what it prints, or "all"; None: those that fit the
    study); autotune.export.export says each."""
    from autotune.export import export

    return export(Path(best_path), formats)


@_checked
def load_config(path: str | Path) -> Config:
    """MODEL_YAML read and checked whole, as `autotune validate` (its space is not kept)."""
    from autotune.job import load_config as _load

    return _load(Path(path))


@_checked
def resolve_space(cfg: Config, device: str | None = None) -> ResolvedSpace:
    """A loaded Config's search space: the global-batch rule and the knobs' own rules applied
    (autotune.space.resolve_space; device cpu fixes the NCCL knobs where gloo runs)."""
    from autotune.space import resolve_space as _resolve

    return _resolve(cfg, device)


# The distribution's name (pyproject.toml's [project] name; tests/test_install.py holds them
# together): the import package and the command are `autotune`, but PyPI's `autotune` is another
# project's
DISTRIBUTION = "autotune-llm"


def _package_version() -> str:
    """The installed distribution's version (pyproject.toml's, through importlib.metadata): one
    place to bump."""
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def __getattr__(name: str) -> Any:  # lazy re-exports (PEP 562): `import autotune` stays cheap
    if name == "__version__":
        return _package_version()
    if name in ("AutotuneError", "ConfigError", "ExitCode"):
        from autotune import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
