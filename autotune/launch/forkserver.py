"""autotune's side of the fork servers (workloads/zygote.py): one server per environment imports
torch and what a trial imports once, then forks each trial's process, so a trial pays no import.

A server is kept per environment as torch reads it at import (the trial's environment less the
variables read only once a trial runs: FORK_TIME), so a trial forks from a server that imported
exactly as a fresh process of its own would have. A trial gets a Forked handle (pid, poll, wait,
returncode, as subprocess.Popen's) of a process in a session of its own: run_trial supervises it
as it does a process it started itself. Where no server can take the trial (it refused the fork,
died, or is not ready within READY_S), the caller starts the trial the usual way.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from autotune.launch import orphans

SERVER_MODULE = "autotune.workloads.zygote"
READY_S = 120.0  # its imports (torch and Dynamo: seconds; a loaded CI machine: tens of seconds)
FORK_S = 10.0  # a fork's answer
# read by a trial only once it runs (CUDA's and NCCL's initialisation, the trial's own parent),
# so they may differ between trials of one server
FORK_TIME = ("CUDA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF", "AUTOTUNE_PARENT_PID")
FORK_TIME_PREFIXES = ("NCCL_",)
MAX_SERVERS = 2  # environments kept at once: a study's, and a check's beside it


class Forked:
    """A trial's process forked by a server: its supervisor, in a session of its own (pid is its
    process group). poll, wait and returncode as subprocess.Popen's, from the server's account of
    it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.stdin = None
        self._ended = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def ended(self, code: int) -> None:
        self.returncode = code
        self._ended.set()


class Server:
    """One fork server process and the reader of its answers."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = env
        self.log_path = log_path
        self.proc = _SPAWNER.submit(_spawn, env, log_path).result()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._answers: dict[int, Forked | str] = {}
        self._forked: dict[int, Forked] = {}
        self._changed = threading.Condition(self._lock)
        self._abandoned: set[int] = set()
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True, name="autotune-forks")
        self._reader.start()

    def fork(
        self, module: str, argv: list[str], env: dict[str, str], log: Path, cwd: str | None
    ) -> Forked | str:
        """The trial's process, forked, or why it was not (the caller starts it the usual way)."""
        if not self._ready.wait(READY_S) or self.proc.poll() is not None:
            return self._gone("was not ready")
        job_id = next(self._ids)
        job = {
            "id": job_id,
            "module": module,
            "argv": argv,
            "env": env,
            "log": str(log),
            "cwd": cwd,
        }
        try:
            self._write(job)
        except OSError:
            return self._gone("could not be reached")
        return self._answer(job_id)

    def _write(self, job: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.flush()

    def _answer(self, job_id: int) -> Forked | str:
        deadline = time.monotonic() + FORK_S
        with self._changed:
            while job_id not in self._answers and time.monotonic() < deadline:
                self._changed.wait(0.1)
            answer = self._answers.pop(job_id, None)
        if answer is None:  # a fork that answers later is ended: its trial starts another way
            with self._changed:
                self._abandoned.add(job_id)
            return self._gone("did not answer")
        return answer

    def _gone(self, how: str) -> str:
        code = self.proc.poll()
        return f"the fork server {how}" + (f" (it ended, exit {code})" if code is not None else "")

    def _read(self) -> None:
        """Answers as they come: ready, forked (its handle made at once, before its end can be
        read), refused, ended. At EOF every forked process still running is ended as killed."""
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self._event(json.loads(raw))
        with self._changed:
            for forked in self._forked.values():
                if forked.returncode is None:
                    forked.ended(-signal.SIGKILL)
            self._changed.notify_all()

    def _event(self, event: dict[str, Any]) -> None:
        if "ready" in event:
            self._ready.set()
            return
        job_id = int(event["id"])
        with self._changed:
            if "pid" in event and job_id in self._abandoned:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(int(event["pid"]), signal.SIGKILL)
            elif "pid" in event:
                self._forked[job_id] = self._answers[job_id] = Forked(int(event["pid"]))
            elif "refused" in event:
                self._answers[job_id] = str(event["refused"])
            elif "exit" in event and job_id in self._forked:
                self._forked.pop(job_id).ended(int(event["exit"]))
            self._changed.notify_all()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """End the server; its trials' supervisors get SIGTERM (their death signal), and end
        theirs."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        orphans.done(self.proc.pid)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def _spawn(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        return orphans.start(
            lambda: subprocess.Popen(
                # its scratch folder named: ps (and a test) tells which study a server serves
                [sys.executable, "-m", SERVER_MODULE, str(log_path.parent)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env={**env, "AUTOTUNE_PARENT_PID": str(os.getpid())},
                start_new_session=True,
            )
        )


# Every server is started from this one thread, which lives as long as autotune: PR_SET_PDEATHSIG
# fires when the *thread* that started the process ends (launch/prestart.py's spawner, likewise).
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="autotune-forkserver")
_SERVERS: dict[frozenset[tuple[str, str]], Server] = {}
_LOCK = threading.Lock()
_NUMBERS = itertools.count(1)


def import_key(env: dict[str, str]) -> frozenset[tuple[str, str]]:
    """The environment as torch reads it at import: what must match for a trial to fork from a
    server."""
    return frozenset(
        (k, v)
        for k, v in env.items()
        if k not in FORK_TIME and not k.startswith(FORK_TIME_PREFIXES)
    )


def server(env: dict[str, str], log_dir: Path) -> Server:
    """The server of this environment, started if there is none alive (the oldest other one ended
    past MAX_SERVERS)."""
    key = import_key(env)
    with _LOCK:
        found = _SERVERS.get(key)
        if found is not None and found.alive():
            return found
        stale = [_SERVERS.pop(key)] if found is not None else []
        while len(_SERVERS) >= MAX_SERVERS:
            stale.append(_SERVERS.pop(next(iter(_SERVERS))))
        log = log_dir / f"forkserver-{os.getpid()}-{next(_NUMBERS)}.log"
        started = Server(dict(key), log)
        _SERVERS[key] = started
    for old in stale:
        old.close()
    return started


def fork(
    module: str, argv: list[str], env: dict[str, str], log: Path, log_dir: Path
) -> Forked | str:
    """The trial's process forked by the server of its environment, or why it could not be (the
    caller starts it the usual way)."""
    return server(env, log_dir).fork(module, argv, env, log, os.getcwd())


def close_all() -> None:
    """End every server: at the end of a search or check, and when autotune exits."""
    with _LOCK:
        ended = list(_SERVERS.values())
        _SERVERS.clear()
    for old in ended:
        old.close()


atexit.register(close_all)
