"""task command, issue 38: a trial's figures must be possible, and a job that gave its steps is
measured. Real tiny jobs (a Python script as command.argv) report what a hostile or broken job
would; each is failed with one line naming the field, the bad value and what is allowed, and the
search goes on."""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from pathlib import Path

import pytest
import yaml

from autotune import metrics, reporting
from autotune.job import load_config
from autotune.launch.process import Outcome
from autotune.launch.runner import Bench, record_of
from autotune.protocol import RunSettings, TrialResult
from autotune.search.run import run_search

# A job's head: the reporter, its clock, a loop of `steps` steps (each body below runs in it).
HEAD = "import json, os, time\nfrom autotune import reporting\nr = reporting.reporter()\n"
LOOP = "for i in range(40):\n    time.sleep(0.01)\n"


def _record(tmp_path: Path, body: str, **command: object) -> dict:
    """The one trial of a search over a job whose script is `body` (1 warm-up, 2 measured steps,
    at most 4)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    job = tmp_path / "job.py"
    job.write_text(body)
    doc = {
        "name": "job",
        "workload": {"task": "command", "warmup_steps": 1, "measure_steps": 2},
        "command": {"argv": ["{python}", str(job)], "max_steps": 4, **command},
        "space": {},
        "study": {"trials": 1, "seed": 0, "confirm_top": 0, "trial_timeout_min": 1},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = run_search(load_config(path), out_root=tmp_path / "trials", device="cpu", trials=1)
    return next(iter(result.history.seen.values())).user_attrs


def _failed(rec: dict, reason: str) -> None:
    assert rec["status"] == "crash", rec["reason"]
    assert len(rec["reason"].splitlines()) == 1 and len(rec["reason"]) <= 1000
    assert "Traceback" not in rec["reason"]
    assert re.search(reason, rec["reason"]), rec["reason"]


def _line(fields: str) -> str:
    """A job's loop body that appends one step line of its own making (fields: Python source)."""
    return (
        f"    doc = {{'s': 0.01, 'tokens': 10, 'at': time.time(), {fields}}}\n"
        "    open(os.environ['AUTOTUNE_REPORT'], 'a').write(json.dumps(doc) + '\\n')\n"
    )


IMPOSSIBLE_STEPS = [
    (
        "    r.record(0.0, 10)\n",
        r"s is 0\.0; allowed: a finite number of seconds above 0",
    ),
    (
        "    r.record(-0.01, 10)\n",
        r"s is -0\.01; allowed: a finite number of seconds",
    ),
    (
        _line("'s': float('nan')"),
        r"s is nan; allowed: a finite number of seconds",
    ),
    (
        _line("'s': 'fast'"),
        r"s is 'fast', not a number; allowed: a finite number",
    ),
    (
        "    reporting.step(tokens=10**30)\n",
        r"tokens is 10{30}; allowed: a whole number of tokens .* from 1 to 10,000,000,000",
    ),
    (
        "    reporting.step(tokens=0)\n",
        r"tokens is 0; allowed: a whole number of tokens",
    ),
    (_line("'tokens': 2.5"), r"tokens is 2\.5; allowed: a whole number"),
    (
        _line("'padded': 5"),
        r"padded is 5; allowed: a whole number of tokens \(padding included: at .* from 10",
    ),
    (
        "    r.record(30.0, 10)\n",
        r"s is 30 s, longer than the [\d.]+ s since the trial started the job",
    ),
    (
        _line("'at': 4e9"),
        r"at is 4000000000\.0; allowed: the job's time\.time\(\) at the step's end, from 1",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("body", "reason"), IMPOSSIBLE_STEPS)
def test_command_step_that_cannot_be_fails_the_trial_naming_it(
    tmp_path: Path, body: str, reason: str
) -> None:
    rec = _record(tmp_path, HEAD + LOOP + body)
    _failed(rec, r"^the command reported what cannot be: steps.jsonl line 1: " + reason)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "reason"),
    [
        # 1e-12 s steps 10 ms apart: 1e14 tokens/s, chosen as the winner before
        (
            "    if r.record(1e-12, 100):\n        break\n",
            r"reported 3e-12 s for steps 2 to 4, [\d.e-]+% of",
        ),
        # 1 ms steps 200 ms apart: 0.5% of the wall clock
        (
            "    time.sleep(0.2)\n    if r.record(0.001, 100):\n        break\n",
            r"0\.003 s for steps 2 to 4, 0\.\d+% of",
        ),
    ],
)
def test_command_steps_far_shorter_than_the_wall_clock_fail_the_trial(
    tmp_path: Path, body: str, reason: str
) -> None:
    rec = _record(tmp_path, HEAD + LOOP + body)
    between = r" the [\d.]+ s between their reports \(their 'at' stamps\); a job's timed steps"
    _failed(rec, reason + between + " are at least 2% of its time")
    assert not rec.get("metrics")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("done", "reason"),
    [
        (
            {"peak_mem_bytes": "lots"},
            r"line 4: peak_mem_bytes is 'lots', not a number; allowed: a whole number of bytes",
        ),
        (
            {"peak_mem_reserved_bytes": -1},
            r"peak_mem_reserved_bytes is -1; allowed: a whole number of bytes from 0",
        ),
        (
            {"device_name": "GPU\nrm -rf"},
            r"device_name is 'GPU\\nrm -rf'; allowed: the device's name, printable",
        ),
        ({"done": 1}, r"line 4: done is 1; allowed: true"),
    ],
)
def test_command_done_line_that_cannot_be_fails_the_trial(
    tmp_path: Path, done: dict, reason: str
) -> None:
    body = HEAD + "for i in range(3):\n    time.sleep(0.01)\n    reporting.step(tokens=10)\n"
    body += f"doc = {{'done': True, **{done!r}}}\n"
    body += "open(os.environ['AUTOTUNE_REPORT'], 'a').write(json.dumps(doc) + '\\n')\n"
    _failed(_record(tmp_path, body), reason)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("[1, 2]", r"steps.jsonl line 1 is not a JSON object: '\[1, 2\]'; each line is \{\"step\""),
        ("step 1 took 0.1 s", r"line 1 is not a JSON object: 'step 1 took 0\.1 s'"),
        ('{"tokens": 10}', r"steps.jsonl line 1 has no 's': each step line is"),
        ("x" * 70_000, r"steps.jsonl line 1 is over 65,536 bytes"),
    ],
)
def test_command_malformed_report_line_fails_in_one_line(
    tmp_path: Path, line: str, reason: str
) -> None:
    body = HEAD + f"open(os.environ['AUTOTUNE_REPORT'], 'a').write({line!r} + '\\n')\n" + LOOP
    _failed(_record(tmp_path, body + "    reporting.step(tokens=10)\n"), reason)


@pytest.mark.slow
def test_command_report_line_being_written_waits_for_its_end(tmp_path: Path) -> None:
    """A line without its end yet is no line; a long one being written (no end in sight) is none."""
    body = HEAD + "f = open(os.environ['AUTOTUNE_REPORT'], 'a')\nfor i in range(4):\n"
    body += "    time.sleep(0.02)\n"
    body += "    line = json.dumps({'s': 0.01, 'tokens': 10, 'at': time.time()})\n"
    body += (
        "    f.write(line[:9]); f.flush(); time.sleep(0.15); f.write(line[9:] + '\\n'); f.flush()\n"
    )
    rec = _record(tmp_path, body)
    assert rec["status"] == "ok", rec["reason"]
    assert rec["metrics"]["window"]["measured_steps"] == 3
    endless = (
        HEAD + "open(os.environ['AUTOTUNE_REPORT'], 'a').write('x' * 70_000)\ntime.sleep(60)\n"
    )
    _failed(_record(tmp_path / "endless", endless), r"steps.jsonl line 1 is over 65,536 bytes")


@pytest.mark.slow
def test_command_report_that_is_no_regular_file_fails_at_once(tmp_path: Path) -> None:
    """A FIFO put in the report's place: read, it would block the trial until its limit."""
    body = HEAD + "os.mkfifo(os.environ['AUTOTUNE_REPORT'])\ntime.sleep(60)\n"
    _failed(_record(tmp_path, body), r"steps.jsonl is not a regular file: the job replaced it")


LOG = "import time\nfor i in range(60):\n    time.sleep(0.02)\n"
LOG += "    print(f'step {i} | tps: %s', flush=True)\n"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("figure", "shown"),
    [
        ("1e400", "inf"),
        ("-5000", r"-5000\.0"),
        ("0", r"0\.0"),
        ("3e10", r"30000000000\.0"),
        ("1.2.3", "'1.2.3'"),
    ],
)
def test_command_log_figure_that_cannot_be_fails_the_trial(
    tmp_path: Path, figure: str, shown: str
) -> None:
    rec = _record(
        tmp_path, LOG % figure, measure="log", log_pattern=r"tps: (?P<tokens_per_s>[-0-9,.e]+)"
    )
    line = rf"'step 0 \| tps: {re.escape(figure)}'"
    reason = rf"command.log_pattern's tokens_per_s in the line {line} is {shown}(, not a number)?"
    _failed(rec, reason + r"; allowed: tokens a second above 0 and at most 1e\+10")


@pytest.mark.slow
def test_command_log_running_count_that_repeats_keeps_its_time(tmp_path: Path) -> None:
    """A count printed twice (a loss line, then an evaluation's) is no step of 0 tokens: its time
    goes to the next step, and the figure stays the count over the time."""
    body = "import time\nfor i in range(60):\n    time.sleep(0.02)\n"
    body += "    print(f'tokens seen: {(i // 2) * 100}', flush=True)\n"
    pattern = r"tokens seen: (?P<tokens_total>\d+)"
    rec = _record(tmp_path, body, measure="log", log_pattern=pattern)
    assert rec["status"] == "ok", rec["reason"]
    assert 100 / 0.04 / 2 < rec["metrics"]["tokens_per_s_per_gpu"] < 100 / 0.04 * 2


@pytest.mark.slow
def test_command_job_that_reported_done_but_exits_slowly_is_measured(tmp_path: Path) -> None:
    """All its steps and its done line, then a minute more (a checkpoint saved): measured, and how
    it ended said, not a timeout."""
    body = HEAD + "for i in range(3):\n    time.sleep(0.01)\n    reporting.step(tokens=10)\n"
    body += "r.close()\ntime.sleep(60)\n"
    rec = _record(tmp_path, body, stop_grace_s=1)
    assert rec["status"] == "ok", rec["reason"]
    ended = "so its process group was ended"
    assert (
        rec["applied"]["stop"]
        == f"reported done but had not exited 1 s after the stop request, {ended}"
    )
    assert rec["reason"].startswith(
        f"its 3 steps are measured; the command {rec['applied']['stop']}; window "
    )
    assert "not settled to +-3% in the 3 steps the job gave" in rec["reason"]
    assert rec["metrics"]["tokens_per_s_per_gpu"] > 0


def test_reporter_writes_no_more_steps_than_the_trial_asks(tmp_path: Path) -> None:
    """A job that ignores the stop and goes on calling step(): its report stops growing."""
    path = tmp_path / "r.jsonl"
    stop = str(tmp_path / "stop")
    r = reporting.Reporter(str(path), "1,2", sync=lambda: None, stop=stop, most=5)
    for _ in range(1000):
        r.step(tokens=10)
    lines = path.read_text().splitlines()
    assert len(lines) == 6 and '"done": true' in lines[-1]
    assert reporting.MAX_STEP_LINES >= 2 * 100_000  # command.max_steps' bound, twice


def test_reporter_stamps_agree_with_its_step_times(tmp_path: Path) -> None:
    """A step's time and the time between its stamps come from one clock (the trial checks
    them)."""
    path = tmp_path / "r.jsonl"
    r = reporting.Reporter(
        str(path), "1,2", sync=lambda: None, stop=str(tmp_path / "stop"), most=50
    )
    for _ in range(20):
        os.sched_yield()
        r.step(tokens=10)
    steps = [json.loads(x) for x in path.read_text().splitlines()]
    for before, after in itertools.pairwise(steps):
        assert after["s"] == pytest.approx(after["at"] - before["at"], abs=1e-6)


def _bench() -> Bench:
    run = RunSettings(warmup_steps=1, measure_steps=2)
    return Bench(None, run, "cpu", 60.0, Path("."), task="command")


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        (
            TrialResult("ok", step_times_s=[0.0, 0.1], tokens_per_step=10),
            r"a measured step took 0\.0 s",
        ),
        (
            TrialResult("ok", step_times_s=[math.nan], tokens_per_step=10),
            r"a measured step took nan s",
        ),
        (
            TrialResult(
                "ok",
                step_times_s=[0.1],
                tokens_per_step=10,
                output={"window": {"tokens_per_s": -5.0}},
            ),
            r"the trial's tokens_per_s_per_gpu is -5\.0; allowed: a finite number above 0",
        ),
    ],
)
def test_runner_never_records_a_figure_that_cannot_be(result: TrialResult, reason: str) -> None:
    """Whatever a trial wrote, a step of 0 s or a negative or infinite figure is a failed trial
    (not a ZeroDivisionError, not a figure in best.yaml)."""
    rec = record_of(0, {}, Outcome("ok", result=result), _bench())
    assert rec.status == "crash" and re.search(reason, rec.reason), rec.reason
    assert not rec.metrics
    assert metrics.impossible([0.1, 0.2], 10) == ""
