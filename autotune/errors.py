"""The error family and every exit code: each failure the user can cause ends here as one line and a code."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """autotune's exit codes (README's table and `autotune --help` are made from EXIT_MEANINGS)."""

    OK = 0
    FAILED = 1
    BAD_INPUT = 2
    UNMEASURED = 3
    INTERRUPTED = 130  # 128 + SIGINT


EXIT_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "done; `check`: pass (or faster)",
    ExitCode.FAILED: "`search`: no trial succeeded; `check`: regression; `nccl`: no setting ran",
    ExitCode.BAD_INPUT: "bad input: usage, missing file, invalid YAML, schema error, a study made from another YAML; "
                        "`check`: another GPU model than the baseline's",
    ExitCode.UNMEASURED: "`check`: could not measure (every repeat failed; the reason is shown)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C); the study is kept and resumable",
}


def exit_codes_markdown() -> str:
    """README's exit-code table."""
    rows = ["| code | meaning |", "|---|---|"] + [f"| {int(c)} | {m} |" for c, m in EXIT_MEANINGS.items()]
    return "\n".join(rows) + "\n"


def exit_codes_help() -> str:
    """One line for `autotune --help`."""
    short = {ExitCode.OK: "done (check: pass)", ExitCode.FAILED: "no trial succeeded (check: regression)",
             ExitCode.BAD_INPUT: "bad input", ExitCode.UNMEASURED: "check could not measure",
             ExitCode.INTERRUPTED: "interrupted"}
    return "Exit codes: " + ", ".join(f"{int(c)} {short[c]}" for c in ExitCode) + "."


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
    """Every repeat of a check failed."""

    exit_code = ExitCode.UNMEASURED
