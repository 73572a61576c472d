"""A command trial's reason says where it failed and what held its lines back: a bare assert names
its file, line and code (tracebacks.raised_at through protocol.last_words); a log job piped
through a filter that buffers is named with the fix (command/bursts.py), one that passes each line
on is not."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from autotune.command.bursts import FIXES, buffered, noted
from autotune.job import load_config
from autotune.protocol import last_words
from autotune.search.run import run_search
from autotune.status import Status

# a job that logs a running count of tokens every 20 ms, each line about 1 KB (so a Python filter's
# 8 KiB buffer passes on about 8 lines at once)
JOB = """\
import time
for i in range(2000):
    time.sleep(0.02)
    print(f"step {i} | tokens seen: {(i + 1) * 100} | " + "." * 1000, flush=True)
"""
COPY = "import sys; [print(line, end='') for line in sys.stdin]"
ASSERTS = """\
def check(block_size):
    limit = 8
    assert block_size <= limit


check(16)
"""


def _search(tmp_path: Path, argv: list[str], **command: object) -> dict:
    """The one trial of a one-trial search of this command (its record)."""
    doc = {
        "name": "job",
        "workload": {"task": "command", "warmup_steps": 2, "measure_steps": 4},
        "command": {"argv": argv, "cwd": str(tmp_path), **command},
        "space": {},
        "study": {"trials": 1, "seed": 0, "confirm_top": 0, "trial_timeout_min": 1},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = run_search(load_config(path), out_root=tmp_path / "trials", device="cpu", trials=1)
    return next(iter(result.history.seen.values())).user_attrs


def _log_job(tmp_path: Path, copy: str) -> dict:
    (tmp_path / "job.py").write_text(JOB)
    pipeline = f"'{{python}}' job.py | {copy}"
    pattern = r"tokens seen: (?P<tokens_total>[0-9]+)"
    return _search(tmp_path, ["sh", "-c", pipeline], measure="log", log_pattern=pattern)


def test_bursts_of_held_lines_are_told_from_steps_as_they_end() -> None:
    held = [b + i * 0.0001 for b in (1.0, 1.16, 1.32, 1.48) for i in range(8)]  # 8 at once
    said = buffered(held)
    assert said.startswith("its step lines came in bursts (32 of 32 within 10 ms")
    assert "4 bursts between silences of 0.16 s" in said and said.endswith(FIXES)
    jitter = random.Random(0)
    steady, at = [], 0.0
    for _ in range(200):  # 4 ms steps on a busy machine: some gaps of 15 to 50 ms
        at += 0.004 if jitter.random() < 0.9 else jitter.uniform(0.015, 0.05)
        steady.append(at)
    assert buffered(steady) == ""
    assert buffered([i * 0.5 for i in range(20)]) == ""  # a step every 0.5 s
    assert buffered(held[:8]) == ""  # one burst: no silence between bursts to tell it by
    assert noted("", [{"at": a} for a in held]) == said
    assert noted("measured", [{"at": a} for a in held]) == f"measured; {said}"
    assert noted("measured", [{"at": 1.0}]) == "measured"


def test_a_bare_assert_names_where_it_failed() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/home/me/nanoGPT/train.py", line 112, in <module>\n'
        "    assert block_size <= config.block_size\n"
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        "AssertionError\n"
    )
    said = "AssertionError at train.py:112: assert block_size <= config.block_size"
    assert last_words(text) == said
    installed = text.replace("/home/me/nanoGPT", "/v/lib/python3.11/site-packages/peft")
    assert last_words(installed).startswith("AssertionError at peft/train.py:112: assert")
    assert last_words("AssertionError: x must be 3") == "AssertionError: x must be 3"
    assert last_words("AssertionError") == "AssertionError"  # no traceback: nothing more known


@pytest.mark.slow
def test_a_job_failing_on_a_bare_assert_says_where(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(ASSERTS)
    rec = _search(tmp_path, ["{python}", "train.py"])
    assert rec["status"] == Status.CRASH
    assert "AssertionError at train.py:3: assert block_size <= limit" in rec["reason"], rec


@pytest.mark.slow
def test_a_log_job_through_a_buffering_filter_is_named_with_the_fix(tmp_path: Path) -> None:
    # Python buffers its output into a pipe (8 KiB) unless told otherwise: the trial's own
    # PYTHONUNBUFFERED, which the job inherits, is taken off the filter as a user's shell has none
    rec = _log_job(tmp_path, f"env -u PYTHONUNBUFFERED '{{python}}' -c \"{COPY}\"")
    assert rec["status"] == Status.OK, rec["reason"]
    assert "its step lines came in bursts (" in rec["reason"] and FIXES in rec["reason"]


@pytest.mark.slow
def test_a_log_job_through_a_filter_that_passes_each_line_on_is_not(tmp_path: Path) -> None:
    rec = _log_job(tmp_path, f"env -u PYTHONUNBUFFERED '{{python}}' -u -c \"{COPY}\"")
    assert rec["status"] == Status.OK, rec["reason"]
    assert "bursts" not in (rec.get("reason") or "")
    # best.yaml says what timed it: the job's own lines, not a clock around its steps
    best = yaml.safe_load((tmp_path / "trials" / "job" / "best.yaml").read_text())
    assert best["measurement"]["timing"] == (
        "the job's own log lines: tokens_total (a running count: its differences over the lines' "
        "arrival times)"
    )
