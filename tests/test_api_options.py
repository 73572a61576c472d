"""The Python API checks its options as the CLI does (api_options.py): the same one-line
ConfigError, exit 2."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import tiny

import autotune
from autotune.api_options import SEARCH, checked
from autotune.errors import ConfigError
from autotune.search.observer import Observer

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "search_spaces" / "tiny.yaml"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"trials": -1}, r"trials: '-1' is not allowed; use an integer from 1 to 100000"),
        ({"trials": True}, r"trials: 'True' is not allowed"),
        ({"device": "tpu"}, r"device: 'tpu' is not allowed; use cuda or cpu"),
        ({"gpus": "abc"}, r"gpus: 'abc' is not allowed; use distinct GPU indices"),
        ({"gpus": ["0", "0"]}, r"gpus: .* is not allowed"),
        (
            {"timeout_min": math.nan},
            r"timeout_min: 'nan' is not allowed; use a finite number from 0.01 to 525600",
        ),
        ({"out_root": 3}, r"out_root: '3' is not a path"),
        ({"fresh": "yes"}, r"fresh: 'yes' is not allowed; use True or False"),
        ({"progress": 3}, r"progress: '3' is not callable"),
        (
            {"progress": print, "observer": Observer()},
            r"progress: give progress .* or observer, not both",
        ),
    ],
)
def test_api_run_search_refuses_what_the_cli_refuses(options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        autotune.run_search(TINY, **options)
    assert err.value.exit_code == 2 and len(str(err.value).splitlines()) == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"repeats": 0}, r"repeats: '0' is not allowed; use an integer from 1 to 1000"),
        (
            {"tolerance_pct": math.nan},
            r"tolerance_pct: 'nan' is not allowed; use a finite number from 0 to 100",
        ),
        ({"tolerance_pct": -1.0}, r"tolerance_pct: '-1.0' is not allowed"),
        ({"junit": 5}, r"junit: '5' is not a path"),
        ({"max_repeats": -1}, r"max_repeats: '-1' is not allowed; use an integer from 0 to 1000"),
        (
            {"repeats": 5, "max_repeats": 3},
            r"--max-repeats: 3 is not allowed with --repeats 5; use 0 \(no extra repeats\) or a "
            "number from 5 to 1000",
        ),
    ],
)
def test_api_run_check_refuses_what_the_cli_refuses(
    tmp_path: Path, options: dict, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        autotune.run_check(tmp_path / "best.yaml", **options)


def test_api_options_are_typed_keywords() -> None:
    import inspect

    params = inspect.signature(autotune.run_search).parameters
    assert all(
        params[name].kind is inspect.Parameter.KEYWORD_ONLY
        for name in (*SEARCH, "progress", "observer")
    )
    assert {name: params[name].annotation for name in ("out_root", "warm_start_from")} == {
        "out_root": "str | Path",
        "warm_start_from": "str | Path | None",
    }
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        autotune.run_search(TINY, bogus=1)
    with pytest.raises(
        ConfigError, match=r"run_search: unknown option 'trails'; did you mean trials\? allowed"
    ):
        checked("run_search", SEARCH, {"trails": 1})


@pytest.mark.slow
def test_api_run_search_takes_str_paths_and_reports_progress(
    tmp_path: Path, write_yaml, capsys
) -> None:
    model = str(write_yaml(tiny(study={"trials": 1})))  # confirm_rounds 0: one trial process in all
    records = []
    result = autotune.run_search(
        model, out_root=str(tmp_path / "out"), device="cpu", trials=1, progress=records.append
    )
    assert result.study_dir.parent == tmp_path / "out"
    # each finished trial's TrialRecord
    assert [(r.number, r.status) for r in records] == [(0, "ok")]
    assert "autotune search" not in capsys.readouterr().err  # a callback replaces the default log
    again = autotune.run_search(
        model,
        out_root=str(tmp_path / "out"),
        device="cpu",
        trials=1,
        # its own trials: none new to copy
        warm_start_from=str(result.study_dir),
    )
    assert again.stop_reason == "budget already reached"
    # the default log
    assert "autotune search t on cpu: space of 6 points" in capsys.readouterr().err
