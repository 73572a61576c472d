"""Issue 62, item 6: the search knows the host was busy. It samples the host's load and the other
GPU processes before and after each trial's process and each confirmation process, as `check` does
(search/host.py), marks a measurement taken while disturbed on its record, never fails it, and says
so on the live line, in the report's trials and on the card (study/disturbed.py). Real trial
processes (a user's job of task command); the host's load comes from check's loadavg seam, so which
measurement is disturbed is known."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

from conftest import command_job, run_cli

from autotune.documents.record import TrialRecord
from autotune.job import load
from autotune.report import collect, to_json, to_markdown
from autotune.search import run_search
from autotune.search.host import Watch, words
from autotune.study.load import load_study
from autotune.views import TrialLog

QUIET = (0.1, 0.1, 0.1)
BUSY = (9.0, 9.0, 9.0)  # 4.5 per core on 2 CPUs, past check's limit of 2


def _scripted(busy: set[int]) -> Callable[[], tuple[float, float, float]]:
    """A loadavg that reads busy at the calls numbered in `busy` (two a measurement: before, after),
    quiet at the others."""
    calls = iter(range(10_000))
    return lambda: BUSY if next(calls) in busy else QUIET


def _search(tmp_path: Path, loadavg: Callable[[], tuple[float, float, float]], **study: object):
    cfg, space = load(command_job(tmp_path, "busy", study={"trials": 2, **study}), "cpu")
    stream = io.StringIO()
    watch = Watch("cpu", loadavg=loadavg)
    result = run_search(
        cfg,
        out_root=tmp_path / "trials",
        device="cpu",
        space=space,
        observer=TrialLog(stream),
        watch=watch,
    )
    study_obj = load_study(tmp_path / "trials" / "busy", None, None)[0]
    return result, study_obj, stream.getvalue()


def test_search_disturbed_trial_is_marked_said_and_never_failed(tmp_path: Path) -> None:
    """Trial 0's process measured while the host was busy (its before and after samples), and the
    second confirmation process: the search goes on and ends as always, the trial's record carries
    what disturbed it, its live line says so, the report's trials mark it busy, and the card says
    the choice rests on disturbed measurements, in every form."""
    # calls 0, 1: trial 0; 2, 3: trial 1; then two a confirmation process (call 7: the second's
    # after-sample)
    result, study, live = _search(tmp_path, _scripted({0, 1, 7}), confirm_top=2, confirm_rounds=2)
    assert result.best_yaml is not None and result.best_yaml.is_file()
    records = {t.number: TrialRecord.of(t) for t in study.trials if t.user_attrs.get("status")}
    first, second = records[0], records[1]
    assert first.status == "ok" and second.status == "ok"  # marked, not failed
    assert first.disturbed == ["host load 4.50 per core before it (9 on 2 CPUs; limit 2)"]
    assert first.host is not None and first.host["after"]["load_1min"] == 9.0
    assert second.disturbed == [] and second.host is not None
    assert "#0 ok" in live and "disturbed: host load 4.50 per core before it" in live
    assert "#1 ok" in live and live.count("disturbed:") == 1
    conf = study.user_attrs["confirmation"]
    per_process = [
        d
        for arm in [*conf["stats"], conf.get("baseline") or {}]
        for d in arm.get("disturbed") or []
    ]
    assert len(per_process) == 4 and sum(1 for d in per_process if d) == 1

    data = collect(study, tmp_path / "trials" / "busy")
    assert data.disturbed is not None and data.disturbed["trials"] == [0]
    assert data.disturbed["processes"] == 1 and data.disturbed["of"] == 4
    said = data.disturbed["text"]
    assert said.startswith(
        "Measured on a busy host: trial 0 and 1 of 4 confirmation processes ran while other work "
        "disturbed them (trial 0: host load 4.50 per core before it"
    )
    assert "may not hold on a quiet machine" in said
    rows = {r.number: r for r in data.trials}
    assert rows[0].host == "busy" and rows[1].host == "quiet"
    text = to_markdown(data)
    assert said in text.replace("\\", "")
    assert "| host |" in text and "| busy |" in text
    assert json.loads(to_json(data))["disturbed"]["text"] == said


def test_search_disturbed_a_quiet_host_says_nothing(tmp_path: Path) -> None:
    """Sampled and quiet: each record holds its samples and no disturbance; no host column, no
    busy sentence."""
    result, study, live = _search(tmp_path, lambda: QUIET, confirm_top=0)
    records = [TrialRecord.of(t) for t in study.trials if t.user_attrs.get("status") == "ok"]
    assert records and all(r.host is not None and r.disturbed == [] for r in records)
    assert "disturbed:" not in live
    data = collect(study, tmp_path / "trials" / "busy")
    assert data.disturbed is None
    text = to_markdown(data)
    assert "busy host" not in text and "| host |" not in text


def test_search_disturbed_the_command_samples_the_host_around_every_trial(tmp_path: Path) -> None:
    """`autotune search` watches the host by default: every trial it launched holds the samples
    taken before and after its process (whatever this machine's load reads)."""
    yaml_path = command_job(tmp_path, "watched", study={"trials": 2})
    done = run_cli("search", str(yaml_path), "--out", "trials", "--device", "cpu", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    study = load_study(tmp_path / "trials" / "watched", None, None)[0]
    launched = [TrialRecord.of(t) for t in study.trials if t.user_attrs.get("status") == "ok"]
    assert len(launched) == 2
    for record in launched:
        assert record.host is not None and set(record.host) == {"before", "after", "disturbed"}
        assert record.host["before"]["cpus"] >= 1 and record.host["before"]["gpu_processes"] is None
        assert isinstance(record.host["disturbed"], list)


def test_search_disturbed_other_processes_on_the_trial_s_gpus_are_named() -> None:
    """A trial on GPUs 2 and 3: the processes on each are read, and another's is named."""
    asked: list[int] = []

    def processes(index: int) -> list[dict[str, object]]:
        asked.append(index)
        return [{"pid": 4242, "name": "hog", "used_mib": 900}] if index == 3 else []

    watch = Watch("cuda", loadavg=lambda: QUIET, processes=processes)  # type: ignore[arg-type]
    sample = watch.sample("2,3")
    assert asked == [2, 3] and sample["gpu_processes"] == [
        {"pid": 4242, "name": "hog", "used_mib": 900}
    ]
    assert words([sample, sample]) == ["other processes on its GPU: pid 4242 (hog)"]
    assert words([watch.sample("2")]) == []
