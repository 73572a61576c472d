"""launch/locks.py: one measurement per device across autotune processes, and namespaces that keep
them apart."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from autotune.launch.locks import DeviceLock

HOLD = (
    "import sys, time; from autotune.launch.locks import DeviceLock; "
    "l = DeviceLock([sys.argv[1]]); l.acquire(); print('held', flush=True); time.sleep(60)"
)


def _holder(unit: str, namespace: str) -> subprocess.Popen:
    """Another process holding unit in namespace (a real search, or another test session)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, unit],
        stdout=subprocess.PIPE,
        text=True,
        env={**__import__("os").environ, "AUTOTUNE_LOCK_NAMESPACE": namespace},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_locks_another_process_of_the_namespace_is_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AUTOTUNE_LOCK_NAMESPACE", "locks-test-a")
    proc = _holder("gpu-x", "locks-test-a")
    try:
        waited: list[str] = []
        stop = threading.Event()
        threading.Timer(1.0, stop.set).start()
        with pytest.raises(KeyboardInterrupt):  # the wait ends only by stop (or Ctrl-C)
            DeviceLock(["gpu-x"]).acquire(stop=stop, on_wait=waited.append)
        assert waited == ["gpu-x"]
    finally:
        proc.kill()
        proc.wait()


def test_locks_other_namespaces_never_wait_on_each_other(monkeypatch: pytest.MonkeyPatch) -> None:
    proc = _holder("gpu-y", "locks-test-real-search")
    try:
        monkeypatch.setenv("AUTOTUNE_LOCK_NAMESPACE", "locks-test-session")
        with DeviceLock(["gpu-y"]) as lock:
            assert lock.units == ["gpu-y"]
        monkeypatch.delenv("AUTOTUNE_LOCK_NAMESPACE")
        with DeviceLock(["gpu-y"]):  # the machine-wide namespace is a third one
            pass
    finally:
        proc.kill()
        proc.wait()


def test_locks_each_xdist_worker_measures_apart() -> None:
    """The workers of one test run hold device locks in namespaces of their own (conftest): one
    worker's CPU trial never waits for another's."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        pytest.skip("not under pytest-xdist")
    assert os.environ["AUTOTUNE_LOCK_NAMESPACE"].endswith(f"-{worker}")
