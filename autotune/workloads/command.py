"""task command: the user's own training command as one trial, in its own process group, its steps read from
what it reports (autotune.reporting, the callbacks) or from its output (a log pattern), then ended.

The trial process is a launcher here: it takes the command the parent rendered with the knob values
(tasks.Command.prepare, command_render.py), starts it, watches its report file and output, asks it to stop once warm-up and measured steps are done,
ends its process group after command.stop_grace_s, and turns what the job said into the measured steps.
Its failures (out of memory, NCCL refusals, an exit before its steps, no step at all, a hang) are classified
from its exit and output, whose tail is kept in the reason.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from autotune import nccl_log
from autotune.reporting import ENV_KNOBS, ENV_REPORT, ENV_STEPS
from autotune.workloads.base import Failed, Measured, Work, Workload
from autotune.workloads.timing import Timing

TAIL_LINES = 20  # of the job's output, kept in a failure's reason
POLL_S = 0.1
LINE_BYTES = 64 << 10
TERM_GRACE_S = 10.0  # after SIGTERM, before SIGKILL
REPORT_FILE = "steps.jsonl"


@dataclass
class _Rendered:
    """The trial's command as the parent rendered it (command_render.Rendered, through the spec)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    config_path: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)


class _Output:
    """The job's output, copied line by line into the trial's log; its tail kept, its pattern's samples read."""

    def __init__(self, stream: Any, pattern: str | None) -> None:
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.pattern = re.compile(pattern) if pattern else None
        self.samples: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: Any) -> None:
        for raw in iter(lambda: stream.readline(LINE_BYTES), b""):  # a line without end is read in pieces
            sys.stdout.buffer.write(raw)
            sys.stdout.flush()
            line = raw.decode(errors="replace").rstrip()
            self.tail.append(line)
            if self.pattern is not None and (m := self.pattern.search(line)):
                self.samples.append(_sample(m, time.time()))

    def text(self) -> str:
        return "\n".join(self.tail)


def _number(text: str) -> float:
    return float(text.replace(",", "").replace("_", ""))


def _sample(m: re.Match[str], at: float) -> dict[str, Any]:
    """A log line's sample: seconds and tokens of a step, or a throughput (one token in 1/tps seconds)."""
    groups = m.groupdict()
    if groups.get("step_time_s") is not None:
        return {"s": _number(groups["step_time_s"]), "tokens": int(_number(groups["tokens"])), "at": at}
    return {"s": 1.0 / _number(groups["tokens_per_s"]), "tokens": 1, "at": at}


def read_report(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The steps a job reported so far and its `done` line (None before it)."""
    steps, done = [], None
    try:
        text = path.read_text()
    except FileNotFoundError:
        return steps, done
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue  # a line being written
        if doc.get("done"):
            done = doc
        elif "s" in doc:
            steps.append(doc)
    return steps, done


class Command(Workload):
    task: ClassVar[str] = "command"
    touches_device: ClassVar[bool] = False

    def build(self) -> None:
        """Render the trial's command; nothing is started yet."""
        params, run = self.spec.params, self.spec.run
        self.cfg = params["command"]
        assert self.run_dir is not None
        self.rendered = _Rendered(**params["rendered"])  # by the parent (tasks.Command.prepare)
        self.needed = run.warmup_steps + run.measure_steps
        self.report_path = self.run_dir / REPORT_FILE
        self.report_path.unlink(missing_ok=True)
        self.deadline_s = float(params.get("timeout_s", 3600.0))
        self.applied = {"command": self.rendered.argv, "env": self.rendered.env, "cwd": self.rendered.cwd}
        if self.rendered.overrides:
            self.applied["config_overrides"] = self.rendered.overrides

    def _env(self) -> dict[str, str]:
        steps = f"{self.spec.run.warmup_steps},{self.spec.run.measure_steps}"
        knobs = json.dumps(self.spec.knobs)
        env = {**os.environ, **self.rendered.env, ENV_STEPS: steps, ENV_KNOBS: knobs}
        if self.cfg.get("measure", "report") == "report":
            env[ENV_REPORT] = str(self.report_path)
        return env

    def _start(self) -> subprocess.Popen[bytes]:
        try:
            return subprocess.Popen(
                self.rendered.argv,
                cwd=self.rendered.cwd,
                env=self._env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the trial ends all of it
            )
        except OSError as err:
            raise Failed("crash", f"the command could not start: {err}; command.argv[0] is {self.rendered.argv[0]!r}")

    def _steps(self, output: _Output) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        if self.cfg.get("measure", "report") == "log":
            return list(output.samples), None
        return read_report(self.report_path)

    def run(self) -> Measured:
        t0 = time.time()
        proc = self._start()
        output = _Output(proc.stdout, self.cfg.get("log_pattern"))
        try:
            steps, done, stop = self._watch(proc, output, t0)
        finally:
            _end_group(proc, 0.0)
            output.thread.join(timeout=5)
        if len(steps) < self.needed:
            raise self._failure(proc.returncode, steps, output)
        return self._measured(steps[: self.needed], done or {}, stop, t0)

    def _watch(self, proc: subprocess.Popen[bytes], output: _Output, t0: float) -> tuple[list, dict | None, str]:
        """Wait for the job's steps, then for its exit (stop_grace_s), then end it; the trial's deadline too."""
        grace = float(self.cfg.get("stop_grace_s", 30.0))
        measured_at = None
        while True:
            steps, done = self._steps(output)
            if measured_at is None and len(steps) >= self.needed:
                measured_at = time.monotonic()
                if self.cfg.get("measure") == "log":  # a log job has no stop channel: SIGTERM is its request
                    _signal_group(proc, signal.SIGTERM)
            if proc.poll() is not None:
                return steps, done, "exited by itself" if measured_at is not None else ""
            if measured_at is not None and time.monotonic() - measured_at > grace:
                _end_group(proc, TERM_GRACE_S)
                return steps, done, f"ignored the stop request: its process group was ended {grace:.0f} s after"
            if time.time() - t0 > self.deadline_s:
                _end_group(proc, TERM_GRACE_S)
                raise Failed(
                    "timeout",
                    f"the command reported {len(steps)} of {self.needed} steps in {self.deadline_s:.0f} s (trial "
                    f"timeout); its process group was ended. Last output:\n{output.text()}",
                )
            time.sleep(POLL_S)

    def _expected(self) -> str:
        if self.cfg.get("measure") == "log":
            return f"output lines matching log_pattern {self.cfg.get('log_pattern')!r}"
        return (
            f"steps in {ENV_REPORT} (autotune.reporting.step() after each optimizer step, or the "
            "AutotuneCallback of autotune.callbacks.hf / .lightning)"
        )

    def _failure(self, code: int | None, steps: list[dict[str, Any]], output: _Output) -> Failed:
        """Why the job ended before its steps: out of memory, NCCL's refusal, a crash, or an early exit."""
        tail = output.text()
        if "out of memory" in tail.lower() or "OutOfMemoryError" in tail:
            oom = [line for line in output.tail if "out of memory" in line.lower() or "OutOfMemoryError" in line]
            return Failed("oom", f"the command ran out of memory: {oom[-1].strip()[:400]}")
        refusal = nccl_log.refusal_of(Exception(tail))
        if refusal is not None:
            return Failed("invalid_config", refusal)
        how = f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exited with code {code}"
        if code == 0 and not steps:
            return Failed("crash", f"the command exited 0 without reporting a step; expected {self._expected()}")
        if code == 0:
            return Failed(
                "crash",
                f"the command exited 0 after {len(steps)} of {self.needed} steps "
                f"({self.spec.run.warmup_steps} warm-up + {self.spec.run.measure_steps} measured): let it run at "
                "least that many optimizer steps (its step limit, e.g. --max_steps)",
            )
        return Failed("crash", f"the command {how} after {len(steps)} of {self.needed} steps:\n{tail}")

    def _measured(self, steps: list[dict[str, Any]], done: dict[str, Any], stop: str, t0: float) -> Measured:
        warm, timed = steps[: self.spec.run.warmup_steps], steps[self.spec.run.warmup_steps :]
        tokens = [int(s["tokens"]) for s in timed]
        padded = [int(s["padded"]) for s in timed if "padded" in s]
        self.tokens_per_step = round(sum(tokens) / len(tokens))
        start = warm[-1].get("at", t0) if warm else t0
        window = (float(start), float(timed[-1].get("at", time.time())))
        peak = done.get("peak_mem_bytes")
        kind = "cuda_max_memory_allocated" if peak is not None else "not reported by the job"
        timing = Timing([s["s"] for s in warm], start, _at_mean_tokens(timed), [], window, peak, kind, None)
        timing.reserved_bytes = done.get("peak_mem_reserved_bytes")
        self.applied["stop"] = stop
        job_env = {"device": self.spec.device, **{k: done[k] for k in ("device_name",) if k in done}}
        if self.spec.device == "cuda" and "device_name" not in job_env:
            job_env["device_name"] = _visible_gpu_name()
        output = {"tokens": tokens, "step_s_as_reported": [s["s"] for s in timed], "job_env": job_env}
        if len(padded) == len(tokens):
            output["padded_tokens"] = padded
            output["padding_pct"] = round(100 * (1 - sum(tokens) / sum(padded)), 2) if sum(padded) else 0.0
        self.timing = timing
        return Measured(timing, output=output)

    def work(self) -> Work:
        return Work(tokens_per_step=getattr(self, "tokens_per_step", None))


def _at_mean_tokens(steps: list[dict[str, Any]]) -> list[float]:
    """Each step's time scaled to the mean tokens of a step: tokens_per_step / median of these is the median of
    the steps' own rates. A job's steps differ in tokens (variable lengths, length-grouped batches), and a
    median step time against the mean tokens would mix two steps; the times as reported are kept beside."""
    mean = sum(s["tokens"] for s in steps) / len(steps)
    return [s["s"] * mean / s["tokens"] if s["tokens"] else s["s"] for s in steps]


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _end_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the job's process group, SIGKILL it after grace_s (at once with 0: what is left of it)."""
    if grace_s > 0 and proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(proc, signal.SIGKILL)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def _visible_gpu_name() -> str:
    """The first visible GPU's name from NVML (a job measured from its log reports no device)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        index = int((os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0])
        return str(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index)))
    except Exception:  # no NVML, or CUDA_VISIBLE_DEVICES by UUID: the GPU is still a GPU
        return "NVIDIA GPU (not reported by the job)"
