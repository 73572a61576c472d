"""The one error funnel: every error becomes one line on stderr and a documented exit code
(errors.ExitCode); tracebacks only with --debug. SIGTERM ends a command as Ctrl-C does (exit 143
instead of 130)."""

from __future__ import annotations

import contextlib
import errno
import signal
import sys
import threading
from collections.abc import Callable, Iterator

import typer
from rich.text import Text

from autotune.cli._app import state
from autotune.cli._console import console
from autotune.errors import AutotuneError, ExitCode, HungUp, Terminated, excerpt, printable

MAX_MESSAGE = 1000  # characters of one error line
# What the funnel lets through as it is: a command's exit, an abort and click's own errors (a usage
# line), as the click Typer runs on has them: from typer 0.2x on its own copy (typer._click), which
# needs no click package (the core install has none), before it the click package
PASSED: tuple[type[BaseException], ...] = (
    typer.Exit,
    typer.Abort,
    next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"),
)


_signalled: dict[str, BaseException | None] = {"by": None}


def _terminate(signum: int, frame: object) -> None:
    by = HungUp() if signum == signal.SIGHUP else Terminated()
    _signalled["by"] = by
    raise by


def _interrupt(signum: int, frame: object) -> None:
    _signalled["by"] = KeyboardInterrupt()
    raise KeyboardInterrupt()


def _line(message: str) -> str:
    """One line of bounded length, user text in it made printable (a newline in a path shown as
    \\n)."""
    flat = printable(str(message).strip(), newlines=False)
    return flat if len(flat) <= MAX_MESSAGE else flat[: MAX_MESSAGE - 3] + "..."


def _interruption(e: BaseException) -> BaseException:
    """The Ctrl-C or SIGTERM behind an error, if one caused it, else the error itself. A signal is
    what decides: libraries turn the KeyboardInterrupt it raised into other errors (Python wraps one
    raised while a class is made in a RuntimeError; a C extension interrupted at import raises
    ImportError)."""
    if _signalled["by"] is not None:
        return _signalled["by"]
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return seen
        seen = seen.__cause__ or seen.__context__
    return e


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def disk_full(e: BaseException) -> str | None:
    """The full disk (or quota) behind an error, anywhere in its chain (SQLAlchemy wraps SQLite's),
    said as such."""
    seen: BaseException | None = e
    while seen is not None:
        where = f" ({seen.filename})" if isinstance(seen, OSError) and seen.filename else ""
        if (
            isinstance(seen, OSError)
            and seen.errno in NO_SPACE
            or "database or disk is full" in str(seen)
        ):
            return (
                f"the disk is full{where}: no space left to write; the completed trials are "
                "stored and kept: free space and run the same command again to resume"
            )
        seen = seen.__cause__ or seen.__context__
    return None


def _classify(e: BaseException) -> tuple[str, int]:
    """The message and exit code of an error that reached the funnel."""
    e = _interruption(e)
    if isinstance(e, HungUp):
        return (
            "hung up (SIGHUP): the study is kept; run the same command again to resume",
            ExitCode.HANGUP,
        )
    if isinstance(e, Terminated):
        return (
            "terminated (SIGTERM): the study is kept; run the same command again to resume",
            ExitCode.TERMINATED,
        )
    if isinstance(e, KeyboardInterrupt):
        return (
            "interrupted: the study is kept; run the same command again to resume",
            ExitCode.INTERRUPTED,
        )
    if isinstance(e, AutotuneError):
        return str(e), e.exit_code
    if (full := disk_full(e)) is not None:
        return full, ExitCode.BAD_INPUT
    if isinstance(e, OSError):  # a path the user gave (or the file system under it) refused
        where = f"{e.filename}: " if e.filename else ""
        return f"{where}{e.strerror or e}", ExitCode.BAD_INPUT
    if isinstance(e, (MemoryError, RecursionError)):
        return f"input too large or too deeply nested ({type(e).__name__})", ExitCode.BAD_INPUT
    while type(e).__name__ == "StorageInternalError" and e.__cause__ is not None:
        # Optuna's "invalid data in the commit" hides the database's own reason: show that
        e = e.__cause__
    # a study's database refused (damaged, unreachable, read-only)
    if type(e).__module__.startswith("sqlalchemy"):
        return (
            f"storage: {type(e).__name__}: "
            f"{excerpt(str(e).splitlines()[0] if str(e) else '', 300)}",
            ExitCode.BAD_INPUT,
        )
    return (
        f"internal error, please report it: {type(e).__name__}: {excerpt(str(e), 300)} "
        "(autotune --debug ... shows the traceback)",
        ExitCode.INTERNAL,
    )


def _quiet(
    hook: Callable[[sys.UnraisableHookArgs], object],
) -> Callable[[sys.UnraisableHookArgs], None]:
    """sys.unraisablehook that says nothing of our own Ctrl-C/SIGTERM: raised where Python can only
    report it (an import lock's weakref callback, seen in CI at 0.2 s), it printed a traceback;
    funnel acts on it instead."""

    def quiet(unraisable: sys.UnraisableHookArgs) -> None:
        if _signalled["by"] is not None and isinstance(
            unraisable.exc_value, (KeyboardInterrupt, Terminated)
        ):
            return
        hook(unraisable)

    return quiet


@contextlib.contextmanager
def funnel() -> Iterator[None]:
    previous, previous_int, previous_hup, previous_hook = None, None, None, sys.unraisablehook
    _signalled["by"] = None
    sys.unraisablehook = _quiet(previous_hook)
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
        previous_hup = (
            signal.signal(signal.SIGHUP, _terminate)
            if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN
            else None
        )
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            previous_int = signal.signal(signal.SIGINT, _interrupt)
    try:
        yield
        # a signal whose exception Python swallowed (above): never lost
        if _signalled["by"] is not None:
            raise _signalled["by"]
    except PASSED:
        raise
    except BaseException as e:
        if state["debug"] or isinstance(e, SystemExit):
            raise
        message, code = _classify(e)
        console(stderr=True).print(
            Text.assemble(
                ("error: ", "red") if code not in (129, 130, 143) else "", _line(message)
            ),
            soft_wrap=True,
        )
        raise typer.Exit(code) from None
    finally:
        sys.unraisablehook = previous_hook
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if previous_int is not None:
            signal.signal(signal.SIGINT, previous_int)
        if previous_hup is not None:
            signal.signal(signal.SIGHUP, previous_hup)
