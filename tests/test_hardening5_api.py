"""Issue 52, broken 4: every argument of every public function of the Python API is checked before
anything runs: a wrong type is a TypeError, a wrong value a ValueError (each a ConfigError, exit 2),
one line naming the argument and its value (api_options.py). An observer without the protocol's
methods, a callback that cannot take what it is given, formats that are not a list: refused up
front, never an AttributeError or TypeError after a trial or a repeat was measured."""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

import pytest
from conftest import command_job

import autotune
from autotune.errors import ConfigError, ExitCode
from autotune.search.observer import Observer

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "search_spaces" / "tiny.yaml"


def _functions() -> dict[str, Any]:
    """The API's functions: every name of autotune.__all__ that is a function."""
    found = {name: getattr(autotune, name) for name in autotune.__all__}
    return {name: f for name, f in found.items() if inspect.isfunction(f)}


def _base(tmp_path: Path) -> dict[str, tuple[tuple[Any, ...], dict[str, Any]]]:
    """A call of each function that fails at once on a missing file (or resolves a space) when its
    arguments are good: nothing is ever measured."""
    missing = tmp_path / "missing.yaml"
    return {
        "run_search": ((missing,), {"out_root": tmp_path / "out", "device": "cpu"}),
        "run_check": ((missing,), {}),
        "read_report": ((tmp_path / "missing",), {}),
        "run_nccl": ((tmp_path / "nccl",), {"device": "cpu"}),
        "run_export": ((missing,), {}),
        "load_config": ((missing,), {}),
        "resolve_space": ((autotune.load_config(TINY),), {"device": "cpu"}),
    }


# Values no argument of the API takes (True aside: a flag's); a wrong type or a wrong value each
HOSTILE = [object(), b"bytes", {"k": 1}, [object()], math.nan, True, -1, "", 10**5000]


def test_api_every_public_function_is_checked(tmp_path: Path) -> None:
    functions = _functions()
    assert set(functions) == set(_base(tmp_path)), "a new API function: add its base call here"
    for name, f in functions.items():
        assert hasattr(f, "__wrapped__"), f"{name} is not checked at its entry (_checked)"


@pytest.mark.parametrize("function", sorted(_functions()))
def test_api_refuses_every_hostile_value_of_every_argument_up_front(
    tmp_path: Path, function: str
) -> None:
    f = _functions()[function]
    args, kwargs = _base(tmp_path)[function]
    params = list(inspect.signature(f).parameters.values())
    before = sorted(tmp_path.rglob("*"))
    for i, param in enumerate(params):
        for bad in HOSTILE:
            if bad is True and param.name in ("fresh", "update"):
                continue
            call_args = list(args)
            call_kwargs = dict(kwargs)
            if param.kind is param.POSITIONAL_OR_KEYWORD and i < len(call_args):
                call_args[i] = bad
            else:
                call_kwargs[param.name] = bad
            with pytest.raises((TypeError, ValueError)) as err:
                f(*call_args, **call_kwargs)
            message = str(err.value)
            assert isinstance(err.value, ConfigError), (function, param.name, bad, message)
            assert err.value.exit_code == ExitCode.BAD_INPUT
            assert message.startswith(f"{param.name}: ") and "\n" not in message, message
            assert len(message) < 400, message
    assert sorted(tmp_path.rglob("*")) == before  # nothing written


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda p: autotune.run_search(TINY, out_root=p, device="cpu", observer=object()),
            TypeError,
            r"observer: <object object at .*> has no method \w+ taking \d argument",
        ),
        (
            lambda p: autotune.run_search(TINY, out_root=p, device="cpu", observer=_Partial()),
            TypeError,
            r"observer: .* has no method \w+ taking \d argument\(s\); give an "
            r"autotune.search.observer.Observer",
        ),
        (
            lambda p: autotune.run_search(TINY, out_root=p, device="cpu", progress=lambda: None),
            TypeError,
            r"progress: .* cannot be called with one argument",
        ),
        (
            lambda p: autotune.run_search(TINY, out_root=p, device="cpu", gpus=5),
            TypeError,
            r"gpus: '5' is not allowed; use a str such as 0,1,2,3 or all",
        ),
        (
            lambda p: autotune.run_search(TINY, out_root=p, device="cpu", trials=3.0),
            TypeError,
            r"trials: '3.0' is not allowed; use an integer from 1 to 100000",
        ),
        (
            lambda p: autotune.run_search(TINY, out_root=p, device="cpu", storage=""),
            ValueError,
            r"storage: '' is not allowed; give a storage URL",
        ),
        (
            lambda p: autotune.run_nccl(p, device="cpu", algos=["Rnig"]),
            ValueError,
            r"algos: 'Rnig' is not allowed; did you mean Ring\? allowed: default, Ring",
        ),
        (
            lambda p: autotune.run_nccl(p, device="cpu", sizes=[True]),
            TypeError,
            r"sizes: 'True' is not allowed; use an integer from 4 to 16384000000",
        ),
        (
            lambda p: autotune.run_export(p / "best.yaml", "json"),
            TypeError,
            r"formats: 'json' is not a list of names; allowed: command, torchrun",
        ),
        (
            lambda p: autotune.run_export(p / "best.yaml", ["xml"]),
            ValueError,
            r"formats: 'xml' is not allowed; allowed: command, .*, json, all",
        ),
        (
            lambda p: autotune.load_config(str(p / "a\x00b.yaml")),
            ValueError,
            r"path: '.*' is not a path; give a file or folder name \(not empty, no NUL\)",
        ),
        (
            lambda p: autotune.resolve_space({"space": {}}),
            TypeError,
            r"cfg: \{'space': \{\}\} is not a loaded Config; give autotune.load_config\(path\)",
        ),
        (
            lambda p: autotune.resolve_space(autotune.load_config(TINY), "tpu"),
            ValueError,
            r"device: 'tpu' is not allowed; use cuda or cpu",
        ),
        (
            lambda p: autotune.read_report(p, study=7),
            TypeError,
            r"study: '7' is not a string",
        ),
    ],
)
def test_api_names_the_argument_its_value_and_what_is_allowed(
    tmp_path: Path, call: Any, error: type, message: str
) -> None:
    with pytest.raises(error, match=message) as err:
        call(tmp_path / "out")
    assert isinstance(err.value, ConfigError) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


class _Partial:
    """An observer of the older interface: trial_finished only."""

    def trial_finished(self, record: Any, history: Any) -> None: ...


def test_api_takes_what_it_promises(tmp_path: Path) -> None:
    """os.PathLike paths, numpy-like integers, tuples of formats, an Observer subclass: taken."""
    cfg = autotune.load_config(_PathLike(TINY))
    assert autotune.resolve_space(cfg, device="cpu").searched
    with pytest.raises(ConfigError, match="no such file"):
        autotune.run_search(
            _PathLike(tmp_path / "missing.yaml"),
            out_root=_PathLike(tmp_path / "out"),
            device="cpu",
            observer=type("Mine", (Observer,), {})(),
            trials=_Index(2),
        )


class _PathLike:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __fspath__(self) -> str:
        return str(self.path)


class _Index(int):
    """An int subclass (as numpy's are Integral): taken as the int it is."""


@pytest.mark.slow
def test_api_check_and_export_refuse_before_measuring(tmp_path: Path) -> None:
    """A real command study's best.yaml: run_check with a callback that is not one (a str, a
    function of no argument) and run_export with formats 5 are refused before any repeat runs or
    anything is written beside best.yaml."""
    best = _command_study(tmp_path)
    before = sorted(best.parent.rglob("*"))
    for on_repeat in ("x", lambda: None, 3):
        with pytest.raises(TypeError, match=r"^on_repeat: "):
            autotune.run_check(best, repeats=1, on_repeat=on_repeat)
    with pytest.raises(TypeError, match=r"^formats: '5' is not a list of names"):
        autotune.run_export(best, 5)  # type: ignore[arg-type]
    assert sorted(best.parent.rglob("*")) == before  # no history.jsonl, no checks/
    assert [f.format for f in autotune.run_export(best, ("json",))] == ["json"]


def _command_study(root: Path) -> Path:
    """A real two-trial command study on the CPU (the Python API's run_search); its best.yaml."""
    command_job(root, "api5")
    result = autotune.run_search(
        root / "job.yaml", out_root=root / "out", device="cpu", progress=lambda record: None
    )
    assert result.best_yaml is not None and result.best_yaml.is_file()
    return result.best_yaml
