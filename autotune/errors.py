"""The error family and exit codes: every failure the user can cause ends here as one line."""

from __future__ import annotations

# Exit codes, documented in README.md ("Exit codes") and in `autotune --help`.
EXIT_OK = 0
EXIT_NO_SUCCESS = 1  # search: no trial succeeded
EXIT_BAD_INPUT = 2  # usage, file, YAML, schema
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)


class AutotuneError(Exception):
    """Base of every error autotune reports as a one-line message."""

    exit_code = EXIT_BAD_INPUT


class ConfigError(AutotuneError):
    """The YAML file or the command line is wrong; the message names the path, value and remedy."""

    exit_code = EXIT_BAD_INPUT


class StudyError(AutotuneError):
    """The study cannot be created or resumed as asked (e.g. it was made from another YAML)."""

    exit_code = EXIT_BAD_INPUT


class NoSuccessError(AutotuneError):
    """The search ran but no trial succeeded."""

    exit_code = EXIT_NO_SUCCESS
