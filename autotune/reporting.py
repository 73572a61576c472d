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
callbacks (autotune.callbacks) time steps with CUDA events instead and call `record`. The first
training to begin claims the trial's one training (`Reporter.claim`), in its process and across the
job's processes (a claim file beside the report, made with O_CREAT | O_EXCL: its pid, its program
and what trained): one training is measured; a training that begins in another process of the job
(a calibration step of a shell script, a helper child), or in this one after the first ended before
autotune stopped it, fails the trial (a "failed" line naming both). Under torchrun only the first
rank reports and claims. The callbacks also write the settings the job really ran with
(`Reporter.job_settings`), which the trial compares with its knobs.
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
# a "failed" line's reason at most (the trial reads no longer one): the callbacks' are under 800
MAX_REASON_CHARS = 1000
MAX_CLAIM_BYTES = 4096  # a claim file: a JSON line of a pid, a program and what trained; its end
CLAIM_CHARS = 80  # of a program or a training's name, quoted in a reason
LOOP = "its own training loop (reporting.step)"  # what trains, for a job that reports itself


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


def claim_path(report: str) -> str:
    """The claim file beside the report (steps.jsonl -> steps.claim): the trial's one training,
    across the job's processes."""
    return os.path.splitext(report)[0] + ".claim"


def _short(text: str) -> str:
    return text if len(text) <= CLAIM_CHARS else text[: CLAIM_CHARS - 3] + "..."


def _program(argv: list[str] | None = None) -> str:
    """This process's program as run (python train.py, python -m torch.distributed.run), or that of
    another's argv, for a reason: the script or module, never its arguments (a token may be one)."""
    argv = argv or list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    shown, rest = [os.path.basename(argv[0])], iter(argv[1:])
    for arg in rest:
        if arg in ("-W", "-X"):  # an option of Python's with its value
            next(rest, None)
        elif arg in ("-m", "-c"):
            shown += [arg, next(rest, "")] if arg == "-m" else [arg]
            break
        elif not arg.startswith("-"):
            shown.append(arg)
            break
    return _short(" ".join(shown))


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
        self.what = ""  # what it is, as a reason names it (an HF Trainer of Qwen2ForCausalLM)
        self.stopped = False  # it ended because autotune had its steps (close), not by itself
        self.refused = False  # another process of the job holds the claim: this one is silent
        # the most the job held allocated at a step's end (weights, optimizer state: what no
        # micro-batch adds; study/peaks.py fits the peak's growth above it)
        self.resident: int | None = None

    @property
    def active(self) -> bool:
        return bool(self.path)

    def done(self) -> bool:
        """autotune has every step it needs (its stop file, or the most steps it asks): stop
        training."""
        if not self.active:
            return False
        return self.count >= self.most or bool(self.stop and os.path.exists(self.stop))

    def claim(self, owner: object, what: str = "a training") -> bool:
        """A training begins (owner: its callback; what: what trains, for a reason): True when it is
        the trial's one training, the first to begin in the job. Another in this process (a second
        Trainer, the same one trained again) stays silent, so that no step is counted twice; if it
        begins after the measured one ended by itself, before autotune had its window, the trial
        is told it failed. So is one in another process of the job (the claim file is held): the
        job trained twice, and autotune cannot tell which training is the job's."""
        if not self.active or self.refused:
            return False
        if self.owner is None:
            held = self._claim_file(what)
            if held is None:
                self.owner, self.what = owner, what
                return True
            self.refused = True
            if held.get("pid") != os.getpid():  # else another reporter of this process measures
                self.fail(_two_processes(held, what, self.needed))
            return False
        if self.closed and not self.stopped:
            again = owner is self.owner
            self.fail(self._again_said(what, again))
        return False

    def _claim_file(self, what: str) -> dict[str, Any] | None:
        """Claim the job's one training in its claim file (None: claimed here), else what the
        process holding it wrote. A claim file that cannot be made (a read-only folder) leaves the
        claim to this process alone."""
        assert self.path is not None
        path = claim_path(self.path)
        mine = {"pid": os.getpid(), "program": _program(), "trained": _short(what)}
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return _held(path)
        except OSError:
            return None
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(mine) + "\n")
        return None

    def _again_said(self, what: str, again: bool) -> str:
        """Why a training that began in this process after the measured one ended fails the
        trial, naming both."""
        second = "trained its Trainer again" if again else "trained a second Trainer"
        most = self.most if self.most < 10**9 else self.needed
        if self.count < self.needed:
            first = f"the first training's {self.count} of the {self.needed} optimizer steps"
            first += " autotune needs"
        else:
            first = (
                f"the first training ended by itself after {self.count} optimizer steps, before "
                f"autotune had its window ({self.needed} steps at least, up to {most} until its "
                "figure settles)"
            )
        both = f"first {self.what}, then {_short(what)}, in pid {os.getpid()} ({_program()})"
        return (
            f"the job {second} after {first} ({both}): autotune measures one Trainer's training; "
            f"let the first train until autotune stops it (its max_steps at least {most}), or "
            "leave the other training out of the job autotune runs"
        )

    def job_settings(self, settings: Knobs, read_from: dict[str, str]) -> None:
        """The settings the job ran with, in autotune's knob names (read_from: where each was read,
        in the framework's terms); the trial compares them with its knobs."""
        if self.active:
            self._write({"job_settings": settings, "read_from": read_from})

    def fail(self, reason: str) -> None:
        """Fail the trial with this one-line reason (the trial ends the job when it reads it)."""
        if self.active:
            self._write({"failed": " ".join(reason.split())[:MAX_REASON_CHARS]})

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
        if not self.active or (self.owner is None and not self.claim(self, LOOP)):
            return False  # outside autotune, or another process of the job trains (claim)
        self.count += 1
        self._resident()
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
            self.stopped = self.done()  # autotune had its steps: a later training is no concern
            self._write({"done": True, **_memory(), **self._held()})
            self._ended()

    def _resident(self) -> None:
        """Read what the job holds allocated at this step's end (no synchronisation: the
        allocator's counter)."""
        if (now := _allocated()) is not None:
            self.resident = max(now, self.resident or 0)

    def _held(self) -> dict[str, int]:
        """The done line's resident memory, where a step's end read it."""
        return {} if self.resident is None else {"resident_mem_bytes": self.resident}

    def _ended(self) -> None:
        """The claim file's second line: the measured training's end, its steps (a training in
        another process names it so)."""
        assert self.path is not None
        if self.owner is None:
            return
        try:
            with open(claim_path(self.path), "a") as f:
                f.write(json.dumps({"ended": self.count, "stopped": self.stopped}) + "\n")
        except OSError:
            pass  # no claim file (a read-only folder): the claim was this process's alone

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


def _held(path: str) -> dict[str, Any]:
    """What the process holding the claim file wrote (its claim, then its end): read again for a
    moment while it is still being written."""
    for _ in range(20):
        try:
            with open(path, "rb") as f:
                lines = f.read(MAX_CLAIM_BYTES).decode(errors="replace").splitlines()
            docs = [json.loads(x) for x in lines if x.strip()]
        except (OSError, ValueError):
            docs = []
        if docs and all(isinstance(d, dict) for d in docs):
            return {k: v for d in docs for k, v in d.items()}
        time.sleep(0.05)
    return {}


def _two_processes(held: dict[str, Any], what: str, needed: int) -> str:
    """Why a training in a second process of the job fails the trial, naming both."""
    first = f"pid {held.get('pid', '?')} ({_short(str(held.get('program', '?')))})"
    first += f" trained {_short(str(held.get('trained', 'a training')))}"
    ended = held.get("ended")
    if isinstance(ended, int) and held.get("stopped") is True:
        first += f", stopped by autotune after {ended} steps"
    elif isinstance(ended, int):
        of = f" of the {needed} steps autotune needs" if ended < needed else " steps"
        first += f", which ended by itself after {ended}{of}"
    second = f"pid {os.getpid()} ({_program()}) began {_short(what)}"
    return (
        f"two trainings in one job: {first}; then {second}: autotune measures the trial's one "
        "training, and cannot tell which is the job's; leave the other out of the command "
        "autotune runs (run a calibration or helper step before autotune, or without "
        "AUTOTUNE_REPORT in its environment)"
    )


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


def _allocated() -> int | None:
    """What the job's tensors hold on its GPU now (None: no torch with CUDA initialised)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return int(torch.cuda.memory_allocated())


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
