"""Where `make test`'s CPU goes: each test's CPU-seconds and the Python processes it started.

    python3 benchmarks/suite_cpu.py arm [LOG_DIR]      # the venv logs every Python process's start
    .venv/bin/python -m pytest -q -n 2 --dist worksteal -p suite_cpu -m "not serial" tests
    .venv/bin/python -m pytest -q -p no:cacheprovider -p suite_cpu -m serial FILES...
    python3 benchmarks/suite_cpu.py table OUT.tsv      # joins the logs, then disarms the venv

`arm` copies this file into .venv's site-packages with a .pth that imports it in every Python
process the venv starts: each logs its start, argv and parent chain (procs.log). Loaded by pytest
(`-p suite_cpu`), it also takes getrusage (itself and its reaped children) around each test, one
JSON line per test and worker. `table` attributes each process to the test its worker was running
when it started (the worker's pid in its parent chain, the time in the test's span) and writes one
row per test: CPU-seconds, wall, the worker's own CPU, trial and CLI processes. pytest's
--durations gives wall time only, and not the processes a test starts; py-spy and perf are not on
the CI machine. `disarm` removes the venv's two files without a table.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

LOG_DIR = Path("/tmp/suite_cpu")
KINDS = {
    "autotune.workloads.trial": "trial",
    "autotune.workloads.supervise": "supervisor",
    "autotune.cli": "cli",
    "torch.distributed.run": "torchrun",
}


def started(log_dir: str) -> None:
    """This process's start, argv and parent chain, appended to procs.log (from the .pth, which
    Python may read twice: logged once)."""
    global LOG_DIR, _logged
    if _logged:
        return
    LOG_DIR, _logged = Path(log_dir), True
    chain, pid = [], os.getpid()
    for _ in range(16):
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if pid <= 1:
            break
        chain.append(str(pid))
    argv = " ".join(sys.orig_argv[1:4]).replace("\n", " ").replace("\t", " ")[:200]
    line = f"{time.time():.3f}\t{os.getpid()}\t{','.join(chain)}\t{argv}\n"
    with open(LOG_DIR / "procs.log", "a") as log:
        log.write(line)


def _cpu() -> tuple[float, float]:
    """CPU-seconds of this process, and of it with its reaped children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    mine = own.ru_utime + own.ru_stime
    return mine, mine + kids.ru_utime + kids.ru_stime


_logged = False
_measures = True
_open: dict[str, tuple[float, float, float]] = {}


def pytest_configure(config: object) -> None:
    """pytest-xdist's controller hears each worker's logstart and logfinish too: only the process
    that runs the tests measures them."""
    global _measures
    option = getattr(config, "option", None)
    controller = getattr(option, "dist", "no") != "no" and not hasattr(config, "workerinput")
    _measures = not controller


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    if _measures:
        _open[nodeid] = (time.time(), *_cpu())


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    if nodeid not in _open:
        return
    t0, own0, cpu0 = _open.pop(nodeid)
    own, cpu = _cpu()
    row = {"id": nodeid, "pid": os.getpid(), "t0": t0, "t1": time.time()}
    row.update(cpu=cpu - cpu0, own=own - own0)
    with open(LOG_DIR / f"tests.{os.getpid()}.jsonl", "a") as log:
        log.write(json.dumps(row) + "\n")


def _site() -> Path:
    """The venv's site-packages, as its own Python names it."""
    ask = [".venv/bin/python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    return Path(subprocess.run(ask, capture_output=True, text=True, check=True).stdout.strip())


def arm(log_dir: Path) -> None:
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(parents=True)
    shutil.copy(__file__, _site() / "suite_cpu.py")
    pth = f"import suite_cpu; suite_cpu.started({str(log_dir)!r})\n"
    (_site() / "suite_cpu.pth").write_text(pth)


def disarm() -> None:
    for name in ("suite_cpu.pth", "suite_cpu.py"):
        (_site() / name).unlink(missing_ok=True)


def _kind(argv: str) -> str:
    return next((kind for key, kind in KINDS.items() if key in argv), "other")


def _attribute(tests: list[dict], procs: list[list[str]]) -> dict[str, collections.Counter]:
    """Each process counted for the test its worker ran when it started."""
    by_worker = collections.defaultdict(list)
    for test in tests:
        by_worker[test["pid"]].append(test)
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for at, _pid, chain, argv in procs:
        workers = [int(p) for p in chain.split(",") if p and int(p) in by_worker]
        spans = by_worker[workers[0]] if workers else []
        test = next((t["id"] for t in spans if t["t0"] <= float(at) <= t["t1"]), "between tests")
        counts[test][_kind(argv)] += 1
    return counts


def table(out: Path, log_dir: Path) -> None:
    tests = [json.loads(line) for f in log_dir.glob("tests.*.jsonl") for line in f.open()]
    rows = [line.rstrip("\n").split("\t") for line in (log_dir / "procs.log").open()]
    procs = [r for r in rows if len(r) == 4]
    counts = _attribute(tests, procs)
    kinds = collections.Counter(_kind(r[3]) for r in procs)
    total, own = sum(t["cpu"] for t in tests), sum(t["own"] for t in tests)
    lines = [
        f"# {len(tests)} tests, {total:.0f} CPU-s in them ({own:.0f} in the pytest workers)",
        "# Python processes started: " + ", ".join(f"{n} {k}" for k, n in kinds.most_common()),
        "cpu_s\twall_s\tworker_cpu_s\ttrial_processes\tcli_processes\ttest",
    ]
    for t in sorted(tests, key=lambda t: -t["cpu"]):
        c = counts[t["id"]]
        wall = t["t1"] - t["t0"]
        lines.append(
            f"{t['cpu']:.1f}\t{wall:.1f}\t{t['own']:.1f}\t{c['trial']}\t{c['cli']}\t{t['id']}"
        )
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:2]))


def main(argv: list[str]) -> int:
    verb, rest = argv[0], argv[1:]
    if verb == "arm":
        arm(Path(rest[0]) if rest else LOG_DIR)
    elif verb == "table":
        table(Path(rest[0]), Path(rest[1]) if len(rest) > 1 else LOG_DIR)
        disarm()
    elif verb == "disarm":
        disarm()
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
