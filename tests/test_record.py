"""documents/record.py: the typed, versioned trial record every reader uses, and records written
before it."""

from __future__ import annotations

import optuna
import pytest

from autotune.documents.record import SCHEMA_VERSION, Metric, RecordError, TrialRecord
from autotune.study.history import History, store


def _stored(attrs: dict) -> optuna.trial.FrozenTrial:
    """A trial stored in an in-memory study with exactly these user attributes."""
    study = optuna.create_study(direction="maximize")
    value = (attrs.get("metrics") or {}).get(Metric.TOKENS_PER_GPU) or 1.0
    study.add_trial(optuna.trial.create_trial(value=value, user_attrs=attrs))
    return study.trials[0]


def test_record_round_trips_through_optuna_with_its_schema() -> None:
    record = TrialRecord(
        0,
        {"micro_batch_size": 8},
        "ok",
        metrics={Metric.TOKENS_PER_GPU: 1234.5, Metric.MFU: None},
        raw={"step_times_s": [0.1, 0.2]},
        extra={"gpu": "0"},
    )
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    store(trial, record)
    study.tell(trial, 1234.5)
    back = TrialRecord.of(study.trials[0])
    assert back == record and back.schema == SCHEMA_VERSION
    assert study.trials[0].user_attrs["schema"] == SCHEMA_VERSION
    assert (
        back.tokens_per_gpu == 1234.5
        and back.step_times == [0.1, 0.2]
        and back.extra == {"gpu": "0"}
    )


def test_record_reads_a_record_written_before_records_were_versioned() -> None:
    """A 2026-11 record (no schema key, the same fields): read as it is; what the study set stays in
    extra."""
    old = {
        "knobs": {"micro_batch_size": 4, "precision": "fp32"},
        "status": "ok",
        "reason": "",
        "predicted": False,
        "wall_s": 3.2,
        "metrics": {Metric.TOKENS_PER_GPU: 601.0},
        "claimed": True,
        "worker": "host:1",
    }
    record = TrialRecord.of(_stored(old))
    assert (
        record.schema == SCHEMA_VERSION
        and record.knobs == old["knobs"]
        and record.tokens_per_gpu == 601.0
    )
    assert record.extra == {"claimed": True, "worker": "host:1"}
    assert len(History.of(_study_of(old)).completed) == 1


def _study_of(attrs: dict) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    study.add_trial(optuna.trial.create_trial(value=1.0, user_attrs=attrs))
    return study


def test_record_of_a_newer_release_is_refused_by_name() -> None:
    with pytest.raises(
        RecordError,
        match=r"trial 0: record schema 99 is newer than this autotune reads \(up to 3\)",
    ):
        TrialRecord.of(_stored({"knobs": {}, "status": "ok", "schema": 99}))
