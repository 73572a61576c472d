"""What every format shares: the Form it returns, a knob's translation (Out, Rule), the loop that
names what a format cannot express (translate), the knobs only the model's code holds, torchrun's
launch, and the text helpers (environment lines, Python literals and calls)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autotune.command.render import text_of
from autotune.export._winner import ENV_KNOBS, Winner


@dataclass
class Form:
    """The winner in one format: the text to paste, and the knobs it cannot express ("knob=value
    (why)"), which the text names too, as `# no equivalent in <format>: ...` lines."""

    format: str
    text: str
    missing: list[str] = field(default_factory=list)


@dataclass
class Out:
    """What one knob value becomes in a format: arguments (keyword arguments, or a config's dotted
    keys), lines of code to add, or `none`: why it has no equivalent (named when the value is not
    autotune's default, or always when `always`: the framework does otherwise even then)."""

    args: dict[str, Any] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    none: str | None = None
    always: bool = False


Rule = Callable[[Any, Winner], Out]


def no_equivalent(why: str) -> Out:
    return Out(none=why)


def unlike(why: str) -> Out:
    """No equivalent even at autotune's default value: the framework does otherwise."""
    return Out(none=why, always=True)


def same(value: Any, w: Winner) -> Out:
    """The rule of a knob another rule expresses (a DDP option inside the strategy)."""
    return Out()


def _attention_code(value: Any) -> str:
    if value == "eager":
        return "attention as softmax(QK^T)V, materialised: your model's code"
    return (
        "an SDPA backend forced with torch.nn.attention.sdpa_kernel around the forward; "
        'attn_implementation="sdpa" leaves the choice to PyTorch'
    )


# The knobs that change the model's own code: no framework's configuration holds them (why, by
# value).
MODEL_CODE: dict[str, Callable[[Any], str]] = {
    "attention": _attention_code,
    "pad_vocab_multiple": lambda v: (
        "a change to the model: embedding and head padded, logits cut before the loss"
    ),
    "cross_entropy": lambda v: (
        "autotune's chunked loss: head and cross-entropy over token slices, each checkpointed"
    ),
}


def launcher(w: Winner) -> list[str]:
    """torchrun's arguments: --standalone on one node, a c10d rendezvous on several (run it on every
    node)."""
    per_node = ["--nproc-per-node", str(w.world_size // w.nnodes)]
    if w.nnodes == 1:
        return ["torchrun", "--standalone", *per_node]
    endpoint = w.rdzv_endpoint or "HOST:PORT"
    return [
        "torchrun",
        "--nnodes",
        str(w.nnodes),
        *per_node,
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        endpoint,
    ]


@dataclass
class Translation:
    """A format's reading of the winner's knobs: the arguments and lines, in knob order, and what is
    missing."""

    args: dict[str, Any] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def translate(w: Winner, rules: dict[str, Rule], otherwise: str) -> Translation:
    """Each knob of the winner through the format's rules. An environment knob is the environment
    lines'; a knob of your command (task command) is yours; a knob without a rule has no equivalent,
    `otherwise` says why."""
    done = Translation()
    for name, value in w.knobs.items():
        if value is None or name in ENV_KNOBS:
            continue
        out = _out(name, value, w, rules, otherwise)
        done.args.update(out.args)
        done.lines += [line for line in out.lines if line not in done.lines]
        if out.none is not None and (out.always or w.differs(name)):
            done.missing.append(f"{name}={text_of(value)} ({out.none})")
    return done


def _out(name: str, value: Any, w: Winner, rules: dict[str, Rule], otherwise: str) -> Out:
    if name in w.user_knobs:
        return no_equivalent("a knob of your command")
    if name in rules:
        return rules[name](value, w)
    if name in MODEL_CODE:
        return no_equivalent(MODEL_CODE[name](value))
    return no_equivalent(otherwise)


def missing_lines(fmt: str, missing: list[str]) -> list[str]:
    """One comment line each: a value's newline or other control character is written escaped,
    so that nothing a knob holds ends the comment in any format."""
    return [f"# no equivalent in {fmt}: {one_line(m)}" for m in missing]


def one_line(text: str) -> str:
    """Text with every character that is not printable (newlines, carriage returns, U+2028, ...)
    escaped."""
    return "".join(c if c.isprintable() else _escaped(c) for c in text)


def _escaped(c: str) -> str:
    return c.encode("unicode_escape").decode("ascii")


def export_lines(env: dict[str, str]) -> list[str]:
    """The environment as shell lines, one variable a line."""
    return [f"export {name}={shlex.quote(value)}" for name, value in env.items()]


def env_block(env: dict[str, str], prefix: str = "") -> list[str]:
    """The environment section of a form (empty when nothing is set); `prefix` comments it out
    (TOML)."""
    if not env:
        return []
    return [
        "# environment of every rank, set before launching",
        *[prefix + line for line in export_lines(env)],
    ]


class Code(str):
    """A Python expression written as it is (not as a string literal)."""


def py(value: Any) -> str:
    """A value as Python source: strings in double quotes, True/False, dicts and lists of those."""
    if isinstance(value, Code):
        return str(value)
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py(k)}: {py(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(py(v) for v in value) + "]"
    return repr(value)


def call(name: str, kwargs: dict[str, Any]) -> list[str]:
    """`name(` with one keyword argument a line, then `)`."""
    return [f"{name}(", *[f"    {key}={py(value)}," for key, value in kwargs.items()], ")"]
