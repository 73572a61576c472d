"""A job for the fork server's tests (tests/test_forkserver.py): `main([what, out])` does `what`
and writes what it saw of its process to the JSON file `out`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

SEEN: list[str] = []  # module state: a fork must start without an earlier job's


def main(argv: list[str]) -> int:
    what, out = argv
    SEEN.append(what)
    seen = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "pgid": os.getpgid(0),
        "sid": os.getsid(0),
        "seen": list(SEEN),
        "env": os.environ.get("FAKE_FORK_VAR"),
        "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cwd": os.getcwd(),
        "torch_imported": "torch" in sys.modules,
    }
    # what this job changes must stay in its own process
    os.environ["FAKE_FORK_VAR"] = "changed by " + what
    os.environ["CUDA_VISIBLE_DEVICES"] = "7"
    if what == "daemon":  # a process in a session of its own, left behind
        seen["daemon"] = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
        ).pid
    with open(out, "w") as f:
        json.dump(seen, f)
    return _act(what)


def _act(what: str) -> int:
    if what == "crash":
        os.abort()
    if what == "exit3":
        sys.exit(3)
    if what == "raise":
        raise RuntimeError("the job raised")
    if what in ("hang", "daemon"):
        time.sleep(600)
    if what == "leak":
        hold = bytearray(256 * 2**20)
        hold[::4096] = b"x" * len(hold[::4096])
    return 0
