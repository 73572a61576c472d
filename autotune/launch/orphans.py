"""Nothing a trial starts outlives it, whatever it does to its supervisor.

Each trial runs under a supervisor (workloads/supervise.py) that reaps and kills what the trial
leaves. A trial can still start a daemon in a session of its own and then kill (or stop) its
supervisor: the daemon would be left to init. So autotune itself is a child subreaper
(PR_SET_CHILD_SUBREAPER, Linux): such a process becomes autotune's child instead of init's, and
after every trial `sweep` kills every child of autotune's that autotune did not start itself (its
supervisors and prestarted processes, registered by `ours`), with all below it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Any

PR_SET_CHILD_SUBREAPER = 36
_OURS: set[int] = set()  # the processes autotune started itself (supervisors, standbys)
_LOCK = threading.Lock()
_armed = {"done": False}


def become_subreaper() -> None:
    """Orphans of our trials become our children (Linux; elsewhere the supervisors' own sweep
    remains)."""
    if _armed["done"]:
        return
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    _armed["done"] = True


def start(make: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """Start a process of autotune's own (make() returns its Popen), known as ours before any sweep
    can see it."""
    with _LOCK:
        proc = make()
        _OURS.add(proc.pid)
    return proc


def keep_started(start: Callable[[], Any]) -> Any:
    """Run start(), a library's call that starts a helper process of its own (W&B's service), and
    count the children it started as ours, so that no sweep ends them. Returns what start()
    returned."""
    with _LOCK:  # a sweep lists strangers under this lock: it sees the helper either absent or ours
        before = _children()
        result = start()
        _OURS.update(_children() - before)
    return result


def _children() -> set[int]:
    me = os.getpid()
    return {pid for pid, parent in _parents().items() if parent == me}


def done(pid: int) -> None:
    """A process of ours has been reaped: its pid may be reused by a stranger."""
    with _LOCK:
        _OURS.discard(pid)


def _parents() -> dict[int, int]:
    found = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = open(f"/proc/{entry}/stat").read()
            found[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def _tree(root: int, parents: dict[int, int]) -> list[int]:
    tree, frontier = [root], [root]
    while frontier:
        frontier = [p for p, parent in parents.items() if parent in frontier and p not in tree]
        tree += frontier
    return tree


def sweep() -> list[int]:
    """Stop, then kill, every child autotune did not start (a trial's escaped daemon) and everything
    below it; reap them. Returns the pids ended."""
    if not _armed["done"] or not os.path.isdir("/proc"):
        return []
    me, ended = os.getpid(), []
    parents = _parents()
    with _LOCK:
        strangers = [p for p, parent in parents.items() if parent == me and p not in _OURS]
    for pid in strangers:
        tree = _tree(pid, parents)
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for p in tree:
                with contextlib.suppress(OSError):
                    os.kill(p, sig)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)
        ended += tree
    return ended
