"""Issue 52: a study's budget counts measured trials, and a killed study resumed reaches it.

study.trials counts trials measured to their end (ok, or over_limit); a failed or pruned trial,
and one lost with its killed worker, is not counted: another is measured in its place, up to
history.launch_cap launches. A lost trial's point is measured again, first. A search that ends at
its budget leaves no trial waiting in the queue, and report never lists a trial without knobs (a
queued one an older study left). The kill test runs the real CLI (slow); the loop's counting runs
in this process on the fake measurement (tests/fake_measure.py), as tests/test_search.py does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import cli_here, load_trials, run_cli, start_cli, tiny, wait_until
from fake_measure import FakeMeasure
from optuna.trial import TrialState

from autotune.job import parse_config
from autotune.search import SearchResult, run_search, stages
from autotune.search.drive import Drive, Told
from autotune.search.schedule import Schedule
from autotune.space import resolve_space
from autotune.study.history import launch_cap

# every bf16 trial ends as a crash: half the space cannot be measured
CRASH_BF16 = "crash@precision=bf16"


def _search(doc: dict, out: Path, fake: FakeMeasure | None = None, **options) -> SearchResult:
    cfg = parse_config(doc)
    return run_search(cfg, out_root=out, device="cpu", measure_fn=fake or FakeMeasure(), **options)


def _ok(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    return [t for t in trials if t.user_attrs.get("status") == "ok"]


def _waiting(out: Path) -> list[optuna.trial.FrozenTrial]:
    return [t for t in load_trials(out) if t.state == TrialState.WAITING]


@pytest.mark.parametrize("sampler", ["tpe", "random", "grid"])
def test_failed_trials_do_not_count_toward_the_budget(
    tmp_path: Path, monkeypatch, sampler: str
) -> None:
    """3 measured trials asked of a space whose bf16 half crashes: the 3 fp32 points are measured,
    whatever the sampler drew first (seed 3 draws bf16 twice in its first three); none is left
    waiting."""
    monkeypatch.setenv("AUTOTUNE_FAULT", CRASH_BF16)
    doc = tiny(study={"trials": 3, "sampler": sampler, "confirm_top": 0, "seed": 3})
    result = _search(doc, tmp_path)
    trials = load_trials(tmp_path)
    ok = _ok(trials)
    assert len(ok) == 3 and {t.params["precision"] for t in ok} == {"fp32"}, result.stop_reason
    assert result.history.measured == 3 and result.stop_reason == "budget reached"
    assert not _waiting(tmp_path)


def test_launches_are_capped_when_most_configurations_fail(tmp_path: Path, monkeypatch) -> None:
    """Where the configurations fail, the search stops at the launch cap, saying so."""
    monkeypatch.setenv("AUTOTUNE_FAULT", "crash@micro_batch_size>=4")
    doc = tiny(
        space={"micro_batch_size": [2, 4, 8, 16], "precision": ["fp32", "bf16"]},
        study={"trials": 3, "sampler": "random", "confirm_top": 0, "seed": 3},
    )
    result = _search(doc, tmp_path)
    h = result.history
    assert h.launched <= launch_cap(3)
    # at most 2 points run (micro-batch 2): the budget cannot be measured, the cap ends it
    assert h.measured <= 2 and result.stop_reason.startswith(("launch cap", "space exhausted"))
    if result.stop_reason.startswith("launch cap"):
        assert h.launched == launch_cap(3) and "measured" in result.stop_reason


def test_several_workers_reach_the_measured_budget(tmp_path: Path, monkeypatch) -> None:
    """Two trials at once (--gpus on the CPU): a worker waits while the other's trial could take
    the rest of the budget, and measures in its place when it crashes."""
    monkeypatch.setenv("AUTOTUNE_FAULT", CRASH_BF16)
    doc = tiny(study={"trials": 3, "sampler": "tpe", "confirm_top": 0, "seed": 3})
    result = _search(doc, tmp_path, gpus=["0", "1"])
    ok = _ok(load_trials(tmp_path))
    assert len(ok) == 3 and result.stop_reason == "budget reached"
    assert not [t for t in load_trials(tmp_path) if t.state in (TrialState.RUNNING,)]
    assert not _waiting(tmp_path)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_lost_trial_is_measured_again_first(tmp_path: Path, monkeypatch) -> None:
    """A trial left RUNNING by a killed worker (on this host: its pid is gone) is failed as
    worker_lost, not counted, and its point is measured first on resume."""
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    doc = tiny(study={"trials": 1, "confirm_top": 0})
    _search(doc, tmp_path)
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 't' / 'study.db'}")
    lost = {"micro_batch_size": 8, "precision": "bf16"}
    study.enqueue_trial(lost)
    trial = study.ask()
    trial.set_user_attr("knobs", {**lost, "grad_accum_steps": 1})
    trial.set_user_attr("worker", {"host": os.uname().nodename, "pid": _dead_pid()})
    fake = FakeMeasure()
    result = _search(doc, tmp_path, fake, trials=2)
    trials = {t.number: t for t in load_trials(tmp_path)}
    assert trials[trial.number].user_attrs["status"] == "worker_lost"
    assert (
        fake.calls[0].knobs["micro_batch_size"] == 8 and fake.calls[0].knobs["precision"] == "bf16"
    )
    assert result.history.measured == 2 and len(fake.calls) == 1


def test_report_lists_no_trial_without_knobs(tmp_path: Path, monkeypatch) -> None:
    """A study an older autotune left with trials waiting in the queue (the grid kept a few
    enqueued) and one asked but never given its point: report lists neither, in any format."""
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    _search(tiny(study={"trials": 2, "sampler": "grid", "confirm_top": 0}), tmp_path)
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 't' / 'study.db'}")
    study.enqueue_trial({"micro_batch_size": 8, "precision": "fp32"})
    study.enqueue_trial({"micro_batch_size": 4, "precision": "bf16"})
    study.ask()  # one of them asked, never given its knobs (its worker died at once)
    measured = {t.number for t in _ok(load_trials(tmp_path))}
    proc = cli_here("report", str(tmp_path / "t"), "--format", "json", "--no-html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    listed = {r["number"] for r in json.loads(proc.stdout)["trials"]}
    assert listed == measured
    for fmt in ("rich", "markdown"):
        proc = cli_here("report", str(tmp_path / "t"), "--format", fmt, "--no-html", cwd=tmp_path)
        assert proc.returncode == 0 and "waiting" not in proc.stdout and "None" not in proc.stdout


@pytest.mark.slow
def test_killed_study_resumes_to_its_measured_budget(tmp_path: Path) -> None:
    """kill -9 of the CLI while its second trial runs, then the same command: the study ends with
    the measured trials asked for (the fp32 half of the space; bf16 crashes), none waiting."""
    doc = tiny(study={"trials": 3, "confirm_top": 0, "prune_below": 0, "seed": 3})
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    args = ("search", str(path), "--out", str(out), "--device", "cpu")
    env = {"AUTOTUNE_FAULT": CRASH_BF16}
    first = start_cli(*args, cwd=tmp_path, env=env)
    runs = out / "t" / "runs"
    wait_until(lambda: (runs / "0001" / "spec.json").exists(), 180, "the second trial's start")
    first.send_signal(signal.SIGKILL)
    first.communicate()
    again = run_cli(*args, cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    trials = load_trials(out)
    ok = _ok(trials)
    assert len(ok) == 3 and {t.params["precision"] for t in ok} == {"fp32"}, again.stdout
    assert "budget reached" in again.stdout + again.stderr
    assert not [t for t in trials if t.state in (TrialState.WAITING, TrialState.RUNNING)]


def test_an_enqueue_never_slips_between_another_workers_ask_and_its_new_trial(
    tmp_path: Path, monkeypatch
) -> None:
    """Two workers of one process: an ask that found no waiting trial creates a new one; a point
    the other worker enqueued in between (a repeat's nearest point) was left waiting past the
    budget's end (seen once in a full run). Here the ask is held right after its empty pop while
    the other worker enqueues: the enqueue waits for the ask (Schedule.queue_lock), then finds the
    budget's one trial running and enqueues nothing."""
    cfg = parse_config(tiny(study={"trials": 1, "confirm_top": 0}))
    space = resolve_space(cfg, "cpu")
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="t", storage=storage)
    schedule = Schedule(study, space, stages.staging(cfg.study, space, 1, "train"), 1, 2, 0, False)
    drive = Drive(
        study, lambda t: Told(TrialState.FAIL), [], 2, threading.Event(), schedule.queue_lock
    )
    popped_empty, go = threading.Event(), threading.Event()
    pop = optuna.study.Study._pop_waiting_trial_id

    def held_pop(self: optuna.study.Study) -> int | None:
        found = pop(self)
        if found is None:
            popped_empty.set()
            go.wait(10)
        return found

    monkeypatch.setattr(optuna.study.Study, "_pop_waiting_trial_id", held_pop)
    asker = threading.Thread(target=drive.ask)
    asker.start()
    assert popped_empty.wait(10)
    enqueuer = threading.Thread(target=schedule.enqueue, args=([space.baseline],))
    enqueuer.start()
    enqueuer.join(0.3)
    go.set()
    asker.join(10)
    enqueuer.join(10)
    states = [t.state for t in study.get_trials(deepcopy=False)]
    assert states == [TrialState.RUNNING], states
