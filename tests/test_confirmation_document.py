"""The confirmation's document (documents/confirmation.py): `store` writes what the search wrote
before the document, key for key; `of` reads it back equal, and reads every layout earlier releases
stored with the defaults their readers took; a newer schema is refused."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import optuna
import pytest
from fake_measure import FakeMeasure

from autotune.documents import confirmation
from autotune.documents.confirmation import Confirmation, ConfirmationError, Dropped
from autotune.job import parse_config
from autotune.launch.runner import Bench
from autotune.search import confirm
from autotune.search.observer import Observer

DATA = Path(__file__).parent / "data"
# the study's confirmation as the dict writer of commit 192f3bc stored it: confirm.confirm of the
# unconfirmed study below (the top 3 and the baseline, 3 rounds asked), on fake_measure
STORED = DATA / "confirmation" / "stored-by-192f3bc.json"
UNCONFIRMED = DATA / "confirmation" / "unconfirmed" / "study.db"


def _landscape(knobs: dict[str, Any]) -> float:
    """micro-batch 8 and 4 bf16 tied, everything else far behind (tests/test_race.py's)."""
    if knobs.get("precision") == "bf16" and knobs["micro_batch_size"] in (4, 8):
        return 2000.0 + knobs["micro_batch_size"]
    return 1000.0 + 10 * knobs["micro_batch_size"]


def _confirmed(tmp_path: Path) -> tuple[optuna.Study, Confirmation | None]:
    """The unconfirmed study (6 trials searched) confirmed now by confirm.confirm, as
    search/run.py calls it, on a fresh fake measurement."""
    shutil.copy(UNCONFIRMED, tmp_path / "study.db")
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 'study.db'}")
    cfg = parse_config(study.user_attrs["config"])
    bench = Bench.of(
        cfg.model, cfg.workload, device="cpu", timeout_s=60.0, home=tmp_path, base_dir=None
    )
    doc = confirm.confirm(
        study,
        bench,
        top=3,
        rounds=3,
        base_knobs=study.user_attrs["baseline_knobs"],
        runs=tmp_path / "runs",
        observer=Observer(),
        measure_fn=FakeMeasure(landscape=_landscape, noise=0.01),
    )
    return study, doc


def test_confirmation_store_writes_the_json_the_dict_writer_wrote(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    study, doc = _confirmed(tmp_path)
    stored = study.user_attrs["confirmation"]
    assert json.dumps(stored) == json.dumps(json.loads(STORED.read_text()))
    # what confirm returns is what `of` reads, and storing it again writes the same
    assert doc is not None and doc == confirmation.of(study)
    assert json.dumps(doc.to_json()) == json.dumps(stored)
    # the race this study ran: a candidate and the baseline left it, a runner-up was named
    assert doc.complete and not doc.decided and doc.rounds_done == doc.rounds == 3
    assert [a.dropped.round for a in doc.arms if a.dropped] == [1, 2]
    assert doc.runner_up is not None and doc.runner_up.within_noise
    assert doc.baseline is not None and doc.baseline.changed_knobs == []
    assert doc.chosen_arm.trial == doc.chosen and doc.arm(doc.baseline.trial) is doc.baseline


def test_confirmation_round_trip_is_exact() -> None:
    given = json.loads(STORED.read_text())
    doc = Confirmation.from_json(given)
    again = Confirmation.from_json(json.loads(json.dumps(doc.to_json())))
    assert again == doc and json.dumps(again.to_json()) == json.dumps(given)
    study = optuna.create_study()
    confirmation.store(study, doc)
    assert confirmation.of(study) == doc
    # the report's JSON form reads back to the same form (Report.of, then Report.to_dict)
    report = json.loads(json.dumps(doc.report_dict()))
    assert Confirmation.from_json(report).report_dict() == report
    assert list(report) == [
        *("chosen", "why", "rounds_done", "rounds", "complete", "decided", "stats", "baseline"),
        "runner_up",
    ]


def _arm(trial: int, samples: list[float]) -> dict[str, Any]:
    """A candidate's arm as the first release stored it (2026-11-30)."""
    return {
        "trial": trial,
        "knobs": {"micro_batch_size": trial},
        "changed_knobs": ["micro_batch_size"],
        "samples": samples,
        "search_value": 100.0 + trial,
        "failures": [],
        "median": sorted(samples)[len(samples) // 2],
        "ci95": [0.0, 1.1e12],  # it kept intervals that bounded nothing
    }


def _first() -> dict[str, Any]:
    """The layout of 2026-11-30: no rounds asked, no baseline arm, no process walls."""
    return {
        "candidates": [3, 5],
        "rounds_done": 2,
        "stats": [_arm(3, [110.0, 111.0]), _arm(5, [100.0, 101.0])],
        "chosen": 3,
        "why": "highest confirmed median",
    }


def _walls() -> dict[str, Any]:
    """2026-12-05: rounds asked, complete, each arm's walls and compiles, the baseline's arm."""
    doc = _first()
    for st in doc["stats"]:
        st.update(ci95_why=None, walls_s=[10.0, 11.0], compile_s=[None, None])
    doc["baseline"] = {
        "trial": 0,
        "knobs": {"micro_batch_size": 0},
        "samples": [90.0, 91.0],
        "failures": [],
        "walls_s": [9.0, 9.5],
        "compile_s": [None, None],
        "median": 90.5,
    }
    doc.update(rounds=3, complete=False)
    return doc


def test_confirmation_of_the_first_layout_defaults_what_it_lacks() -> None:
    doc = Confirmation.from_json(_first())
    assert (doc.rounds, doc.complete, doc.decided) == (2, True, False)  # the rounds it did
    assert doc.baseline is None and doc.runner_up is None and doc.arms == doc.stats
    st = doc.arm(3)
    assert st is not None and st.ci95 == [0.0, 1.1e12] and st.ci95_why is None
    assert (st.walls_s, st.compile_s, st.compile_cache, st.disturbed) == (None,) * 4
    assert st.dropped is None and st.search_compile_s is None and st.runs == 2
    assert st.interval()[0] is None  # recomputed, as the report shows it: two bound nothing
    assert doc.outcome(0).baseline_samples == [] and doc.outcome(3).baseline_samples == st.samples


def test_confirmation_of_the_layout_with_walls_and_the_baseline_s_arm() -> None:
    doc = Confirmation.from_json(_walls())
    assert (doc.rounds, doc.complete, doc.decided) == (3, False, False)
    base = doc.baseline
    assert base is not None and base.changed_knobs == [] and base.search_value is None
    assert base.walls_s == [9.0, 9.5] and base.ci95 is None and base.dropped is None
    assert doc.samples_of(0) == [90.0, 91.0] and doc.arm(7) is None
    outcome = doc.outcome(0)
    assert [own for _, own in outcome.arms] == [False, False, True]
    assert outcome.baseline_samples == [90.0, 91.0] and outcome.runner_up is None
    # stored again, the layout of today: every key, the baseline's full arm
    stored = doc.to_json()
    assert list(stored["baseline"]) == list(stored["stats"][0])


def test_confirmation_of_the_race_layout_reads_drops_and_the_runner_up() -> None:
    """2026-12-05, the race: dropped, compile_cache, search_compile_s, peak_mem_gib, decided and
    the runner-up (before `disturbed`, 2026-12-07)."""
    given = json.loads(STORED.read_text())
    for st in [*given["stats"], given["baseline"]]:
        del st["disturbed"]
    doc = Confirmation.from_json(given)
    assert all(a.disturbed is None for a in doc.arms)
    assert doc.baseline is not None and doc.baseline.dropped == Dropped(2, doc.baseline.dropped.why)
    assert doc.runner_up is not None and doc.runner_up.trial == given["runner_up"]["trial"]


def test_confirmation_of_a_study_stored_by_an_earlier_release() -> None:
    """tests/data/studies/staged-h200: a confirmation stored on an H200 (no walls, no rounds)."""
    url = f"sqlite:///{DATA / 'studies' / 'staged-h200' / 'study.db'}"
    study = optuna.load_study(study_name=optuna.get_all_study_names(url)[0], storage=url)
    doc = confirmation.of(study)
    assert doc is not None and doc.candidates == [3, 13] and doc.chosen == 3
    assert (doc.rounds, doc.complete) == (2, True) and doc.chosen_arm.median is not None


def test_confirmation_of_a_newer_schema_is_refused_and_a_damaged_one_is_none() -> None:
    study = optuna.create_study()
    newer = {**_first(), "schema": confirmation.SCHEMA_VERSION + 1}
    study.set_user_attr("confirmation", newer)
    with pytest.raises(ConfirmationError, match="newer than this autotune reads"):
        confirmation.of(study)
    with pytest.raises(ConfirmationError, match="upgrade autotune"):
        Confirmation.from_json(newer)
    for damaged in ({}, {"candidates": [1]}, {**_first(), "stats": [{"trial": 1}]}, "x"):
        study.set_user_attr("confirmation", damaged)
        assert confirmation.of(study) is None
    assert confirmation.of(optuna.create_study()) is None


def test_confirmation_document_is_its_own_copy() -> None:
    """from_json copies the stored lists: a document changed in memory leaves the dict it came
    from as it was."""
    given = _walls()
    kept = copy.deepcopy(given)
    doc = Confirmation.from_json(given)
    doc.stats[0].samples.append(1.0)
    doc.stats[0].failures.append("crash: x")
    assert given == kept
