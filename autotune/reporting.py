"""Report your own training job's optimizer steps to autotune (task: command). Standard library
only.

A job that autotune launches as a trial finds these environment variables: AUTOTUNE_REPORT (the file
the trial reads), AUTOTUNE_STEPS ("WARMUP,MEASURE": the steps it needs at least), AUTOTUNE_MAX_STEPS
(the most it asks for), AUTOTUNE_STOP (a file that appears once the trial has what it needs: its
window settled, or the search pruned it) and AUTOTUNE_KNOBS (the trial's knob values as JSON).
Outside autotune none is set and every call here does nothing, so the job runs as before.

    from autotune import reporting

    for batch in loader:
        ...                                   # forward, backward, optimizer.step()
        if reporting.step(tokens=int(batch["attention_mask"].sum())):
            break                             # autotune has its steps: stop training

`step` marks the end of an optimizer step: it waits for the device (torch.cuda.synchronize, when the
job has imported torch and initialised CUDA) so that a step is what the GPU did, and times it from
the previous step's end, and writes it at once (the trial sees every step as it ends, and may stop
the job). With each step goes the number of graphs torch.compile has made so far (Dynamo's counter,
when the job imported it): a job that recompiles for every new shape is found out while it runs.
`tokens` are the step's real tokens (padding excluded: you pay for padding, and autotune shows it);
`padded_tokens` the tokens the step computed on, padding included. The HF Trainer and Lightning
callbacks (autotune.callbacks) time steps with CUDA events instead and call `record`; the first
training to begin claims the job's reporter (`Reporter.claim`): one training is measured, and one
that begins after it ended short of autotune's steps fails the trial (a "failed" line). They also
write the settings the job really ran with (`Reporter.job_settings`), which the trial compares with
its knobs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.knobs import Knobs

ENV_REPORT, ENV_STEPS, ENV_KNOBS = "AUTOTUNE_REPORT", "AUTOTUNE_STEPS", "AUTOTUNE_KNOBS"
ENV_STOP, ENV_MAX_STEPS = "AUTOTUNE_STOP", "AUTOTUNE_MAX_STEPS"
# The report's bounds, so that a job that ignores the stop and goes on calling step() never fills
# the disk: step lines past the most the trial asks for (AUTOTUNE_MAX_STEPS) are never read, and no
# trial asks for more than command.max_steps (at most 100,000) and its warm-up: twice that at most
MAX_STEP_LINES = 200_000
# ... and bytes: 200,000 lines of about 100 bytes, 300 with the callbacks' extras.
MAX_REPORT_BYTES = 64 << 20


def device_sync() -> None:
    """Wait for the GPU when the job uses one (torch imported by the job and CUDA initialised); no
    import here."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def graphs() -> int | None:
    """Graphs torch.compile has compiled in this process so far (Dynamo's counters; None: never
    imported)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    return int(utils.counters["stats"]["unique_graphs"])


def knobs() -> dict[str, Any]:
    """The trial's knob values (AUTOTUNE_KNOBS), for a job that reads them itself; {} outside
    autotune."""
    knobs: dict[str, Any] = json.loads(os.environ.get(ENV_KNOBS) or "{}")
    return knobs


class Reporter:
    """The steps of one job: each step's seconds and tokens, one JSON line each, appended to
    AUTOTUNE_REPORT. `active` is False outside autotune (no file named): then nothing is written and
    no step stops the job. The job is done once the stop file exists or it gave `most` steps;
    without a stop file, at `needed`. A job that goes on past it writes no more than the trial reads
    (MAX_STEP_LINES, MAX_REPORT_BYTES)."""

    def __init__(
        self,
        path: str | None = None,
        steps: str | None = None,
        sync: Callable[[], None] = device_sync,
        stop: str | None = None,
        most: int | None = None,
    ):
        self.path = path if path is not None else os.environ.get(ENV_REPORT)
        # under torchrun the first rank reports (its own tokens)
        if os.environ.get("RANK", "0") != "0":
            self.path = None
        warmup, _, measure = (
            steps if steps is not None else os.environ.get(ENV_STEPS, "0,0")
        ).partition(",")
        self.needed = int(warmup or 0) + int(measure or 0)
        self.stop = stop if stop is not None else os.environ.get(ENV_STOP)
        most_env = os.environ.get(ENV_MAX_STEPS)
        given = most if most is not None else int(most_env) if most_env else None
        # without a bound: the steps asked, or (with a stop file) until autotune stops it
        self.most: int = given if given is not None else self.needed if not self.stop else 10**9
        self.sync = sync
        self.count = 0
        self.closed = False
        self.written = 0  # bytes (MAX_REPORT_BYTES)
        self.last = time.perf_counter()
        # a step's stamp (at) is read off the clock that times it, from this origin: its time and
        # the time between its stamps agree (the trial checks they do)
        self.origin = (time.time(), self.last)
        self.owner: object | None = None  # the training measured (claim)

    @property
    def active(self) -> bool:
        return bool(self.path)

    def done(self) -> bool:
        """autotune has every step it needs (its stop file, or the most steps it asks): stop
        training."""
        if not self.active:
            return False
        return self.count >= self.most or bool(self.stop and os.path.exists(self.stop))

    def has_steps(self) -> bool:
        """autotune has the steps it needs: its stop file, or at least the steps it asks (a job
        that ends then is measured)."""
        return self.count >= self.needed or bool(self.stop and os.path.exists(self.stop))

    def claim(self, owner: object) -> bool:
        """A training begins (owner: its callback): True when it is the one measured, the first to
        begin. Another (a second Trainer, the same one trained again) stays silent, so that no step
        is counted twice; if it begins after the measured one ended short of autotune's steps, the
        trial is told it failed: the job went on to train something autotune does not measure."""
        if not self.active:
            return False
        if self.owner is None:
            self.owner = owner
            return True
        if self.closed and not self.has_steps():
            what = (
                "trained its Trainer again" if owner is self.owner else "trained a second Trainer"
            )
            self.fail(
                f"the job {what} after the first training's {self.count} of the {self.needed} "
                "optimizer steps autotune needs: autotune measures one Trainer's training; let "
                f"the first train at least {self.needed} steps (its max_steps), or leave the other "
                "training out of the job autotune runs"
            )
        return False

    def job_settings(self, settings: Knobs, read_from: dict[str, str]) -> None:
        """The settings the job ran with, in autotune's knob names (read_from: where each was read,
        in the framework's terms); the trial compares them with its knobs."""
        if self.active:
            self._write({"job_settings": settings, "read_from": read_from})

    def fail(self, reason: str) -> None:
        """Fail the trial with this one-line reason (the trial ends the job when it reads it)."""
        if self.active:
            self._write({"failed": " ".join(reason.split())})

    def begin(self) -> None:
        """Mark the start of the first step (else the reporter's creation is)."""
        self.sync()
        self.last = time.perf_counter()

    def step(self, tokens: int, padded_tokens: int | None = None) -> bool:
        """An optimizer step has ended: synchronise, time it from the previous end, write it. True:
        stop now."""
        if not self.active:
            return False
        self.sync()
        now = time.perf_counter()
        seconds, self.last = now - self.last, now
        at = self.origin[0] + (now - self.origin[1])
        return self.record(seconds, tokens, padded_tokens, at=at, graphs=graphs())

    def record(
        self, seconds: float, tokens: int, padded_tokens: int | None = None, **extra: float | None
    ) -> bool:
        """A step timed by the caller (CUDA events): its seconds and tokens, and numbers of its own
        (extra: at, its wall-clock end; graphs, torch.compile's graphs so far). True: stop now."""
        if not self.active:
            return False
        self.count += 1
        line = {"step": self.count, "s": float(seconds), "tokens": int(tokens), "at": time.time()}
        line.update({k: v for k, v in extra.items() if v is not None})
        if padded_tokens is not None:
            line["padded"] = int(padded_tokens)
        if self.count <= min(self.most or MAX_STEP_LINES, MAX_STEP_LINES):  # past it: never read
            self._write(line)
        done = self.done()
        if done:
            self.close()
        return done

    def close(self) -> None:
        """The job's last line: its peak memory (written once, when it stops or its training
        ends)."""
        if self.active and not self.closed:
            self.closed = True
            self._write({"done": True, **_memory()})

    def _write(self, line: dict[str, Any]) -> None:
        """Append one line (one short write with O_APPEND: a reader never sees half of one), within
        MAX_REPORT_BYTES (but for the closing and the failing line)."""
        assert self.path is not None
        text = json.dumps(line) + "\n"
        if self.written + len(text) > MAX_REPORT_BYTES and not ({"done", "failed"} & set(line)):
            return
        self.written += len(text)
        with open(self.path, "a") as f:
            f.write(text)


def _memory() -> dict[str, Any]:
    """The job's peak GPU memory, when it has torch with CUDA initialised (else nothing: the trial
    says so)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    return {
        "peak_mem_bytes": torch.cuda.max_memory_allocated(),
        "peak_mem_reserved_bytes": torch.cuda.max_memory_reserved(),
        "device_name": torch.cuda.get_device_name(),
    }


_REPORTER: Reporter | None = None


def reporter() -> Reporter:
    """The job's reporter, made on first use from the environment."""
    global _REPORTER
    if _REPORTER is None:
        _REPORTER = Reporter()
    return _REPORTER


def step(tokens: int, padded_tokens: int | None = None) -> bool:
    """An optimizer step has ended (see Reporter.step). True: autotune has its steps, stop
    training."""
    return reporter().step(tokens, padded_tokens)


def begin() -> None:
    """Mark the start of the first step (optional: else the first call into this module is)."""
    reporter().begin()
