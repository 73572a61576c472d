"""The trial protocol: the spec and result the parent and the trial exchange as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.protocol import RunSettings, TrialResult, TrialSpec


def test_protocol_spec_round_trips_through_json() -> None:
    spec = TrialSpec(
        task="train",
        device="cpu",
        knobs={"micro_batch_size": 4},
        model={"family": "gpt"},
        run=RunSettings(warmup_steps=2, world_size=2),
        base_dir="/x",
        launched_at=1.5,
    )
    again = TrialSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert again == spec and isinstance(again.run, RunSettings) and again.run.world_size == 2


def test_protocol_unknown_keys_fail_loudly(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="spec: unknown key 'moduel'"):
        TrialSpec.from_json({"task": "train", "device": "cpu", "moduel": "x"})
    with pytest.raises(ValueError, match="spec.run: unknown key 'warmup'"):
        TrialSpec.from_json({"task": "train", "device": "cpu", "run": {"warmup": 1}})
    (tmp_path / "r.json").write_text('{"status": "ok", "rows": []}')
    with pytest.raises(ValueError, match="result: unknown key 'rows'"):
        TrialResult.read(tmp_path / "r.json")


def test_protocol_result_status_is_one_of_the_statuses(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="status 'fine' is not one of ok, pruned, over_limit, oom"):
        TrialResult("fine")
    TrialResult("oom", "CUDA out of memory").write(tmp_path / "r.json")
    assert TrialResult.read(tmp_path / "r.json") == TrialResult("oom", "CUDA out of memory")
    assert not (tmp_path / "r.json.tmp").exists()  # written atomically
