"""A study's fork server: `python -m autotune.workloads.zygote` (torch and the standard library).

It imports what every trial imports (torch, torch.compile's stack, the trial's workloads) once,
never touching CUDA, then forks a fresh process per trial, so a trial starts in milliseconds instead
of paying `import torch` and Dynamo's import (seconds of CPU) each time. Each fork is as isolated as
a trial started from scratch:

- the forked process (the trial's supervisor) starts a session of its own (its process group is
  what autotune kills on a timeout), is a child subreaper, dies with the server (PR_SET_PDEATHSIG),
  and takes the trial's whole environment, working folder and log;
- it forks the trial itself, waits for it, then kills and reaps whatever the trial left
  (workloads/supervise.py's end_all), and ends as the trial ended (its code, or its signal);
- nothing flows back into the server: a crash, an OOM, a hang, a leak or an environment the trial
  changed stays in that trial's processes, and the next fork starts from the server's clean state.

The server forks only while it is safe to: one Python thread, CUDA not initialised; otherwise it
refuses the job and autotune starts that trial the usual way (a fresh interpreter).

Protocol, one JSON object a line. In, on stdin: {"id", "module", "argv", "env", "cwd", "log"}. Out,
on stdout: {"ready": pid} once imported, then {"id", "pid"} when forked or {"id", "refused"}, and
{"id", "exit"} when the forked process ended (a negative exit: killed by that signal). EOF on stdin:
the server waits for its trials, then leaves.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import sys
import threading
import traceback
from typing import Any, TextIO

from autotune import atomic
from autotune.workloads import supervise
from autotune.workloads.trial import exit_now

# what every trial imports before its first step: the seconds a fork saves
PRELOAD = (
    "torch",
    "torch._dynamo",
    "torch._inductor.compile_fx",
    "autotune.workloads.trial",
    "autotune.workloads.train",
)
POLL_S = 0.05  # how often the server reaps its ended trials while no job comes
# why a fork of this server could not use CUDA ("" where it could); what it printed at its start
_STATE: dict[str, Any] = {"poisoned": "", "said": b""}


def main() -> int:
    # not a subreaper: what a trial's supervisor leaves goes to autotune, whose sweep ends it
    supervise.arm(os.environ.get("AUTOTUNE_PARENT_PID"), signal.SIGKILL, subreaper=False)
    out = os.fdopen(os.dup(1), "w", buffering=1)  # events; fd 1 itself becomes /dev/null
    _quiet()
    # an import that asks whether CUDA is there (cudaGetDeviceCount) poisons every later fork for
    # CUDA ("Cannot re-initialize CUDA in forked subprocess"); NVML answers instead, in the server
    # alone (a trial gets its own environment)
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    for name in PRELOAD:
        with contextlib.suppress(Exception):  # a trial that needs it fails in its own process
            importlib.import_module(name)
    _STATE["poisoned"] = _poisoned()
    _STATE["said"] = _said()
    _send(out, {"ready": os.getpid()})
    return _serve(out)


def _quiet() -> None:
    """The server's own stdin stays the job pipe; what it prints (its interpreter's start, the
    imports' warnings) goes to its log, fd 2, which every trial's log then begins with (_said)."""
    os.dup2(2, 1)


SAID_MAX = 64 * 1024  # of the server's start-up output, copied into every trial's log


def _said() -> bytes:
    """What the server printed before its first fork (a sitecustomize's output, an import's
    warning): a fresh process of the trial would have printed it into its own log."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        with open("/proc/self/fd/2", "rb") as log:
            return log.read(SAID_MAX)
    except OSError:
        return b""


def _serve(out: TextIO) -> int:
    running: dict[int, Any] = {}  # forked pid -> job id
    pending = b""  # what came on stdin after the last whole line
    stdin_open = True
    while stdin_open or running:
        if stdin_open and _readable(0):
            chunk = os.read(0, 1 << 16)  # unbuffered: select sees every byte not yet read
            stdin_open = bool(chunk)
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                _take(json.loads(line), running, out)
        _reap(running, out, block=not stdin_open)
    return 0


def _readable(fd: int) -> bool:
    ready, _, _ = select.select([fd], [], [], POLL_S)
    return bool(ready)


def _take(job: dict[str, Any], running: dict[int, Any], out: TextIO) -> None:
    """Fork the job's supervisor, or refuse it where a fork would not be clean."""
    refused = unsafe()
    if refused:
        _send(out, {"id": job["id"], "refused": refused})
        return
    pid = os.fork()
    if pid == 0:
        _child(job, out)
    running[pid] = job["id"]
    _send(out, {"id": job["id"], "pid": pid})


def unsafe() -> str:
    """Why forking now would not give a clean process, or "": another Python thread (it may hold a
    lock the child would never see released) or an initialised CUDA (a forked CUDA context is
    unusable)."""
    if threading.active_count() > 1:
        return f"the fork server runs {threading.active_count()} threads"
    if _STATE["poisoned"]:
        return _STATE["poisoned"]
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA was initialised in the fork server"
    return ""


def _poisoned() -> str:
    """Why a fork of this process could not initialise CUDA (torch marks a child "in bad fork" once
    its parent touched the CUDA runtime), or "": asked of one forked probe, once."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch._C, "_cuda_isInBadFork"):
        return ""
    probe = os.fork()
    if probe == 0:
        os._exit(1 if torch._C._cuda_isInBadFork() else 0)
    _, status = os.waitpid(probe, 0)
    if os.waitstatus_to_exitcode(status) == 0:
        return ""
    return "the fork server's imports touched CUDA, so a fork could not use the GPU"


def _reap(running: dict[int, Any], out: TextIO, block: bool) -> None:
    while running:
        pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        if pid == 0:
            return
        job = running.pop(pid, None)
        if job is not None:
            _send(out, {"id": job, "exit": os.waitstatus_to_exitcode(status)})


def _send(out: TextIO, event: dict[str, Any]) -> None:
    out.write(json.dumps(event) + "\n")
    out.flush()


def _child(job: dict[str, Any], out: TextIO) -> None:
    """The forked process: the trial's supervisor, in a session of its own. Never returns."""
    code = 1
    try:
        out.close()
        os.setsid()
        _become(job)
        code = _supervise(job)
    except BaseException:  # the traceback goes to the trial's log; the parent sees a crash
        traceback.print_exc()
    finally:
        os._exit(code)


def _become(job: dict[str, Any]) -> None:
    """Take the trial's files, folder and environment, as a fresh process would have them."""
    server = os.getppid()
    supervise.arm(str(server), signal.SIGTERM)  # the server's end is the trial's end
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    log = atomic.create(job["log"])  # never through a link planted there
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    if _STATE["said"]:
        os.write(1, _STATE["said"])
    os.environ.clear()
    os.environ.update(job["env"])
    if job.get("cwd"):
        os.chdir(job["cwd"])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, supervise.on_signal)


def _supervise(job: dict[str, Any]) -> int:
    """Fork the trial, wait for it, end what it left: supervise.main's rules, without an exec."""
    trial = os.fork()
    if trial == 0:
        _trial(job)
    _, status = os.waitpid(trial, 0)
    code = os.waitstatus_to_exitcode(status)
    supervise.end_all()
    if code < 0:  # die of the same signal, so the parent sees how the trial ended
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def _trial(job: dict[str, Any]) -> None:
    """The trial process: the module's main(argv), as `python -m module argv...` runs it. Never
    returns."""
    code = 1
    try:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        os.environ["AUTOTUNE_PARENT_PID"] = str(os.getppid())
        sys.argv = [job["module"], *job["argv"]]
        module = importlib.import_module(job["module"])
        code = module.main(list(job["argv"]))
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except BaseException:
        traceback.print_exc()
    finally:
        exit_now(code)


def _exit_code(code: object) -> int:
    """SystemExit's code as the interpreter turns it into an exit status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
