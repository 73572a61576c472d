"""measure log: the job's steps read from lines of its output matching command.log_pattern
(command/log.py); asked to stop by SIGTERM. Its rules: the pattern is needed, compiles, names a
step's figure and reads no average since the start."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from autotune.errors import excerpt
from autotune.modes._base import Mode


def _rules(section: Mapping[str, Any]) -> None:
    pattern = section.get("log_pattern")
    if not pattern:
        raise ValueError(
            "command.log_pattern: needed with measure log (a regex with a named group tokens_per_s)"
        )
    _check_pattern(pattern)


# Words of an average since the start (the HF Trainer's train_samples_per_second, avg, mean, ...):
# the trial refuses a line whose figure has one before it (command/log.AVERAGE, a line's words);
# here the pattern's own text is read for them, so `validate` refuses it before any trial. Letters,
# not \b, bound them: avg_tokens_per_s is one.
AVERAGE = re.compile(
    r"(train_\w*per_second|(?<![a-z])(avg|average|mean|overall|cumulative)(?![a-z])"
    r"|since[\W_]*(the[\W_]*)?start|(?<![a-z])running[\W_]*(avg|average|mean|rate|tps|throughput"
    r"|tokens|speed))",
    re.I,
)
AVERAGE_REACH = 40  # characters of the pattern before a figure's group, as the trial reads a line
FIGURES = ("tokens_per_s", "step_time_s", "tokens")  # the groups of a step's figure
RATE_NAME = re.compile(r"tok|tps|per_s|throughput|step_time|samples|rate|speed", re.I)
NAMED = re.compile(r"\(\?P<(\w+)>")


def _check_pattern(pattern: str) -> None:
    try:
        groups = re.compile(pattern).groupindex
    except re.error as err:
        raise ValueError(
            f"command.log_pattern: {excerpt(pattern)} is not a regular expression: {err}"
        ) from None
    named = set(groups)
    if "tokens_total" not in named and (said := _averaged(pattern)) is not None:
        raise ValueError(
            f"command.log_pattern: {excerpt(pattern)} reads an average since the start ({said}), "
            "not a step's figure; allowed: a figure per step (tokens_per_s, or step_time_s with "
            "tokens), a running count of tokens as the group tokens_total, or measure: hf / "
            "lightning (autotune's callback, no edit)"
        )
    if not {"tokens_per_s", "tokens_total"} & named and not {"step_time_s", "tokens"} <= named:
        raise ValueError(
            f"command.log_pattern: {excerpt(pattern)} has no named group tokens_per_s, "
            "tokens_total, or "
            "step_time_s with tokens; e.g. 'tps: (?P<tokens_per_s>[0-9][0-9,.]*)'"
        )


def _averaged(pattern: str) -> str | None:
    """Where the pattern's text says its figure is an average since the start: a figure-like
    group named so (avg_tokens_per_s), or such a word in the text before its first group (where
    the trial looks in a line) or just around a figure's group; None where nothing says so."""
    for name in NAMED.findall(pattern):
        if AVERAGE.search(name) and RATE_NAME.search(name):
            return f"the group {name}"
    starts = [(m.start(), m.end(), m.group(1)) for m in NAMED.finditer(pattern)]
    nearby = [(0, starts[0][0], starts[0][2])] if starts else []
    for start, end, name in starts:
        if name in FIGURES:
            close = _group_end(pattern, end)
            nearby += [(start - AVERAGE_REACH, start, name), (close, close + 12, name)]
    for begin, end, name in nearby:
        # the other groups' names are no words of the line: (?P<mean_loss> is no "mean"
        text = NAMED.sub("(", pattern[max(0, begin) : end])
        if found := AVERAGE.search(text):
            return f"{found.group(0)!r} by the group {name}"
    return None


def _group_end(pattern: str, start: int) -> int:
    """The index after the `)` that closes the group whose text starts at `start`."""
    depth, i = 1, start
    while i < len(pattern) and depth:
        if pattern[i] == "\\":
            i += 1
        elif pattern[i] == "(":
            depth += 1
        elif pattern[i] == ")":
            depth -= 1
        i += 1
    return i


MODE = Mode(
    name="log",
    help="lines of its output matching log_pattern",
    rules=_rules,
    reads="output",
    stop="signal",
)
