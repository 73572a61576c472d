"""Shared fixtures and helpers: a tiny model YAML, the real CLI in a subprocess, polling with a
deadline."""

from __future__ import annotations

import contextlib
import copy
import fcntl
import io
import itertools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

# Device locks of this test session apart from any other autotune process on the machine
# (launch/locks.py): a test never waits on a real search, and a search never waits on the tests.
# setdefault: a session may choose its own. Each xdist worker takes its own namespace beside it:
# the workers inherit the controller's environment, and in one namespace every CPU trial of one
# worker waited for the other's (one "cpu-0" unit), leaving the cores idle. The GPU tests take
# turns on a lock file of their own (_one_gpu_test_at_a_time below).
_SESSION_LOCKS = os.environ.setdefault("AUTOTUNE_LOCK_NAMESPACE", f"tests-{os.getpid()}")
if _XDIST_WORKER := os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["AUTOTUNE_LOCK_NAMESPACE"] = f"{_SESSION_LOCKS}-{_XDIST_WORKER}"

# The suite shares its cores by design (two xdist workers, each test's trial processes): its checks'
# repeats wait for a CPU and the load passes 2 per core, which would make a check "unreliable"
# (check/conditions.py). check's --max-load defaults to AUTOTUNE_MAX_LOAD, 0 here: not judged; the
# tests of that judgement pass --max-load themselves (tests/test_gate_noise_machine.py,
# tests/test_regress.py) or call the library, whose default judges.
os.environ.setdefault("AUTOTUNE_MAX_LOAD", "0")

# Several xdist workers (two on CI's 2 cores): each trial's torch threads over its worker's
# share of the cores (at least one), as autotune sizes trials side by side (runner.omp_env), not
# over all of them each (oversubscribed: every process slower). A value already set wins; the
# serial pass, one process, keeps torch's own.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))

# A CPU trial that compiles (torch.compile's C++ kernels) compiles them scalar: Inductor's check
# of the CPU's vector instructions (six g++ runs in each fresh study's cache) and its vectorised
# kernels were 40% of a compiling test's time (37 s -> 24 s), and no test judges the kernels' speed:
# they judge what autotune does with the compile (its cache, graphs, reasons), the same either way.
# A value already set wins.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "0")

# The mark of the running test in the environment of every process it starts (SCOPE=<pid>.<n>). An
# environment is inherited through every fork and exec: into a session of its own (autotune starts
# each trial, probe and standby in one: launch/process.py, launch/probe.py, launch/prestart.py) and
# after the parent died (kill -9: the orphans are init's), where neither a session id nor the parent
# chain finds them.
# Leftover checks look for this mark, so two tests, or two xdist workers, never see each other's.
SCOPE = "AUTOTUNE_TEST_SCOPE"
_scopes = itertools.count()


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A serial test measures real speed, alone, after the parallel pass (make test): it is slow
    too, so `make test-fast` (not slow) leaves it out without a pass of its own."""
    for item in items:
        if item.get_closest_marker("serial"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _one_gpu_test_at_a_time(request, tmp_path_factory) -> Iterator[None]:
    """A GPU test (marked gpu) holds a lock that the run's pytest-xdist workers share (`make test`
    starts two): never two measure on one GPU at once. A lock, not xdist_group: --dist loadgroup
    silently stops grouping with pytest 9.2 (pytest-xdist issue 1386)."""
    if not (request.node.get_closest_marker("gpu") and os.environ.get("PYTEST_XDIST_WORKER")):
        yield
        return
    # each worker's base folder is <the run's>/popen-gwN: the parent is the run's, shared
    with open(tmp_path_factory.getbasetemp().parent / "gpu.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # the lock ends with the file's close


@pytest.fixture(autouse=True)
def _own_processes(monkeypatch) -> None:
    """This test's mark (SCOPE), for the processes it starts."""
    monkeypatch.setenv(SCOPE, f"{os.getpid()}.{next(_scopes)}")


TINY: dict[str, Any] = {
    "name": "t",
    "model": {
        "family": "gpt",
        "n_layers": 1,
        "d_model": 32,
        "n_heads": 2,
        "vocab_size": 128,
        "seq_len": 16,
    },
    "workload": {
        "task": "train",
        "global_batch_size": 8,
        "world_size": 1,
        "warmup_steps": 1,
        "measure_steps": 2,
    },
    "space": {
        "micro_batch_size": [2, 4, 8],
        "precision": ["fp32", "bf16"],
        "grad_accum_steps": "auto",
        "compile": False,
    },
    "study": {
        "trials": 3,
        "timeout_min": 5,
        "sampler": "tpe",
        "seed": 0,
        "trial_timeout_min": 2,
        "confirm_rounds": 0,
    },
    "baseline": {"micro_batch_size": 2, "precision": "fp32"},
}


def tiny(**overrides: Any) -> dict[str, Any]:
    """The tiny config with sections merged from overrides (section=dict) or top-level keys
    replaced."""
    data = copy.deepcopy(TINY)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


# A user's training job on the CPU for task command: a step of 2 ms per sample of --bs, reported
# through autotune.reporting; --tag is a knob of the user's own that changes nothing
# The tiny causal LM of the HF Trainer job scripts the tests write (a script's text: it needs
# `import torch` above it): 32 tokens, 8 dimensions, its loss computed on every position
TINY_LM = """\
class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(32, 8), torch.nn.Linear(8, 32)

    def forward(self, input_ids, attention_mask=None, labels=None):
        logits = self.head(self.embed(input_ids))
        return {"loss": torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())}
"""

SLEEPY_JOB = """
import argparse, time
from autotune import reporting
p = argparse.ArgumentParser()
p.add_argument("--bs", type=int, default=1)
p.add_argument("--tag", default="")
a = p.parse_args()
for _ in range(10_000):
    time.sleep(0.002 * a.bs)
    if reporting.step(tokens=100 * a.bs):
        break
"""


def conf_doc(given: dict[str, Any]) -> Any:
    """A confirmation document (documents/confirmation.py) of the parts a test gives (chosen, its
    arms' trials and samples), the rest at the defaults a stored one of the earliest layout reads
    with."""
    from autotune.documents.confirmation import Confirmation

    stats = [{"median": None, "failures": [], "search_value": None, **st} for st in given["stats"]]
    return Confirmation.from_json({"rounds_done": 0, "why": "", **given, "stats": stats})


def command_job(root: Path, name: str, trials: int = 2, **sections: Any) -> Path:
    """SLEEPY_JOB and its YAML in root (micro_batch_size 1 or 2, `sections` merged into the YAML's
    sections): the YAML's path."""
    (root / "job.py").write_text(SLEEPY_JOB)
    doc: dict[str, Any] = {
        "name": name,
        "workload": {"task": "command", "warmup_steps": 2, "measure_steps": 4},
        "command": {
            "argv": ["{python}", "job.py"],
            "knobs": {"micro_batch_size": {"flag": "--bs"}},
        },
        "space": {"micro_batch_size": [1, 2]},
        "study": {"trials": trials, "seed": 0, "confirm_top": 0, "trial_timeout_min": 1},
    }
    for key, value in sections.items():
        doc[key] = {**doc.get(key, {}), **value}
    (root / "job.yaml").write_text(yaml.safe_dump(doc))
    return root / "job.yaml"


@pytest.fixture
def write_yaml(tmp_path: Path):
    def write(data: Any, name: str = "model.yaml") -> Path:
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
        return path

    return write


def _env(env: dict[str, str] | None) -> dict[str, str]:
    """The test's environment for a child: AUTOTUNE_FAULT only when the test sets it."""
    full = {**os.environ, "COLUMNS": "200"}
    full.pop("AUTOTUNE_FAULT", None)
    return {**full, **(env or {})}


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """The real `autotune` command in a subprocess (exit codes, signals and files are real)."""
    return subprocess.run(
        [sys.executable, "-m", "autotune.cli", *args],
        cwd=cwd,
        env=_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM)


def _hung(seconds: float) -> Callable[[int, Any], None]:
    def hung(signum: int, frame: Any) -> None:
        raise AssertionError(f"the command did not return within {seconds} s (a hang guard)")

    return hung


def cli_here(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """The `autotune` command's main() run in this process, for what a command says and exits with
    before it starts a process of its own (parsing, validation, reading and refusing files): the
    same funnel, messages and exit codes as run_cli, without a new interpreter and its imports per
    call (seconds each on 2 cores). run_cli where processes, signals or the environment a trial
    inherits are what is tested. Working folder, environment, argv and signal handlers are
    restored after. timeout: a hang guard (SIGALRM in this, the main, thread), as run_cli's."""
    from autotune.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = (os.getcwd(), dict(os.environ), sys.argv, [signal.getsignal(s) for s in _SIGNALS])
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(_env(env))
    sys.argv = ["autotune", *args]
    code: Any = 0
    signal.signal(signal.SIGALRM, _hung(timeout))
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as e:
        code = e.code
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        os.chdir(saved[0])
        os.environ.clear()
        os.environ.update(saved[1])
        sys.argv = saved[2]
        for sig, handler in zip(_SIGNALS, saved[3]):
            signal.signal(sig, handler)
    returncode = code if isinstance(code, int) else (0 if code is None else 1)
    return subprocess.CompletedProcess(list(args), returncode, out.getvalue(), err.getvalue())


def start_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The real `autotune` command, started in the background (to be interrupted or killed)."""
    # its own session: a signal meant for the test run (a terminal's Ctrl-C) never reaches it; only
    # the test signals it
    return subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", *args],
        cwd=cwd,
        # a hung command's stacks: ends() sends SIGABRT past its guard, faulthandler prints them
        env={**_env(env), "PYTHONFAULTHANDLER": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_until(
    condition: Callable[[], Any], seconds: float = 120, what: str = "the condition"
) -> Any:
    """Poll until condition() is true (returns its value); fail the test after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {seconds} s")
        time.sleep(0.2)


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def ours(pid: int | str) -> bool:
    """Whether process pid is this test's: its mark (SCOPE) in the process's environment."""
    mark = f"{SCOPE}={os.environ[SCOPE]}".encode()
    try:
        return mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone, or not ours to read
        return False


def processes_with(needle: str) -> list[str]:
    """Pids of this test's processes (ours) that name needle, found through /proc: in their command
    line, or in where their output goes (a trial forked by the fork server has the server's
    command line, and writes its run folder's worker.log: a spec file's needle finds it by its
    folder). A process that is exiting may already show neither: where a test relies on one being
    reaped, it waits for `not alive(pid)`."""
    folder = f"{Path(needle).parent}/" if needle.endswith("spec.json") else None
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # gone
            continue
        names = f"{cmdline} {_outputs(pid)}"
        if (needle in names or (folder is not None and folder in names)) and ours(pid):
            found.append(pid)
    return found


def _outputs(pid: str) -> str:
    """Where the process's standard output and error go (file paths), as far as /proc shows."""
    targets = []
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return " ".join(targets)


def none_left(needle: str, seconds: float = 15) -> None:
    """Assert that none of this test's processes naming needle is left (they may take a moment to
    exit)."""
    wait_until(
        lambda: not processes_with(needle), seconds, f"the end of every process naming {needle}"
    )


def finishes(work: Callable[[], Any], seconds: float = 300, what: str = "the call") -> Any:
    """work()'s value (or its exception), run in a thread: a hang guard for an in-process call, as a
    subprocess's timeout= is for a child. Fails the test when work() has not returned after
    `seconds`, a bound far above its cost (it stands for "never", not for a speed)."""
    done: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(work())
        except BaseException as err:  # handed to the test's thread
            failed.append(err)

    thread = threading.Thread(target=run, name="finishes", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise AssertionError(f"{what} did not return within {seconds} s (a hang guard)")
    if failed:
        raise failed[0]
    return done[0]


def interrupt_when_running(
    proc: subprocess.Popen,
    spec_files: Callable[[], list[Path]],
    count: int = 1,
    sig: int = signal.SIGINT,
) -> tuple[str, str]:
    """Send `sig` once `count` trial processes have started training (their spec files exist and the
    trial process has got past its start), then wait for the command to end; returns its output."""
    specs = wait_until(
        lambda: (lambda found: found if len(found) >= count else None)(spec_files()),
        what=f"{count} trial(s) starting",
    )
    wait_until(lambda: all(processes_with(str(s)) for s in specs), 30, "the trial processes")
    proc.send_signal(sig)
    return ends(proc)


def ends(proc: subprocess.Popen, seconds: float = 300) -> tuple[str, str]:
    """The command's output once it has ended. A hang guard, far above its cost (an interrupted
    search writes best.yaml and its report on a loaded machine): past it the command's session is
    killed, so nothing of it runs on into the next test, and the test fails with what it said,
    every thread's stack last (start_cli's PYTHONFAULTHANDLER: SIGABRT prints them)."""
    try:
        return proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        with contextlib.suppress(ProcessLookupError):  # the group may have ended with it
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"the command did not end within {seconds} s: {out}\n{err}") from None


def load_trials(out: Path, name: str = "t") -> list[Any]:
    """The trials of study `name` in OUT/<name>/study.db."""
    import optuna

    return optuna.load_study(
        study_name=name, storage=f"sqlite:///{out / name / 'study.db'}"
    ).get_trials()


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Any]
) -> Path:
    """Folder `name`, filled by build(folder) once for the whole run: the first pytest-xdist worker
    to ask builds it under a lock the workers share (the run's base folder, as the GPU lock's), the
    other waits and reuses it, so a module's study is searched once, not once per worker. Only for
    what its tests read and never change (each copies what it damages). A build that failed is
    retried by the next to ask (its folder emptied first)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # <the run's>/popen-gwN: the parent is the run's, shared
    folder, done = base / name, base / f"{name}.built"
    with open(base / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released with the file's close
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            build(folder)
            done.touch()
    return folder
