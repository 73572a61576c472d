"""One tracker's background thread: trials queued by the study, logged one by one, failures counted.

The study only queues (never waits on a tracking server): a server that is down makes each log fail,
one that is slow makes the queue back up until it is full, and either way the study goes on. The
first failure is logged once; the rest are counted and summed up at the end."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from autotune.redact import mask

log = logging.getLogger("autotune.search.tracking")

# Trials waiting to be logged; past it a trial is dropped (counted), never waited for.
QUEUE_SIZE = 1000


class Background:
    """Calls `send(*item)` for each submitted item (a tuple) in a daemon thread; never raises into
    the caller."""

    def __init__(self, name: str, send: Callable[..., None]) -> None:
        self.name = name
        self.send = send
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_SIZE)
        self.submitted = 0
        self.logged = 0
        self.failed = 0
        self.dropped = 0
        self.warned = False
        self.lock = threading.Lock()  # submit is called from each of the study's threads (--gpus)
        self.thread = threading.Thread(
            target=self._run, name=f"autotune-tracking-{name}", daemon=True
        )
        self.thread.start()

    def submit(self, item: tuple[Any, ...]) -> None:
        """Queue one item (non-blocking: a full queue drops it)."""
        with self.lock:
            self.submitted += 1
            try:
                self.queue.put_nowait(item)
            except queue.Full:
                self.dropped += 1

    def close(self, deadline: float) -> None:
        """Let the thread finish what is queued until `deadline` (time.monotonic()), then say what
        was lost."""
        try:
            self.queue.put_nowait(None)  # the end; when full, the deadline ends the wait instead
        except queue.Full:
            pass
        self.thread.join(timeout=max(deadline - time.monotonic(), 0.0))
        self._summary()

    def _run(self) -> None:
        while (item := self.queue.get()) is not None:
            try:
                self.send(*item)
                self.logged += 1
            except Exception as err:  # a tracker's failure is never the study's
                self.failed += 1
                if not self.warned:
                    self.warned = True
                    log.warning(
                        "tracking: %s: %s: %s; the study goes on, later failures are counted",
                        self.name,
                        type(err).__name__,
                        one_line(err),
                    )

    def _summary(self) -> None:
        """One line when something was not logged: a warning unless a failure was reported."""
        lost = self.submitted - self.logged
        if not lost:
            return
        unsent = lost - self.failed - self.dropped
        level = logging.INFO if self.warned else logging.WARNING
        log.log(
            level,
            "tracking: %s: %d of %d trial(s) not logged (%d failed, %d dropped on a full queue, "
            "%d still unsent at the end)",
            self.name,
            lost,
            self.submitted,
            self.failed,
            self.dropped,
            unsent,
        )


def one_line(err: BaseException, limit: int = 300) -> str:
    """An error's message on one bounded line, credentials masked (a URI may carry a password)."""
    text = " ".join(str(err).split())
    return mask(text if len(text) <= limit else text[:limit] + "...")
