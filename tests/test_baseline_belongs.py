"""A best.yaml edited after its baseline was measured (another model, world size or knob, each still
valid) is refused by check, not measured against the old numbers; --reset-baseline records a
baseline of it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import run_cli, tiny


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
        run_cli("check", str(best), "--reset-baseline", "--repeats", "2", cwd=tmp_path).returncode
        == 0
    )
    # the load: not judged
    proc = run_cli("check", str(best), "--repeats", "2", "--max-load", "0", cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr  # measured and decided against its own baseline
