"""The Python API refuses a wrong type or an out-of-range value at its entry, in one line
(ConfigError), as the CLI does; the nightly history is read only from a regular file."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import autotune
from autotune.documents import nightly
from autotune.errors import ConfigError


@pytest.mark.parametrize("bad", [5, None, 1.5])
def test_run_search_and_run_check_refuse_a_path_that_is_no_path(bad) -> None:
    with pytest.raises(ConfigError, match="is not a path"):
        autotune.run_search(bad, device="cpu")
    with pytest.raises(ConfigError, match="best_yaml: .* is not a path"):
        autotune.run_check(bad)


def test_read_report_refuses_wrong_types() -> None:
    with pytest.raises(ConfigError, match="study_dir: .* is not a path"):
        autotune.read_report(7)
    with pytest.raises(ConfigError, match="study: .* is not a string"):
        autotune.read_report(study=3)


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"iters": 0}, "iters: "),
        ({"warmup": -1}, "warmup: "),
        ({"timeout_s": float("inf")}, "timeout_s: "),
        ({"sizes": [10**15]}, "sizes: "),
        ({"sizes": "big"}, "sizes: "),
        ({"algos": "Ring"}, "algos: "),
        ({"protos": ["Nope"]}, "protos: "),
    ],
)
def test_run_nccl_is_bounds_checked_before_anything_runs(tmp_path: Path, options, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        autotune.run_nccl(tmp_path, device="cpu", **options)
    assert not any(tmp_path.iterdir())


def test_a_history_that_is_a_fifo_is_never_opened(tmp_path: Path) -> None:
    fifo = tmp_path / nightly.FILE
    os.mkfifo(fifo)
    done: list = []
    reader = threading.Thread(target=lambda: done.append(nightly.read(fifo)), daemon=True)
    reader.start()
    reader.join(10)
    assert done and done[0][0] == [] and "not a regular file" in done[0][1][0]
    writer = threading.Thread(target=lambda: _append(fifo, done), daemon=True)
    writer.start()
    writer.join(10)
    assert len(done) == 2 and isinstance(done[1], OSError)


def _append(path: Path, done: list) -> None:
    try:
        nightly.append(path, {"night": 1})
    except OSError as err:
        done.append(err)


def test_a_history_that_is_a_folder_is_named_not_read(tmp_path: Path) -> None:
    (tmp_path / nightly.FILE).mkdir()
    nights, skipped = nightly.read(tmp_path / nightly.FILE)
    assert nights == [] and "not a regular file" in skipped[0]


@pytest.mark.slow
def test_mlflow_leaves_autotune_environment_as_it_was(tmp_path: Path, monkeypatch) -> None:
    """mlflow.set_tracking_uri writes MLFLOW_TRACKING_URI (a password in it) into os.environ;
    the trials started after the first one logged would inherit it."""
    from test_tracking import _mlflow_study

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    _mlflow_study(tmp_path, monkeypatch)
    assert "MLFLOW_TRACKING_URI" not in os.environ


def test_the_json_report_is_strict_json() -> None:
    import json

    from autotune.report._render import to_json

    text = to_json({"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": -float("inf")}})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == {
        "a": None,
        "b": [None, 1.5],
        "c": {"d": None},
    }
