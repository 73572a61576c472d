"""The error family and every exit code: each failure the user can cause ends here as one line and a
code."""

from __future__ import annotations

import re
from enum import IntEnum


class ExitCode(IntEnum):
    """autotune's exit codes (README's table and `autotune --help` are made from EXIT_MEANINGS)."""

    OK = 0
    FAILED = 1
    BAD_INPUT = 2
    UNMEASURED = 3
    INTERNAL = 4
    # check measured but cannot decide: apart from 3 (could not measure, or disturbed) so that CI
    # can tell a scattered measurement from a broken or shared machine
    INCONCLUSIVE = 5
    HANGUP = 129  # 128 + SIGHUP
    INTERRUPTED = 130  # 128 + SIGINT
    TERMINATED = 143  # 128 + SIGTERM


EXIT_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: (
        "done; `check`: pass (or faster): the 95% interval of the ratio lies above 1 - tolerance"
    ),
    ExitCode.FAILED: (
        "`search`: no trial succeeded; `check`: regression (the interval lies below 1 - tolerance, "
        "or the nightly series stepped down); `nccl`: no setting ran"
    ),
    ExitCode.BAD_INPUT: (
        "bad input: usage, missing file, invalid YAML, schema error, a study made from another "
        "YAML; `check`: another GPU model than the baseline's; also what the machine refused: a "
        "full disk, a storage that cannot be reached"
    ),
    ExitCode.UNMEASURED: (
        "`search`: the baseline could not be measured whatever its knobs (task command: an "
        "average since the start refused, no step reported), or it failed and the next trial "
        "failed the same way, so the search stopped; "
        "`check`: could not measure (every repeat failed; the reason is shown), or unreliable: "
        "measured while other processes ran on the GPU, the host's load per core was past "
        "`--max-load` or a repeat's processes waited for a CPU over 20% of the time they were "
        "ready to run (named), so neither a pass nor a regression can be trusted; "
        "`check --reset-baseline` and `--update`: the baseline was not recorded, its processes "
        "measured beside such work or spread more than the gate can use (named)"
    ),
    ExitCode.INTERNAL: (
        "an error inside autotune (a bug): one line naming it; `--debug` shows the traceback"
    ),
    ExitCode.INCONCLUSIVE: (
        "`check`: inconclusive: measured, but the ratio's 95% interval lies neither above nor "
        "below 1 - tolerance (repeats that scatter, one sample a side), also after "
        "`--max-repeats`; the verdict says why and what would settle it"
    ),
    ExitCode.HANGUP: (
        "hung up (SIGHUP: the terminal closed): handled as Ctrl-C; the study is kept and resumable"
    ),
    ExitCode.INTERRUPTED: (
        "interrupted (Ctrl-C); the study is kept and resumable; `check`: nothing decided or "
        "recorded, and its `--junit` report says interrupted"
    ),
    ExitCode.TERMINATED: "terminated (SIGTERM): handled as Ctrl-C; the study is kept and resumable",
}


def exit_codes_markdown() -> str:
    """README's exit-code table."""
    rows = ["| code | meaning |", "|---|---|"] + [
        f"| {int(c)} | {m} |" for c, m in EXIT_MEANINGS.items()
    ]
    return "\n".join(rows) + "\n"


def exit_codes_help() -> str:
    """One line for `autotune --help`."""
    short = {
        ExitCode.OK: "done (check: pass)",
        ExitCode.FAILED: "no trial succeeded (check: regression)",
        ExitCode.BAD_INPUT: "bad input",
        ExitCode.UNMEASURED: "nothing could be measured (check: or was disturbed)",
        ExitCode.INTERNAL: "internal error",
        ExitCode.INCONCLUSIVE: "check inconclusive",
        ExitCode.HANGUP: "SIGHUP",
        ExitCode.INTERRUPTED: "interrupted",
        ExitCode.TERMINATED: "SIGTERM",
    }
    return "Exit codes: " + ", ".join(f"{int(c)} {short[c]}" for c in ExitCode) + "."


def excerpt(value: object, limit: int = 80) -> str:
    """A bounded repr of a user's value for a message: never the whole of a huge or deeply nested
    value (a YAML alias bomb expands to gigabytes), so building it costs little too."""
    import reprlib

    r = reprlib.Repr()
    r.maxstring, r.maxother, r.maxlist, r.maxdict, r.maxtuple, r.maxset, r.maxlevel = (
        limit,
        limit,
        6,
        4,
        6,
        6,
        3,
    )
    text = r.repr(value)
    return text if len(text) <= limit + 20 else text[:limit] + "..."


def did_you_mean(given: object, allowed: "list[str] | tuple[str, ...]") -> str:
    """'did you mean precision? ' for a misspelt key (difflib's closest allowed name), else ''."""
    import difflib

    close = difflib.get_close_matches(str(given)[:100], list(allowed), n=1)
    return f"did you mean {close[0]}? " if close else ""


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Unicode's bidirectional controls: embeddings and overrides (U+202E shows "txt.exe" as "exe.txt"),
# isolates, and the marks (left-to-right, right-to-left, Arabic letter); invisible, they reorder
# what follows them (Trojan Source, CVE-2021-42574)
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str, newlines: bool = True) -> str:
    """User text made safe to print: control characters (an ESC that would recolour the terminal, a
    NUL) shown as \\xNN escapes, bidirectional controls by their code point (<U+202E>); newlines
    too when newlines is False (a one-line message)."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    text = _BIDI.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)
    return text if newlines else text.replace("\n", "\\n").replace("\t", " ")


class Terminated(KeyboardInterrupt):
    """SIGTERM: handled everywhere as Ctrl-C (trials interrupted, best.yaml written), exit 143."""


class HungUp(Terminated):
    """SIGHUP (the terminal or ssh session closed): as SIGTERM, exit 129."""


class AutotuneError(Exception):
    """Base of every error autotune reports as a one-line message."""

    exit_code = ExitCode.BAD_INPUT


class ConfigError(AutotuneError):
    """The YAML file or the command line is wrong; the message names the path, value and remedy."""


class StudyError(AutotuneError):
    """The study cannot be created or resumed as asked (e.g. it was made from another YAML)."""


class NoSuccessError(AutotuneError):
    """The search (or the nccl sweep) ran but nothing succeeded."""

    exit_code = ExitCode.FAILED


class UnmeasuredError(AutotuneError):
    """Every repeat of a check failed, or a search's baseline could not be measured whatever its
    knobs (search/drive.py)."""

    exit_code = ExitCode.UNMEASURED


class BaselineRefused(AutotuneError):
    """check --reset-baseline or --update refused to record a baseline the gate cannot use: its
    processes spread past what the tolerance allows, or they were measured beside other work
    (check/record.py). Nothing is recorded."""

    exit_code = ExitCode.UNMEASURED


class CheckInterrupted(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP during `check`: check's own words (what was measured, that nothing
    was decided or recorded, the JUnit report written) and the signal's exit code (130, 143,
    129). A KeyboardInterrupt still, for a caller of the API that catches one."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.message, self.exit_code = message, exit_code
