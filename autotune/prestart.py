"""Trial processes started ahead: the next trial's process imports torch and torch.compile's stack while the
current trial runs, then waits for its spec on stdin. Still one fresh process per trial (a crash, an OOM or
a hang loses nothing); only its start-up moves out of the trial's time.

A standby is kept per environment (the GPU slot is part of it: CUDA_VISIBLE_DEVICES), so a trial takes one
only when it would have started with exactly that environment; anything else starts cold. Nothing touches
the GPU before the spec arrives: CUDA is initialised by the trial, never by a waiting process.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

STANDBY_FLAG = "--standby"


@dataclass
class Standby:
    """A started trial process (under its supervisor) waiting for the spec of the trial it will run."""

    proc: subprocess.Popen[bytes]
    log_path: Path  # its output until it is given a trial (then it writes the trial's own log)

    def activate(self, spec_path: Path, result_path: Path, log_path: Path) -> subprocess.Popen[bytes] | None:
        """Hand it its trial; None when it is no longer alive to take one (the caller starts one cold)."""
        if self.proc.poll() is not None or self.proc.stdin is None:
            self.dismiss()
            return None
        job = {"spec": str(spec_path), "result": str(result_path), "log": str(log_path)}
        try:
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            self.dismiss()
            return None
        return self.proc

    def dismiss(self) -> None:
        """End it (and its supervisor's descendants) and remove its log."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        if self.proc.stdin:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        self.log_path.unlink(missing_ok=True)

    def output(self) -> str:
        """What it printed before it was given its trial (normally nothing), then its log is removed."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            text = ""
        self.log_path.unlink(missing_ok=True)
        return text


_POOL: dict[frozenset[tuple[str, str]], Standby] = {}
_LOCK = threading.Lock()


def take(env: dict[str, str]) -> Standby | None:
    """The standby started with exactly this environment, if there is one (it leaves the pool)."""
    with _LOCK:
        return _POOL.pop(frozenset(env.items()), None)


def start(cmd: list[str], env: dict[str, str], log_dir: Path) -> None:
    """Start the next trial's process with this environment (cmd ends with the trial module and no spec)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    fd, name = _log_file(log_dir)
    try:
        proc = subprocess.Popen([*cmd, STANDBY_FLAG], stdin=subprocess.PIPE, stdout=fd, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
    finally:
        os.close(fd)
    old = None
    with _LOCK:
        old = _POOL.pop(frozenset(env.items()), None)
        _POOL[frozenset(env.items())] = Standby(proc, name)
    if old is not None:
        old.dismiss()


def _log_file(log_dir: Path) -> tuple[int, Path]:
    import tempfile

    fd, name = tempfile.mkstemp(prefix="standby-", suffix=".log", dir=log_dir)
    return fd, Path(name)


def dismiss_all() -> None:
    """End every waiting process: at the end of a search or check, and when autotune exits."""
    with _LOCK:
        waiting = list(_POOL.values())
        _POOL.clear()
    for standby in waiting:
        standby.dismiss()


atexit.register(dismiss_all)
