"""The search loop: resume, no repeats, predicted OOM, failures, refusal, --fresh, warm start,
confirmation. The loop's logic runs in this process on a fake measurement (tests/fake_measure.py:
a deterministic landscape, the runner's own records); real CPU trial processes where the process is
what is tested: one whole search and its confirmation, and the compile cache on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from conftest import cli_here, tiny
from conftest import load_trials as _trials
from fake_measure import FakeMeasure, speed

from autotune import tasks
from autotune.documents.record import TrialRecord
from autotune.errors import ConfigError, StudyError
from autotune.job import parse_config
from autotune.protocol import CONFIG_FAILURES, STATUSES, TrialResult
from autotune.report import collect, to_markdown
from autotune.search import Observer, SearchResult, run_search
from autotune.search.confirm import choose
from autotune.search.sampler import make_sampler
from autotune.search.storage import open_study
from autotune.study.history import History, optuna_state


def _cfg(**overrides):
    return parse_config(tiny(**overrides))


def _close(knobs: dict[str, Any]) -> float:
    """fake_measure.speed's ranking within 3%: arms the race cannot separate in two rounds."""
    return 1000.0 + speed(knobs) / 10


def _search(cfg, out: Path, fake: FakeMeasure | None = None, **options) -> SearchResult:
    """The whole search (run_search: study, loop, confirmation, best.yaml) on the fake measurement,
    in this process."""
    return run_search(cfg, out_root=out, device="cpu", measure_fn=fake or FakeMeasure(), **options)


def test_study_baseline_first_no_repeats_and_resume(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    cfg = _cfg(study={"trials": 6})  # the whole 3 x 2 space
    fake = FakeMeasure()
    result = _search(cfg, tmp_path, fake)
    trials = _trials(tmp_path)
    # the baseline is trial 0, and measured first
    assert trials[0].params == {"micro_batch_size": 2, "precision": "fp32"}
    assert fake.calls[0].number == 0
    launched = [t for t in trials if t.user_attrs.get("status") == "ok"]
    assert len(launched) == 6
    # no configuration measured twice
    assert len({tuple(sorted(t.params.items())) for t in launched}) == 6
    assert len(fake.calls) == 6
    assert result.stop_reason in ("budget reached", "space exhausted")
    best = yaml.safe_load(result.best_yaml.read_text())
    # global batch kept
    assert best["knobs"]["micro_batch_size"] * best["knobs"]["grad_accum_steps"] == 8
    # The same command again resumes: the completed trials count, nothing is re-run.
    again = FakeMeasure()
    resumed = _search(cfg, tmp_path, again)
    assert resumed.new_trials == 0 and resumed.history.launched == 6 and again.calls == []
    assert len(_trials(tmp_path)) == len(trials)


def test_study_resume_continues_to_budget(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    cfg = _cfg(study={"trials": 2})
    _search(cfg, tmp_path)
    fake = FakeMeasure()
    more = _search(cfg, tmp_path, fake, trials=4)
    assert more.new_trials == 2 and more.history.launched == 4 and len(fake.calls) == 2
    ok = [t for t in _trials(tmp_path) if t.user_attrs.get("status") == "ok"]
    assert len({tuple(sorted(t.params.items())) for t in ok}) == 4


def test_study_failures_recorded_and_oom_predicted(tmp_path: Path, monkeypatch) -> None:
    """The trial's OOM itself is classified in a real process by test_runner.py
    (test_runner_classifies_failures); here the loop records it and predicts the larger size."""
    monkeypatch.setenv("AUTOTUNE_FAULT", "oom@micro_batch_size>=4")
    cfg = _cfg(space={"precision": ["fp32"]}, study={"trials": 3, "sampler": "grid"})
    fake = FakeMeasure()
    result = _search(cfg, tmp_path, fake)
    by_mbs = {
        t.params["micro_batch_size"]: t
        for t in _trials(tmp_path)
        if "status" in t.user_attrs and t.user_attrs["status"] != "duplicate"
    }
    assert by_mbs[2].user_attrs["status"] == "ok"
    assert by_mbs[4].user_attrs["status"] == "oom" and not by_mbs[4].user_attrs["predicted"]
    assert by_mbs[8].user_attrs["status"] == "oom" and by_mbs[8].user_attrs["predicted"]
    assert "predicted: needs at least the memory of trial" in by_mbs[8].user_attrs["reason"]
    # the sampler learns from both
    assert by_mbs[4].state == by_mbs[8].state == optuna.trial.TrialState.PRUNED
    # never launched: neither measured nor given a folder
    assert [c.knobs["micro_batch_size"] for c in fake.calls] == [2, 4]
    assert not (tmp_path / "t" / "runs" / f"{by_mbs[8].number:04d}").exists()
    assert result.history.launched == 2 and result.best.params["micro_batch_size"] == 2


def test_study_failed_trial_never_stops_study(tmp_path: Path, monkeypatch) -> None:
    """A NaN loss (classified in a real trial process by test_runner_classifies_failures) ends its
    trial PRUNED; the study goes on to its budget."""
    monkeypatch.setenv("AUTOTUNE_FAULT", "nan@precision=bf16")
    result = _search(_cfg(study={"trials": 6}), tmp_path)
    statuses = sorted(
        t.user_attrs["status"]
        for t in _trials(tmp_path)
        if t.user_attrs.get("status") != "duplicate"
    )
    assert statuses == ["nonfinite_loss"] * 3 + ["ok"] * 3
    assert all(
        t.state == optuna.trial.TrialState.PRUNED
        for t in _trials(tmp_path)
        if t.user_attrs.get("status") == "nonfinite_loss"
    )
    assert result.best.params["precision"] == "fp32"


def test_study_refuses_changed_space_and_nothing_written(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    _search(_cfg(study={"trials": 1}), tmp_path)
    db = tmp_path / "t" / "study.db"
    before = db.read_bytes()
    changed = _cfg(space={"micro_batch_size": [2, 4]}, study={"trials": 1})
    refused = FakeMeasure()
    with pytest.raises(
        StudyError,
        match=(
            r"name: study 't' exists with a different model, workload or space \(.*\); run with "
            r"--fresh --warm-start "
        ),
    ):
        _search(changed, tmp_path, refused)
    assert db.read_bytes() == before and refused.calls == []
    with pytest.raises(StudyError, match=r"different device \(cpu\)"):
        _device_check(tmp_path)
    fresh = _search(changed, tmp_path, fresh=True)
    assert fresh.history.launched == 1
    archived = [p for p in tmp_path.iterdir() if p.name.startswith("t.archived-")]
    assert len(archived) == 1 and (archived[0] / "study.db").exists()  # nothing lost
    assert (
        History.of(
            optuna.load_study(study_name="t", storage=f"sqlite:///{archived[0] / 'study.db'}")
        ).launched
        == 1
    )


def _device_check(out: Path) -> None:
    open_study(_cfg(study={"trials": 1}), out_root=out, device="cuda", fresh=False, baseline={})


def _frozen(number: int, value: float, knobs: dict) -> optuna.trial.FrozenTrial:
    t = optuna.trial.create_trial(value=value, user_attrs={"knobs": knobs})
    t.number = number
    return t


def test_study_choose_prefers_fewer_changed_knobs_within_noise() -> None:
    base = {"micro_batch_size": 8, "precision": "fp32", "compile": False}
    # 3 knobs changed
    a = _frozen(5, 540.0, {"micro_batch_size": 64, "precision": "bf16", "compile": True})
    # 2 knobs changed
    b = _frozen(7, 530.0, {"micro_batch_size": 8, "precision": "bf16", "compile": True})
    # far slower
    c = _frozen(9, 300.0, {"micro_batch_size": 8, "precision": "bf16", "compile": False})
    samples = {5: [538.0, 545.0, 530.0], 7: [536.0, 528.0, 541.0], 9: [301.0, 299.0, 300.0]}
    result = choose([a, b, c], samples, {5: [], 7: [], 9: []}, base, 3)
    assert result.chosen == 7  # within the noise of trial 5, one knob fewer
    assert "changes fewer knobs from the baseline (2 against 3)" in result.why
    stats = {st.trial: st for st in result.stats}
    assert stats[5].median == 538.0 and stats[5].ci95[0] < 538.0 < stats[5].ci95[1]
    # Clearly apart: the faster one wins even though it changes more knobs.
    samples = {5: [540.0, 541.0, 539.0], 7: [500.0, 501.0, 499.0], 9: [300.0, 300.5, 299.5]}
    assert choose([a, b, c], samples, {5: [], 7: [], 9: []}, base, 3).chosen == 5


def test_study_choose_one_sample_each_takes_the_higher_median() -> None:
    """One sample has no interval (its noise is unknown): the fewer-knobs rule must not pick a
    slower one."""
    base = {"micro_batch_size": 8, "precision": "fp32", "compile": False}
    fast = _frozen(5, 540.0, {"micro_batch_size": 64, "precision": "bf16", "compile": True})
    plain = _frozen(7, 300.0, {"micro_batch_size": 8, "precision": "bf16", "compile": False})
    result = choose([fast, plain], {5: [538.0], 7: [301.0]}, {5: [], 7: []}, base, 1)
    assert result.chosen == 5 and "within" not in result.why


def test_study_choose_two_samples_a_side_compare_by_their_ratio() -> None:
    """Two samples alone bound nothing (Student's t of 1 degree of freedom is 12.7): each arm's own
    interval is None with why. Two a side do bound their ratio (the pooled noise, 2 degrees of
    freedom): within it, the cheaper program wins (no compile before a compiled one), and says so;
    apart, the faster one."""
    base = {"micro_batch_size": 8, "precision": "fp32", "compile": False}
    fast = _frozen(5, 540.0, {"micro_batch_size": 64, "precision": "bf16", "compile": True})
    plain = _frozen(7, 530.0, {"micro_batch_size": 8, "precision": "bf16", "compile": False})
    result = choose([fast, plain], {5: [538.0, 545.0], 7: [536.0, 528.0]}, {5: [], 7: []}, base, 2)
    assert result.chosen == 7 and "a cheaper program (no compile against whole-model" in (
        result.why
    )
    assert all(
        st.ci95 is None and st.ci95_why.startswith("too few samples (2;") for st in result.stats
    )
    runner = result.runner_up
    assert runner.trial == 5 and runner.within_noise and runner.gap_pct > 0
    apart = choose([fast, plain], {5: [538.0, 540.0], 7: [500.0, 502.0]}, {5: [], 7: []}, base, 2)
    assert apart.chosen == 5 and apart.runner_up.within_noise is False


def test_study_confirmation_interleaved_one_measurement_a_sample(
    tmp_path: Path, monkeypatch
) -> None:
    """The top 2 and the baseline re-measured in 2 interleaved rounds (A B base A B base), each
    sample a measurement of its own in its own folder (on the real measurement a fresh process: the
    test on real trials below), speed only, each one's wall time kept; the confirmed choice goes to
    best.yaml and the report, its gain a ratio of confirmed medians; a resume confirms nothing
    again."""
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    cfg = _cfg(study={"trials": 3, "confirm_top": 2, "confirm_rounds": 2})
    fake = FakeMeasure(landscape=_close)  # no arm separates: both rounds measure every arm
    result = _search(cfg, tmp_path, fake)
    conf = result.confirmation
    assert conf.rounds_done == conf.rounds == 2 and conf.complete is True
    assert len(conf.candidates) == 2 and 0 not in conf.candidates  # the baseline is slowest
    base = conf.baseline
    assert base.trial == 0 and len(base.samples) == 2 and base.median > 0
    for st in [*conf.stats, base]:
        assert len(st.samples) == len(st.walls_s) == 2 and all(w > 0 for w in st.walls_s)
    a, b = conf.candidates
    samples = fake.calls[3:]  # after the search's 3 trials
    assert [(c.number, c.run_dir.name) for c in samples] == [
        (n, f"confirm-{n:04d}-{r}") for r in (0, 1) for n in (a, b, 0)
    ]
    # the numerics check was made once, in the search
    assert not any("loss_check" in c.params for c in samples)
    runs = sorted(
        p.name for p in (tmp_path / "t" / "runs").iterdir() if p.name.startswith("confirm-")
    )
    assert len(runs) == 6  # 2 candidates and the baseline x 2 rounds, each its own folder
    best = yaml.safe_load(result.best_yaml.read_text())
    assert best["chosen"]["trial"] == conf.chosen and best["chosen"]["why"].startswith(
        "confirmation (2 of 2 interleaved"
    )
    chosen = next(c for c in best["confirmation"] if c["trial"] == conf.chosen)
    assert best["metrics"]["tokens_per_s_per_gpu"] == round(chosen["median"], 1)
    assert best["baseline"]["confirmed_samples"] == base.samples
    ratio = chosen["median"] / base.median
    assert best["metrics"]["speedup_vs_baseline"] == pytest.approx(ratio, abs=1e-4)
    lo, hi = best["metrics"]["speedup_ci95"]
    assert lo < ratio < hi and best["metrics"]["speedup_within_noise"] is (lo <= 1 <= hi)
    # The report shows the confirmed choice of best.yaml, not only the search's single best
    # measurement.
    data = collect(
        optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 't' / 'study.db'}"),
        tmp_path / "t",
    )
    assert data.confirmation.chosen == conf.chosen and len(data.confirmation.stats) == 2
    assert data.confirmation.complete is True
    assert data.chosen["gain"]["ratio"] == pytest.approx(ratio)
    assert not data.cost["confirmation_estimated"]  # every sample's wall time was measured
    shown = to_markdown(data)
    assert f"**Chosen (best.yaml): trial {conf.chosen}, " in shown and "fresh processes" in shown
    # the last word: the gain of confirmed medians with its interval (study/bound.py)
    assert f"beats your setting {ratio:.2f}x (95% interval" in shown
    assert "confirmed medians of the same rounds" in shown and data.bound["text"] in shown
    # Resuming with nothing new does not confirm again.
    again = FakeMeasure()
    assert _search(cfg, tmp_path, again).confirmation == conf and again.calls == []
    assert (
        len([p for p in (tmp_path / "t" / "runs").iterdir() if p.name.startswith("confirm-")]) == 6
    )


@pytest.mark.slow
def test_study_on_real_trials_each_trial_and_sample_a_fresh_process(
    tmp_path: Path, monkeypatch
) -> None:
    """run_search's own measurement (no measure_fn) is the real one, for the search and its
    confirmation alike: 2 trials and 2 confirmation samples, each a trial process of its own that
    wrote its spec, result and log in its own folder; the records and best.yaml hold what they
    measured."""
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    cfg = _cfg(study={"trials": 2, "confirm_top": 2, "confirm_rounds": 1})
    result = run_search(cfg, out_root=tmp_path, device="cpu")
    ok = [t for t in _trials(tmp_path) if t.user_attrs.get("status") == "ok"]
    assert [t.number for t in ok] == [0, 1]
    assert ok[0].params == {"micro_batch_size": 2, "precision": "fp32"}  # the baseline first
    conf = result.confirmation
    assert conf.rounds_done == 1 and sorted(conf.candidates) == [0, 1]
    runs = tmp_path / "t" / "runs"
    folders = sorted(p.name for p in runs.iterdir())
    assert folders == ["0000", "0001", "confirm-0000-0", "confirm-0001-0"]
    for name in folders:
        assert {"spec.json", "result.json", "worker.log"} <= {
            p.name for p in (runs / name).iterdir()
        }
        measured = TrialResult.read(runs / name / "result.json")
        assert measured.status == "ok" and measured.phases_s["start"] > 0
    for t in ok:
        record = TrialRecord.of(t)
        assert len(record.step_times) == 2 and record.tokens_per_gpu > 0
        assert record.fingerprint["torch"].startswith("2.")
    best = yaml.safe_load(result.best_yaml.read_text())
    assert best["chosen"]["why"].startswith("confirmation (1 of 1 interleaved")
    assert all(len(c["samples"]) == 1 and c["samples"][0] > 0 for c in best["confirmation"])
    # each sample's process timed from outside
    assert all(len(c["walls_s"]) == 1 and c["walls_s"][0] > 0 for c in best["confirmation"])
    # the finished study's cost is what its processes took, not an estimate
    cost = collect(
        optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 't' / 'study.db'}"),
        tmp_path / "t",
    ).cost
    assert cost["confirmation_estimated"] is False
    walls = sum(c["walls_s"][0] for c in best["confirmation"])
    assert cost["by_kind"]["confirmation"]["seconds"] == pytest.approx(walls, rel=0.01, abs=0.1)


class _CtrlCAfter(Observer):
    """Presses Ctrl-C right after the n-th confirmation sample was stored."""

    def __init__(self, n: int) -> None:
        self.n, self.seen, self.kept = n, 0, None

    def confirm_started(self, candidates: list[int], rounds: int, kept: int = 0) -> None:
        self.kept = kept

    def confirm_sample(self, number: int, round_: int, value: float | None, status: str) -> None:
        self.seen += 1
        if self.seen == self.n:
            raise KeyboardInterrupt


def test_study_interrupted_confirmation_goes_on_from_its_samples(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    cfg = _cfg(study={"trials": 3, "confirm_top": 2, "confirm_rounds": 2})
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C in round 2, after its first sample
        # 3 arms: the top 2 and the baseline, within noise of each other (none leaves the race)
        _search(cfg, tmp_path, FakeMeasure(landscape=_close), observer=_CtrlCAfter(4))
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 't' / 'study.db'}")
    stored = study.user_attrs["confirmation"]
    arms = [*stored["stats"], stored["baseline"]]
    kept = {st["trial"]: st["samples"] for st in arms}
    # 4 samples kept, the cut told as it is
    assert stored["rounds_done"] == 1 and sorted(map(len, kept.values())) == [1, 1, 2]
    assert stored["rounds"] == 2 and stored["complete"] is False
    # written on the way out, as for any interruption, and saying it was cut
    best = yaml.safe_load((tmp_path / "t" / "best.yaml").read_text())
    assert (
        "1 of 2 interleaved rounds" in best["chosen"]["why"]
        and "cut short" in best["chosen"]["why"]
    )
    data = collect(study, tmp_path / "t")
    assert data.confirmation.complete is False
    shown = to_markdown(data)
    assert "1 of 2 confirmation rounds: cut" in shown
    assert "**Chosen (best.yaml)" in shown  # best.yaml was written on the way out
    (tmp_path / "t" / "best.yaml").unlink()  # as a search killed outright leaves it
    unwritten = to_markdown(collect(study, tmp_path / "t"))
    assert "Chosen (best.yaml)" not in unwritten and "Leading (confirmation cut)" in unwritten
    assert "run the same search command to finish it" in unwritten
    for command in ("check", "export"):  # what to run, not a bare "no such file"
        said = cli_here(command, str(tmp_path / "t" / "best.yaml"), cwd=tmp_path)
        assert said.returncode == 2 and "has not written it yet" in said.stderr
        assert "run the same `autotune search` command to finish and write it" in said.stderr
    watch, fake = _CtrlCAfter(0), FakeMeasure(landscape=_close)
    again = _search(cfg, tmp_path, fake, observer=watch)
    assert watch.kept == 4 and watch.seen == 2  # only the missing samples were measured
    missing = [n for n, s in kept.items() if len(s) == 1]
    assert [(c.number, c.run_dir.name) for c in fake.calls] == [
        (n, f"confirm-{n:04d}-1") for n in missing
    ]
    conf = again.confirmation
    assert conf.rounds_done == 2 and conf.complete is True
    for st in [*conf.stats, conf.baseline]:
        assert len(st.samples) == 2
        # nothing measured was lost
        assert st.samples[: len(kept[st.trial])] == kept[st.trial]
    runs = sorted(
        p.name for p in (tmp_path / "t" / "runs").iterdir() if p.name.startswith("confirm-")
    )
    assert len(runs) == 6
    assert (tmp_path / "t" / "best.yaml").exists()


def test_search_stores_each_status_in_the_state_the_sampler_learns_from() -> None:
    assert {s: optuna_state(s).name for s in STATUSES} == {
        "ok": "COMPLETE",
        "pruned": "PRUNED",
        "over_limit": "PRUNED",
        "oom": "PRUNED",
        "invalid_config": "PRUNED",
        "nonfinite_loss": "PRUNED",
        "timeout": "FAIL",
        "crash": "FAIL",
    }
    assert set(CONFIG_FAILURES) == {"oom", "invalid_config", "nonfinite_loss"}


def test_search_objective_declares_directions_and_values() -> None:
    """Each study.objective is one typed Objective: Optuna's directions, whether trials may be
    pruned, the values a completed trial is told; the config takes exactly these names."""
    from typing import get_args

    from autotune.documents.record import Metric
    from autotune.tasks._objective import Value

    assert set(get_args(tasks.ObjectiveName)) == set(tasks.OBJECTIVES)
    speed, pareto = tasks.objective("tokens_per_s"), tasks.objective("pareto")
    assert (speed.directions, speed.single) == (["maximize"], True)
    assert (pareto.directions, pareto.single) == (["maximize", "minimize"], False)
    record = TrialRecord(
        0, {}, "ok", metrics={Metric.TOKENS_PER_GPU: 10.0, Metric.TPOT_P99_MS: 2.5}
    )
    assert (speed.of(record), pareto.of(record)) == (10.0, (10.0, 2.5))
    assert pareto.named([1234.56, 2.34567]) == {
        Metric.TOKENS_PER_GPU: 1234.6,
        Metric.TPOT_P99_MS: 2.346,
    }
    assert [o.name for o in tasks.task("generate").objectives] == ["tokens_per_s", "pareto"]
    with pytest.raises(ValueError, match=r"objective ttft: its first value must be tokens_per_s"):
        tasks.Objective("ttft", "", (Value(Metric.TTFT_MS, "minimize", "TTFT", 1),))


def test_search_sampler_steers_away_from_a_configuration_that_cannot_run() -> None:
    """Our sampler, fed trials as our search stores them (a refused value PRUNED, as NCCL_ALGO=Tree
    was refused on 2x H200), proposes the refused value in at most 30% of the trials after its
    start-up trials."""
    from optuna.distributions import CategoricalDistribution as Cat

    dists = {
        "micro_batch_size": Cat([32, 64]),
        "nccl_algo": Cat(["default", "Ring", "Tree"]),
        "bucket_cap_mb": Cat([25, 100]),
        "nccl_proto": Cat(["default", "Simple", "LL", "LL128"]),
    }
    picks = 0
    for seed in range(4):
        study = optuna.create_study(direction="maximize", sampler=make_sampler("tpe", seed, 16))
        for i in range(30):
            t = study.ask(dists)
            if t.params["nccl_algo"] == "Tree":
                picks += i >= 5
                study.tell(t, state=optuna_state("invalid_config"))
            else:
                study.tell(t, 480.0 + 10 * (t.params["micro_batch_size"] == 64) + (i % 7) / 7)
    assert picks <= 0.3 * 25 * 4, picks


def test_study_warm_start_measures_only_what_is_new(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    first = _cfg(
        name="a",
        space={"micro_batch_size": [2, 4], "precision": "fp32"},
        baseline={},
        study={"trials": 2},
    )
    _search(first, tmp_path)
    wider = _cfg(
        name="b",
        space={"micro_batch_size": [2, 4, 8], "precision": "fp32"},
        baseline={},
        study={"trials": 1},
    )
    fake = FakeMeasure()
    result = _search(wider, tmp_path, fake, warm_start_from=tmp_path / "a")
    trials = _trials(tmp_path, "b")
    copied = [t for t in trials if "warm_start" in t.user_attrs]
    assert sorted(t.params["micro_batch_size"] for t in copied) == [2, 4]
    assert [
        t.params["micro_batch_size"]
        for t in trials
        if t.user_attrs.get("status") == "ok" and "warm_start" not in t.user_attrs
    ] == [8]  # only the new point was measured
    assert [c.knobs["micro_batch_size"] for c in fake.calls] == [8]
    assert result.history.launched == 1 and len(result.history.completed) == 3
    other_model = _cfg(
        name="c",
        model={"n_layers": 2},
        space={"micro_batch_size": [2, 4], "precision": "fp32"},
        baseline={},
        study={"trials": 1},
    )
    with pytest.raises(
        ConfigError,
        match=r"--warm-start: .* measured another model \(model\.n_layers: 1 there, 2 here\)",
    ):
        _search(other_model, tmp_path, warm_start_from=tmp_path / "a")
    assert not (tmp_path / "c").exists()  # refused before anything was written


@pytest.mark.slow
def test_study_compile_cache_outlives_the_study(tmp_path: Path, monkeypatch) -> None:
    """study.compile_cache: compiled programs go to one folder a second study finds (a subfolder per
    device and torch version), not into the study."""
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    shared = tmp_path / "cache"
    for name in ("a", "b"):
        cfg = _cfg(
            name=name,
            space={"micro_batch_size": [2], "precision": "fp32", "compile": True},
            baseline={},
            study={"trials": 1, "compile_cache": str(shared)},
        )
        assert run_search(cfg, out_root=tmp_path / "out", device="cpu").history.completed
    (key,) = [p.name for p in shared.iterdir()]
    assert key.startswith("cpu-torch2.") and any((shared / key).rglob("*"))
    assert not (tmp_path / "out" / "a" / "inductor-cache").exists()


def test_study_repeat_told_as_the_trial_it_repeats(tmp_path: Path, monkeypatch) -> None:
    """A proposal of a measured configuration is never launched; it is told as the trial it repeats
    ended (Optuna's FAQ for repeated parameters), with a reason, never an empty FAIL."""
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    cfg = _cfg(study={"trials": 6, "extend_edges": False})
    fake = FakeMeasure()
    _search(cfg, tmp_path, fake)
    trials = {t.number: t for t in _trials(tmp_path)}
    repeats = [t for t in trials.values() if t.user_attrs.get("status") == "duplicate"]
    assert repeats and len(fake.calls) == 6
    for t in repeats:
        first = trials[t.user_attrs["duplicate_of"]]
        assert t.state == first.state == optuna.trial.TrialState.COMPLETE
        assert t.values == first.values
        assert t.user_attrs["reason"] == (
            f"not launched: the same configuration as trial {first.number}, measured; told its "
            "value"
        )


def test_study_warm_start_from_a_study_with_repeats(tmp_path: Path, monkeypatch) -> None:
    """A repeat is told COMPLETE as the trial it repeats but measured nothing: it has no
    fingerprint, and a warm start from its study neither refuses it nor copies it."""
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    _search(_cfg(name="a", study={"trials": 6, "extend_edges": False}), tmp_path)
    source = _trials(tmp_path, "a")
    assert any(t.user_attrs.get("status") == "duplicate" for t in source)
    again = _cfg(name="b", study={"trials": 6, "extend_edges": False})
    fake = FakeMeasure()
    _search(again, tmp_path, fake, warm_start_from=tmp_path / "a")
    copied = [t for t in _trials(tmp_path, "b") if "warm_start" in t.user_attrs]
    measured = [t for t in source if t.user_attrs.get("status") == "ok"]
    assert len(copied) == len(measured) and fake.calls == []
