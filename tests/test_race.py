"""The confirmation's race (search/race.py, search/confirm.py): arms that separate from the leader
leave once they do (after one round, the noise pooled over the arms and their search trials), ties
run to the rounds asked, a lone winner gets its own interval, the cheaper program wins within
noise, and the runner-up is named with its cost."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from conftest import tiny
from fake_measure import FakeMeasure

from autotune.documents.confirmation import Arm
from autotune.job import parse_config
from autotune.report import collect, to_markdown
from autotune.search import race, run_search
from autotune.study.load import load_study


def test_race_separated_only_from_two_samples_a_side_with_an_interval_below_one() -> None:
    assert race.separated([90.0], [100.0]) is None  # one sample: the noise is unknown
    why = race.separated([90.0, 90.5], [100.0, 100.4])
    assert why is not None and why.startswith("9.9% slower (ratio 95% interval 0.")
    assert race.separated([99.0, 101.0], [100.0, 100.5]) is None  # tied


def test_race_drops_the_separated_and_the_failed() -> None:
    samples = {1: [100.0, 101.0], 2: [99.5, 100.8], 3: [80.0, 80.5], 9: [60.0, 60.2], 4: []}
    failures = {1: [], 2: [], 3: [], 9: [], 4: ["oom: x", "oom: y"]}
    out = race.drops(samples, failures, [1, 2, 3, 4, 9])
    assert set(out) == {3, 4, 9}  # 2 is tied with the leader; the baseline (9) separated
    assert out[4] == "failed in 2 processes"
    # no arm measured: nobody leaves (the race runs its rounds), never an empty race
    nothing = {1: [], 9: []}
    assert race.drops(nothing, {1: ["crash: x"] * 2, 9: ["crash: y"] * 2}, [1, 9]) == {}


def _st(trial: int, samples: list[float], **knobs: Any) -> Arm:
    return Arm.from_json(
        {
            "trial": trial,
            "samples": samples,
            "median": sorted(samples)[len(samples) // 2],
            "knobs": {"compile": True, **knobs},
            "changed_knobs": ["compile"],
            "search_compile_s": 131.0 if knobs.get("compile_scope") != "block" else 6.0,
        }
    )


def test_race_pick_prefers_the_cheaper_program_within_noise_and_names_the_runner_up() -> None:
    whole = _st(13, [100.6, 100.2, 100.9], compile_scope="model")
    block = _st(7, [100.0, 100.3, 99.8], compile_scope="block")
    chosen, top, close = race.pick([whole, block])
    assert chosen is block and top is whole and len(close) == 2
    runner = race.runner_up(chosen, [whole, block])
    assert runner is not None
    assert runner.trial == 13 and runner.within_noise and 0 < runner.gap_pct < 1
    assert (runner.compile_s, runner.chosen_compile_s) == (131.0, 6.0)


def _landscape(knobs: dict[str, Any]) -> float:
    """micro-batch 8 and 4 bf16 tied, everything else far behind."""
    if knobs.get("precision") == "bf16" and knobs["micro_batch_size"] in (4, 8):
        return 2000.0 + knobs["micro_batch_size"]
    return 1000.0 + 10 * knobs["micro_batch_size"]


@pytest.mark.parametrize("rounds", [3, 4])
def test_race_runs_ties_to_the_rounds_asked_and_drops_the_rest(
    tmp_path: Path, monkeypatch, rounds: int
) -> None:
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    cfg = parse_config(
        tiny(study={"trials": 6, "confirm_top": 3, "confirm_rounds": rounds, "extend_edges": False})
    )
    fake = FakeMeasure(landscape=_landscape, noise=0.01)
    result = run_search(cfg, out_root=tmp_path, device="cpu", measure_fn=fake)
    conf = result.confirmation
    stats = {st.trial: st for st in conf.stats}
    tied = [n for n, st in stats.items() if st.dropped is None]
    gone = [n for n, st in stats.items() if st.dropped is not None]
    assert len(tied) == 2 and len(gone) == 1
    # far behind: out after one round, the race's noise pooled over every arm's search trial and
    # first confirmation process (race.race_spread)
    assert stats[gone[0]].dropped.round == 1 and len(stats[gone[0]].samples) == 1
    assert all(len(stats[n].samples) == rounds for n in tied)
    assert conf.complete and conf.rounds_done == rounds
    # the baseline (fp32, 2) separated too, after the two samples that bound the gain
    assert conf.baseline.dropped.round == 2
    confirm_runs = [c for c in fake.calls if c.run_dir.name.startswith("confirm-")]
    assert len(confirm_runs) == 4 + 3 + 2 * (rounds - 2)
    text = to_markdown(collect(load_study(tmp_path / "t", None, None)[0], tmp_path / "t"))
    assert "left the race after round 1" in text and "Runner-up: trial" in text


def test_race_decided_gives_the_winner_its_third_sample(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    cfg = parse_config(
        tiny(study={"trials": 6, "confirm_top": 3, "confirm_rounds": 5, "extend_edges": False})
    )
    result = run_search(cfg, out_root=tmp_path, device="cpu", measure_fn=FakeMeasure(noise=0.01))
    conf = result.confirmation
    winner = next(st for st in conf.stats if st.trial == conf.chosen)
    assert conf.decided and conf.complete and len(winner.samples) == 3
    assert winner.ci95 is not None  # its own interval: what check compares against
    assert all(st.dropped for st in conf.stats if st is not winner)


def test_race_a_lone_winner_where_your_setting_did_not_fit_gets_its_interval(
    tmp_path: Path, monkeypatch
) -> None:
    """Issue 61's H100 run: your setting ran out of memory and one configuration completed, the
    rest pruned: no confirmation ran, so the last word had no interval. The lone winner is now
    measured in fresh processes until its figure has one."""
    monkeypatch.setenv("AUTOTUNE_FAULT", "oom@micro_batch_size>=8")
    cfg = parse_config(
        tiny(
            space={"micro_batch_size": [4, 8], "precision": ["fp32"]},
            baseline={"micro_batch_size": 8},
            study={"trials": 2, "sampler": "grid", "confirm_top": 3, "confirm_rounds": 3},
        )
    )
    measure = FakeMeasure(noise=0.01)
    result = run_search(cfg, out_root=tmp_path, device="cpu", measure_fn=measure)
    conf = result.confirmation
    assert conf is not None and conf.baseline is None
    (lone,) = conf.stats
    assert lone.trial == conf.chosen and len(lone.samples) == 3
    assert lone.ci95 is not None


def _spread_out(knobs: dict[str, Any]) -> float:
    """Three leaders 5% apart, everything else (the baseline too) far behind."""
    if knobs.get("precision") == "bf16":
        return {2: 1800.0, 4: 1900.0, 8: 2000.0}.get(knobs["micro_batch_size"], 1000.0)
    return 1000.0


def test_race_settles_arms_far_apart_in_one_round_and_the_leader_s_interval(
    tmp_path: Path, monkeypatch
) -> None:
    """Issue 64: the race spends what separates the arms. With the noise pooled over every arm's
    search trial and first confirmation process, arms 5% apart separate after one round; the
    leader then gets its interval and your setting its second sample (it bounds the gain): 5
    processes for the top 3, 7 with your setting's."""
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    cfg = parse_config(
        tiny(study={"trials": 6, "confirm_top": 3, "confirm_rounds": 3, "extend_edges": False})
    )
    fake = FakeMeasure(landscape=_spread_out, noise=0.01)
    result = run_search(cfg, out_root=tmp_path, device="cpu", measure_fn=fake)
    conf = result.confirmation
    assert conf.decided and conf.complete
    confirm_runs = [c for c in fake.calls if c.run_dir.name.startswith("confirm-")]
    top3 = [c for c in confirm_runs if c.number != conf.baseline.trial]
    assert (len(top3), len(confirm_runs)) == (5, 7)
    winner = next(st for st in conf.stats if st.trial == conf.chosen)
    assert len(winner.samples) == 3 and winner.ci95 is not None


def test_race_pooled_noise_widens_where_a_search_figure_ran_off() -> None:
    """A search trial that ran slow (a cold GPU, the first trial) is one more sample of its arm: it
    widens the race's noise, so the race measures more, never decides on it."""
    samples = {1: [100.0], 2: [96.0], 3: [60.0]}
    none: dict[int, list[str]] = {1: [], 2: [], 3: []}
    alike = {1: 100.4, 2: 96.3, 3: 60.1}
    assert set(race.drops(samples, none, [1, 2, 3], alike)) == {2, 3}
    off = {1: 100.4, 2: 96.3, 3: 51.0}  # a search trial 15% slow
    assert set(race.drops(samples, none, [1, 2, 3], off)) == {3}
    assert race.drops(samples, none, [1, 2, 3], alike, baseline=3) == {
        2: race.drops(samples, none, [1, 2, 3], alike)[2]
    }
    assert race.drops(samples, none, [1, 2, 3]) == {}  # no pool: two samples a side


def test_race_pooled_interval_is_student_s_over_the_pooled_log_spread() -> None:
    spread = race.pooled([[100.0, 102.0], [90.0, 91.0, 89.0], [50.0]])
    assert spread.df == 3  # a lone sample adds no degree of freedom
    lo, hi = race.pooled_interval([90.0], [100.0], spread)  # type: ignore[misc]
    from scipy.stats import t as student_t

    logs = [[math.log(x) for x in g] for g in ([100.0, 102.0], [90.0, 91.0, 89.0])]
    squares = sum((x - sum(g) / len(g)) ** 2 for g in logs for x in g)
    half = student_t.ppf(0.975, 3) * math.sqrt(squares / 3) * math.sqrt(2)
    assert lo == pytest.approx(0.9 * math.exp(-half)) and hi == pytest.approx(0.9 * math.exp(half))
    assert race.pooled_interval([90.0], [100.0], race.Spread(squares, 2)) is None  # too few df
