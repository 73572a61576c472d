"""What a command job reports, read and checked where it is read: its steps.jsonl as it grows (only
the bytes new since the last read, never more than a bound), each field a finite number in its
range, each step's time within the wall clock between its reports, and the window's figure one that
hardware can deliver. Standard library only (the trial's process).

A number that cannot be fails the trial with one line naming the line, the field, the value and
what is allowed: a job that reports a 1e-12 s step, 1e30 tokens or a 1 ms step between reports
200 ms apart is never chosen as the winner (issue 38).
"""

from __future__ import annotations

import json
import math
import os
import stat
import time
from pathlib import Path
from typing import Any, TypedDict

from autotune.command.hook import unmeasured
from autotune.command.said import settings_said
from autotune.protocol import Knobs
from autotune.reporting import MAX_REASON_CHARS, MAX_REPORT_BYTES, claim_path
from autotune.status import Status

# A step's tokens at most: 150x the largest global batch published (DeepSeek-V3's 15,360
# sequences of 4,096 tokens, 63M); a count past it counts no real step.
MAX_TOKENS_PER_STEP = 10**10
# A figure at most: a training token costs at least 6 FLOPs a parameter (PaLM); 1e10 tokens/s of a
# 1M-parameter model is 6e16 FLOP/s, 4x a DGX H200's 8 x 1,979 TFLOP/s (dense FP8).
MAX_TOKENS_PER_S = 1e10
MAX_MEMORY_BYTES = 2**50  # 1 PiB, 7,000x an H200's 141 GB: no device's peak
MAX_NAME_CHARS = 200  # a device's name (NVML's are under 100)
# A step's seconds may pass the time between its report and the one before by this much: the job's
# two clock reads (the step's end, then its stamp) may be split by a preemption of a loaded host;
# Windows' time.time() ticks by 15.6 ms.
CLOCK_SLACK_S = 0.05
CLOCK_DRIFT = 0.001  # and by this share of it: NTP slews a wall clock by at most 500 ppm
# The window's reported seconds are at least this share of the wall clock between its reports.
# reporting.step() and the callbacks time from one step's end to the next (data loading, logging
# and an evaluation inside the training included: their share is 1); a job timing its steps itself
# (Reporter.record, begin() before each step) may leave out its data loading, logging and a
# periodic evaluation, but its timed steps are still more than 1/50 of its time. 1 ms steps 200 ms
# apart (0.5%) are not steps.
MIN_TIMED_SHARE = 0.02
MAX_LINE_BYTES = 64 << 10  # a step's line is about 100 bytes; a longer one is no report
# The trial reads at most this much of the report: the reporter's own bound (reporting.py) and its
# done line.
MAX_READ_BYTES = MAX_REPORT_BYTES + MAX_LINE_BYTES
EXCERPT_CHARS = 80  # of a bad line or value, quoted in the reason
LINE_FORMAT = '{"step", "s", "tokens", "at"} or {"done": true, ...}'
MAX_SETTINGS = 20  # a job_settings line's entries (the callbacks write at most 7)
MAX_SETTING_CHARS = 60  # a setting's name, text value or source
# a job_settings value (settings_line checks it): a bool, a whole number or a short text
Setting = bool | int | str


def fresh(path: Path) -> None:
    """A trial's report made ready for its job: the report, its claim file (the job's one
    training: reporting.Reporter.claim) and its notes of unmeasured trainings (hook/unmeasured.py)
    of an earlier run removed."""
    path.unlink(missing_ok=True)
    Path(claim_path(str(path))).unlink(missing_ok=True)
    Path(unmeasured.path_of(str(path))).unlink(missing_ok=True)


class BadReport(ValueError):
    """A number the job reported that cannot be: the reason, one line."""

    status: str = Status.CRASH  # the trial's failure
    prefix = "the command reported what cannot be: "  # the reason's start


class JobFailed(BadReport):
    """The job's callback failed the trial (a "failed" line: a second training), or the job ran
    with other settings than the trial set: its reason as it stands."""

    prefix = ""

    def __init__(self, reason: str, status: str = Status.CRASH) -> None:
        super().__init__(reason)
        self.status = status


def excerpt(value: object) -> str:
    text = repr(value)
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 3] + "..."


def finite(value: object, where: str, allowed: str) -> float:
    """A JSON number that is finite (no bool, no string, no NaN or infinity), else BadReport."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadReport(f"{where} is {excerpt(value)}, not a number; allowed: {allowed}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise BadReport(f"{where} is {excerpt(value)}; allowed: {allowed}")
    return number


def positive(value: object, where: str, allowed: str) -> float:
    """A finite number above 0 (a step's seconds, a rate)."""
    number = finite(value, where, allowed)
    if number <= 0:
        raise BadReport(f"{where} is {excerpt(value)}; allowed: {allowed}")
    return number


def whole(value: object, where: str, low: int, high: int, what: str) -> int:
    """A whole number from low to high (tokens, bytes, graphs)."""
    allowed = f"a whole number of {what} from {low:,} to {high:,}"
    number = finite(value, where, allowed)
    if not number.is_integer() or not low <= number <= high:
        raise BadReport(f"{where} is {excerpt(value)}; allowed: {allowed}")
    return int(number)


def step_tokens(value: object, where: str) -> int:
    return whole(value, where, 1, MAX_TOKENS_PER_STEP, "tokens (a step's real tokens)")


SECONDS = "a finite number of seconds above 0"


class Report:
    """A job's steps.jsonl (reporting.py writes it) read as it grows: each read takes only the bytes
    new since the last, a line being written waits for its end, and at most MAX_READ_BYTES are read
    in all; steps past `most` (the most the trial asks for) are not kept."""

    def __init__(
        self,
        path: Path,
        t0: float,
        most: int,
        knobs: Knobs | None = None,
        command: dict[str, Any] | None = None,
    ) -> None:
        self.path, self.t0, self.most = path, t0, most
        # the trial's knobs, compared with the job's settings (said.settings_said), and how the
        # command's knobs reach it (its command section's knobs: a knob of your own is compared
        # where its values reach the job as they are)
        self.knobs, self.mappings = knobs or {}, (command or {}).get("knobs") or {}
        self.settings: dict[str, Setting] | None = None  # what the job ran with (job_settings)
        self.offset, self.lines = 0, 0
        self.rest = b""  # a line being written
        self.steps: list[dict[str, Any]] = []
        self.done: DoneLine | None = None

    def read(self) -> tuple[list[dict[str, Any]], DoneLine | None]:
        """The steps so far and the done line (None before it); BadReport for a line that cannot
        be."""
        new = self._new()
        now = time.time()  # after the read: every line read was stamped before it
        *complete, self.rest = (self.rest + new).split(b"\n")
        if len(self.rest) > MAX_LINE_BYTES:
            raise BadReport(self._long(self.lines + 1))
        for raw in complete:
            self.lines += 1
            self._take(raw, now)
        return list(self.steps), self.done

    def _new(self) -> bytes:
        """The bytes written since the last read, up to the bound; the file must be a regular one
        (a FIFO or a device there would block or never end)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            return b""
        except OSError as err:
            raise BadReport(f"{self.path.name} cannot be read: {err.strerror}") from None
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise BadReport(f"{self.path.name} is not a regular file: the job replaced it")
            f.seek(self.offset)
            data = f.read(max(0, MAX_READ_BYTES - self.offset))
        self.offset += len(data)
        return data

    def _long(self, number: int) -> str:
        return (
            f"{self.path.name} line {number} is over {MAX_LINE_BYTES:,} bytes (a step's line is "
            f"about 100): not a report line; each line is {LINE_FORMAT}"
        )

    def _take(self, raw: bytes, now: float) -> None:
        where = f"{self.path.name} line {self.lines}"
        if len(raw) > MAX_LINE_BYTES:
            raise BadReport(self._long(self.lines))
        if not raw.strip():
            return
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise BadReport(
                f"{where} is not a JSON object: {excerpt(raw.decode(errors='replace'))}; each line "
                f"is {LINE_FORMAT}"
            )
        if "failed" in doc:
            raise JobFailed(failed_reason(doc["failed"], where))
        if "job_settings" in doc:
            self.settings, read_from = settings_line(doc, where)
            if why := settings_said(self.settings, read_from, self.knobs, self.mappings):
                raise JobFailed(why, Status.INVALID_CONFIG)
        elif "done" in doc:
            self.done = done_line(doc, where)
        elif len(self.steps) < self.most:
            self.steps.append(self._step(doc, where, now))

    def _step(self, doc: dict[str, Any], where: str, now: float) -> dict[str, Any]:
        """A step line, its fields checked, its time within the wall clock since the report before
        it (the trial's start for the first)."""
        for key in ("s", "tokens", "at"):
            if key not in doc:
                raise BadReport(f"{where} has no {key!r}: each step line is {LINE_FORMAT}")
        step = dict(doc)
        step["s"] = positive(doc["s"], f"{where}: s", SECONDS)
        step["tokens"] = step_tokens(doc["tokens"], f"{where}: tokens")
        step["at"] = self._at(doc["at"], f"{where}: at", now)
        if doc.get("padded") is not None:
            what = "tokens (padding included: at least the step's real tokens)"
            named = f"{where}: padded"
            step["padded"] = whole(doc["padded"], named, step["tokens"], MAX_TOKENS_PER_STEP, what)
        if doc.get("graphs") is not None:
            step["graphs"] = whole(doc["graphs"], f"{where}: graphs", 0, 2**31, "graphs compiled")
        self._within_clock(step, where)
        return step

    def _within_clock(self, step: dict[str, Any], where: str) -> None:
        """A step lasts no longer than the wall clock since the report before it (its `at`; the
        trial's start for the first), within the clocks' slack."""
        gap = step["at"] - (self.steps[-1]["at"] if self.steps else self.t0)
        if step["s"] > gap + CLOCK_SLACK_S + CLOCK_DRIFT * abs(gap):
            since = "the report before it" if self.steps else "the trial started the job"
            raise BadReport(
                f"{where}: s is {step['s']:.6g} s, longer than the {gap:.6g} s since {since} (its "
                f"'at' stamps, within {CLOCK_SLACK_S:g} s): a step cannot outlast the wall clock"
            )

    def _at(self, value: object, where: str, now: float) -> float:
        """A step's wall-clock stamp: between the trial's start and the trial's reading of it."""
        low, high = self.t0, now
        slack = CLOCK_SLACK_S + CLOCK_DRIFT * (high - low)
        allowed = (
            f"the job's time.time() at the step's end, from {low - slack:.3f} to {high + slack:.3f}"
        )
        at = finite(value, where, allowed)
        if not low - slack <= at <= high + slack:
            raise BadReport(f"{where} is {excerpt(value)}; allowed: {allowed} (the trial's clock)")
        return at


class DoneLine(TypedDict, total=False):
    """The job's done line as the trial reads it (done_line): what its allocator counted at its
    peak (reporting.py, the callbacks) and its device's name, each where the job gave it."""

    done: bool
    peak_mem_bytes: int
    peak_mem_reserved_bytes: int
    resident_mem_bytes: int  # allocated at a step's end, the most (reporting.Reporter.resident)
    device_name: str


def done_line(doc: dict[str, Any], where: str) -> DoneLine:
    """The job's last line: `done` true, its peak memory in bytes, its device's name."""
    if doc["done"] is not True:
        allowed = "true (the job's last line)"
        raise BadReport(f"{where}: done is {excerpt(doc['done'])}; allowed: {allowed}")
    done = DoneLine(done=True)
    if doc.get("peak_mem_bytes") is not None:
        done["peak_mem_bytes"] = _bytes(doc["peak_mem_bytes"], "peak_mem_bytes", where)
    if doc.get("peak_mem_reserved_bytes") is not None:
        reserved = doc["peak_mem_reserved_bytes"]
        done["peak_mem_reserved_bytes"] = _bytes(reserved, "peak_mem_reserved_bytes", where)
    if doc.get("resident_mem_bytes") is not None:
        resident = doc["resident_mem_bytes"]
        done["resident_mem_bytes"] = _bytes(resident, "resident_mem_bytes", where)
    name = doc.get("device_name")
    if isinstance(name, str) and 0 < len(name) <= MAX_NAME_CHARS and name.isprintable():
        done["device_name"] = name
    elif name is not None:
        allowed = f"the device's name, printable text of 1 to {MAX_NAME_CHARS} characters"
        raise BadReport(f"{where}: device_name is {excerpt(name)}; allowed: {allowed}")
    return done


def _bytes(value: object, key: str, where: str) -> int:
    return whole(value, f"{where}: {key}", 0, MAX_MEMORY_BYTES, "bytes")


def failed_reason(value: object, where: str) -> str:
    """A "failed" line's reason: one line of printable text."""
    if isinstance(value, str) and 0 < len(value) <= MAX_REASON_CHARS and value.isprintable():
        return value
    allowed = f"the job's reason, one printable line of 1 to {MAX_REASON_CHARS} characters"
    raise BadReport(f"{where}: failed is {excerpt(value)}; allowed: {allowed}")


def _short(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_SETTING_CHARS and value.isprintable()


def settings_line(doc: dict[str, Any], where: str) -> tuple[dict[str, Setting], dict[str, str]]:
    """A job_settings line: knob names to a bool, a whole number or a short text, and where each
    was read (read_from)."""
    settings, read_from = doc["job_settings"], doc.get("read_from") or {}
    for name, table in (("job_settings", settings), ("read_from", read_from)):
        if not isinstance(table, dict) or len(table) > MAX_SETTINGS:
            allowed = f"an object of at most {MAX_SETTINGS} settings"
            raise BadReport(f"{where}: {name} is {excerpt(table)}; allowed: {allowed}")
        for key, value in table.items():
            plain = isinstance(value, bool) or _short(value)
            plain = plain or (isinstance(value, int) and 0 <= value < 2**31 and name != "read_from")
            if not _short(key) or not plain:
                allowed = "a knob's name to a bool, a whole number or a short text"
                raise BadReport(f"{where}: {name} has {excerpt({key: value})}; allowed: {allowed}")
    return settings, read_from


def clock_said(steps: list[dict[str, Any]], start: int, end: int) -> str:
    """Why the window steps[start:end] cannot be as reported (its seconds under MIN_TIMED_SHARE of
    the wall clock between its reports, from the report before it), or ''."""
    timed = sum(s["s"] for s in steps[start:end])
    since = steps[start - 1]["at"] if start else steps[0]["at"] - steps[0]["s"]
    span = steps[end - 1]["at"] - since
    if span <= 0 or timed >= MIN_TIMED_SHARE * span:
        return ""
    share = f"{100 * timed / span:.2g}%"
    return (
        f"the job reported {timed:.6g} s for steps {start + 1} to {end}, {share} of the "
        f"{span:.6g} s between their reports (their 'at' stamps); a job's timed steps are at least "
        f"{MIN_TIMED_SHARE:.0%} of its time: time each whole optimizer step (reporting.step(), the "
        "callbacks)"
    )


def figure_said(tokens_per_s: float) -> str:
    """Why a window's figure cannot be (not finite, not above 0, past MAX_TOKENS_PER_S), or ''."""
    if math.isfinite(tokens_per_s) and 0 < tokens_per_s <= MAX_TOKENS_PER_S:
        return ""
    return (
        f"the job's figure is {tokens_per_s:.6g} tokens/s; allowed: above 0 and at most "
        f"{MAX_TOKENS_PER_S:.0e} (no hardware trains faster: command/report.py)"
    )
