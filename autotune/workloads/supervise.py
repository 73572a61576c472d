"""The trial's supervisor: `python -m autotune.workloads.supervise CMD...` (standard library only).

autotune starts every trial through it, in a session of its own. It runs CMD (the trial, or torchrun
with its ranks) as its child and makes sure nothing of the trial outlives the trial or autotune:

- PR_SET_PDEATHSIG: when autotune dies, even by kill -9, the supervisor gets SIGTERM at once;
- autotune gone before that was armed (a kill within milliseconds of the start): getppid() is no
  longer AUTOTUNE_PARENT_PID, so it leaves before starting anything;
- PR_SET_CHILD_SUBREAPER: processes the trial leaves behind (Inductor's compile workers, ranks that
  torchrun put in sessions of their own) become the supervisor's children instead of init's;
- on SIGTERM, SIGINT or SIGHUP, and when CMD ends: every descendant is killed (SIGKILL) and reaped.

Its exit status is CMD's; a CMD killed by a signal is reported by the supervisor dying of the same
signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36


def descendants(root: int) -> list[int]:
    """Every process below root, read from /proc (children before grandchildren)."""
    parents: dict[int, int] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            # the field after the (command)
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [root]
    while frontier:
        frontier = [
            pid for pid, parent in parents.items() if parent in frontier and pid not in found
        ]
        found += frontier
    return found


def end_all(within_s: float = 10.0) -> None:
    """Stop, then kill, every descendant, again and again until none is left (a process that keeps
    forking is frozen by SIGSTOP before it can fork once more), then reap them: as subreaper they
    are ours by now."""
    deadline = time.monotonic() + within_s
    while (pids := descendants(os.getpid())) and time.monotonic() < deadline:
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def on_signal(signum: int, frame: object) -> None:
    """SIGTERM, SIGINT or SIGHUP: every descendant ended, then leave as that signal's exit."""
    end_all()
    os._exit(128 + signum)


def arm(parent: str | None, death_signal: int, subreaper: bool = True) -> None:
    """Die with the parent (PR_SET_PDEATHSIG: death_signal when it ends, even by kill -9) and, as a
    subreaper, adopt what the trial leaves behind (Linux only; elsewhere the parent's own sweep is
    what remains). A parent already gone before the signal was armed (getppid() is no longer
    `parent`, autotune's pid as passed): leave at once, starting nothing."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        if subreaper:
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
        libc.prctl(PR_SET_PDEATHSIG, death_signal)
    if parent and os.getppid() != int(parent):
        os._exit(1)


def main(argv: list[str]) -> int:
    arm(os.environ.get("AUTOTUNE_PARENT_PID"), signal.SIGTERM)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    # close_fds=False: a descriptor the parent passed on purpose (the probe's answer pipe) reaches
    # the child
    child = subprocess.Popen(
        argv, env={**os.environ, "AUTOTUNE_PARENT_PID": str(os.getpid())}, close_fds=False
    )
    code = child.wait()
    end_all()
    if code < 0:  # die of the same signal, so the parent sees how the trial ended
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
