"""A command job's output: copied line by line into the trial's log, its tail kept, and (measure
log) its lines matching command.log_pattern turned into steps.

A pattern's numbers are read whole: `2.2e+04` is 22,000 even where the pattern's group stopped at
`2.2` (the README's old `[0-9,.]+` read the HF Trainer's figures 10,000x low). A figure that is an
average since the start (the Trainer's `train_samples_per_second`, words such as avg, mean, overall,
since start, before the number) is refused: it describes the run from its start, compile included,
never a step. A cumulative count (the group tokens_total, e.g. the Trainer's num_input_tokens_seen)
is turned into steps by its differences over the lines' arrival times.
"""

from __future__ import annotations

import collections
import difflib
import re
import sys
import threading
import time
from typing import Any

TAIL_LINES = 100  # of the job's output, read for a failure's telling line (a traceback, its noise)
LINE_BYTES = 64 << 10
EXPONENT = re.compile(r"[eE][+-]?\d+")
AVERAGE = re.compile(
    r"(train_\w*per_second|\bavg\b|average|\bmean\b|overall|since[ _]start|cumulative)", re.I
)
AVERAGE_REACH = 40  # characters before the number where such a word marks an average


class CumulativeFigure(ValueError):
    """The pattern matched an average since the start: the line, for the reason."""


def number(text: str) -> float:
    return float(text.replace(",", "").replace("_", ""))


def whole(line: str, m: re.Match[str], group: str) -> str:
    """The group's text with an exponent that follows it in the line (2.2 of 2.2e+04 -> 2.2e+04)."""
    text = m.group(group)
    more = EXPONENT.match(line, m.end(group))
    return text + more.group(0) if more and not EXPONENT.search(text) else text


def averaged(line: str, m: re.Match[str]) -> bool:
    """Whether a word of averages stands just before the figure (or is the figure's key)."""
    first = min(m.start(g) for g in m.re.groupindex if m.group(g) is not None)
    return bool(AVERAGE.search(line[max(0, first - AVERAGE_REACH) : first]))


def sample(line: str, m: re.Match[str], at: float) -> dict[str, Any]:
    """A log line's sample: seconds and tokens of a step, a throughput (one token in 1/tps seconds),
    or a running token count (turned into steps by `steps_of`)."""
    groups = m.groupdict()
    if groups.get("tokens_total") is not None:
        return {"total": number(whole(line, m, "tokens_total")), "at": at}
    if averaged(line, m):
        raise CumulativeFigure(line.strip()[:200])
    if groups.get("step_time_s") is not None:
        return {
            "s": number(whole(line, m, "step_time_s")),
            "tokens": int(number(whole(line, m, "tokens"))),
            "at": at,
        }
    return {"s": 1.0 / number(whole(line, m, "tokens_per_s")), "tokens": 1, "at": at}


def steps_of(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Steps from the samples: a running count's differences over its lines' arrival times."""
    if not samples or "total" not in samples[0]:
        return list(samples)
    out = []
    for before, after in zip(samples, samples[1:]):
        seconds = after["at"] - before["at"]
        if seconds > 0 and after["total"] >= before["total"]:
            out.append(
                {"s": seconds, "tokens": int(after["total"] - before["total"]), "at": after["at"]}
            )
    return out


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

    def __init__(self, stream: Any, pattern: str | None) -> None:
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.pattern = re.compile(pattern) if pattern else None
        self.samples: list[dict[str, Any]] = []
        self.refused: str | None = None  # a cumulative figure's line
        self.seen: collections.deque[str] = collections.deque(maxlen=200)  # for close_lines
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: Any) -> None:
        for raw in iter(
            lambda: stream.readline(LINE_BYTES), b""
        ):  # a line without end is read in pieces
            sys.stdout.buffer.write(raw)
            sys.stdout.flush()
            line = raw.decode(errors="replace").rstrip()
            self.tail.append(line)
            self.seen.append(line)
            if self.pattern is not None and (m := self.pattern.search(line)):
                self._take(line, m)

    def _take(self, line: str, m: re.Match[str]) -> None:
        try:
            self.samples.append(sample(line, m, time.time()))
        except CumulativeFigure as err:
            self.refused = self.refused or str(err)
        except (ValueError, ZeroDivisionError):
            pass  # a figure of 0, or text the group took that is no number: no step

    def steps(self) -> list[dict[str, Any]]:
        return steps_of(list(self.samples))

    def text(self) -> str:
        return "\n".join(self.tail)
