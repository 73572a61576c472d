"""task command: the user's own training command as one trial, in its own process group, its steps
read from what it reports (autotune.reporting, the callbacks) or from its output (a log pattern) as
they end.

The trial process is a launcher here: it takes the command the parent rendered with the knob values
(tasks.Command.prepare, command/render.py), starts it and watches its steps as they come. It asks
the job to stop (the stop file, or SIGTERM for a log job) once the window has settled
(command/window.py: the figure is tokens over time), once the search's pruner says so, or once the
job keeps recompiling; it ends the process group after command.stop_grace_s. Nothing reported is
thrown away: a job that gave its steps is measured however it exits, and one stopped at the trial's
limit keeps the steps it gave, and one that said it is done is measured then, however slowly it
exits. What it reports is checked as it is read (report.py): a figure that cannot be, a setting
the job ran other than the trial set (job_settings: said.settings_said) or a second training of the
job (reporting's claim file) fails the trial, naming it. Its failures (out of memory, NCCL refusals,
an exit before its steps, no step) are classified from its exit and output, whose telling line
(protocol.last_words: the exception, not a warning) is quoted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from autotune import atomic, modes, nccl_log
from autotune.command import bursts
from autotune.command import window as windows
from autotune.command.gpu_peak import PeakWatch, job_peak, tokens_per_micro_batch, visible_gpu_name
from autotune.command.hook import unmeasured
from autotune.command.log import Output, close_lines, per_step_of
from autotune.command.report import BadReport, DoneLine, Report, clock_said, figure_said, fresh
from autotune.command.said import average_said, child_said, ended_said, stopped_said, time_went
from autotune.protocol import ENV_SECRETS, CommandParams, last_words, told_lines, unhide
from autotune.reporting import ENV_KNOBS, ENV_MAX_STEPS, ENV_REPORT, ENV_STEPS, ENV_STOP
from autotune.status import Status
from autotune.workloads.base import Failed, Measured, Work, Workload
from autotune.workloads.timing import Timing

POLL_S = 0.1
TERM_GRACE_S = 10.0  # after SIGTERM, before SIGKILL
REPORT_FILE, STOP_FILE = "steps.jsonl", "stop"
RECOMPILING_STEPS = 3  # steps after the first that compiled new graphs: the job keeps recompiling


@dataclass
class _Watch:
    """What the watch of a running job ended with."""

    steps: list[dict[str, Any]]
    done: DoneLine | None
    window: windows.Window | None = None  # settled, or max_steps reached
    stopped: str = ""  # why the trial stopped the job before its window (pruned, recompiling, ...)
    stop: str = ""  # how the job ended once asked (record.applied.stop)
    said_done: bool = False  # its done line came before its window: it ended its reports itself


class Command(Workload):
    task: ClassVar[str] = "command"
    touches_device: ClassVar[bool] = False
    imports_torch: ClassVar[bool] = False

    def build(self) -> None:
        """Render the trial's command; nothing is started yet."""
        params, run = self.spec.params, self.spec.run
        assert isinstance(params, CommandParams) and params.rendered is not None
        assert self.run_dir is not None
        self.params = params
        self.cfg = params.command
        self.rendered = params.rendered  # by the parent (tasks.Command.prepare)
        # its secrets masked: the values come in this process's environment alone (protocol.unhide)
        hidden = os.environ.get(ENV_SECRETS)
        self.real_argv, self.real_env = unhide(self.rendered.argv, self.rendered.env, hidden)
        self.needed = run.warmup_steps + run.measure_steps
        self.rule = windows.Rule(
            run.warmup_steps,
            run.measure_steps,
            max(self.needed, int(self.cfg.get("max_steps") or 0)),
            float(self.cfg.get("half_width_pct", windows.Rule.half_width_pct)),
        )
        self.mode = modes.of(self.cfg)  # where its steps are read, how it is asked to stop
        self.per_step = per_step_of(self.cfg, self.spec.knobs)  # command.tokens_per_step
        self.log = self.mode.reads == "output"  # its steps are lines of its output
        self.report_path, self.stop_path = self.run_dir / REPORT_FILE, self.run_dir / STOP_FILE
        fresh(self.report_path)  # and its claim file
        self.stop_path.unlink(missing_ok=True)
        self.deadline_s = params.timeout_s
        self.first_step_s = min(
            self.deadline_s, float(self.cfg.get("first_step_s") or self.deadline_s)
        )
        self.applied = {
            "command": [self._program(), *self.rendered.argv[1:]],
            "env": self.rendered.env,
            "cwd": self.rendered.cwd,
        }
        if self.rendered.overrides:
            self.applied["config_overrides"] = self.rendered.overrides

    def _program(self) -> str:
        """argv[0] as Popen finds it, recorded so that the export names the interpreter the trial
        ran: a bare name (`python`) on the job's PATH; a path, or a secret, as it is."""
        import shutil

        shown = self.rendered.argv[0]
        if shown != self.real_argv[0] or os.sep in shown:
            return shown
        path = self.real_env.get("PATH", os.environ.get("PATH", os.defpath))
        return shutil.which(shown, path=path) or shown

    def _env(self) -> dict[str, str]:
        steps = f"{self.spec.run.warmup_steps},{self.spec.run.measure_steps}"
        knobs = json.dumps(self.spec.knobs)
        env = {**os.environ, **self.real_env, ENV_STEPS: steps, ENV_KNOBS: knobs}
        env.pop(ENV_SECRETS, None)  # the hand-over is autotune's, not the job's
        if self.mode.reads == "report":
            env.update({ENV_REPORT: str(self.report_path), ENV_MAX_STEPS: str(self.rule.max_steps)})
        if self.mode.stop == "file":
            env[ENV_STOP] = str(self.stop_path)
        return env

    def _start(self) -> subprocess.Popen[bytes]:
        try:
            return subprocess.Popen(
                self.real_argv,
                cwd=self.rendered.cwd,
                env=self._env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the trial ends all of it
            )
        except OSError as err:
            raise Failed(
                Status.CRASH,
                f"the command could not start: {err}; command.argv[0] is {self.rendered.argv[0]!r}",
            )

    def _steps(self, output: Output) -> tuple[list[dict[str, Any]], DoneLine | None]:
        """The steps so far (and the done line); a figure that cannot be fails the trial."""
        try:
            if output.bad:
                raise BadReport(output.bad)
            return (output.steps(), None) if self.log else self.report.read()
        except BadReport as err:  # or the job's own failing line (JobFailed: no prefix)
            raise Failed(err.status, f"{err.prefix}{err}") from None

    def run(self) -> Measured:
        t0 = time.time()
        self.report = Report(self.report_path, t0, self.rule.max_steps, self.spec.knobs, self.cfg)
        proc = self._start()
        assert proc.stdout is not None  # started with stdout=PIPE
        output = Output(
            proc.stdout, self.cfg.get("log_pattern"), self.rule.max_steps, self.per_step
        )
        memory = PeakWatch(proc.pid).start() if self.spec.device == "cuda" else None
        try:
            watch = self._watch(proc, output, t0)
        except Failed as err:  # a log job's lines held back by a filter: its reason says so
            raise Failed(err.status, bursts.noted(str(err), output.samples)) from None
        finally:
            _end_group(proc, 0.0)
            output.thread.join(timeout=5)
            self.nvml_peak = memory.stop() if memory is not None else None
        self._steps(output)  # a figure read after the last look fails it too
        steps = watch.steps
        if watch.window is None and not watch.stopped and len(steps) >= self.needed:
            watch.window = windows.window(
                _pairs(steps), self.rule
            )  # it exited by itself: all it gave counts
        if watch.window is None and not (watch.stopped and len(steps) > self.rule.warmup):
            raise self._failure(proc.returncode, steps, output, watch.stopped)
        return self._measured(watch, t0, output)

    def _ask_stop(self, proc: subprocess.Popen[bytes]) -> None:
        """Ask the job to stop as its mode says: its stop file (the callbacks), or SIGTERM."""
        if self.mode.stop == "file":
            atomic.touch(self.stop_path)
        else:
            _signal_group(proc, signal.SIGTERM)

    def _watch(self, proc: subprocess.Popen[bytes], output: Output, t0: float) -> _Watch:
        """Follow the job's steps until its window settles or something stops it, then let it exit
        (stop_grace_s) and end its process group."""
        grace = float(self.cfg.get("stop_grace_s", 30.0))
        asked_at = None
        watch = _Watch([], None)
        while True:
            watch.steps, watch.done = self._steps(output)
            if asked_at is None and (why := self._verdict(watch, output, t0)):
                if why != "window":
                    watch.stopped = why
                if why.startswith("timeout"):  # the trial's limit: no grace beyond it
                    _end_group(proc, TERM_GRACE_S)
                    watch.steps, watch.done = self._steps(output)
                    return watch
                self._ask_stop(proc)
                asked_at = time.monotonic()
            if proc.poll() is not None:
                watch.steps, watch.done = self._steps(output)
                watch.stop = "exited by itself" if asked_at is not None else ""
                return watch
            late = asked_at is not None and time.time() - t0 > self.deadline_s  # the steps are kept
            if asked_at is not None and (time.monotonic() - asked_at > grace or late):
                _end_group(proc, TERM_GRACE_S)
                watch.stop = ended_said(watch.said_done, late, grace, self._notes())
                watch.steps, watch.done = self._steps(output)
                return watch
            time.sleep(POLL_S)

    def _verdict(self, watch: _Watch, output: Output, t0: float) -> str:
        """Why the job should stop now ("window": it has what it needs), or ''."""
        elapsed = time.time() - t0
        if self.rule.against is None:
            self.rule = windows.against(self.rule, self.run_dir)
        if output.refused:
            raise Failed(Status.INVALID_CONFIG, average_said(output.refused))
        if watch.done is not None and len(watch.steps) >= self.needed:  # it gave all it will
            decided = windows.decide(_pairs(watch.steps), self.rule)
            watch.window = decided or windows.window(_pairs(watch.steps), self.rule)
            watch.said_done = decided is None  # before its window: the job ended, not the trial
            return "window"
        if elapsed > self.deadline_s:
            return self._timed_out(watch, output, t0)
        if not watch.steps and elapsed > self.first_step_s:
            return self._no_first_step(output)
        if (recompiling := _recompiling(watch.steps)) is not None:
            return recompiling
        if self._pruned(watch.steps):
            return Status.PRUNED
        watch.window = windows.decide(_pairs(watch.steps), self.rule)
        return "window" if watch.window is not None else ""

    def _pruned(self, steps: list[dict[str, Any]]) -> bool:
        """The search's pruner (trial.Progress): each step past the warm-up, as a time at the first
        one's tokens."""
        measured = steps[self.rule.warmup :]
        if self.progress is None or not measured:
            return False
        self.tokens_per_step = int(measured[0]["tokens"]) or 1
        return bool(self.progress(_at_tokens(measured, self.tokens_per_step), self.tokens_per_step))

    def _timed_out(self, watch: _Watch, output: Output, t0: float) -> str:
        """The job at the trial's limit: pruned with its steps past the warm-up, else a timeout;
        either names the limit, its setting and what ate the time."""
        minutes = self.params.trial_timeout_min
        setting = "study.trial_timeout_min" + (f" {minutes:g}" if minutes else "")
        limit = f"the trial's limit, {self.deadline_s:.0f} s ({setting}: raise it to measure more)"
        went = time_went(watch.steps, t0)
        if len(watch.steps) > self.rule.warmup:
            return f"timeout after {len(watch.steps)} of {self.needed} steps: {limit}; {went}"
        said = self._closest(output) if not watch.steps else ""
        if not said and (words := last_words(output.text(), 160)):
            said = f"; its output ends: {words}"
        if child := child_said(self._notes()):
            said = f"; {child}{said}"
        raise Failed(
            Status.TIMEOUT,
            f"the command reported {len(watch.steps)} of {self.needed} steps by {limit}: {went}; "
            f"none measured past its {self.rule.warmup} warm-up steps{said}",
        )

    def _closest(self, output: Output) -> str:
        """A log job's output lines closest to its pattern, for one that never matched ('' else)."""
        if not self.log:
            return ""
        close = close_lines(list(output.seen), self.cfg.get("log_pattern") or "")
        return f"; the lines closest to command.log_pattern: {'; '.join(close) or 'none'}"

    def _no_first_step(self, output: Output) -> str:
        what = f"no step in {self.first_step_s:.0f} s (command.first_step_s: raise it if slow)"
        child = child_said(self._notes())
        what += f"; {child}" if child else f"; expected {self._expected()}"
        said = self._closest(output)
        if not said and (words := last_words(output.text(), 160)):
            said = f"; its output ends: {words}"
        raise Failed(Status.CRASH, what + said)

    def _notes(self) -> list[dict[str, Any]]:
        """The trainings of the job that autotune did not measure (hook/unmeasured.py)."""
        return unmeasured.read(str(self.report_path))  # a log job's: none (no hook)

    def _expected(self) -> str:
        if self.log:
            return f"output lines matching log_pattern {self.cfg.get('log_pattern')!r}"
        return (
            f"steps in {ENV_REPORT} (autotune.reporting.step() after each optimizer step, the "
            "AutotuneCallback of autotune.callbacks.hf / .lightning, or command.measure: hf / "
            "lightning)"
        )

    def _failure(
        self, code: int | None, steps: list[dict[str, Any]], output: Output, stopped: str
    ) -> Failed:
        """Why the job ended before its steps: out of memory, NCCL's refusal, a crash, or an early
        exit."""
        tail = output.text()
        told, _ = told_lines(tail)  # a library's warning that mentions memory is no OOM
        oom = [x for x in told if "out of memory" in x.lower() or "OutOfMemoryError" in x]
        if oom:
            return Failed(Status.OOM, f"the command ran out of memory: {oom[-1][:400]}")
        refusal = nccl_log.refusal_of(Exception(tail))
        if refusal is not None:
            return Failed(Status.INVALID_CONFIG, refusal)
        if stopped:
            return Failed(
                Status.CRASH, f"{stopped}, after {len(steps)} steps, none measured past the warm-up"
            )
        how = (
            f"killed by {signal.Signals(-code).name}"
            if code is not None and code < 0
            else f"exited with code {code}"
        )
        child = child_said(self._notes()) if not steps else ""
        if code == 0 and not steps:
            expected = f"reporting a step; expected {self._expected()}"
            said = f"a measured step: {child}" if child else expected
            return Failed(Status.CRASH, f"the command exited 0 without {said}")
        if code == 0:
            return Failed(
                Status.CRASH,
                f"the command exited 0 after {len(steps)} of {self.needed} steps "
                f"({self.spec.run.warmup_steps} warm-up + {self.spec.run.measure_steps} "
                "measured): let it run at least that many optimizer steps (its step limit, e.g. "
                "--max_steps)",
            )
        said = last_words(tail) or "no output"
        ended = f"the command {how} after {len(steps)} of {self.needed} steps"
        return Failed(Status.CRASH, f"{ended}: {said}" + (f"; {child}" if child else ""))

    def _measured(self, watch: _Watch, t0: float, lines: Output) -> Measured:
        steps, done = watch.steps, watch.done or DoneLine()
        win = watch.window or windows.window(_pairs(steps), self.rule)
        clock = "" if self.log else clock_said(steps, win.start, win.end)  # a log's lines: no clock
        if why := clock or figure_said(win.tokens_per_s):
            raise Failed(Status.CRASH, f"the command reported what cannot be: {why}")
        warm, timed = steps[: win.start], steps[win.start : win.end]
        tokens = [int(s["tokens"]) for s in timed]
        padded = [int(s["padded"]) for s in timed if "padded" in s]
        self.tokens_per_step = round(sum(tokens) / len(tokens))
        start = warm[-1].get("at", t0) if warm else t0
        span = (float(start), float(timed[-1].get("at", time.time())))
        peak, kind = job_peak(done, getattr(self, "nvml_peak", None))
        timing = Timing(
            [s["s"] for s in warm],
            start,
            _at_tokens(timed, self.tokens_per_step),
            [],
            span,
            peak,
            kind,
            None,
        )
        timing.reserved_bytes = done.get("peak_mem_reserved_bytes")
        timing.stopped_early = bool(watch.stopped)
        self.applied["stop"] = watch.stop
        output: dict[str, Any] = {
            "tokens": tokens,
            "step_s_as_reported": [s["s"] for s in timed],
            "job_env": self._job_env(done),
            "resident_mem_bytes": done.get("resident_mem_bytes"),
        }
        output["window"] = {**win.summary(), "said": windows.said(win, self.rule)}
        output["job_settings"] = self.report.settings  # what the job ran with (None: not reported)
        output["nvml_peak_bytes"] = getattr(self, "nvml_peak", None)
        output["tokens_per_micro_batch"] = tokens_per_micro_batch(steps, self.spec.knobs)
        if any("graphs" in s for s in steps):
            output["graphs"] = [s.get("graphs") for s in steps]
        if len(padded) == len(tokens):
            output["padded_tokens"] = padded
            output["padding_pct"] = (
                round(100 * (1 - sum(tokens) / sum(padded)), 2) if sum(padded) else 0.0
            )
        self.timing = timing
        stopped = stopped_said(watch.stopped, len(steps), self.needed, win.tokens_per_s)
        if watch.stop.startswith("reported done"):  # measured: how it ended is the reason
            stopped = f"its {len(steps)} steps are measured; the command {watch.stop}"
        stopped = bursts.noted(stopped, lines.samples)
        return Measured(timing, output=output, stopped=stopped)

    def _job_env(self, done: DoneLine) -> dict[str, Any]:
        job_env = {
            "device": self.spec.device,
            **{k: done[k] for k in ("device_name",) if k in done},
        }
        if self.spec.device == "cuda" and "device_name" not in job_env:
            job_env["device_name"] = visible_gpu_name()
        return job_env

    def work(self) -> Work:
        return Work(tokens_per_step=getattr(self, "tokens_per_step", None))


def _pairs(steps: list[dict[str, Any]]) -> list[windows.Step]:
    return [(float(s["s"]), float(s["tokens"])) for s in steps]


def _at_tokens(steps: list[dict[str, Any]], tokens: float) -> list[float]:
    """Each step's time scaled to `tokens` a step (the mean of the window): the steps' own rates,
    for the pruner, the step-time statistics and the steadiness flag; the figure is tokens over time
    (window.py), and the times as reported are kept beside."""
    return [s["s"] * tokens / s["tokens"] if s["tokens"] else s["s"] for s in steps]


def _recompiling(steps: list[dict[str, Any]]) -> str | None:
    """Why the job should stop, when RECOMPILING_STEPS steps after the first compiled new graphs
    (the first compiles the program; a dynamic recompile at the second shape is one more)."""
    graphs: list[int | None] = [s.get("graphs") for s in steps]
    compiled = [
        now
        for before, now in zip(graphs, graphs[1:])
        if before is not None and now is not None and now > before
    ]
    if len(compiled) < RECOMPILING_STEPS:
        return None
    return (
        f"recompiling: {len(compiled)} steps after the first compiled new graphs ({graphs[-1]} in "
        "all), as torch.compile does for each new sequence length; pad to a multiple (e.g. "
        "pad_to_multiple_of) "
        "or a fixed length, mark the length dynamic, or leave compile off"
    )


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _end_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the job's process group, SIGKILL it after grace_s (at once with 0: what is left of
    it)."""
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
