"""Trial processes started ahead: the next trial's process imports torch and torch.compile's stack
while the current trial runs, then waits for its spec on stdin. Still one fresh process per trial (a
crash, an OOM or a hang loses nothing); only its start-up moves out of the trial's time.

Standbys are kept per environment (the GPU slot is part of it: CUDA_VISIBLE_DEVICES), DEPTH of them,
so a trial takes one only when it would have started with exactly that environment; anything else
starts cold. Nothing touches the GPU before the spec arrives: CUDA is initialised by the trial,
never by a waiting process.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from autotune.launch import logcap, orphans

STANDBY_FLAG = "--standby"


@dataclass
class Standby:
    """A started trial process (under its supervisor) waiting for the spec of the trial it will
    run."""

    proc: subprocess.Popen[bytes]
    log_path: Path  # its output until it is given a trial (then it writes the trial's own log)

    def activate(
        self, spec_path: Path, result_path: Path, log_path: Path
    ) -> subprocess.Popen[bytes] | None:
        """Hand it its trial; None when it is no longer alive to take one (the caller starts one
        cold)."""
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
        """What it printed before it was given its trial (normally nothing), then its log is
        removed."""
        text = logcap.tail(self.log_path)
        self.log_path.unlink(missing_ok=True)
        return text


DEPTH = 2  # processes waiting per environment: a trial shorter than an import still finds one ready
_POOL: dict[frozenset[tuple[str, str]], list[Standby]] = {}
_LOCK = threading.Lock()


def take(env: dict[str, str]) -> Standby | None:
    """The oldest process started with exactly this environment that is still alive (it leaves the
    pool)."""
    with _LOCK:
        waiting = _POOL.get(frozenset(env.items()), [])
        while waiting:
            standby = waiting.pop(0)
            if standby.proc.poll() is None:
                return standby
            standby.dismiss()
    return None


def fill(cmd: list[str], env: dict[str, str], log_dir: Path, depth: int = DEPTH) -> None:
    """Start processes with this environment until `depth` wait (cmd: the trial module without a
    spec).
    Processes of the same GPU slot with another environment (other knob variables) are ended: the
    trials of a slot go on with the environment of the latest one."""
    key, slot = frozenset(env.items()), env.get("CUDA_VISIBLE_DEVICES")
    with _LOCK:
        stale = [k for k in _POOL if k != key and dict(k).get("CUDA_VISIBLE_DEVICES") == slot]
        ended = [standby for k in stale for standby in _POOL.pop(k)]
        missing = depth - len(_POOL.get(key, []))
    for standby in ended:
        standby.dismiss()
    log_dir.mkdir(parents=True, exist_ok=True)
    for _ in range(max(0, missing)):
        standby = _SPAWNER.submit(_spawn, cmd, env, log_dir).result()
        with _LOCK:
            _POOL.setdefault(key, []).append(standby)


def _spawn(cmd: list[str], env: dict[str, str], log_dir: Path) -> Standby:
    fd, name = _log_file(log_dir)
    try:
        proc = orphans.start(
            lambda: subprocess.Popen(
                [*cmd, STANDBY_FLAG, str(name)],
                stdin=subprocess.PIPE,
                stdout=fd,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        )
    finally:
        os.close(fd)
    return Standby(proc, name)


# Every standby is started from this one thread, which lives as long as autotune: the supervisor's
# PR_SET_PDEATHSIG fires when the *thread* that started it ends, and a search's worker threads end
# with it.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="autotune-prestart")


def _log_file(log_dir: Path) -> tuple[int, Path]:
    import tempfile

    fd, name = tempfile.mkstemp(prefix="standby-", suffix=".log", dir=log_dir)
    return fd, Path(name)


def dismiss_all() -> None:
    """End every waiting process: at the end of a search or check, and when autotune exits."""
    with _LOCK:
        waiting = [standby for standbys in _POOL.values() for standby in standbys]
        _POOL.clear()
    for standby in waiting:
        standby.dismiss()


atexit.register(dismiss_all)
