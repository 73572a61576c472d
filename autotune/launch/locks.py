"""One measurement per device at a time, across every autotune process on this host.

Two searches (or a search and a check) measuring on the same GPU disturb each other's numbers; so a
measurement holds its device units while it runs, and another waits for them (the wait is recorded).
The locks are abstract Unix sockets (Linux): nothing is written to disk, and a process that dies,
even by kill -9, releases its locks at once. AUTOTUNE_LOCK_NAMESPACE, when set, prefixes every
lock's name:
processes of another namespace (a test session beside a real search) never wait on each other.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

_POLL_S = 0.5


def _namespace() -> str:
    """AUTOTUNE_LOCK_NAMESPACE and a dash, or nothing (the machine-wide namespace every search
    shares)."""
    import os

    name = os.environ.get("AUTOTUNE_LOCK_NAMESPACE", "")
    return f"{name[:64]}-" if name else ""


class DeviceLock:
    """Exclusive hold of device units: GPUs (by NVML UUID or index) or CPU slots."""

    def __init__(self, units: list[str]) -> None:
        self.units = sorted(set(units))  # one order for every process: no two wait on each other
        self._held: list[socket.socket] = []

    def _try(self, unit: str) -> socket.socket | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(f"\0autotune-device-{_namespace()}{unit}")
            return sock
        except OSError:
            sock.close()
            return None

    def acquire(
        self, stop: threading.Event | None = None, on_wait: Callable[[str], None] | None = None
    ) -> float:
        """Hold every unit, waiting while another process holds one; returns the seconds waited.
        KeyboardInterrupt (or `stop` set) ends the wait."""
        t0 = time.monotonic()
        told = False
        for unit in self.units:
            while (sock := self._try(unit)) is None:
                if not told and on_wait:
                    on_wait(unit)
                    told = True
                if stop is not None and stop.is_set():
                    self.release()
                    raise KeyboardInterrupt
                time.sleep(_POLL_S)
            self._held.append(sock)
        return time.monotonic() - t0

    def release(self) -> None:
        for sock in self._held:
            sock.close()
        self._held = []

    def __enter__(self) -> DeviceLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
