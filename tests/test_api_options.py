"""The Python API checks its options as the CLI does (api_options.py): the same one-line ConfigError, exit 2."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import autotune
from autotune.errors import ConfigError

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
        ({"timeout_min": math.nan}, r"timeout_min: 'nan' is not allowed; use a finite number from 0.01 to 525600"),
        ({"out_root": 3}, r"out_root: '3' is not a path"),
        ({"fresh": "yes"}, r"fresh: 'yes' is not allowed; use True or False"),
        ({"bogus": 1}, r"run_search: unknown option 'bogus'; allowed: out_root, device"),
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
        ({"tolerance_pct": math.nan}, r"tolerance_pct: 'nan' is not allowed; use a finite number from 0 to 100"),
        ({"tolerance_pct": -1.0}, r"tolerance_pct: '-1.0' is not allowed"),
        ({"junit": 5}, r"junit: '5' is not a path"),
    ],
)
def test_api_run_check_refuses_what_the_cli_refuses(tmp_path: Path, options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        autotune.run_check(tmp_path / "best.yaml", **options)


def test_api_run_search_takes_str_paths(tmp_path: Path) -> None:
    result = autotune.run_search(str(TINY), out_root=str(tmp_path / "out"), device="cpu", trials=1)
    assert result.study_dir.parent == tmp_path / "out"
