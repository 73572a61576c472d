"""measure log: the job's steps read from lines of its output matching command.log_pattern
(command/log.py); asked to stop by SIGTERM. Its rules: the pattern is needed, compiles, names a
step's figure in the unit its text shows and reads no average since the start; a step's tokens
given as command.tokens_per_step, an arithmetic expression of the trial's knobs (parsed and
evaluated here: the schema and the trial read it)."""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from autotune.errors import excerpt
from autotune.modes._base import Mode


def _rules(section: Mapping[str, Any]) -> None:
    pattern = section.get("log_pattern")
    if not pattern:
        raise ValueError(
            "command.log_pattern: needed with measure log (a regex with a named group tokens_per_s)"
        )
    per_step = section.get("tokens_per_step")
    _check_pattern(pattern, per_step is not None)
    _check_units(pattern)
    if per_step is not None:
        _check_per_step(pattern, str(per_step))


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
FIGURES = ("tokens_per_s", "step_time_s", "step_time_ms", "tokens")  # a step's figure's groups
STEP_TIMES = {"step_time_s": 1.0, "step_time_ms": 1e-3}  # a step's time, as seconds
RATE_NAME = re.compile(r"tok|tps|per_s|throughput|step_time|samples|rate|speed", re.I)
NAMED = re.compile(r"\(\?P<(\w+)>")


def _check_pattern(pattern: str, per_step: bool) -> None:
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
    timed = named & set(STEP_TIMES)
    if len(timed) > 1:
        raise ValueError(
            f"command.log_pattern: {excerpt(pattern)} names both step_time_s and step_time_ms; "
            "keep the one of the unit the line prints"
        )
    counted = "tokens" in named or per_step
    if not {"tokens_per_s", "tokens_total"} & named and not (timed and counted):
        raise ValueError(
            f"command.log_pattern: {excerpt(pattern)} has no named group tokens_per_s, "
            "tokens_total, or "
            "step_time_s with tokens; e.g. 'tps: (?P<tokens_per_s>[0-9][0-9,.]*)' (or "
            "step_time_ms; a line without its tokens: command.tokens_per_step)"
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


# The unit a step's time group's text shows beside it: `ms` after (nanoGPT's "time 359.49ms") or
# as the label just before it (word_language_model's "ms/batch 12.34"), `s` after it. Regex
# whitespace (` `, `\s*`, `[ ]+`) between is skipped; letters bound the words (`msg`, `samples`
# are none).
SKIPPED = re.compile(r"(?:\\s|\\ | |\[ \])(?:[*+?]|\{\d*,?\d*\})?")
MS_WORD = re.compile(r"(?<![a-z])(ms|msec|millis|milliseconds?)(?![a-z])", re.I)
MS_AFTER = re.compile(r"(ms|msec|millis|milliseconds?)(?![a-z])", re.I)
S_AFTER = re.compile(r"(s|sec|secs|seconds?)(?![a-z])", re.I)
LABEL_REACH = 16  # characters before a figure that may be its label ("| ms/batch  ")


def _check_units(pattern: str) -> None:
    """A step time's group whose text shows another unit: step_time_s beside `ms` (a figure in
    milliseconds read as seconds, 1000x slow), step_time_ms followed by `s`."""
    for m in NAMED.finditer(pattern):
        name = m.group(1)
        if name not in STEP_TIMES:
            continue
        after = _skipped(pattern[_group_end(pattern, m.end()) :])
        label = NAMED.sub("(", pattern[max(0, m.start() - LABEL_REACH) : m.start()])
        milli = MS_AFTER.match(after) or MS_WORD.search(label)
        if name == "step_time_s" and milli:
            raise ValueError(
                f"command.log_pattern: {excerpt(pattern)} reads the group step_time_s, in "
                f"seconds, from a figure in milliseconds ({milli.group(0)!r} beside it in the "
                "pattern): a step of 359.49 ms would read as 359.49 s; name the group "
                "step_time_ms"
            )
        if name == "step_time_ms" and not milli and (said := S_AFTER.match(after)):
            raise ValueError(
                f"command.log_pattern: {excerpt(pattern)} reads the group step_time_ms, in "
                f"milliseconds, from a figure in seconds ({said.group(0)!r} follows it in the "
                "pattern); name the group step_time_s"
            )


def _skipped(text: str) -> str:
    """The text with the regex whitespace at its start taken off."""
    while (m := SKIPPED.match(text)) and m.end():
        text = text[m.end() :]
    return text


def _check_per_step(pattern: str, expression: str) -> None:
    """command.tokens_per_step gives the tokens of a line that times a step and counts none."""
    named = set(re.compile(pattern).groupindex)
    if "tokens" in named or not named & set(STEP_TIMES):
        raise ValueError(
            "command.tokens_per_step: only for a log_pattern with the group step_time_s or "
            "step_time_ms and no group tokens (a line that times a step and counts none); "
            f"{excerpt(pattern)} "
            + ("reads the tokens from the line" if "tokens" in named else "times no step")
        )
    per_step_names(expression)


# command.tokens_per_step: `{micro_batch_size} * {grad_accum_steps} * 64`, read with ast (never
# eval): numbers, the trial's knobs in braces, + - * / // and parentheses, nothing else.
PER_STEP = "command.tokens_per_step"
ALLOWED = "+, -, *, /, //, parentheses, numbers and {knob} names of the trial's knobs"
MAX_EXPRESSION = 300  # characters: a product of a few knobs and constants is far shorter
BRACED = re.compile(r"\{([^{}]*)\}")
HOLE = "__autotune_knob_"  # a braced name's stand-in in the parsed text: no name of a YAML's knob
OPERATORS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
}


def per_step_names(expression: str) -> list[str]:
    """The knob names of command.tokens_per_step (ValueError for anything but ALLOWED)."""
    return _parsed(expression)[2]


def per_step_tokens(expression: str, knobs: Mapping[str, object]) -> float:
    """command.tokens_per_step with the trial's knob values (ValueError: a knob without a number
    here, a division by zero)."""
    tree, source, names = _parsed(expression)
    values = {}
    for name in names:
        value = knobs.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            why = "has no value" if value is None else f"is {excerpt(value)}, not a number,"
            raise ValueError(f"{PER_STEP}: {{{name}}} {why} in this trial")
        values[f"{HOLE}{names.index(name)}"] = value
    try:
        return _value(tree, values)
    except ZeroDivisionError:
        shown = ", ".join(f"{n}={knobs.get(n)}" for n in dict.fromkeys(names))
        raise ValueError(f"{PER_STEP}: {excerpt(expression)} divides by zero ({shown})") from None


def _parsed(expression: str) -> tuple[ast.expr, str, list[str]]:
    """The expression's tree, its text with each `{knob}` a stand-in name, and the knobs named."""
    if len(expression) > MAX_EXPRESSION:
        raise ValueError(f"{PER_STEP}: {len(expression)} characters; at most {MAX_EXPRESSION}")
    names: list[str] = []

    def hole(m: re.Match[str]) -> str:
        name = m.group(1).strip()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"{PER_STEP}: {m.group(0)!r} is no knob name; allowed: {ALLOWED}")
        names.append(name)
        return f"{HOLE}{names.index(name)}"

    source = BRACED.sub(hole, expression).strip()
    if "{" in source or "}" in source:
        raise ValueError(
            f"{PER_STEP}: {excerpt(expression)} has a brace unmatched; a knob is "
            "written {micro_batch_size}"
        )
    try:
        tree = ast.parse(source, mode="eval").body
    except SyntaxError:
        raise ValueError(
            f"{PER_STEP}: {excerpt(expression)} is no arithmetic expression; allowed: {ALLOWED}"
        ) from None
    _check(tree, source, names)
    return tree, source, names


def _check(node: ast.expr, source: str, names: list[str]) -> None:
    """Every part of the tree is ALLOWED, else ValueError naming the first part that is not."""
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        _check(node.left, source, names)
        _check(node.right, source, names)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        _check(node.operand, source, names)
        return
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return
    if isinstance(node, ast.Name) and node.id.startswith(HOLE):
        return
    part = re.sub(
        rf"{HOLE}(\d+)",
        lambda m: f"{{{names[int(m.group(1))]}}}",
        ast.get_source_segment(source, node) or "",
    )
    if isinstance(node, ast.Name):
        raise ValueError(f"{PER_STEP}: {part!r} is a bare name; write a knob as {{{part}}}")
    raise ValueError(f"{PER_STEP}: {excerpt(part)} is not allowed; allowed: {ALLOWED}")


def _value(node: ast.expr, values: Mapping[str, float]) -> float:
    """The checked tree's value (_check allowed each part)."""
    if isinstance(node, ast.BinOp):
        return OPERATORS[type(node.op)](_value(node.left, values), _value(node.right, values))
    if isinstance(node, ast.UnaryOp):
        inner = _value(node.operand, values)
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.Name):
        return values[node.id]
    assert isinstance(node, ast.Constant) and isinstance(node.value, (int, float))
    return node.value


MODE = Mode(
    name="log",
    help="lines of its output matching log_pattern",
    rules=_rules,
    reads="output",
    stop="signal",
)
