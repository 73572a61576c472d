"""documents/identity.py: a study is named by what differs from the defaults, so an upgrade that
adds a knob costs nothing.

The fixtures under tests/data/studies/ were made by autotune before identities existed (2026-12-01):
fixture-v0 by that release, fixture-older by it with the knob fsdp_backward_prefetch taken out of
the catalogue (make_older.py), as a release from before that knob would have; fixture-v3 by the
release of 2026-12-03 (9320a0d: best.yaml schema 3, base_dir relative), before best.yaml's reader
moved to documents/ and the loop to ask-and-tell. Each must resume, warm-start and check.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from conftest import cli_here, load_trials, tiny

from autotune.documents import identity
from autotune.documents.best_file import Upgraded, read_best
from autotune.job import parse_config
from autotune.study.history import key
from autotune.tasks import check_workload

FIXTURES = Path(__file__).parent / "data" / "studies"


def test_identity_leaves_out_what_is_at_its_default() -> None:
    plain = parse_config(tiny()).model_dump(mode="json")
    spelled = parse_config(
        tiny(
            space={"activation_checkpointing": "none", "fused_optimizer": [False]},
            workload={"seed": 0},
        )
    ).model_dump(mode="json")
    assert identity.digest(plain) == identity.digest(spelled)
    assert identity.difference(plain, spelled) is None
    older = {
        **plain,
        "space": {k: v for k, v in plain["space"].items() if k != "fsdp_backward_prefetch"},
    }
    # a release without that knob: the same study
    assert identity.digest(older) == identity.digest(plain)


def test_identity_names_the_first_factor_that_differs() -> None:
    a = parse_config(tiny()).model_dump(mode="json")
    b = parse_config(tiny(space={"precision": ["fp32", "fp16"]})).model_dump(mode="json")
    assert (
        identity.difference(a, b)
        == 'space.precision: ["fp32", "bf16"] there, ["fp32", "fp16"] here'
    )
    c = parse_config(tiny(model={"n_layers": 2})).model_dump(mode="json")
    assert identity.difference(a, c).startswith("model.n_layers: ")
    assert identity.digest(a) == identity.digest(
        parse_config(tiny(study={"trials": 99})).model_dump(mode="json")
    )


def test_identity_of_a_trial_leaves_out_knobs_at_their_defaults() -> None:
    assert key({"micro_batch_size": 8, "fsdp_backward_prefetch": 1, "parallel": None}) == key(
        {"micro_batch_size": 8}
    )
    assert key({"micro_batch_size": 8, "fsdp_backward_prefetch": 2}) != key({"micro_batch_size": 8})
    # a value of another type is not the default
    assert key({"compile": 0}) != key({"compile": False})


def _copy(tmp_path: Path, name: str) -> Path:
    """The fixture study as a user has it: the YAML beside trials/<name>/ (study.db, best.yaml)."""
    study = tmp_path / "trials" / name
    study.mkdir(parents=True)
    for f in ("study.db", "best.yaml"):
        shutil.copy(FIXTURES / name / f, study / f)
    shutil.copy(FIXTURES / name / f"{name}.yaml", tmp_path / f"{name}.yaml")
    return study


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fixture-v0", "fixture-older", "fixture-v3"])
def test_identity_a_study_from_before_resumes(tmp_path: Path, name: str) -> None:
    """The study resumes: its 3 trials count as measured, and its one new trial is the one point of
    the space none of them measured (their identities read right: none measured again). What is
    tested is the search's reading of the older study, so the new trial ends at its start
    (AUTOTUNE_FAULT=error): measured, that point (bf16 on the CPU) takes 20 to 60 s. A new trial
    measured beside older ones: test_identity_fresh_warm_start_from_the_study_it_archives."""
    _copy(tmp_path, name)
    # its best sits at the end of its list: no step past it here (tests/test_edges.py), so the new
    # trial is the list's unmeasured point
    doc = yaml.safe_load((tmp_path / f"{name}.yaml").read_text())
    doc["study"]["extend_edges"] = False
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    proc = cli_here(
        "search",
        f"{name}.yaml",
        "--trials",
        "4",
        "--device",
        "cpu",
        cwd=tmp_path,
        env={"AUTOTUNE_FAULT": "error"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "(3 already measured)" in proc.stdout
    assert "1 new trial(s)" in proc.stdout.replace("\n", " ")
    new = load_trials(tmp_path / "trials", name)[-1]
    assert new.params == {"micro_batch_size": 4, "precision": "bf16"}, new.params
    assert "AUTOTUNE_FAULT=error" in new.user_attrs["reason"], new.user_attrs["reason"]


def _widened(tmp_path: Path) -> None:
    """fixture-older's YAML, same name, with micro_batch_size 16 added to the space."""
    doc = yaml.safe_load((FIXTURES / "fixture-older" / "fixture-older.yaml").read_text())
    doc["space"]["micro_batch_size"] = [4, 8, 16]
    doc["study"]["trials"] = 1
    (tmp_path / "fixture-older.yaml").write_text(yaml.safe_dump(doc))


def test_identity_a_widened_space_is_refused_naming_the_warm_start(tmp_path: Path) -> None:
    _copy(tmp_path, "fixture-older")
    _widened(tmp_path)
    proc = cli_here("search", "fixture-older.yaml", "--device", "cpu", cwd=tmp_path)
    assert proc.returncode == 2
    assert (
        "run with --fresh --warm-start trials/fixture-older to start anew from its 4 trials"
        in " ".join(proc.stderr.split())
    ), proc.stderr


@pytest.mark.slow
def test_identity_fresh_warm_start_from_the_study_it_archives(tmp_path: Path) -> None:
    # the remedy the refusal names, from a study made before a knob existed: the same name, widened
    _copy(tmp_path, "fixture-older")
    _widened(tmp_path)
    proc = cli_here(
        "search",
        "fixture-older.yaml",
        "--fresh",
        "--warm-start",
        "trials/fixture-older",
        "--device",
        "cpu",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "3 imported by --warm-start" in proc.stdout.replace("\n", " "), proc.stdout
    assert [
        p.name.startswith("fixture-older.archived-") for p in (tmp_path / "trials").iterdir()
    ].count(True) == 1
    # the new point measured beside the older study's trials
    new = load_trials(tmp_path / "trials", "fixture-older")[-1]
    assert new.params["micro_batch_size"] == 16, new.params
    assert new.user_attrs["status"] == "ok", new.user_attrs["reason"]


def test_identity_an_older_best_yaml_is_upgraded_on_read(tmp_path: Path) -> None:
    study = _copy(tmp_path, "fixture-older")
    doc = read_best(study / "best.yaml", check_workload).doc
    # neither acts: one rank, compile off
    added = {"fsdp_backward_prefetch": None, "compile_dynamic": None}
    assert doc.upgraded == Upgraded(from_schema=1, knobs_added=added)
    # one rank: the knob cannot act, as a search writes it
    assert doc.knobs["fsdp_backward_prefetch"] is None
    edited = yaml.safe_load((study / "best.yaml").read_text())
    # a current file whose knob list was edited
    edited.update(schema_version=2, knob_set="000000000000")
    del edited["knobs"]["compile"]
    (study / "best.yaml").write_text(yaml.safe_dump(edited))
    with pytest.raises(Exception, match="knobs: compile is missing"):
        read_best(study / "best.yaml", check_workload)


@pytest.mark.parametrize("name", ["fixture-v0", "fixture-older", "fixture-v3"])
def test_identity_every_layout_reads_as_the_typed_document(name: str) -> None:
    """schema 1 (fixture-v0, fixture-older) and 3 (fixture-v3) read as one typed document: each
    section an attribute, the model, workload and command as autotune.config types them."""
    best = read_best(FIXTURES / name / "best.yaml", check_workload)
    doc = best.doc
    assert (doc.name, doc.chosen.trial, doc.fingerprint.device) == (name, 1, "cpu")
    assert doc.metrics.tokens_per_s_per_gpu > 0 and doc.metrics.tpot_ms_median is None
    assert (doc.measurement.warmup_steps, doc.measurement.measure_steps) == (1, 3)
    assert doc.apply is not None and doc.apply.env == {} and doc.check_baseline is None
    assert doc.study is not None and doc.study.trials_completed == 3
    assert best.workload.task == "train" and best.workload.global_batch_size == 32
    assert best.model is not None and best.model.family == "gpt" and best.command is None
    assert best.base_dir is not None and Path(best.base_dir).is_absolute()
    assert doc.knobs["micro_batch_size"] * doc.knobs["grad_accum_steps"] == 32
    # the knobs added since schema 1, filled in as its search would have written them
    assert (doc.upgraded is None) == (name == "fixture-v3")


@pytest.mark.slow
def test_identity_check_of_an_older_best_yaml_measures_it(tmp_path: Path) -> None:
    """An older best.yaml (no digest) is not compared with its search's numbers (issue 52); its
    --reset-baseline measures it, knobs added since filled in, and check then judges it."""
    study = _copy(tmp_path, "fixture-older")
    args = ("--repeats", "2", "--max-repeats", "0", "--max-load", "0")
    proc = cli_here("check", str(study / "best.yaml"), *args, cwd=tmp_path)
    assert proc.returncode == 2 and "--reset-baseline" in proc.stderr, proc.stderr
    # any spread, the load unjudged: this shared CPU's processes are what they are (issue 62)
    reset = cli_here(
        "check",
        str(study / "best.yaml"),
        "--reset-baseline",
        *args,
        "--tolerance",
        "100",
        cwd=tmp_path,
    )
    assert reset.returncode == 0, reset.stderr
    assert (
        yaml.safe_load((study / "best.yaml").read_text())["knobs"]["fsdp_backward_prefetch"] is None
    )
    proc = cli_here("check", str(study / "best.yaml"), *args, cwd=tmp_path)
    # measured and judged: pass, regression or inconclusive (the CPU's speed is not the question)
    assert proc.returncode in (0, 1, 5), proc.stderr
