"""Past the edge of the user's list (search/edges.py): the next value beyond the list, measured
while it gains and fits, marked in the live line, the report and best.yaml; why not, where not."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from conftest import run_cli, tiny
from fake_measure import FakeMeasure

from autotune.job import parse_config
from autotune.report import collect, to_markdown
from autotune.search import run_search
from autotune.search.edges import next_value, split
from autotune.space import resolve_space


def _space(**space: Any):
    cfg = parse_config(tiny(workload={"global_batch_size": 48}, space=space))
    return resolve_space(cfg, "cpu")


def test_edges_next_value_divides_the_global_batch_or_doubles() -> None:
    space = _space(micro_batch_size=[2, 4, 8], pad_vocab_multiple=[None, 32, 64])
    assert next_value(space, "micro_batch_size", 8, up=True) == (12, "")  # 48 = 4 x 12
    assert next_value(space, "micro_batch_size", 2, up=False) == (1, "")
    nothing, why = next_value(space, "micro_batch_size", 48, up=True)
    assert nothing is None and why == (
        "no larger micro_batch_size divides the global batch per rank (48)"
    )
    assert next_value(space, "pad_vocab_multiple", 64, up=True) == (128, "")
    # a value past the list stands as the list's end in Optuna's params, itself beside them
    params, beyond = split(space, {"micro_batch_size": 12, "precision": "bf16"})
    assert params == {"micro_batch_size": 8, "precision": "bf16"}
    assert beyond == {"micro_batch_size": 12}


def _peak_at_16(knobs: dict[str, Any]) -> float:
    """Tokens/s growing with the micro-batch up to 16, falling after it."""
    mbs = int(knobs["micro_batch_size"])
    return 1000.0 * (1 + math.log2(min(mbs, 16)) / 4) * (0.8 if mbs > 16 else 1.0)


def _cfg(**study: Any):
    return parse_config(
        tiny(
            workload={"global_batch_size": 32},
            space={"micro_batch_size": [2, 4, 8], "precision": ["fp32"]},
            study={"trials": 6, "confirm_top": 2, "confirm_rounds": 2, **study},
        )
    )


def test_edges_search_measures_past_the_list_while_it_gains(tmp_path: Path, monkeypatch) -> None:
    """The list stops at 8; 16 is faster and 32 slower: 16 is chosen, marked beyond the list in
    the study, best.yaml and the report; 32 was measured and the report says how it did."""
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    fake = FakeMeasure(landscape=_peak_at_16, noise=0.005)
    result = run_search(_cfg(), out_root=tmp_path, device="cpu", measure_fn=fake)
    measured = [c.knobs["micro_batch_size"] for c in fake.calls if c.run_dir.name[0].isdigit()]
    assert 16 in measured and 32 in measured and measured.index(16) < measured.index(32)
    best = yaml.safe_load(result.best_yaml.read_text())
    assert best["knobs"]["micro_batch_size"] == 16
    assert best["chosen"]["beyond_list"] == {"micro_batch_size": 16}
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path}/t/study.db")
    beyond = [t for t in study.trials if t.user_attrs.get("beyond_list")]
    # Optuna's parameter stays in the list (the sampler reads it as the list's end)
    assert {t.params["micro_batch_size"] for t in beyond} == {8}
    data = collect(study, tmp_path / "t")
    rows = {r.number: r for r in data.trials}
    assert all(rows[t.number].beyond_list for t in beyond)
    text = to_markdown(data)
    assert "16 (past list)" in text
    assert "micro_batch_size 32 measured (trial" in study.user_attrs["edges"]


def test_edges_report_says_why_not_when_the_next_size_runs_out_of_memory(
    tmp_path: Path, monkeypatch
) -> None:
    """16 runs out of memory: 8 stays chosen, and the report says why nothing past it was."""
    monkeypatch.setenv("AUTOTUNE_FAULT", "oom@micro_batch_size>=16")
    fake = FakeMeasure(landscape=_peak_at_16, noise=0.005)
    result = run_search(_cfg(), out_root=tmp_path, device="cpu", measure_fn=fake)
    best = yaml.safe_load(result.best_yaml.read_text())
    assert best["knobs"]["micro_batch_size"] == 8 and "beyond_list" not in best["chosen"]
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path}/t/study.db")
    note = study.user_attrs["edges"]
    assert "sits at the largest micro_batch_size (8); micro_batch_size 16 (trial" in note
    assert "oom" in note
    assert "Past the edge of your list" in to_markdown(collect(study, tmp_path / "t"))


def test_edges_off_measures_only_the_list(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("AUTOTUNE_FAULT", raising=False)
    fake = FakeMeasure(landscape=_peak_at_16, noise=0.005)
    run_search(_cfg(extend_edges=False), out_root=tmp_path, device="cpu", measure_fn=fake)
    assert max(c.knobs["micro_batch_size"] for c in fake.calls) == 8
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path}/t/study.db")
    assert "study.extend_edges is false" in study.user_attrs["edges"]


@pytest.mark.slow
def test_edges_real_cpu_search_past_a_short_list(tmp_path: Path, write_yaml) -> None:
    """A real search on the CPU (tiny model, trial processes): the list [2, 4] of a global batch of
    16 stops inside the sizes that fit. Wherever the best lands at an end of the list, the search
    measures past it (marked in the live view) or the report says why not; a size chosen beyond
    the list is marked in best.yaml and the report."""
    cfg = tiny(
        workload={"global_batch_size": 16, "warmup_steps": 1, "measure_steps": 3},
        space={"micro_batch_size": [2, 4], "precision": ["fp32"]},
        study={"trials": 4, "confirm_top": 0, "prestart": False},
    )
    path = write_yaml(cfg)
    done = run_cli("search", str(path), "--device", "cpu", cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    best = yaml.safe_load((tmp_path / "trials" / "t" / "best.yaml").read_text())
    report = run_cli("report", "trials/t", "--format", "markdown", cwd=tmp_path).stdout
    mbs = best["knobs"]["micro_batch_size"]
    if mbs not in (2, 4):
        assert best["chosen"]["beyond_list"] == {"micro_batch_size": mbs}
        assert "(past list)" in report and "past your list: micro_batch_size" in done.stdout
    # the best sits at an end of the list or past it: the report says what became of the next step
    assert "Past the edge of your list: trial" in report
