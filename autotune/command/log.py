"""A command job's output: copied line by line into the trial's log, its tail kept, and (measure
log) its lines matching command.log_pattern turned into steps.

A pattern's numbers are read whole: `2.2e+04` is 22,000 even where the pattern's group stopped at
`2.2` (the README's old `[0-9,.]+` read the HF Trainer's figures 10,000x low). A figure that is an
average since the start (the Trainer's `train_samples_per_second`, words such as avg, mean, overall,
since start, before the number) is refused: it describes the run from its start, compile included,
never a step. A cumulative count (the group tokens_total, e.g. the Trainer's num_input_tokens_seen,
which counts padding unless the job passes --include_num_input_tokens_seen non_padding:
docs/command.md) is turned into steps by its differences over the lines' arrival times. Every
figure read is checked (report.py): one that is no finite number in its range (`tps: 0`,
`tps: -5000`, `tps: 1e400`) fails the trial, naming the line; the reader never dies (the job would
block on its full pipe).
"""

from __future__ import annotations

import collections
import difflib
import re
import sys
import threading
import time
from collections.abc import Mapping
from typing import IO, Any

from autotune.command import report as checks
from autotune.command.report import MAX_TOKENS_PER_S, SECONDS, BadReport, excerpt
from autotune.modes.log import LABEL_REACH, MS_AFTER, MS_WORD, S_AFTER, STEP_TIMES, per_step_tokens
from autotune.reporting import MAX_STEP_LINES
from autotune.status import Status
from autotune.workloads.base import Failed

TAIL_LINES = 100  # of the job's output, read for a failure's telling line (a traceback, its noise)
LINE_BYTES = 64 << 10
EXPONENT = re.compile(r"[eE][+-]?\d+")
AVERAGE = re.compile(
    r"(train_\w*per_second|\bavg\b|average|\bmean\b|overall|since[ _]start|cumulative)", re.I
)
AVERAGE_REACH = 40  # characters before the number where such a word marks an average
RATE = f"tokens a second above 0 and at most {MAX_TOKENS_PER_S:.0e} (no hardware trains faster)"
TOTAL = "a whole number of tokens seen so far, 0 or more"
MAX_SAMPLES = MAX_STEP_LINES  # a log's samples kept at most (a running count may repeat)


class CumulativeFigure(ValueError):
    """The pattern matched an average since the start: the line, for the reason."""


def number(text: str, where: str, allowed: str) -> float:
    """The group's text as a number (1,234 and 1_234 too), else BadReport."""
    try:
        return float(text.replace(",", "").replace("_", ""))
    except ValueError:
        raise BadReport(f"{where} is {excerpt(text)}, not a number; allowed: {allowed}") from None


def whole(line: str, m: re.Match[str], group: str) -> str:
    """The group's text with an exponent that follows it in the line (2.2 of 2.2e+04 -> 2.2e+04)."""
    text = m.group(group)
    more = EXPONENT.match(line, m.end(group))
    return text + more.group(0) if more and not EXPONENT.search(text) else text


def averaged(line: str, m: re.Match[str]) -> bool:
    """Whether a word of averages stands just before the figure (or is the figure's key)."""
    first = min(m.start(g) for g in m.re.groupindex if m.group(g) is not None)
    return bool(AVERAGE.search(line[max(0, first - AVERAGE_REACH) : first]))


def figure(line: str, m: re.Match[str], group: str, allowed: str) -> tuple[float, str]:
    """The group's number and where it was read (for a reason), BadReport when it is none."""
    where = f"command.log_pattern's {group} in the line {excerpt(line.strip())}"
    return number(whole(line, m, group), where, allowed), where


def sample(line: str, m: re.Match[str], at: float, per_step: float | None = None) -> dict[str, Any]:
    """A log line's sample: seconds and tokens of a step (its tokens `per_step` where the line has
    none: command.tokens_per_step), a throughput (one token in 1/tps seconds), or a running token
    count (turned into steps by `steps_of`); each checked (BadReport)."""
    groups = m.groupdict()
    if groups.get("tokens_total") is not None:
        total, where = figure(line, m, "tokens_total", TOTAL)
        return {"total": checks.whole(total, where, 0, 2**62, "tokens (a running count)"), "at": at}
    if averaged(line, m):
        raise CumulativeFigure(line.strip()[:200])
    timed = next((g for g in STEP_TIMES if groups.get(g) is not None), None)
    if timed is not None:
        value, where = figure(line, m, timed, SECONDS)
        seconds = checks.positive(value, where, SECONDS) * STEP_TIMES[timed]
        unit_said(line, m, timed, seconds, where)
        step = {"s": seconds, "at": at}
        if per_step is not None:  # command.tokens_per_step, with the trial's knobs
            where = f"command.tokens_per_step for the line {excerpt(line.strip())}"
            return {**step, "tokens": checks.step_tokens(per_step, where)}
        tokens, where = figure(line, m, "tokens", "a whole number of tokens above 0")
        return {**step, "tokens": checks.step_tokens(tokens, where)}
    rate, where = figure(line, m, "tokens_per_s", RATE)
    if checks.positive(rate, where, RATE) > MAX_TOKENS_PER_S:
        raise BadReport(f"{where} is {excerpt(rate)}; allowed: {RATE}")
    return {"s": 1.0 / rate, "tokens": 1, "at": at}


# A step's time read in one unit from a line that prints it in the other. The line's own word
# beside the figure decides: `ms` right after it (nanoGPT's "time 359.49ms") or as its label just
# before it (word_language_model's "ms/batch 12.34") read as seconds, `s` right after a figure read
# as milliseconds. Elsewhere in the line within AVERAGE_REACH of the figure, `ms` is a hint, not
# proof (a line may time its data loading in ms beside a step in seconds), so it refuses only
# where the step it implies is implausible: SLOW_STEP_S or more. A step of a minute is slow but
# real (a large model, a long accumulation); a job that prints milliseconds beside it is timing
# steps of milliseconds, whose figures (tens to thousands) read as seconds give steps of tens of
# seconds to hours and a rate 1000x low: nanoGPT's 359.49 ms, read as 359.49 s, a 6-minute step.
SLOW_STEP_S = 60.0


def unit_said(line: str, m: re.Match[str], group: str, seconds: float, where: str) -> None:
    """BadReport naming the unit where the line says the step's time is in the other one."""
    end = m.end(group)
    end += (more.end() - end) if (more := EXPONENT.match(line, end)) else 0
    after = line[end : end + 16].lstrip()
    # the figure's label: the text just before it, after the line's previous number
    label = re.split(r"[0-9]", line[max(0, m.start(group) - LABEL_REACH) : m.start(group)])[-1]
    milli = MS_AFTER.match(after) or MS_WORD.search(label)
    rename = "name the group step_time_ms (the figure is milliseconds)"
    if group == "step_time_s" and milli:
        raise BadReport(
            f"{where} reads as {seconds:g} s a step, but the line gives it in ms "
            f"({milli.group(0)!r} beside it): a figure in milliseconds read as seconds (1000x "
            f"slow); {rename}"
        )
    if group == "step_time_ms" and not milli and (said := S_AFTER.match(after)):
        raise BadReport(
            f"{where} reads as {seconds * 1000:g} ms a step, but the line gives it in seconds "
            f"({said.group(0)!r} follows it): name the group step_time_s"
        )
    near = line[max(0, m.start(group) - AVERAGE_REACH) : end + AVERAGE_REACH]
    if group == "step_time_s" and seconds >= SLOW_STEP_S and MS_WORD.search(near):
        raise BadReport(
            f"{where} reads as {seconds:g} s a step ({SLOW_STEP_S:g} s or more) on a line that "
            f"says ms beside it: a figure in milliseconds read as seconds (1000x slow); {rename}"
        )


def steps_of(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Steps from the samples: a running count's differences over its lines' arrival times. A line
    that repeats the count (a loss line, then an evaluation's) or comes at the same instant is no
    step: its time and tokens go to the next one; a count that falls (a restart) starts over."""
    if not samples or "total" not in samples[0]:
        return list(samples)
    out, before = [], samples[0]
    for after in samples[1:]:
        seconds, tokens = after["at"] - before["at"], after["total"] - before["total"]
        if tokens > 0 and seconds > 0:
            out.append({"s": seconds, "tokens": tokens, "at": after["at"]})
        if tokens < 0 or (tokens > 0 and seconds > 0):
            before = after
    return out


def per_step_of(command: Mapping[str, Any], knobs: Mapping[str, object]) -> float | None:
    """command.tokens_per_step with the trial's knobs (None: the lines count their tokens); a knob
    without a number here, or a division by zero, fails the trial."""
    expression = command.get("tokens_per_step")
    if expression is None:
        return None
    try:
        return per_step_tokens(str(expression), knobs)
    except ValueError as err:
        raise Failed(Status.INVALID_CONFIG, str(err)) from None


def close_lines(lines: list[str], pattern: str, k: int = 3) -> list[str]:
    """The lines that look most like the pattern (its literal text), for a pattern that never
    matched."""
    literal = re.sub(r"\(\?P<\w+>[^)]*\)|[\\^$.*+?()[\]{}|]", " ", pattern)
    scored = [
        (difflib.SequenceMatcher(None, literal, line).ratio(), line)
        for line in lines
        if line.strip()
    ]
    return [line.strip()[:160] for _, line in sorted(scored, reverse=True)[:k]]


class Output:
    """The job's output, copied line by line into the trial's log; its tail kept, its pattern's
    samples read."""

    def __init__(
        self,
        stream: IO[bytes],
        pattern: str | None,
        most: int = MAX_STEP_LINES,
        per_step: float | None = None,
    ) -> None:
        self.per_step = per_step  # a step's tokens where its line has none (tokens_per_step)
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.pattern = re.compile(pattern) if pattern else None
        self.samples: list[dict[str, Any]] = []
        self.most = most  # steps at most: the trial asks for no more
        self.refused: str | None = None  # a cumulative figure's line
        self.bad: str | None = None  # the first figure that cannot be: the trial's reason
        self.seen: collections.deque[str] = collections.deque(maxlen=200)  # for close_lines
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        for raw in iter(
            lambda: stream.readline(LINE_BYTES), b""
        ):  # a line without end is read in pieces
            sys.stdout.buffer.write(raw)
            sys.stdout.flush()
            line = raw.decode(errors="replace").rstrip()
            self.tail.append(line)
            self.seen.append(line)
            if self.pattern is not None and len(self.samples) < MAX_SAMPLES:
                self._take(line)

    def _take(self, line: str) -> None:
        """The line's sample, if the pattern matches; a figure that cannot be is kept as the
        trial's reason (never raised: the reader goes on, the job never blocks on its pipe)."""
        try:
            if m := self.pattern.search(line):  # type: ignore[union-attr]
                self.samples.append(sample(line, m, time.time(), self.per_step))
        except CumulativeFigure as err:
            self.refused = self.refused or str(err)
        except BadReport as err:
            self.bad = self.bad or str(err)
        except Exception as err:  # noqa: BLE001  whatever a line holds, the reader goes on
            where = f"command.log_pattern in the line {excerpt(line.strip())}"
            self.bad = self.bad or f"{where}: {type(err).__name__}: {excerpt(str(err))}"

    def steps(self) -> list[dict[str, Any]]:
        return steps_of(list(self.samples))[: self.most]

    def text(self) -> str:
        return "\n".join(self.tail)
