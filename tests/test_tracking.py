"""Experiment tracking (autotune/tracking): the config, the trial as logged, MLflow (a real file
store) and W&B (offline run files) read back, a tracking server that is down or silent, and one real
search logged."""

from __future__ import annotations

import logging
import socket
import struct
import threading
from pathlib import Path
from typing import Any

import optuna
import pytest
from conftest import finishes, tiny, wait_until

from autotune.documents.record import Metric, TrialRecord
from autotune.errors import ConfigError
from autotune.job import parse_config
from autotune.search.tracking import Tracker, logged_trial, start, with_overrides
from autotune.study.history import optuna_state, store

OK = TrialRecord(
    0,
    {"micro_batch_size": 2, "precision": "fp32", "bucket_cap_mb": None},
    "ok",
    metrics={
        Metric.TOKENS_PER_GPU: 1234.5,
        Metric.MFU: 0.41,
        Metric.PEAK_MEM_GIB: 1.5,
        Metric.PEAK_MEM_KIND: "cpu_max_rss",
        Metric.STEP_TIME: {"median_s": 0.02, "n": 3},
    },
)
OOM = TrialRecord(
    1,
    {"micro_batch_size": 8, "precision": "fp32"},
    "oom",
    "CUDA out of memory (8 GiB)",
    metrics={Metric.TOKENS_PER_GPU: 99.0},
)
CRASH = TrialRecord(
    2, {"micro_batch_size": 4, "precision": "bf16"}, "crash", "exit code -11 (SIGSEGV)"
)
DUPLICATE = TrialRecord(3, {"micro_batch_size": 2, "precision": "fp32"}, "duplicate")


class _Failed(Exception):
    pass


def _study(records: list[TrialRecord], tracker: Tracker | None, name: str = "t") -> optuna.Study:
    """A real in-memory study told as the search loop tells (loop.Search.record): ok COMPLETE,
    configuration failures PRUNED, machine failures and duplicates FAIL; the tracker passed as the
    loop passes it."""
    todo = list(records)

    def objective(trial: optuna.Trial) -> float:
        record = todo.pop(0)
        trial.suggest_categorical(
            "micro_batch_size", [2, 4, 8]
        )  # the sampler's; the record's knobs are logged
        store(trial, record)
        state = (
            optuna_state(record.status)
            if record.status != "duplicate"
            else optuna.trial.TrialState.FAIL
        )
        if state == optuna.trial.TrialState.PRUNED:
            raise optuna.TrialPruned(record.reason)
        if state == optuna.trial.TrialState.FAIL:
            raise _Failed(record.reason)
        return record.metric(Metric.TOKENS_PER_GPU)

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(study_name=name, direction="maximize")
    study.optimize(
        objective, n_trials=len(records), catch=(_Failed,), callbacks=[tracker] if tracker else []
    )
    return study


def _tracking(tmp_path: Path, **sections: Any):
    return parse_config(tiny(study={"tracking": sections})).study.tracking


def test_tracking_config_sections_and_overrides() -> None:
    cfg = parse_config(tiny(study={"tracking": {"mlflow": {"experiment": "e"}}}))
    assert cfg.study.tracking.mlflow.experiment == "e" and cfg.study.tracking.wandb is None
    with pytest.raises(
        ConfigError, match=r"study\.tracking\.mlflow\.uri: unknown key; allowed here: tracking_uri"
    ):
        parse_config(tiny(study={"tracking": {"mlflow": {"uri": "http://h"}}}))
    with pytest.raises(
        ConfigError, match=r"study\.tracking\.wandb\.mode: .*'online', 'offline' or 'disabled'"
    ):
        parse_config(tiny(study={"tracking": {"wandb": {"mode": "offlin"}}}))
    both = with_overrides(cfg, mlflow="sqlite:///m.db", wandb="proj")
    assert both.study.tracking.mlflow.tracking_uri == "sqlite:///m.db"
    assert both.study.tracking.mlflow.experiment == "e"  # the YAML's other fields kept
    assert both.study.tracking.wandb.project == "proj"
    with pytest.raises(ConfigError, match=r"--wandb: '' is not allowed"):
        with_overrides(cfg, wandb="")


def test_tracking_logged_trial_knobs_metrics_and_state() -> None:
    study = _study([OK, OOM, CRASH, DUPLICATE], None)
    ok, oom, crash, duplicate = (logged_trial(t) for t in study.trials)
    assert ok.view.params == {
        "micro_batch_size": 2,
        "precision": "fp32",
    }  # a knob not acting (None) left out
    assert dict(zip(ok.metric_names, ok.view.values)) == {
        "tokens_per_s_per_gpu": 1234.5,
        "mfu": 0.41,
        "peak_mem_gib": 1.5,
        "step_time.median_s": 0.02,
        "step_time.n": 3.0,
    }
    assert (
        oom.view.values is None and oom.metric_names == []
    )  # what it measured is no objective value
    assert oom.tags == {"state": "PRUNED", "status": "oom", "reason": "CUDA out of memory (8 GiB)"}
    assert crash.tags["state"] == "FAIL" and crash.tags["status"] == "crash"
    assert duplicate is None  # recorded without a launch: nothing to log


def _mlflow_study(tmp_path: Path, monkeypatch) -> tuple[Any, str]:
    pytest.importorskip("optuna_integration")
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv(
        "MLFLOW_ALLOW_FILE_STORE", "true"
    )  # MLflow 3 keeps its file store behind this switch
    uri = (tmp_path / "mlruns").as_uri()
    tracker = start(_tracking(tmp_path, mlflow={"tracking_uri": uri}), "t", tmp_path)
    _study([OK, OOM, CRASH, DUPLICATE], tracker)
    tracker.close()
    return mlflow, uri


def test_tracking_mlflow_file_store_read_back(tmp_path: Path, monkeypatch, caplog) -> None:
    mlflow, uri = _mlflow_study(tmp_path, monkeypatch)
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("t").experiment_id])
    by_name = {r.info.run_name: r for r in runs}
    assert sorted(by_name) == ["trial 0", "trial 1", "trial 2"]  # the duplicate is not logged
    ok, oom, crash = by_name["trial 0"], by_name["trial 1"], by_name["trial 2"]
    assert ok.data.params == {"micro_batch_size": "2", "precision": "fp32"}
    assert ok.data.metrics == {
        "tokens_per_s_per_gpu": 1234.5,
        "mfu": 0.41,
        "peak_mem_gib": 1.5,
        "step_time.median_s": 0.02,
        "step_time.n": 3.0,
    }
    assert ok.info.status == "FINISHED" and ok.data.tags["state"] == "COMPLETE"
    assert oom.info.status == "KILLED" and oom.data.metrics == {}  # no bogus value
    assert (
        oom.data.tags["state"] == "PRUNED"
        and oom.data.tags["reason"] == "CUDA out of memory (8 GiB)"
    )
    assert crash.info.status == "FAILED" and crash.data.tags["status"] == "crash"
    assert not [r for r in caplog.records if r.name == "autotune.search.tracking"]


def _wandb_runs(root: Path) -> list[dict[str, Any]]:
    """The offline runs under root/wandb read back from their .wandb files: W&B's own reader went
    into its Go core, so the LevelDB log format
    (https://github.com/google/leveldb/blob/main/doc/log_format.md: 7-byte file header, 32 KiB
    blocks, records of crc32 u32, length u16, type u8) is read here."""
    from wandb.proto import wandb_internal_pb2 as pb

    runs = []
    for path in sorted(root.glob("wandb/offline-run-*/run-*.wandb")):
        run: dict[str, Any] = {"config": {}, "history": {}, "tags": set()}
        for record in _leveldb_records(path.read_bytes(), pb.Record):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run["group"], run["tags"] = record.run.run_group, run["tags"] | set(record.run.tags)
                run["config"].update({i.key: i.value_json for i in record.run.config.update})
            elif kind == "config":
                run["config"].update({i.key: i.value_json for i in record.config.update})
            elif kind == "history":
                run["history"].update(
                    {i.key or ".".join(i.nested_key): i.value_json for i in record.history.item}
                )
        runs.append(run)
    return runs


def _offline_runs(root: Path, count: int) -> list[dict[str, Any]]:
    """The `count` offline runs under root, by trial number, once W&B's service has written them
    (its Go core writes the files a moment after run.finish() returns)."""

    def complete() -> list[dict[str, Any]] | None:
        runs = _wandb_runs(root)
        done = len(runs) == count and all("trial_number" in r["history"] for r in runs)
        return sorted(runs, key=lambda r: int(r["history"]["trial_number"])) if done else None

    return wait_until(complete, 30, f"{count} offline W&B runs written")


def _leveldb_records(data: bytes, message: type) -> Any:
    pos, chunks = 7, b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's trailer
            pos += 32768 - pos % 32768
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunks, pos = chunks + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0 or pos > len(data):  # the end, or a record still being written
            break
        if kind in (1, 4):  # FULL, LAST
            record = message()
            record.ParseFromString(chunks)
            chunks = b""
            yield record


@pytest.mark.slow
def test_tracking_wandb_offline_run_files(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("optuna_integration")
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    tracker = start(_tracking(tmp_path, wandb={"project": "p"}), "t", tmp_path)
    _study(
        [OK, OOM, DUPLICATE], tracker
    )  # a FAIL trial is logged as a PRUNED one is (MLflow's test has both)
    tracker.close()
    ok, oom = _offline_runs(tmp_path, 2)  # the duplicate is not logged
    assert ok["group"] == oom["group"] == "t"
    assert ok["config"]["micro_batch_size"] == "2" and ok["config"]["precision"] == '"fp32"'
    assert (
        float(ok["history"]["tokens_per_s_per_gpu"]) == 1234.5
        and float(ok["history"]["mfu"]) == 0.41
    )
    assert ok["tags"] == {"COMPLETE", "ok", "t"}
    assert "tokens_per_s_per_gpu" not in oom["history"] and oom["tags"] == {"PRUNED", "oom", "t"}
    assert (
        oom["config"]["state"] == '"PRUNED"'
        and oom["config"]["reason"] == '"CUDA out of memory (8 GiB)"'
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("server", ["down", "silent"])
def test_tracking_server_down_or_silent_never_holds_the_study(
    server: str, tmp_path: Path, monkeypatch, caplog
) -> None:
    """down: every log fails at once, one warning, the rest counted. silent: the server takes the
    connection and never answers (a request would wait 600 s): the nine trials are told and the
    tracker closed after flush_s while its first request still waits, nothing logged or failed:
    neither the study nor its end waited on the server (a hang guard, far below 600 s, fails the
    test if one did)."""
    pytest.importorskip("optuna_integration")
    pytest.importorskip("mlflow")
    listener = socket.socket()  # silent: accepts connections, never answers
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1] if server == "silent" else _closed_port()
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "600" if server == "silent" else "1")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    tracking = _tracking(tmp_path, mlflow={"tracking_uri": f"http://127.0.0.1:{port}"}, flush_s=1.5)
    tracker = start(tracking, "t", tmp_path)
    (worker,) = tracker.workers
    try:
        with caplog.at_level(logging.INFO, logger="autotune.search.tracking"):
            finishes(lambda: _study([OK, OOM, CRASH] * 3, tracker), 120, "telling nine trials")
            told = (worker.submitted, worker.logged + worker.failed)
            finishes(tracker.close, 120, "the tracker's close")  # waits flush_s for the queue
            closed = worker.logged + worker.failed
            said = [(r.levelno, r.getMessage()) for r in caplog.records]
    finally:
        listener.close()  # the pending request is reset: the tracking thread ends
        worker.thread.join(60)  # its last failure said within this test
    if server == "silent":
        assert told == (9, 0) and closed == 0, (told, closed)
    warnings = [message for level, message in said if level >= logging.WARNING]
    assert len(warnings) == 1, warnings  # once, then counted
    assert f"tracking: mlflow (http://127.0.0.1:{port}): " in warnings[0]
    assert "9 trial(s) not logged" in said[-1][1]
    if server == "silent":  # the end did not wait for the server: all nine still unsent
        assert "(0 failed, 0 dropped on a full queue, 9 still unsent at the end)" in warnings[0]


def test_tracking_not_installed_names_the_extra(tmp_path: Path, monkeypatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    with pytest.raises(
        ConfigError,
        match=r"study\.tracking\.wandb: needs wandb, not installed; pip install "
        r"'autotune-llm\[wandb\]'",
    ):
        start(_tracking(tmp_path, wandb={}), "t", tmp_path)


@pytest.mark.slow
def test_tracking_a_real_search_logs_each_trial_once_and_never_waits_on_a_silent_server(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    """The search loop's hook: two real CPU trials (the baseline, one OOM by the fault switch)
    logged to W&B offline, each once, with the record's own metrics; MLflow's server takes the
    connection and never answers: one warning, and the study never waits on it (both trials run
    and the search ends while MLflow's first request still waits)."""
    pytest.importorskip("optuna_integration")
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    from autotune.search import run_search

    monkeypatch.setenv("AUTOTUNE_FAULT", "oom@micro_batch_size=4")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "900")  # far above the hang guard below
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    listener = socket.socket()  # a silent server: accepts connections, never answers
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    tracking = {
        "mlflow": {"tracking_uri": f"http://127.0.0.1:{listener.getsockname()[1]}"},
        "wandb": {"project": "p"},
        "flush_s": 5,
    }
    cfg = parse_config(
        tiny(
            space={"micro_batch_size": [2, 4], "precision": ["fp32"]},
            study={"trials": 2, "sampler": "grid", "confirm_top": 0, "tracking": tracking},
        )
    )
    try:
        with caplog.at_level(logging.WARNING, logger="autotune.search.tracking"):
            # a hang guard: a search that waited on MLflow's first request would wait 900 s
            result = finishes(
                lambda: run_search(cfg, out_root=tmp_path / "out", device="cpu"), 600, "the search"
            )
            warnings = [
                r.getMessage() for r in caplog.records if r.name == "autotune.search.tracking"
            ]
    finally:
        listener.close()  # the pending request is reset: the tracking thread ends
        for thread in threading.enumerate():  # its last failure said within this test
            if thread.name.startswith("autotune-tracking-mlflow"):
                thread.join(60)
    first, second = sorted(result.history.seen.values(), key=lambda t: t.number)
    assert (first.user_attrs["status"], second.user_attrs["status"]) == (
        "ok",
        "oom",
    )  # the study as without
    assert len(warnings) == 1 and warnings[0].startswith("tracking: mlflow (http://127.0.0.1:"), (
        warnings
    )
    # MLflow never answered, yet both trials ran and the search ended after flush_s with both
    # unsent: nothing waited on it, between the trials or at the end
    assert (
        "2 of 2 trial(s) not logged (0 failed, 0 dropped on a full queue, 2 still unsent"
        in (warnings[0])
    )
    offline = _offline_runs(tmp_path / "out" / "t", 2)  # W&B's files beside the study's
    assert [r["history"]["trial_number"] for r in offline] == ["0", "1"]
    assert float(offline[0]["history"]["tokens_per_s_per_gpu"]) == first.value
    assert offline[0]["config"]["micro_batch_size"] == "2" and offline[1]["tags"] == {
        "PRUNED",
        "oom",
        "t",
    }


def test_tracking_cli_flags_checked_as_the_yaml_is(write_yaml, tmp_path: Path) -> None:
    from conftest import run_cli

    done = run_cli("search", str(write_yaml(tiny())), "--dry-run", "--wandb", "", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "--wandb: '' is not allowed: String should have at least 1 character" in done.stderr


def test_tracking_uri_password_never_stored(tmp_path: Path) -> None:
    from autotune.search.storage import open_study

    uri = "http://me:hunter2@mlflow.example:5000"
    cfg = parse_config(tiny(study={"tracking": {"mlflow": {"tracking_uri": uri}}}))
    study, _, _ = open_study(cfg, out_root=tmp_path, device="cpu", fresh=False, baseline={})
    stored = study.user_attrs["config"]["study"]["tracking"]["mlflow"]["tracking_uri"]
    assert "hunter2" not in stored and stored.startswith("http://me:")
