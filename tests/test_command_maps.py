"""A command knob's `map` (command/render.py): a whole number without an entry, a micro-batch past
the list's edge (search/edges.py) or the accumulation derived from it, renders through the pattern
the map's entries follow, or is not measured, with why; `validate` shows the baseline's trial's
command line and warns of a map entry that leaves out the flag it maps (issue 61, items 7 and 8)."""

from __future__ import annotations

import sys
from pathlib import Path

import optuna
import pytest
import yaml
from fake_measure import FakeMeasure
from typer.testing import CliRunner

from autotune.cli import app
from autotune.command.render import pattern, render, unrendered
from autotune.job import load, load_config
from autotune.search import edges
from autotune.search.run import run_search
from autotune.study.history import History

ROOT = Path(__file__).resolve().parent.parent
NANOGPT = ROOT / "tests" / "data" / "jobs" / "nanogpt_style.py"
# nanoGPT's configurator takes `--key=value` only: its maps give each listed value's text
BATCH = {
    "micro_batch_size": {
        "flag": "--batch_size",
        "map": {2: ["--batch_size=2"], 4: ["--batch_size=4"]},
    },
    "grad_accum_steps": {
        "flag": "--gradient_accumulation_steps",
        "map": {4: ["--gradient_accumulation_steps=4"], 8: ["--gradient_accumulation_steps=8"]},
    },
}


def _command(**knobs: dict) -> dict:
    return {"argv": ["python", "train.py"], "knobs": knobs}


def test_render_map_renders_a_value_past_its_entries_through_their_pattern() -> None:
    """32 and 2, no entries of the maps, as nanoGPT takes them; a typed key and a variable's text
    likewise; a listed value as its own entry."""
    knobs = {"micro_batch_size": 32, "grad_accum_steps": 2}
    argv = render(_command(**BATCH), knobs, None, Path(".")).argv
    assert argv[2:] == ["--batch_size=32", "--gradient_accumulation_steps=2"]
    assert render(_command(**BATCH), {"micro_batch_size": 4}, None, Path(".")).argv[2:] == [
        "--batch_size=4"
    ]
    keyed = {"key": "train.bs", "map": {8: 8, 16: 16}}
    assert pattern(keyed)[0] is not None
    keys = render(_command(micro_batch_size=keyed), {"micro_batch_size": 32}, None, Path("."))
    assert keys.overrides == {"train.bs": 32}
    env = {"env": "BS", "map": {1: "bs1", 10: "bs10"}}  # 1 in 10 is no hole
    out = render(_command(micro_batch_size=env), {"micro_batch_size": 100}, None, Path("."))
    assert out.env["BS"] == "bs100"


def test_render_unrendered_says_why_a_map_without_one_pattern_cannot_render_a_value() -> None:
    odd = {"flag": "--bs", "map": {2: ["--bs=2"], 4: ["--big"]}}
    why = unrendered(_command(micro_batch_size=odd), {"micro_batch_size": 8})
    assert why.startswith("command.knobs.micro_batch_size.map has no entry for 8 and its entries")
    assert why.endswith(
        "follow no one pattern of their value (such as 8: [--batch_size=8], 16: "
        "[--batch_size=16]); add 8: [...] to it"
    )
    assert unrendered(_command(micro_batch_size=odd), {"micro_batch_size": 4}) == ""
    assert unrendered(_command(**BATCH), {"micro_batch_size": 8, "grad_accum_steps": 2}) == ""


def _job(tmp_path: Path, knobs: dict, trials: int = 3) -> Path:
    doc = {
        "name": "nano",
        "workload": {
            "task": "command",
            "global_batch_size": 16,
            "warmup_steps": 1,
            "measure_steps": 3,
        },
        "command": {"argv": ["{python}", str(NANOGPT)], "max_steps": 8, "knobs": knobs},
        "space": {"micro_batch_size": [2, 4]},
        "study": {"trials": trials, "seed": 0, "confirm_top": 0, "prestart": False},
    }
    path = tmp_path / "nano.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_edges_step_that_the_map_cannot_render_is_noted_not_measured(tmp_path: Path) -> None:
    """The best sits at micro-batch 4, the list's end: 8 has no entry in a map of no one pattern,
    so no step is asked (in-process, a fake measurement), and the note (the report's) says why."""
    odd = {**BATCH, "micro_batch_size": {"flag": "--bs", "map": {2: ["--bs=2"], 4: ["--big"]}}}
    fake = FakeMeasure(landscape=lambda knobs: 100.0 * knobs["micro_batch_size"], noise=0.0)
    cfg = load_config(_job(tmp_path, odd, trials=4))
    run_search(cfg, out_root=tmp_path / "t", device="cpu", measure_fn=fake)
    assert sorted(c.knobs["micro_batch_size"] for c in fake.calls) == [2, 4]
    study = optuna.load_study(study_name="nano", storage=f"sqlite:///{tmp_path}/t/nano/study.db")
    assert study.user_attrs["edges"].startswith(
        "trial 1 sits at the largest micro_batch_size (4); micro_batch_size 8 not measured: "
        "command.knobs.micro_batch_size.map has no entry for 8 and its entries"
    )
    # without the command's mappings the step is asked (edges.steps as before)
    _, space = load(tmp_path / "nano.yaml")
    h = History.of(study)
    assert edges.steps(h, space, {}) == [{"micro_batch_size": 8}]
    assert cfg.command is not None
    assert edges.steps(h, space, {}, cfg.command.model_dump(mode="json")) == []


@pytest.mark.slow
def test_command_nanogpt_map_measures_the_micro_batch_past_the_list(tmp_path: Path) -> None:
    """Real trials of a job that takes `--batch_size=N` only: 8, past the list [2, 4], runs as
    `--batch_size=8 --gradient_accumulation_steps=2` (it crashed as `--batch_size 8`) and wins."""
    result = run_search(load_config(_job(tmp_path, BATCH)), out_root=tmp_path / "t", device="cpu")
    trials = sorted(result.history.seen.values(), key=lambda t: t.number)
    ran = {t.user_attrs["knobs"]["micro_batch_size"]: t.user_attrs for t in trials}
    assert sorted(ran) == [2, 4, 8], {m: a["reason"] for m, a in ran.items()}
    assert all(a["status"] == "ok" for a in ran.values()), {m: a["reason"] for m, a in ran.items()}
    log = (Path(ran[8]["run_dir"]) / "worker.log").read_text()
    assert 'config: {"batch_size": 8, "gradient_accumulation_steps": 2}' in log
    assert result.chosen_number == next(t.number for t in trials if t.user_attrs is ran[8])


def test_cli_validate_shows_the_baseline_command_and_warns_of_a_map_without_its_flag(
    tmp_path: Path,
) -> None:
    knobs = {**BATCH, "precision": {"flag": "--dtype", "map": {"fp32": "float32", "bf16": []}}}
    path = _job(tmp_path, knobs)
    doc = yaml.safe_load(path.read_text())
    doc["command"]["env"] = {"WANDB_API_KEY": "abcdef123456", "HF_TOKEN": "{env:HF_TOKEN}"}
    doc["space"]["precision"] = ["fp32", "bf16"]
    path.write_text(yaml.safe_dump(doc))
    shown = CliRunner().invoke(app, ["validate", str(path)])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    at = lines.index(next(x for x in lines if x.startswith("the baseline's trial runs")))
    # one command line, continued with ` \` where it is wider than the console; the YAML's order
    # (safe_dump sorted it); a secret masked, an {env:NAME} as written
    block = lines[at + 1 : next(i for i in range(at + 1, len(lines)) if lines[i][-1] != "\\") + 1]
    assert " ".join(x.strip().removesuffix("\\").strip() for x in block) == (
        f"cd {tmp_path} && HF_TOKEN='{{env:HF_TOKEN}}' WANDB_API_KEY='***' "
        f"{sys.executable} {NANOGPT} --gradient_accumulation_steps=8 --batch_size=2 float32"
    )
    assert "abcdef123456" not in shown.output
    assert (
        "warning: command.knobs.precision.map: fp32 renders `float32` without a flag (a map "
        "entry replaces `--dtype VALUE` whole); write fp32: [--dtype, float32] to keep the flag"
    ) in " ".join(shown.output.split())
