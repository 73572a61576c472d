"""What a hostile user tries, class by class: every error is one line with exit 2 (4 for autotune's
own bugs), nothing is half-written, user text is printed as text, credentials never shown, reading
never writes, no process outlives autotune, nothing is written outside the study, one measurement
per device at a time."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from conftest import (
    built_once,
    cli_here,
    interrupt_when_running,
    load_trials,
    none_left,
    processes_with,
    run_cli,
    start_cli,
    tiny,
    wait_until,
)

from autotune.redact import mask, remember

# every test here runs searches, checks or several processes: `make test-fast` leaves them out
pytestmark = pytest.mark.slow

ONE = {"micro_batch_size": [2], "precision": "fp32"}  # a one-point space: the quickest real search


def bad_input(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2, one line on stderr starting with 'error:', no traceback, each needle in it."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    assert len(lines[0]) <= 1100 and "Traceback" not in proc.stdout + proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@contextlib.contextmanager
def read_only(path: Path, populate: Callable[[Path], None]) -> Iterator[Path]:
    """A folder that cannot be written, even by root: a tmpfs mounted read-only (skipped where mount
    is refused; without root, a folder without write permission)."""
    path.mkdir(parents=True)
    if os.geteuid() != 0:
        populate(path)
        subprocess.run(["chmod", "-R", "a-w", str(path)], check=True)
        yield path
        subprocess.run(["chmod", "-R", "u+w", str(path)], check=True)
        return
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(path)], capture_output=True
    ).returncode:
        pytest.skip("cannot mount a read-only file system here")
    try:
        populate(path)
        subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


# --- 1. errors that are not autotune's: every path option against files, folders, read-only places
# ----------


def test_hardening_output_paths_that_cannot_be_written(write_yaml, tmp_path: Path) -> None:
    path = write_yaml(tiny(space=ONE, baseline={}, study={"trials": 1}))
    (tmp_path / "afile").write_text("x")
    bad_input(
        cli_here("search", str(path), "--out", str(tmp_path / "afile"), cwd=tmp_path),
        "--out:",
        "is a file",
    )
    bad_input(
        cli_here("search", str(path), "--out", str(tmp_path / "afile" / "sub"), cwd=tmp_path),
        "--out:",
    )
    bad_input(
        cli_here("nccl", "--device", "cpu", "--out", str(tmp_path / "afile"), cwd=tmp_path),
        "--out:",
    )
    bad_input(cli_here("validate", str(tmp_path), cwd=tmp_path), "MODEL_YAML")
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00garbage")
    bad_input(cli_here("validate", str(tmp_path / "binary.yaml"), cwd=tmp_path), "binary.yaml")
    bad_input(cli_here("report", str(tmp_path / "afile"), cwd=tmp_path), "STUDY_DIR")
    with read_only(tmp_path / "ro", lambda p: None) as ro:
        bad_input(
            cli_here("search", str(path), "--out", str(ro), cwd=tmp_path), "--out:", "not writable"
        )
        bad_input(
            cli_here("nccl", "--device", "cpu", "--out", str(ro / "n"), cwd=tmp_path), "--out:"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "afile",
        "binary.yaml",
        "model.yaml",
        "ro",
    ]  # nothing written


def test_hardening_name_too_long_for_the_file_system(write_yaml, tmp_path: Path) -> None:
    proc = cli_here(
        "search",
        str(write_yaml(tiny(name="n" * 250, space=ONE, baseline={}))),
        "--out",
        str(tmp_path / "out"),
        cwd=tmp_path,
    )
    bad_input(proc, "is not a valid study name; use at most 200")
    assert not (tmp_path / "out").exists()


def test_hardening_folder_that_is_not_a_study_is_never_used_or_archived(
    write_yaml, tmp_path: Path
) -> None:
    path = write_yaml(tiny(space=ONE, baseline={}, study={"trials": 1}))
    (tmp_path / "out" / "t").mkdir(parents=True)
    (tmp_path / "out" / "t" / "thesis.tex").write_text("years of work")
    for extra in ((), ("--fresh",)):
        bad_input(
            cli_here("search", str(path), "--out", str(tmp_path / "out"), *extra, cwd=tmp_path),
            "holds no autotune study",
        )
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["t"]
    assert (tmp_path / "out" / "t" / "thesis.tex").read_text() == "years of work"


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """A finished one-trial study (CPU), searched once for the run (its tests only read it)."""

    def search(root: Path) -> None:
        spec = tiny(space=ONE, baseline={}, study={"trials": 1})
        (root / "m.yaml").write_text(yaml.safe_dump(spec))
        proc = cli_here("search", "m.yaml", "--out", "out", "--device", "cpu", cwd=root)
        assert proc.returncode == 0, proc.stderr

    return built_once(tmp_path_factory, "hardening-study", search) / "out" / "t"


def test_hardening_report_and_check_paths(study: Path, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    bad_input(
        cli_here("report", str(study), "--html", str(tmp_path / "afile"), cwd=tmp_path),
        "--html:",
        "is a file",
    )
    best = tmp_path / "best.yaml"
    shutil.copy(study / "best.yaml", best)
    bad_input(
        cli_here("check", str(best), "--junit", str(tmp_path), "--repeats", "1", cwd=tmp_path),
        "--junit:",
        "is a folder",
    )
    assert not (tmp_path / "checks").exists()  # refused before any repeat ran
    bad_input(cli_here("check", str(tmp_path / "none.yaml"), cwd=tmp_path), "no such file")


def test_hardening_finished_study_on_a_read_only_mount(study: Path, tmp_path: Path) -> None:
    with read_only(tmp_path / "ro", lambda p: shutil.copytree(study, p / "t")) as ro:
        proc = cli_here("report", str(ro / "t"), cwd=tmp_path)
        # reading works, and writes nothing (no report/ made)
        assert proc.returncode == 0, proc.stderr
        assert not (ro / "t" / "report").exists() and "HTML report" not in proc.stdout
        bad_input(
            cli_here("search", str(study.parent.parent / "m.yaml"), "--out", str(ro), cwd=tmp_path),
            "not writable",
        )
        bad_input(
            cli_here("check", str(ro / "t" / "best.yaml"), "--repeats", "1", cwd=tmp_path),
            "BEST_YAML:",
            "not writable",
        )


# --- 2. user text is printed as text
# -------------------------------------------------------------------------


def test_hardening_markup_in_values_and_paths_is_printed_literally(
    write_yaml, tmp_path: Path
) -> None:
    odd = "o[/x] [bold]b[/] :x:"
    path = tmp_path / "d[" / "y]" / "m.yaml"  # a path with '[/y]' in it
    path.parent.mkdir(parents=True)
    path.write_text(
        yaml.safe_dump(
            tiny(
                space={**ONE, "cuda_alloc_conf": ["default", "[red]r[/] :smile:"]},
                baseline={},
                study={"trials": 1},
            )
        )
    )
    proc = cli_here("validate", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (
        "[red]r[/] :smile:" in proc.stdout
        and "d[/y]/m.yaml" in proc.stdout
        and "😄" not in proc.stdout
    )
    proc = cli_here(
        "search", str(path), "--out", str(tmp_path / odd), "--device", "cpu", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert " ".join(f"written to {tmp_path / odd}".split()) in " ".join(proc.stdout.split())
    assert (tmp_path / odd / "t" / "best.yaml").is_file()
    bad = write_yaml(tiny(model={"n_layer": 2}), name="[bold]z:x:.yaml")
    bad_input(cli_here("validate", str(bad), cwd=tmp_path), "[bold]z:x:.yaml")


# --- 3. numbers out of range, booleans as numbers
# ----------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"study": {"seed": -1}}, "study.seed"),
        ({"study": {"seed": 2**32}}, "study.seed"),
        ({"workload": {"seed": 2**64}}, "workload.seed"),
        ({"model": {"n_layers": True}}, "model.n_layers"),
        ({"model": {"n_layers": 1.0}}, "model.n_layers"),
        ({"model": {"n_layers": "2"}}, "model.n_layers"),
        ({"model": {"vocab_size": 10**12}}, "model.vocab_size"),
        ({"study": {"timeout_min": float("inf")}}, "study.timeout_min"),
        ({"model": {"family": "llama", "rope_theta": float("nan")}}, "model.rope_theta"),
        ({"space": {"micro_batch_size": [True, 2]}}, "space.micro_batch_size"),
        ({"space": {"micro_batch_size": [2, 10**9]}}, "space.micro_batch_size"),
        ({"space": {"pad_vocab_multiple": [False]}}, "space.pad_vocab_multiple"),
        ({"space": {"compile": [1]}}, "space.compile"),
        ({"workload": {"world_size": 10**6}}, "workload.world_size"),
    ],
)
def test_hardening_out_of_range_numbers_are_bad_input(
    write_yaml, tmp_path: Path, override: dict, needle: str
) -> None:
    proc = cli_here(
        "search",
        str(write_yaml(tiny(**override))),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        cwd=tmp_path,
        timeout=60,
    )
    bad_input(proc, needle)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("search", "M", "--timeout-min", "inf"),
        ("search", "M", "--timeout-min", "nan"),
        ("search", "M", "--trials", "0"),
        ("nccl", "--device", "cpu", "--max-mb", "inf"),
        ("nccl", "--device", "cpu", "--min-mb", "nan"),
        ("check", "M", "--tolerance", "nan"),
        ("check", "M", "--tolerance", "1e400"),
    ],
)
def test_hardening_out_of_range_options_are_usage_errors(
    write_yaml, tmp_path: Path, args: tuple[str, ...]
) -> None:
    path = str(write_yaml(tiny(space=ONE, baseline={})))
    proc = cli_here(*[path if a == "M" else a for a in args], cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "trials").exists()


# --- 4. sizes that would exhaust the parent
# ----------------------------------------------------------------


def test_hardening_huge_ranges_and_spaces_are_refused_quickly(write_yaml, tmp_path: Path) -> None:
    # refused by counting, before anything is enumerated: 10**9 values listed would outlast the
    # subprocess's timeout (a hang guard)
    bad_input(
        cli_here(
            "validate",
            str(write_yaml(tiny(space={"micro_batch_size": {"min": 1, "max": 10**9}}))),
            cwd=tmp_path,
            timeout=60,
        ),
        "space.micro_batch_size",
        "at most 1024",
    )
    big = {
        "micro_batch_size": {"min": 1, "max": 1024},
        "precision": ["fp32", "bf16"],
        "compile": [False, True],
        "attention": ["auto", "flash", "math"],
        "pad_vocab_multiple": [None, 64, 128],
        "activation_checkpointing": ["none", "full", "selective"],
    }
    del_gbs = tiny(space=big, baseline={})
    del del_gbs["workload"]["global_batch_size"]
    proc = cli_here("validate", str(write_yaml(del_gbs)), cwd=tmp_path, timeout=60)
    bad_input(proc, "points; at most 100,000")
    assert len(proc.stdout) < 10_000


# --- 5. hostile YAML
# ---------------------------------------------------------------------------------------


def _bomb(levels: int) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + f"\nname: *a{levels - 1}\n"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (_bomb(9), "holds more than 100,000 values"),
        (_bomb(10), "holds more than 100,000 values"),
        ("name: " + "[" * 20_000 + "]" * 20_000 + "\n", "nested more than 32 levels"),
        ("name: a\nname: b\n", "duplicate key 'name'"),
        ("name: t\nmodel: {family: gpt, family: llama}\n", "duplicate key 'family'"),
        ("x: " + "y" * (2 << 20) + "\n", "bytes; a YAML file here may hold at most"),
    ],
)
def test_hardening_hostile_yaml(write_yaml, tmp_path: Path, text: str, needle: str) -> None:
    # refused while read: a bomb expanded (9**10 values) would outlast the timeout (a hang guard)
    bad_input(cli_here("validate", str(write_yaml(text)), cwd=tmp_path, timeout=60), needle)


def test_hardening_space_file_content_is_never_echoed(write_yaml, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("root:x:0:0:SECRET-CONTENT\n")
    (tmp_path / "secret.yaml").write_text("root:x:0:0:SECRET-CONTENT\n")
    for ref, needle in (
        ("../" * 8 + "etc/passwd", "is not a .yaml file"),
        ("secret.txt", "is not a .yaml file"),
        ("secret.yaml", "holds no mapping of knobs"),
    ):
        proc = cli_here("validate", str(write_yaml(tiny(space=ref))), cwd=tmp_path)
        bad_input(proc, needle)
        assert "SECRET" not in proc.stderr and "root:" not in proc.stderr


# --- 6. user code cannot end or hang the parent
# -------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("import sys\nsys.exit(0)\n", "cannot import 'hostile': SystemExit: 0"),
        ("import os\nos._exit(0)\n", "ended the process (exit code 0)"),
        ("raise KeyboardInterrupt\n", "KeyboardInterrupt"),
        ("while True:\n    pass\n", "did not finish within 2 s"),
    ],
)
def test_hardening_entrypoint_that_exits_or_hangs_at_import(
    write_yaml, tmp_path: Path, body: str, needle: str
) -> None:
    (tmp_path / "hostile.py").write_text(body + "def build(knobs, device):\n    pass\n")
    data = tiny(baseline={"micro_batch_size": 2})
    data["model"] = {"entrypoint": "hostile:build"}
    for cmd in (("validate",), ("search", "--out", str(tmp_path / "out"))):
        # a parent held by the import would outlast the timeout (a hang guard); the hang's needle
        # says the import's own limit (2 s) ended it
        proc = cli_here(
            *cmd[:1],
            str(write_yaml(data)),
            *cmd[1:],
            cwd=tmp_path,
            timeout=60,
            env={"AUTOTUNE_IMPORT_TIMEOUT_S": "2"},
        )
        bad_input(proc, "model.entrypoint:", needle)
    assert not (tmp_path / "out").exists()


# --- 7. credentials
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("postgresql://tuner:s3cret@db.example/autotune", "s3cret"),
        ("postgresql+psycopg2://tuner:p@ss@db.example:5432/x", "p@ss"),
        ("postgresql://tuner@db.example/x?password=s3cret&sslmode=require", "s3cret"),
        ("postgresql://tuner:p%40ss%2Fword@db/x", "p%40ss%2Fword"),
        ("postgresql://tuner:pa:ss@db/x", "pa:ss"),
        ("host=db user=tuner password=s3cret dbname=x", "s3cret"),
        ("host=db password='s3c ret' dbname=x", "s3c ret"),
        ("notaurl://tuner:s3cret@", "s3cret"),
    ],
)
def test_hardening_every_credential_form_is_masked(url: str, secret: str) -> None:
    assert secret not in mask(url) and "***" in mask(url)
    remember(url)
    assert secret not in mask(f"could not connect using {secret} to the server")


def test_hardening_validate_and_errors_never_show_the_password(write_yaml, tmp_path: Path) -> None:
    for url in (
        "postgresql+psycopg2://tuner:p@ss@127.0.0.1:1/x?password=qu3ry",
        "postgresql://tuner:s3cret@[bad",
    ):
        path = write_yaml(tiny(study={"storage": url}))
        proc = cli_here("validate", str(path), cwd=tmp_path)
        search = cli_here(
            "search", str(path), "--out", str(tmp_path / "out"), "--device", "cpu", cwd=tmp_path
        )
        report = cli_here("report", "--study", "t", "--storage", url, cwd=tmp_path)
        for text in (
            proc.stdout,
            proc.stderr,
            search.stdout,
            search.stderr,
            report.stdout,
            report.stderr,
        ):
            assert "p@ss" not in text and "qu3ry" not in text and "s3cret" not in text, text
        assert search.returncode == 2 and report.returncode == 2


# --- 8. report on damaged or unreachable studies never writes
# ------------------------------------------------


def test_hardening_report_never_writes_and_refuses_damaged_storage(
    study: Path, tmp_path: Path
) -> None:
    bad_input(
        cli_here(
            "report", "--study", "t", "--storage", f"sqlite:///{tmp_path / 'new.db'}", cwd=tmp_path
        ),
        "no such SQLite file",
    )
    assert not (tmp_path / "new.db").exists()
    import sqlite3

    foreign = tmp_path / "foreign.db"
    with contextlib.closing(sqlite3.connect(foreign)) as conn:
        conn.execute("CREATE TABLE mine (a)")
        conn.commit()
    before = foreign.read_bytes()
    bad_input(
        cli_here("report", "--study", "t", "--storage", f"sqlite:///{foreign}", cwd=tmp_path),
        "holds no Optuna study",
    )
    assert foreign.read_bytes() == before
    (tmp_path / "trunc").mkdir()
    (tmp_path / "trunc" / "study.db").write_bytes((study / "study.db").read_bytes()[:5000])
    bad_input(
        cli_here("report", str(tmp_path / "trunc"), cwd=tmp_path), "not a readable SQLite database"
    )
    bad_input(
        cli_here(
            "report", "--study", "t", "--storage", "postgresql://u:pw@127.0.0.1:1/x", cwd=tmp_path
        ),
        "cannot read a study from postgresql://u:***@127.0.0.1:1/x",
    )
    bad_input(
        cli_here(
            "report", "--study", "t", "--storage", f"journal:{tmp_path / 'none.log'}", cwd=tmp_path
        ),
        "no such journal file",
    )
    assert not (tmp_path / "none.log").exists()
    db = study / "study.db"
    stamp = (db.read_bytes(), db.stat().st_mtime_ns)
    assert cli_here("report", str(study), "--no-html", cwd=tmp_path).returncode == 0
    assert (db.read_bytes(), db.stat().st_mtime_ns) == stamp


# --- 9. check on a damaged best.yaml, or another model
# -------------------------------------------------------


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        (lambda d: d.update(fingerprint={}), "fingerprint"),
        (lambda d: d["fingerprint"].update(gpu_model=""), "fingerprint.gpu_model"),
        (lambda d: d.update(model={"family": "gpt"}), "model.n_layers"),
        (lambda d: d.pop("chosen"), "chosen"),
        (
            lambda d: d.update(
                check_baseline={
                    "tokens_per_s_samples": [0.0],
                    "recorded_at": "x",
                    "fingerprint": {},
                }
            ),
            "check_baseline.tokens_per_s_samples",
        ),
        (lambda d: d["metrics"].update(tokens_per_s_per_gpu=0), "metrics.tokens_per_s_per_gpu"),
        (lambda d: d["knobs"].update(precision="fp64"), "knobs.precision"),
        (lambda d: d["knobs"].pop("compile"), "knobs"),
        (lambda d: d.update(workload={"warmup_steps": -1}), "workload.warmup_steps"),
        (lambda d: d.update(apply={"env": {"FOO": 1}}), "apply.env.FOO"),
        (lambda d: d.update(apply={"env": {"A=B": "x"}}), "apply.env"),
        (lambda d: d.update(apply={"env": {"FOO": "a\x00b"}}), "apply.env.FOO"),
        (lambda d: d.update(apply="x"), "apply"),
        (lambda d: d["knobs"].update(grad_accum_steps=3), "is not workload.global_batch_size 8"),
    ],
)
def test_hardening_check_damaged_best_yaml_is_bad_input(
    study: Path, tmp_path: Path, damage, needle: str
) -> None:
    doc = yaml.safe_load((study / "best.yaml").read_text())
    damage(doc)
    (tmp_path / "best.yaml").write_text(yaml.safe_dump(doc))
    bad_input(
        cli_here("check", str(tmp_path / "best.yaml"), "--repeats", "1", cwd=tmp_path), needle
    )
    assert not (tmp_path / "checks").exists() and not (tmp_path / "history.jsonl").exists()
    assert not (tmp_path / "tmp").exists()


def test_hardening_check_of_another_model_is_refused(
    study: Path, tmp_path: Path, write_yaml
) -> None:
    shutil.copy(study / "best.yaml", tmp_path / "best.yaml")
    other = write_yaml(tiny(model={"n_layers": 3}, space=ONE, baseline={}), name="other.yaml")
    bad_input(
        cli_here(
            "check",
            str(tmp_path / "best.yaml"),
            "--model",
            str(other),
            "--repeats",
            "1",
            cwd=tmp_path,
        ),
        "--model:",
        "model.n_layers",
    )
    longer = write_yaml(
        tiny(workload={"measure_steps": 9}, space=ONE, baseline={}), name="longer.yaml"
    )
    bad_input(
        cli_here(
            "check",
            str(tmp_path / "best.yaml"),
            "--model",
            str(longer),
            "--repeats",
            "1",
            cwd=tmp_path,
        ),
        "workload.measure_steps",
    )
    assert not (tmp_path / "checks").exists()


# --- 10. no orphans after kill -9
# ----------------------------------------------------------------------------


def _killed_early(write_yaml, tmp_path: Path, workload: dict, delay_s: float) -> Path:
    path = write_yaml(tiny(workload=workload, space=ONE, baseline={}, study={"trials": 1}))
    out = tmp_path / f"out{delay_s}"
    proc = start_cli(
        "search",
        str(path),
        "--out",
        str(out),
        "--device",
        "cpu",
        cwd=tmp_path,
        env={"AUTOTUNE_FAULT": "hang"},
    )
    spec = out / "t" / "runs" / "0000" / "spec.json"
    deadline = time.monotonic() + 60
    while not spec.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(delay_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return spec


@pytest.mark.parametrize("delay_s", [0.0, 0.02, 0.05, 0.3])
def test_hardening_kill_9_right_after_a_trial_starts_leaves_nothing(
    write_yaml, tmp_path: Path, delay_s: float
) -> None:
    spec = _killed_early(write_yaml, tmp_path, {}, delay_s)
    none_left(str(spec), 10)
    # this test's supervisors (its mark), not every process of that name
    none_left("autotune.workloads.supervise", 10)


def test_hardening_kill_9_of_a_two_rank_trial_ends_torchrun_and_ranks(
    write_yaml, tmp_path: Path
) -> None:
    spec = _killed_early(write_yaml, tmp_path, {"world_size": 2, "global_batch_size": 8}, 3.0)
    none_left(str(spec), 10)
    none_left("torch.distributed.run", 10)  # this test's torchrun (its mark), not every one


SPAWNER = """
import os, subprocess, sys, torch


def build(knobs, device):
    # a process the trial leaves behind in a session of its own, as compile workers and ranks can be
    child = subprocess.Popen(["sleep", "1001"], start_new_session=True)
    open(os.environ["SPAWNED_PID_FILE"], "a").write(f"{child.pid}\\n")
    model = torch.nn.Linear(8, 8)
    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model
        def forward(self, x, y):
            return ((self.inner(x) - y) ** 2).mean()
    return {"model": Loss(), "make_batch": lambda n: (torch.randn(n, 8), torch.randn(n, 8)), "tokens_per_sample": 1}
"""  # noqa: E501


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("kill", [False, True])
def test_hardening_processes_a_trial_leaves_behind_are_ended(
    write_yaml, tmp_path: Path, kill: bool
) -> None:
    (tmp_path / "spawner.py").write_text(SPAWNER)
    data = tiny(
        space={"micro_batch_size": [2], "precision": "fp32"}, baseline={}, study={"trials": 1}
    )
    data["model"] = {"entrypoint": "spawner:build"}
    pids = tmp_path / "pids"
    env = {"SPAWNED_PID_FILE": str(pids), **({"AUTOTUNE_FAULT": "slow:1000000"} if kill else {})}
    proc = start_cli(
        "search",
        str(write_yaml(data)),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        cwd=tmp_path,
        env=env,
    )
    if kill:
        deadline = time.monotonic() + 60
        while not pids.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=120)
    spawned = [int(p) for p in pids.read_text().split()]
    wait_until(lambda: not any(map(_alive, spawned)), 10, "the end of what the trial started")


@pytest.mark.gpu
@pytest.mark.skipif(
    not __import__("torch").cuda.is_available(),
    reason="Inductor compiles in worker processes for GPUs",
)
def test_hardening_kill_9_during_compile_leaves_no_compile_worker(
    write_yaml, tmp_path: Path
) -> None:
    # this test's compile workers only (processes_with: its mark in their environment), never those
    # of another test or another search on the machine
    path = write_yaml(tiny(space={**ONE, "compile": True}, baseline={}, study={"trials": 1}))
    out = tmp_path / "out"
    proc = start_cli("search", str(path), "--out", str(out), "--device", "cuda", cwd=tmp_path)
    spec = out / "t" / "runs" / "0000" / "spec.json"
    deadline = time.monotonic() + 120
    while not processes_with("compile_worker") and time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    if not processes_with("compile_worker"):
        proc.kill()
        pytest.skip("Inductor compiled in-process here (no compile workers to leave behind)")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    none_left(str(spec), 10)
    none_left("compile_worker", 5)  # compile workers did not outlive the trial


# --- 11. nothing written outside the study
# ---------------------------------------------------------------


def test_hardening_compiled_trial_writes_only_under_the_study(write_yaml, tmp_path: Path) -> None:
    tmp, home = tmp_path / "systmp", tmp_path / "home"
    tmp.mkdir()
    home.mkdir()
    path = write_yaml(tiny(space={**ONE, "compile": True}, baseline={}, study={"trials": 1}))
    # a process of its own: what its trials inherit (TMPDIR, HOME) is what is tested
    proc = run_cli(
        "search",
        str(path),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        cwd=tmp_path,
        env={"TMPDIR": str(tmp), "HOME": str(home)},
    )
    assert proc.returncode == 0, proc.stderr
    assert list(tmp.rglob("*")) == [] and list(home.rglob("*")) == [], (
        list(tmp.rglob("*"))[:5],
        list(home.rglob("*"))[:5],
    )
    # the compile cache is in the study
    assert any((tmp_path / "out" / "t" / "inductor-cache").rglob("*"))


# --- extras: one measurement per device, SIGTERM, malformed AUTOTUNE_FAULT
# ------------------------------------


@pytest.mark.serial  # who waits, and how long, is timed: another worker's load would be in it
def test_hardening_two_searches_on_one_device_take_turns(write_yaml, tmp_path: Path) -> None:
    slow = write_yaml(tiny(name="a", space=ONE, baseline={}, study={"trials": 1}), name="a.yaml")
    other = write_yaml(tiny(name="b", space=ONE, baseline={}, study={"trials": 1}), name="b.yaml")
    first = start_cli(
        "search",
        str(slow),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        cwd=tmp_path,
        env={"AUTOTUNE_FAULT": "slow:3000"},
    )
    spec = tmp_path / "out" / "a" / "runs" / "0000" / "spec.json"
    deadline = time.monotonic() + 60
    while not processes_with(str(spec)) and time.monotonic() < deadline:
        time.sleep(0.1)
    # a process of its own, as every search beside another is: the device's turns are between
    # processes (launch/locks.py)
    second = run_cli(
        "search", str(other), "--out", str(tmp_path / "out"), "--device", "cpu", cwd=tmp_path
    )
    assert first.wait(timeout=300) == 0 and second.returncode == 0, second.stderr
    assert "waiting for cpu-0: another autotune process is measuring on it" in second.stdout
    (a,), (b,) = load_trials(tmp_path / "out", "a"), load_trials(tmp_path / "out", "b")
    assert b.user_attrs["device_wait_s"] > 0 and a.user_attrs["device_wait_s"] == 0


@pytest.mark.parametrize(
    ("sig", "code", "said"),
    [
        (signal.SIGTERM, 143, "terminated (SIGTERM): the study is kept"),
        (signal.SIGHUP, 129, "hung up (SIGHUP): the study is kept"),
    ],
)
def test_hardening_sigterm_ends_like_ctrl_c(
    write_yaml, tmp_path: Path, sig: int, code: int, said: str
) -> None:
    path = write_yaml(
        tiny(space={"micro_batch_size": [2, 4], "precision": "fp32"}, study={"trials": 2})
    )
    out = tmp_path / "out"
    proc = start_cli(
        "search",
        str(path),
        "--out",
        str(out),
        "--device",
        "cpu",
        cwd=tmp_path,
        env={"AUTOTUNE_FAULT": "hang@micro_batch_size=4"},
    )
    hanging = out / "t" / "runs" / "0001" / "spec.json"
    _, err = interrupt_when_running(proc, lambda: [hanging] if hanging.exists() else [], sig=sig)
    assert proc.returncode == code, err
    assert said in err
    none_left(str(hanging))
    assert [t.user_attrs.get("status") for t in load_trials(out)] == ["ok", "interrupted"]
    assert (out / "t" / "best.yaml").exists()


@pytest.mark.parametrize(
    "fault", ["bogus", "slow", "oom@nosuchknob=1", "oom@micro_batch_size>=lots"]
)
def test_hardening_malformed_fault_switch_names_the_variable(
    write_yaml, tmp_path: Path, fault: str
) -> None:
    proc = cli_here(
        "search",
        str(write_yaml(tiny(space=ONE, baseline={}))),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        cwd=tmp_path,
        env={"AUTOTUNE_FAULT": fault},
    )
    bad_input(proc, "AUTOTUNE_FAULT:")
    assert not (tmp_path / "out").exists()


def test_hardening_internal_errors_are_one_line_exit_4(tmp_path: Path) -> None:
    code = (
        "import sys; from autotune.cli import app; from autotune.cli import hw as h; "
        "import autotune.hardware as hw; hw.detect = lambda: 1 / 0; sys.argv = ['autotune', "
        "'hw']; app()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 4 and proc.stderr.startswith(
        "error: internal error, please report it: ZeroDivisionError"
    ), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("search", "{yaml}", "--storage", "sqlite:///{afile}/x.db"), "study.storage: cannot open"),
        (("search", "{yaml}", "--storage", "journal:{afile}/x.log"), ""),
        (("search", "{yaml}", "--storage", "nonsense://"), "study.storage: cannot open"),
        (
            ("report", "--study", "t", "--storage", "sqlite:///{afile}"),
            "not a readable SQLite database",
        ),
        (("report", "--study", "t", "--storage", "journal:{tmp}"), "no such journal file"),
        (("report", "{study}", "--html", "{afile}/sub"), "--html:"),
        (("check", "{best}", "--model", "{tmp}/none.yaml"), "MODEL_YAML: no such file"),
        (("check", "{best}", "--junit", "{afile}/j.xml"), "--junit:"),
        (("check", "{afile}"), "is this a best.yaml written by autotune search"),
        (("nccl", "--device", "cpu", "--out", "{afile}/n"), "--out:"),
        (("validate", "{tmp}/odd\nname.yaml"), "MODEL_YAML: no such file"),
    ],
)
def test_hardening_every_path_option_against_odd_paths(
    study: Path, tmp_path: Path, write_yaml, args: tuple[str, ...], needle: str
) -> None:
    (tmp_path / "afile").write_text("not a folder, not a database")
    shutil.copy(study / "best.yaml", tmp_path / "best.yaml")
    values = {
        "yaml": str(write_yaml(tiny(space=ONE, baseline={}, study={"trials": 1}))),
        "afile": str(tmp_path / "afile"),
        "tmp": str(tmp_path),
        "study": str(study),
        "best": str(tmp_path / "best.yaml"),
    }
    before = sorted(p.name for p in tmp_path.iterdir())
    extra = ["--repeats", "1"] if args[0] == "check" else []
    proc = cli_here(*[a.format(**values) for a in args], *extra, cwd=tmp_path, timeout=120)
    bad_input(proc, needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


# --- the second hostile round: more cases of each class
# ------------------------------------------------


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("sqlite://u:pa/ss@/st.db", "pa/ss"),
        ("postgresql://u:a b#c?d@h/db", "a b#c?d"),
        ("postgresql://u@h/db?pass%77ord=s3cr3t&x=1", "s3cr3t"),
        ("postgresql://u@h/db?dsn=host%3Dh%20password%3Dsecr3t", "secr3t"),
        ("postgresql+psycopg2:/tuner:s3cret@db.example/x", "s3cret"),  # a URL a path turned into
    ],
)
def test_hardening_credentials_in_odd_forms_are_masked(url: str, secret: str) -> None:
    assert secret not in mask(url), mask(url)


def test_hardening_storage_password_with_a_slash_is_never_shown(write_yaml, tmp_path: Path) -> None:
    path = write_yaml(tiny(space=ONE, baseline={}))
    proc = cli_here(
        "search",
        str(path),
        "--storage",
        "sqlite://u:pa/ss@/st.db",
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        cwd=tmp_path,
    )
    assert "pa/ss" not in proc.stdout + proc.stderr and proc.returncode == 2
    # forgot --storage
    report = cli_here("report", "postgresql+psycopg2://tuner:s3cret@db.example/x", cwd=tmp_path)
    assert "s3cret" not in report.stdout + report.stderr and report.returncode == 2


@pytest.mark.parametrize("out", ["a%41b", "o?mode=memory", "sp ace#h"])
def test_hardening_study_db_stays_in_the_study_whatever_the_folder_name(
    write_yaml, tmp_path: Path, out: str
) -> None:
    # another study's folder the unquoted URL would point to
    (tmp_path / "aAb" / "t").mkdir(parents=True)
    path = write_yaml(tiny(space=ONE, baseline={}, study={"trials": 1}))
    proc = cli_here("search", str(path), "--out", out, "--device", "cpu", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / out / "t" / "study.db").is_file() and not any(
        (tmp_path / "aAb" / "t").iterdir()
    )
    assert cli_here("report", str(tmp_path / out / "t"), "--no-html", cwd=tmp_path).returncode == 0


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        # a flood: never buffered by autotune
        ("while True:\n    print('x' * 2**20)\n", "did not finish within 3 s"),
        # a daemon: ended
        ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(600)\n", None),
        ("print('AUTOTUNE-PROBE:[]')\n", None),  # cannot forge the answer
    ],
)
def test_hardening_entrypoint_floods_daemons_and_forgeries(
    write_yaml, tmp_path: Path, body: str, needle
) -> None:
    (tmp_path / "mod.py").write_text(body + "def build(knobs, device):\n    pass\n")
    data = tiny(baseline={"micro_batch_size": 2})
    data["model"] = {"entrypoint": "mod:build"}
    # a parent that waited for the flood's end or the daemon's (600 s) would outlast the timeout
    proc = cli_here(
        "validate",
        str(write_yaml(data)),
        cwd=tmp_path,
        timeout=60,
        env={"AUTOTUNE_IMPORT_TIMEOUT_S": "3"},
    )
    if needle:
        bad_input(proc, needle)
    else:
        assert proc.returncode == 0, proc.stderr
    # the check's process and anything it started (its command line names the folder)
    none_left(str(tmp_path), 10)
    assert not (tmp_path / "__pycache__").exists()  # no bytecode written beside the user's module


@pytest.mark.parametrize("value", ["abc", "inf", "0", "-1", "1e400"])
def test_hardening_import_timeout_variable_is_checked(
    write_yaml, tmp_path: Path, value: str
) -> None:
    (tmp_path / "mod.py").write_text("def build(knobs, device):\n    pass\n")
    data = tiny(baseline={"micro_batch_size": 2})
    data["model"] = {"entrypoint": "mod:build"}
    bad_input(
        cli_here(
            "validate",
            str(write_yaml(data)),
            cwd=tmp_path,
            env={"AUTOTUNE_IMPORT_TIMEOUT_S": value},
        ),
        "AUTOTUNE_IMPORT_TIMEOUT_S",
    )


def test_hardening_supervisor_ends_a_process_that_keeps_forking(tmp_path: Path) -> None:
    (tmp_path / "walker.py").write_text(
        "import os, time\nif os.fork() == 0:\n    while True:\n        if os.fork():\n"
        "            os._exit(0)\ntime.sleep(600)\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "autotune.workloads.supervise",
            sys.executable,
            str(tmp_path / "walker.py"),
        ]
    )
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    none_left(str(tmp_path / "walker.py"), 5)


def test_hardening_check_model_with_other_code_under_the_same_name(
    tmp_path: Path, write_yaml
) -> None:
    model = (
        "import torch\ndef build(knobs, device):\n    m = torch.nn.Linear({n}, 1)\n    class "
        "L(torch.nn.Module):\n"
        "        def __init__(self):\n            super().__init__(); self.m = m\n        def "
        "forward(self, x, y):\n"
        "            return ((self.m(x) - y) ** 2).mean()\n    return {{'model': L(), "
        "'make_batch': lambda b: (torch.randn(b, {n}), torch.randn(b, 1)), 'tokens_per_sample': "
        "1}}\n"
    )
    for folder, width in (("one", 8), ("two", 64)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "mymodel.py").write_text(model.format(n=width))
        data = tiny(space=ONE, baseline={}, study={"trials": 1})
        data["model"] = {"entrypoint": "mymodel:build"}
        (tmp_path / folder / "m.yaml").write_text(yaml.safe_dump(data))
    proc = cli_here(
        "search",
        str(tmp_path / "one" / "m.yaml"),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    bad_input(
        cli_here(
            "check",
            str(tmp_path / "out" / "t" / "best.yaml"),
            "--model",
            str(tmp_path / "two" / "m.yaml"),
            "--repeats",
            "1",
            cwd=tmp_path,
        ),
        "is other code than the one measured",
    )


@pytest.mark.parametrize("junit", ["rep/" + "L" * 300 + ".xml", "loop.xml", "fifo.xml"])
def test_hardening_junit_refused_before_measuring(study: Path, tmp_path: Path, junit: str) -> None:
    shutil.copy(study / "best.yaml", tmp_path / "best.yaml")
    os.symlink("loop.xml", tmp_path / "loop.xml")
    os.mkfifo(tmp_path / "fifo.xml")
    bad_input(
        cli_here(
            "check",
            str(tmp_path / "best.yaml"),
            "--junit",
            str(tmp_path / junit),
            "--repeats",
            "1",
            cwd=tmp_path,
            timeout=60,
        ),
        "--junit:",
    )
    assert (
        not (tmp_path / "checks").exists()
        and not (tmp_path / "history.jsonl").exists()
        and not (tmp_path / "rep").exists()
    )


@pytest.mark.parametrize(
    ("yaml_text", "needle"),
    [
        ("name: t\nmodel: {family: gpt, n_layers: " + "9" * 5000 + "}\n", "a value cannot be read"),
        (None, "cuda_alloc_conf"),  # NUL in a value that becomes an environment variable
    ],
)
def test_hardening_values_that_were_internal_errors_are_bad_input(
    write_yaml, tmp_path: Path, yaml_text, needle
) -> None:
    path = (
        write_yaml(yaml_text)
        if yaml_text
        else write_yaml(tiny(space={**ONE, "cuda_alloc_conf": ["default", "a\x00b"]}))
    )
    bad_input(
        cli_here(
            "search", str(path), "--out", str(tmp_path / "out"), "--device", "cpu", cwd=tmp_path
        ),
        needle,
    )
    assert not (tmp_path / "out").exists()


def test_hardening_storage_and_out_paths_that_are_not_files(write_yaml, tmp_path: Path) -> None:
    path = write_yaml(tiny(space=ONE, baseline={}))
    os.mkfifo(tmp_path / "fifo")
    os.symlink("loop1", tmp_path / "loop1")
    for args, needle in (
        (("--storage", f"journal:{tmp_path / 'fifo'}"), "not a regular file"),
        (("--storage", "journal:/dev/null"), "not a regular file"),
        (("--out", str(tmp_path / "loop1")), "looping symbolic link"),
    ):
        proc = cli_here("search", str(path), *args, "--device", "cpu", cwd=tmp_path, timeout=60)
        bad_input(proc, needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "loop1", "model.yaml"]
    bad_input(
        cli_here(
            "report",
            "--study",
            "t",
            "--storage",
            f"sqlite+pysqlite:///{tmp_path / 'new.db'}",
            cwd=tmp_path,
        ),
        "no such SQLite file",
    )
    assert not (tmp_path / "new.db").exists()


def test_hardening_report_shows_damaged_records_as_unreadable(study: Path, tmp_path: Path) -> None:
    import sqlalchemy

    shutil.copytree(study, tmp_path / "t")
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 't' / 'study.db'}")
    with engine.begin() as conn:
        conn.execute(
            sqlalchemy.text(
                "UPDATE trial_user_attributes SET value_json = '\"garbage\"' WHERE key = 'metrics'"
            )
        )
        conn.execute(
            sqlalchemy.text(
                "UPDATE study_user_attributes SET value_json = '[1]' WHERE key = 'baseline_knobs'"
            )
        )
    engine.dispose()
    for fmt in ("rich", "json", "markdown"):
        proc = cli_here("report", str(tmp_path / "t"), "--format", fmt, "--no-html", cwd=tmp_path)
        assert proc.returncode == 0 and "unreadable" in proc.stdout, proc.stderr


def test_hardening_grid_of_a_large_space_starts_at_once(write_yaml, tmp_path: Path) -> None:
    """A grid is enqueued a few points at a time: a 99,328-point space measures its first trial
    without first writing 99,328 queued trials."""
    data = tiny(
        space={
            "micro_batch_size": {"min": 1, "max": 97},
            "precision": "fp32",
            "cuda_alloc_conf": [f"expandable_segments:{i}" for i in range(1024)],
        },
        baseline={},
        study={"trials": 1, "sampler": "grid"},
    )
    del data["workload"]["global_batch_size"]
    proc = cli_here(
        "search",
        str(write_yaml(data)),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(load_trials(tmp_path / "out")) <= 5  # not 99,328 queued first


def test_hardening_control_characters_are_shown_escaped(write_yaml, tmp_path: Path) -> None:
    path = write_yaml(tiny(space=ONE, baseline={}), name="\x1b[31mred.yaml")
    proc = cli_here("validate", str(path), cwd=tmp_path)
    assert proc.returncode == 0 and "\x1b" not in proc.stdout and "\\x1b[31mred.yaml" in proc.stdout
    bad_input(cli_here("validate", str(tmp_path / "no\x1b[2Jne.yaml"), cwd=tmp_path), "\\x1b[2J")
    bad_input(
        cli_here("validate", str(tmp_path / "two\nlines.yaml"), cwd=tmp_path), "two\\nlines.yaml"
    )


def test_hardening_early_ctrl_c_is_one_line(tmp_path: Path) -> None:
    for delay in (0.03, 0.06, 0.09, 0.12, 0.14, 0.16, 0.18, 0.2, 0.25, 0.3, 0.4):
        proc = subprocess.Popen(
            [sys.executable, "-m", "autotune.cli", "validate", "none.yaml"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        if proc.returncode == 2:  # finished before the signal came
            continue
        # CPython's own start-up, before any autotune code (seen
        if "Fatal Python error: init_import_site" in err:
            # on a loaded 2-core machine at 30 ms): the interpreter, not autotune, reports it
            continue
        if "KeyboardInterrupt" in err and not re.search(r'File "[^"]*/autotune/[^"]*\.py"', err):
            # runpy still locating the package (no frame of autotune's): none of its code has run
            # yet
            continue
        assert (
            proc.returncode == 130 and len(err.strip().splitlines()) == 1 and "interrupted" in err
        ), (delay, err)
