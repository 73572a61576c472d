"""task command on plain training scripts as they are (issue 66): their own log lines read by
`measure: log` (step_time_ms, command.tokens_per_step, a unit read as the other refused) and their
own flags (`--batch_size={}`, one argument), with karpathy/nanoGPT's train.py and pytorch/examples'
word_language_model main.py unmodified (tests/data/jobs/third_party), trained for real on the
CPU."""

from __future__ import annotations

import os
import pickle
import random
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import cli_here

from autotune.command import render as command_render
from autotune.command.log import sample
from autotune.command.report import BadReport
from autotune.documents import identity
from autotune.errors import ConfigError
from autotune.job import load_config
from autotune.search.run import run_search

ROOT = Path(__file__).resolve().parent.parent
VENDORED = ROOT / "tests" / "data" / "jobs" / "third_party"
# the scripts' own print statements, as their projects wrote them
NANOGPT_LINE = "iter 3: loss 3.2000, time 359.49ms, mfu 1.20%"
WLM_LINE = (
    "| epoch   1 |   200/ 2983 batches | lr 20.00 | ms/batch 12.34 | loss  7.63 | ppl  2056.91"
)
NANOGPT_PATTERN = r"iter \d+: loss [0-9.]+, time (?P<step_time_ms>[0-9.]+)ms"
WLM_PATTERN = r"ms/batch\s+(?P<step_time_ms>[0-9.]+)"


def _doc(command: dict[str, Any], space: dict[str, Any], **study: Any) -> dict[str, Any]:
    return {
        "name": "job",
        "workload": {"task": "command", "warmup_steps": 2, "measure_steps": 4},
        "command": {"measure": "log", **command},
        "space": space,
        "study": {"trials": 2, "seed": 0, "confirm_top": 0, "trial_timeout_min": 2, **study},
    }


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _log(pattern: str, **command: Any) -> dict[str, Any]:
    return _doc({"argv": ["{python}", "train.py"], "log_pattern": pattern, **command}, {})


# --- the pattern and tokens_per_step, at validate time -------------------------------------------


@pytest.mark.parametrize("pattern", [NANOGPT_PATTERN, WLM_PATTERN])
def test_config_takes_the_scripts_own_lines_with_tokens_per_step(
    tmp_path: Path, pattern: str
) -> None:
    doc = _log(pattern, tokens_per_step="{micro_batch_size} * {grad_accum_steps} * 64")
    cfg = load_config(_write(tmp_path, doc))
    assert re.search(pattern, NANOGPT_LINE if "iter" in pattern else WLM_LINE)
    assert cfg.command is not None and cfg.command.tokens_per_step is not None


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        (
            r"time (?P<step_time_s>[0-9.]+)ms",
            "reads the group step_time_s, in seconds, from a "
            "figure in milliseconds ('ms' beside it in the pattern)",
        ),
        (
            r"ms/batch\s+(?P<step_time_s>[0-9.]+)",
            "step_time_s, in seconds, from a figure in milliseconds",
        ),
        (
            r"took (?P<step_time_ms>[0-9.]+)\s*s\b",
            "reads the group step_time_ms, in "
            "milliseconds, from a figure in seconds ('s' follows it in the pattern)",
        ),
    ],
)
def test_config_refuses_a_step_time_beside_the_other_unit(
    tmp_path: Path, pattern: str, said: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(said)) as err:
        load_config(_write(tmp_path, _log(pattern, tokens_per_step=64)))
    assert len(str(err.value).splitlines()) == 1


@pytest.mark.parametrize(
    ("expression", "said"),
    [
        ("{micro_batch_size} ** 2", "'{micro_batch_size} ** 2' is not allowed; allowed: +, -"),
        (
            "{mbs} * 64",
            "{mbs} is no knob of the trial; allowed: {micro_batch_size}, {grad_accum_steps}",
        ),
        (
            "micro_batch_size * 64",
            "'micro_batch_size' is a bare name; write a knob as {micro_batch_size}",
        ),
        ("{precision} * 64", "{precision} is no number"),
        ("__import__('os').system('x')", "is not allowed; allowed:"),
        ("{micro_batch_size} * (64", "is no arithmetic expression"),
    ],
)
def test_config_refuses_a_bad_tokens_per_step(tmp_path: Path, expression: str, said: str) -> None:
    doc = _log(NANOGPT_PATTERN, tokens_per_step=expression)
    with pytest.raises(ConfigError, match=re.escape(said)) as err:
        load_config(_write(tmp_path, doc))
    assert "command.tokens_per_step" in str(err.value)
    assert len(str(err.value).splitlines()) == 1


@pytest.mark.parametrize(
    ("command", "said"),
    [
        ({"log_pattern": r"t (?P<step_time_ms>\d+) n (?P<tokens>\d+)"}, "reads the tokens from"),
        ({"log_pattern": r"tps: (?P<tokens_per_s>\d+)"}, "times no step"),
        ({"measure": "report", "log_pattern": None}, "only with measure log"),
    ],
)
def test_config_takes_tokens_per_step_only_for_a_line_without_tokens(
    tmp_path: Path, command: dict[str, Any], said: str
) -> None:
    doc = _log(NANOGPT_PATTERN, tokens_per_step=64)
    doc["command"].update(command)
    doc["command"] = {k: v for k, v in doc["command"].items() if v is not None}
    with pytest.raises(ConfigError, match=f"command.tokens_per_step: .*{re.escape(said)}"):
        load_config(_write(tmp_path, doc))


def test_config_needs_tokens_for_a_step_time(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="has no named group tokens_per_s") as err:
        load_config(_write(tmp_path, _log(NANOGPT_PATTERN)))
    assert "command.tokens_per_step" in str(err.value)


def test_command_without_tokens_per_step_dumps_and_names_as_before(tmp_path: Path) -> None:
    """best.yaml, the stored config and the study's identity of a command that does not use it
    are those of the release before the field: no `tokens_per_step: null` anywhere."""
    doc = _doc({"argv": ["{python}", "train.py"], "log_pattern": "tps: (?P<tokens_per_s>\\d+)"}, {})
    cfg = load_config(_write(tmp_path, doc))
    dumped = cfg.model_dump(mode="json")
    assert "tokens_per_step" not in dumped["command"]
    assert "tokens_per_step" not in identity.factors(dumped)["command"]
    given = load_config(_write(tmp_path / "b", _log(NANOGPT_PATTERN, tokens_per_step=512)))
    other = given.model_dump(mode="json")
    assert other["command"]["tokens_per_step"] == 512
    changed = identity.difference(
        other, {**other, "command": {**other["command"], "tokens_per_step": 256}}
    )
    assert changed == "command.tokens_per_step: 512 there, 256 here"


def test_validate_shows_the_tokens_of_the_baselines_step(tmp_path: Path) -> None:
    doc = _log(NANOGPT_PATTERN, tokens_per_step="{micro_batch_size} * {grad_accum_steps} * 64")
    doc["workload"]["global_batch_size"] = 16
    doc["command"]["knobs"] = {
        "micro_batch_size": {"flag": "--batch_size={}"},
        "grad_accum_steps": {"flag": "--gradient_accumulation_steps={}"},
    }
    doc["space"] = {"micro_batch_size": [4, 8]}
    out = cli_here("validate", str(_write(tmp_path, doc)), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    said = (
        "the baseline's step: command.tokens_per_step: {micro_batch_size} * {grad_accum_steps} "
        "* 64 = 1,024 tokens a step (micro_batch_size=8, grad_accum_steps=2)"
    )
    assert said in out.stdout, out.stdout
    assert "--batch_size=8" in out.stdout


def test_validate_refuses_a_baseline_step_of_no_whole_tokens(tmp_path: Path) -> None:
    doc = _log(NANOGPT_PATTERN, tokens_per_step="{micro_batch_size} / 3")
    out = cli_here("validate", str(_write(tmp_path, doc)), cwd=tmp_path)
    assert out.returncode == 2
    assert "command.tokens_per_step: {micro_batch_size} / 3 is 2.66667 for the baseline " in (
        out.stderr + out.stdout
    )


# --- the line as the trial reads it -------------------------------------------------------------


def _read(pattern: str, line: str, per_step: float | None = 1024) -> dict[str, Any]:
    m = re.search(pattern, line)
    assert m is not None
    return sample(line, m, 0.0, per_step)


def test_trial_reads_the_scripts_lines_in_milliseconds() -> None:
    assert _read(NANOGPT_PATTERN, NANOGPT_LINE) == {
        "s": pytest.approx(0.35949),
        "tokens": 1024,
        "at": 0.0,
    }
    assert _read(WLM_PATTERN, WLM_LINE)["s"] == pytest.approx(0.01234)


@pytest.mark.parametrize(
    ("pattern", "line", "said"),
    [
        # what validate cannot see: the pattern leaves the unit out, the line says it
        (
            r"time (?P<step_time_s>[0-9.]+)",
            NANOGPT_LINE,
            "reads as 359.49 s a step, but the line gives it in ms ('ms' beside it)",
        ),
        (
            r"batch\s+(?P<step_time_s>[0-9.]+)",
            WLM_LINE,
            "reads as 12.34 s a step, but the line gives it in ms",
        ),
        (
            r"step (?P<step_time_ms>[0-9.]+)",
            "step 0.36s loss 2",
            "reads as 0.36 ms a step, but the line gives it in seconds ('s' follows it)",
        ),
        (
            r"dt=(?P<step_time_s>[0-9.]+)",
            "dt=359.49 data_ms=3",
            "reads as 359.49 s a step (60 s or more) on a line that says ms beside it",
        ),
    ],
)
def test_trial_refuses_a_step_time_the_line_gives_in_the_other_unit(
    pattern: str, line: str, said: str
) -> None:
    with pytest.raises(BadReport, match=re.escape(said)):
        _read(pattern, line)


def test_trial_keeps_a_slow_step_in_seconds_where_nothing_says_ms() -> None:
    """A minute a step is slow but real: only a line that says ms beside it makes it suspect."""
    assert _read(r"dt=(?P<step_time_s>[0-9.]+)", "dt=359.49 data_s=3")["s"] == 359.49
    assert _read(r"dt=(?P<step_time_s>[0-9.]+)", "dt=12.5 data_ms=3")["s"] == 12.5


# --- flags as the scripts take them -------------------------------------------------------------


def test_flag_with_braces_renders_one_argument(tmp_path: Path) -> None:
    doc = _doc(
        {
            "argv": ["{python}", "train.py"],
            "log_pattern": NANOGPT_PATTERN,
            "tokens_per_step": 64,
            "knobs": {
                "micro_batch_size": {"flag": "--batch_size={}"},
                "grad_accum_steps": {"flag": "--gradient_accumulation_steps"},
                "compile": {"flag": "--compile={}"},
            },
        },
        {"micro_batch_size": [4, 8], "compile": [False, True]},
    )
    doc["workload"]["global_batch_size"] = 16
    cfg = load_config(_write(tmp_path, doc))
    assert cfg.command is not None
    knobs = {"micro_batch_size": 8, "grad_accum_steps": 2, "compile": True}
    rendered = command_render.render(cfg.command.model_dump(mode="json"), knobs, None, tmp_path)
    argv = rendered.argv
    assert "--batch_size=8" in argv and "--compile=true" in argv  # one argument each
    assert argv[argv.index("--gradient_accumulation_steps") + 1] == "2"  # two, as before
    assert len(argv) == 2 + 4


def test_flag_with_two_braces_is_refused(tmp_path: Path) -> None:
    doc = _log(NANOGPT_PATTERN, tokens_per_step=64)
    doc["command"]["knobs"] = {"micro_batch_size": {"flag": "--b={}={}"}}
    with pytest.raises(ConfigError, match=re.escape("flag '--b={}={}' has 2 {}; a flag with one")):
        load_config(_write(tmp_path, doc))


# --- the real scripts, trained for real on the CPU -----------------------------------------------


def _nanogpt(folder: Path) -> Path:
    """nanoGPT's files and a dataset laid out as data/shakespeare_char/prepare.py lays it out:
    train.bin and val.bin as uint16 token ids, meta.pkl with vocab_size, itos and stoi."""
    import numpy as np

    folder.mkdir(parents=True)
    for name in ("train.py", "model.py", "configurator.py"):
        shutil.copy(VENDORED / "nanogpt" / name, folder / name)
    text = "First Citizen: Before we proceed any further, hear me speak.\n" * 300
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    data = folder / "data" / "tiny"
    data.mkdir(parents=True)
    cut = int(len(ids) * 0.9)
    ids[:cut].tofile(data / "train.bin")
    ids[cut:].tofile(data / "val.bin")
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}
    (data / "meta.pkl").write_bytes(pickle.dumps(meta))
    return folder


def _word_language_model(folder: Path) -> Path:
    """word_language_model's files and data/wikitext-2/{train,valid,test}.txt (words a line)."""
    folder.mkdir(parents=True)
    for name in ("main.py", "data.py", "model.py"):
        shutil.copy(VENDORED / "word_language_model" / name, folder / name)
    rng = random.Random(0)
    words = [f"w{i}" for i in range(50)]
    data = folder / "data" / "wikitext-2"
    data.mkdir(parents=True)
    for name, lines in (("train", 3000), ("valid", 40), ("test", 40)):
        text = "".join(
            " " + " ".join(rng.choice(words) for _ in range(12)) + " \n" for _ in range(lines)
        )
        (data / f"{name}.txt").write_text(text)
    return folder


def _search(tmp_path: Path, doc: dict[str, Any]) -> list[dict[str, Any]]:
    path = _write(tmp_path, doc)
    result = run_search(load_config(path), out_root=tmp_path / "trials", device="cpu")
    trials = sorted(result.history.seen.values(), key=lambda t: t.number)
    return [t.user_attrs for t in trials]


def _printed_ms(run_dir: str, pattern: str) -> list[float]:
    """The step times the script printed itself (its own clock), in its trial's log."""
    log = (Path(run_dir) / "worker.log").read_text()
    return [float(m.group("step_time_ms")) for m in re.finditer(pattern, log)]


def _check_figure(rec: dict[str, Any], tokens: int, pattern: str) -> None:
    """The figure is the script's own: its step's tokens (tokens_per_step) over the times it
    printed, each measured step one of its lines."""
    assert rec["status"] == "ok", rec["reason"]
    assert rec["metrics"]["tokens_per_step_median"] == tokens
    printed = _printed_ms(rec["run_dir"], pattern)
    steps = rec["raw"]["step_times_s"]  # the measured steps, as the script timed them
    assert all(round(s * 1000, 2) in printed for s in steps), (steps, printed)
    own = tokens * len(steps) / sum(steps)
    assert rec["metrics"]["tokens_per_s_per_gpu"] == pytest.approx(own, rel=1e-3)


@pytest.mark.slow
def test_search_measures_nanogpt_from_its_own_lines_and_flags(tmp_path: Path) -> None:
    """Unmodified nanoGPT: `--batch_size={}` as its configurator takes it, its "time X ms" line
    read as step_time_ms, its tokens a step from command.tokens_per_step (block_size 32)."""
    folder = _nanogpt(tmp_path / "nanogpt")
    shrunk = [
        "--dataset=tiny", "--device=cpu", "--compile=False", "--dtype=float32", "--n_layer=1",
        "--n_head=2", "--n_embd=32", "--block_size=32", "--dropout=0.0", "--max_iters=100000",
        "--eval_interval=100000", "--eval_iters=1", "--log_interval=1", "--out_dir={run_dir}/out",
    ]  # fmt: skip
    doc = _doc(
        {
            "argv": ["{python}", "train.py", *shrunk],
            "cwd": str(folder),
            "log_pattern": NANOGPT_PATTERN,
            "tokens_per_step": "{micro_batch_size} * {grad_accum_steps} * 32",
            "half_width_pct": 100,
            "max_steps": 12,
            "knobs": {
                "micro_batch_size": {"flag": "--batch_size={}"},
                "grad_accum_steps": {"flag": "--gradient_accumulation_steps={}"},
            },
        },
        {"micro_batch_size": [4, 8]},
    )
    doc["workload"]["global_batch_size"] = 8
    records = _search(tmp_path, doc)
    assert len(records) == 2
    for rec in records:
        knobs = rec["knobs"]
        assert knobs["micro_batch_size"] * knobs["grad_accum_steps"] == 8
        _check_figure(rec, 8 * 32, NANOGPT_PATTERN)
        argv = rec["applied"]["command"]
        assert f"--batch_size={knobs['micro_batch_size']}" in argv


@pytest.mark.slow
def test_search_measures_word_language_model_from_its_own_lines(tmp_path: Path) -> None:
    """Unmodified word_language_model: `--batch_size N` (two arguments, argparse), its
    "ms/batch X" line read as step_time_ms, a batch's tokens micro_batch_size x bptt 35."""
    folder = _word_language_model(tmp_path / "wlm")
    doc = _doc(
        {
            "argv": [
                "{python}", "main.py", "--emsize", "16", "--nhid", "16", "--nlayers", "1",
                "--dropout", "0", "--bptt", "35", "--log-interval", "1", "--epochs", "1",
                "--save", "{run_dir}/model.pt",
            ],
            "cwd": str(folder),
            "log_pattern": WLM_PATTERN,
            "tokens_per_step": "{micro_batch_size} * 35",
            "half_width_pct": 100,
            "max_steps": 12,
            "knobs": {"micro_batch_size": {"flag": "--batch_size"}},
        },
        {"micro_batch_size": [4, 8]},
        trials=1,
    )  # fmt: skip
    (rec,) = _search(tmp_path, doc)
    _check_figure(rec, 8 * 35, WLM_PATTERN)
    argv = rec["applied"]["command"]
    assert argv[argv.index("--batch_size") + 1] == "8"


def test_vendored_scripts_keep_their_license() -> None:
    assert "MIT License" in (VENDORED / "nanogpt" / "LICENSE").read_text()
    assert "BSD 3-Clause" in (VENDORED / "word_language_model" / "LICENSE").read_text()
    train = (VENDORED / "nanogpt" / "train.py").read_text()
    assert 'print(f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms' in train
    main = (VENDORED / "word_language_model" / "main.py").read_text()
    assert "ms/batch {:5.2f}" in main
    assert os.path.isfile(sys.executable)


def test_export_renders_a_braced_flag_as_the_trial_did(tmp_path: Path) -> None:
    from test_command_day_one import _best, _text

    knobs = {"micro_batch_size": {"flag": "--batch_size={}"}}
    best = _best(tmp_path, {}, knobs=knobs)
    line = _text(best, "command").splitlines()[-1]
    assert line.endswith(" train.py --batch_size=8"), line
