"""A best.yaml edited after its baseline was measured (another model, world size or knob, each still
valid) is refused by check, not measured against the old numbers; --reset-baseline records a
baseline of it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from conftest import run_cli, tiny

from autotune.documents.best_file import measured_digest, read_best, record_check_baseline
from autotune.tasks import check_workload

FIXTURES = Path(__file__).parent / "data" / "studies"


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("belongs")
    path = root / "t.yaml"
    path.write_text(
        yaml.safe_dump(
            tiny(space={"micro_batch_size": [2, 4], "precision": "fp32"}, study={"trials": 2})
        )
    )
    proc = run_cli("search", str(path), "--out", str(root / "out"), "--device", "cpu", cwd=root)
    assert proc.returncode == 0, proc.stderr
    return root / "out" / "t"


def _edited(study: Path, tmp_path: Path, edit) -> Path:
    folder = tmp_path / "t"
    folder.mkdir()
    doc = yaml.safe_load((study / "best.yaml").read_text())
    edit(doc)
    (folder / "best.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return folder / "best.yaml"


@pytest.mark.slow
@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["model"].update(n_layers=d["model"]["n_layers"] + 1),
        lambda d: d["workload"].update(measure_steps=d["workload"]["measure_steps"] + 1),
        lambda d: d["knobs"].update(precision="bf16"),
    ],
    ids=["model", "workload", "knob"],
)
def test_baseline_belongs_to_what_is_measured(study: Path, tmp_path: Path, edit) -> None:
    best = _edited(study, tmp_path, edit)
    proc = run_cli("check", str(best), "--repeats", "2", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        "were edited after its baseline was measured" in proc.stderr
        and "--reset-baseline" in proc.stderr
    )
    assert not (best.parent / "checks").exists()  # refused before anything ran


@pytest.mark.slow
def test_baseline_belongs_a_reset_baseline_records_one_for_the_edit(
    study: Path, tmp_path: Path
) -> None:
    best = _edited(study, tmp_path, lambda d: d["knobs"].update(precision="bf16"))
    assert (
        run_cli(
            "check",
            str(best),
            # any spread, the load unjudged: this shared CPU's processes are as they are (issue 62)
            *("--reset-baseline", "--repeats", "2", "--tolerance", "100", "--max-load", "0"),
            cwd=tmp_path,
        ).returncode
        == 0
    )
    # the load: not judged
    proc = run_cli(
        "check", str(best), "--repeats", "2", "--max-repeats", "0", "--max-load", "0", cwd=tmp_path
    )
    # measured and judged against its own baseline: pass, regression or inconclusive
    assert proc.returncode in (0, 1, 5), proc.stderr


@pytest.mark.parametrize("name", ["fixture-v0", "fixture-older", "fixture-v3"])
def test_baseline_belongs_digest_of_the_typed_file_is_the_mapping_s(name: str) -> None:
    """The digest of a typed document (older layouts upgraded on read) is the one search/best.py
    takes of the mapping; fixture-v3's recorded digest (schema 3) covered less, so it differs."""
    path = FIXTURES / name / "best.yaml"
    assert read_best(path, check_workload).doc.digest() == measured_digest(
        yaml.safe_load(path.read_text())
    )
    written = yaml.safe_load((FIXTURES / "fixture-v3" / "best.yaml").read_text())["measured"]
    assert written == "65fece6f9493d17b" != read_best(path, check_workload).doc.digest()


def test_baseline_belongs_a_recorded_baseline_keeps_the_file_as_read(tmp_path: Path) -> None:
    """record_check_baseline writes the typed document back as it was read: every key in its place
    (an unknown section too), check_baseline added at the end; a second record replaces it in
    place and keeps its series."""
    text = (FIXTURES / "fixture-v3" / "best.yaml").read_text()
    mine = "my_notes:\n  kept: true\n"
    text = text.replace("study:\n", mine + "study:\n")  # someone's own section, mid-file
    path = tmp_path / "trials" / "fixture-v3" / "best.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    fingerprint = {"device": "cpu", "gpu_model": "x86_64"}
    first = "2026-12-05T10:00:00+00:00"
    record_check_baseline(
        path, read_best(path, check_workload).doc, [1000.5, 999.0], first, fingerprint, reset=True
    )
    measured = read_best(
        path, check_workload
    ).doc.baseline_digest()  # written in this release's layout
    assert path.read_text() == text.replace("schema_version: 3", "schema_version: 4") + (
        "check_baseline:\n  tokens_per_s_samples:\n  - 1000.5\n  - 999.0\n"
        f"  recorded_at: '{first}'\n  fingerprint:\n    device: cpu\n    gpu_model: x86_64\n"
        f"  measured: {measured}\n  series_from: '{first}'\n"
    )
    shutil.copy(path, tmp_path / "first.yaml")
    record_check_baseline(
        path, read_best(path, check_workload).doc, [1001.0], "2026-12-06", fingerprint
    )
    again = yaml.safe_load(path.read_text())
    assert list(again) == list(yaml.safe_load((tmp_path / "first.yaml").read_text()))
    recorded = read_best(path, check_workload).doc.check_baseline
    assert recorded is not None and recorded.tokens_per_s_samples == [1001.0]
    assert (recorded.series_from, recorded.measured) == (
        first,
        read_best(path, check_workload).doc.baseline_digest(),
    )
    assert again["my_notes"] == {"kept": True}
