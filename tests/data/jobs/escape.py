"""A hostile trial (tests of launch/orphans.py): starts a daemon in a session of its own, writes its
pid, then kills (--how kill) or stops (--how stop) its own supervisor, and waits."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

p = argparse.ArgumentParser()
p.add_argument("--how", choices=["kill", "stop"])
p.add_argument("--pidfile")
a = p.parse_args()
daemon = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True
)
Path(a.pidfile).write_text(str(daemon.pid))
pid = os.getpid()
while pid > 1:  # up the tree to the trial's supervisor
    stat = Path(f"/proc/{pid}/stat").read_text()
    pid = int(stat.rsplit(")", 1)[1].split()[1])
    if b"autotune.workloads.supervise" in Path(f"/proc/{pid}/cmdline").read_bytes():
        os.kill(pid, signal.SIGKILL if a.how == "kill" else signal.SIGSTOP)
        break
time.sleep(3600)
