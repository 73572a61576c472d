"""A failure's reason quotes what went wrong, not a library's noise (protocol.last_words), and names
its remedy (remedy.py): real trials and jobs that print warnings before they fail, and the remedies'
texts pinned on records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import tiny

from autotune import remedy
from autotune.documents.record import TrialRecord
from autotune.job import load_config, parse_config
from autotune.launch import logcap
from autotune.launch.runner import Bench, measure
from autotune.protocol import PROGRESS_FILE, TrialResult, last_words, reason_line, told_lines
from autotune.search.run import run_search
from autotune.space import resolve_space

# What torchao 0.x printed on import under Python 3.12 before a trial failed (issue 36)
TORCHAO = (
    "/tmp/site/torchao/quantization/quant_api.py:1542: "
    "SyntaxWarning: invalid escape sequence '\\.'\n"
    '  """Configuration class for applying different quantization configs to modules.\n'
)
NOISE = (
    TORCHAO
    + "/x/amp.py:3: FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated.\n"
    + "  with torch.cuda.amp.autocast():\n"
    + " 45%|████▌     | 45/100 [00:01<00:02, 30.1it/s]\n"
    + "WARNING:torch._dynamo:a graph break\n"
    + "[W1202 10:00:00.123 ProcessGroupNCCL.cpp:123] Warning: a notice\n"
    + "The `x` argument is deprecated and will be removed in v5.\n"
    + "\n==========\n"
)
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 3, in <module>\n'
    "    import flash_attn\n"
    "    ^^^^^^^^^^^^^^^^^\n"
    "ModuleNotFoundError: No module named 'flash_attn'\n"
)


def test_reasons_last_words_skip_library_noise_for_the_exception() -> None:
    assert (
        last_words(NOISE + TRACEBACK + NOISE) == "ModuleNotFoundError: No module named 'flash_attn'"
    )
    assert last_words("step 1\nstep 2: saving\n" + NOISE) == "step 2: saving"  # no exception
    assert last_words(NOISE) == ""
    kept, raised = told_lines("config: x\n" + TRACEBACK)
    assert (
        kept == ["config: x", "ModuleNotFoundError: No module named 'flash_attn'"] and raised == 1
    )


def test_reasons_last_words_take_the_last_traceback_not_a_teardown_one() -> None:
    chained = (
        TRACEBACK + "\nDuring handling of the above exception, another exception occurred:\n\n"
    )
    chained += TRACEBACK.replace(
        "ModuleNotFoundError: No module named 'flash_attn'", "RuntimeError: no"
    )
    assert last_words(chained) == "RuntimeError: no"
    teardown = "Exception ignored in: <function A.__del__>\n" + TRACEBACK.replace(
        "ModuleNot", "Not"
    )
    assert last_words(TRACEBACK + teardown) == "ModuleNotFoundError: No module named 'flash_attn'"
    cause = (
        "Traceback (most recent call last):\n  File 'x'\nBackendCompilerFailed: inductor raised:\n"
    )
    assert (
        last_words(cause + "RuntimeError: bad\n")
        == "BackendCompilerFailed: inductor raised: RuntimeError: bad"
    )
    printed = "torch.OutOfMemoryError: CUDA out of memory.\nsaving a checkpoint\n"  # no traceback
    assert last_words(printed) == "torch.OutOfMemoryError: CUDA out of memory."


def test_reasons_reason_line_prefers_an_error_to_a_warning_that_names_one() -> None:
    old = "exit code 1:\nRuntimeError: boom\n/x.py:3: UserWarning: error handling changed"
    assert reason_line(old) == "RuntimeError: boom"


def _record(status: str, reason: str, **knobs) -> TrialRecord:
    return TrialRecord(0, {"micro_batch_size": 8, **knobs}, status, reason, wall_s=600.0)


def _ctx(tmp_path: Path, **kw) -> remedy.Context:
    """The context as the runner makes it: the log's telling last line read now."""
    said = logcap.last_words(tmp_path / "worker.log", remedy.QUOTE_CHARS)
    return remedy.Context(600.0, tmp_path, said=said, **kw)


CUDA_OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of "
    "which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.90 GiB memory in "
    "use."
)


def test_reasons_oom_names_the_peak_and_the_knobs_that_lower_it(tmp_path: Path) -> None:
    said = remedy.explain(_record("oom", CUDA_OOM), None, _ctx(tmp_path))
    assert said.startswith(
        "out of memory (77.90 GiB in use of 79.15 GiB, 2.00 GiB more asked); lower it with a "
        "smaller micro_batch_size (now 8) or activation_checkpointing full (now none); CUDA out of "
        "memory."
    )
    two = remedy.explain(_record("oom", "rank 1: simulated"), None, _ctx(tmp_path, world_size=2))
    assert two.startswith(
        "rank 1: out of memory; lower it with a smaller micro_batch_size (now 8), "
    )
    assert "or parallel fsdp (now ddp)" in two
    est = _ctx(tmp_path, estimate_gib=3.21)
    floor = remedy.explain(
        _record("oom", "x", micro_batch_size=1, activation_checkpointing="full"), None, est
    )
    assert floor.startswith("out of memory (estimated peak 3.2 GiB); lower it with more GPU memory")
    job = _ctx(tmp_path, task="command", mapped={"micro_batch_size": {"flag": "--bs"}})
    assert "a smaller micro_batch_size (now 8); " in remedy.explain(_record("oom", "x"), None, job)
    unmapped = remedy.explain(_record("oom", "x"), None, _ctx(tmp_path, task="command", mapped={}))
    assert "the job's micro-batch or its activation checkpointing" in unmapped


def test_reasons_timeout_names_the_limit_and_what_ate_the_time(tmp_path: Path) -> None:
    launch = "no result after 600 s (trial timeout); process group killed"
    (tmp_path / "worker.log").write_text(TORCHAO + "compiling the graph\n")
    (tmp_path / PROGRESS_FILE).write_text(json.dumps({"step_times_s": [30.0, 30.0, 30.0]}))
    ctx = _ctx(tmp_path, progress=True, measure_steps=10)
    said = remedy.explain(_record("timeout", launch, compile=True), None, ctx)
    assert said == (
        "no result within the trial's limit, 600 s (study.trial_timeout_min 10): 3 of 10 measured "
        "steps in 90 s (30 s a step), start, build and warm-up (compile on: step 1 compiles) "
        "510 s; raise study.trial_timeout_min to about 17 or take compile out of the space; its "
        "output ends: compiling the graph"
    )
    (tmp_path / PROGRESS_FILE).unlink()
    none = remedy.explain(_record("timeout", launch), None, ctx)
    assert "600 s (study.trial_timeout_min 10): no measured step reported by then" in none
    unknown = remedy.explain(_record("timeout", launch), None, _ctx(tmp_path))
    assert ": which phase ate it is not known (a trial reports its phases at its end); " in unknown
    rank = remedy.explain(
        _record("timeout", launch + "; before that rank 1: RuntimeError: x"), None, ctx
    )
    assert rank == (
        "rank 1: RuntimeError: x; the other ranks then waited for it until the trial's limit, "
        "600 s (study.trial_timeout_min 10)"
    )
    own = remedy.explain(_record("timeout", "the job hung"), TrialResult("timeout"), ctx)
    assert own == "the job hung; raise study.trial_timeout_min (now 10)"


def test_reasons_crash_quotes_the_log_and_names_a_clear_cause(tmp_path: Path) -> None:
    (tmp_path / "worker.log").write_text(NOISE + TRACEBACK + NOISE)
    launch = "trial process ended without a result (exit code 1): " + TORCHAO
    said = remedy.explain(_record("crash", launch), None, _ctx(tmp_path))
    assert said.startswith(
        "exit code 1, no result: ModuleNotFoundError: No module named 'flash_attn'; "
    )
    assert "make 'flash_attn' importable by " in said and "Warning" not in said
    (tmp_path / "worker.log").write_text(TORCHAO)
    killed = "trial process ended without a result (killed by SIGKILL): " + TORCHAO
    assert remedy.explain(_record("crash", killed), None, _ctx(tmp_path)) == (
        "killed by SIGKILL, no result and no output; SIGKILL from outside, most often the kernel's "
        "out-of-memory killer (host memory: dmesg)"
    )
    cuda = "rank 0: RuntimeError: CUDA error: an illegal memory access was encountered"
    assert "CUDA_LAUNCH_BLOCKING=1" in remedy.explain(
        _record("crash", cuda), TrialResult("crash"), _ctx(tmp_path)
    )
    unclear = remedy.explain(
        _record("crash", "rank 0: RuntimeError: x"), TrialResult("crash"), _ctx(tmp_path)
    )
    assert unclear == f"rank 0: RuntimeError: x; its whole output: {tmp_path / 'worker.log'}"
    contract = "the command exited 0 without reporting a step; expected steps in AUTOTUNE_REPORT"
    assert (
        remedy.explain(_record("crash", contract), TrialResult("crash"), _ctx(tmp_path)) == contract
    )


def test_reasons_invalid_config_names_the_knob_value_and_nan_the_precision(tmp_path: Path) -> None:
    rec = _record("invalid_config", "tf32 needs an NVIDIA GPU (Ampere or newer)", precision="tf32")
    rec.cause = {"precision": "tf32"}
    assert (
        remedy.explain(rec, None, _ctx(tmp_path))
        == "precision tf32: tf32 needs an NVIDIA GPU (Ampere or newer)"
    )
    named = _record("invalid_config", "weight_quant int4: no kernel")
    named.cause = {"weight_quant": "int4"}
    assert remedy.explain(named, None, _ctx(tmp_path)) == "weight_quant int4: no kernel"
    nan = remedy.explain(
        _record("nonfinite_loss", "loss became nan", precision="fp16"), None, _ctx(tmp_path)
    )
    assert nan == "loss became nan; fp16 overflows where bf16 (fp32's range) does not: try bf16"


# A job (task command) and a trial's interpreter (sitecustomize) that print what torchao and
# transformers print before the failure: a SyntaxWarning with its source line, a DeprecationWarning
WARN = """import warnings
warnings.simplefilter("default")  # DeprecationWarning shown, as PYTHONWARNINGS=default does
warnings.warn_explicit("invalid escape sequence '\\\\.'", SyntaxWarning, {src!r}, 2)
warnings.warn_explicit("`foo` is deprecated", DeprecationWarning, {src!r}, 3)
"""
SOURCE = (
    '"""torchao, quant_api.py\n"""Configuration class for applying quantization configs.\nfoo()\n'
)


def _warns(tmp_path: Path) -> str:
    src = tmp_path / "quant_api.py"
    src.write_text(SOURCE)
    return WARN.format(src=str(src))


MEMORY_WARNING = "warnings.warn('a large batch may run out of memory', UserWarning)\n"
NO_MODULE = (
    "import not_a_module_of_this_test\n",
    "the command exited with code 1 after 0 of 3 steps: ModuleNotFoundError: No module named "
    "'not_a_module_of_this_test'; make 'not_a_module_of_this_test' importable by the command's "
    "Python (install its package)",
)
BOOM = (
    MEMORY_WARNING + "raise RuntimeError('boom')\n",  # a warning that names memory is no OOM
    "the command exited with code 1 after 0 of 3 steps: RuntimeError: boom; its whole output: ",
)


@pytest.mark.slow
@pytest.mark.parametrize(("body", "reason"), [NO_MODULE, BOOM], ids=["no_module", "warned_memory"])
def test_reasons_a_job_that_warns_then_fails_is_quoted_by_its_error(
    tmp_path: Path, body: str, reason: str
) -> None:
    (tmp_path / "job.py").write_text(_warns(tmp_path) + body)
    doc = {
        "name": "warns",
        "workload": {"task": "command", "warmup_steps": 1, "measure_steps": 2},
        "command": {"argv": ["{python}", "job.py"]},
        "space": {},
        "study": {"trials": 1, "confirm_top": 0, "trial_timeout_min": 1},
    }
    (tmp_path / "warns.yaml").write_text(yaml.safe_dump(doc))
    result = run_search(
        load_config(tmp_path / "warns.yaml"), out_root=tmp_path / "trials", device="cpu"
    )
    rec = next(iter(result.history.seen.values())).user_attrs
    log = (Path(rec["run_dir"]) / "worker.log").read_text()
    assert "SyntaxWarning" in log and "DeprecationWarning" in log  # printed, then left out
    assert rec["status"] == "crash" and len(rec["reason"].splitlines()) == 1
    assert rec["reason"].startswith(reason), rec["reason"]
    assert "Warning" not in rec["reason"]
    assert reason_line(rec["reason"], 100) == rec["reason"][:97] + "..."


def _bench(tmp_path: Path, timeout_s: float = 120) -> tuple[Bench, dict]:
    cfg = parse_config(tiny(space={"micro_batch_size": [2], "precision": "fp32"}))
    space = resolve_space(cfg, "cpu")
    bench = Bench.of(
        cfg.model,
        cfg.workload,
        device="cpu",
        timeout_s=timeout_s,
        home=tmp_path / "s",
        base_dir=None,
    )
    return bench, space.knobs(space.baseline)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "status", "reason"),
    [
        (
            "error",
            "crash",
            "exit code 1, no result: RuntimeError: AUTOTUNE_FAULT=error: a deliberate ",
        ),
        (
            "crash",
            "crash",
            "killed by SIGABRT, no result: AUTOTUNE_FAULT=crash: aborting the trial process; ",
        ),
        ("oom", "oom", "out of memory (estimated peak "),
    ],
)
def test_reasons_a_trial_that_warns_then_fails_is_quoted_by_its_error(
    tmp_path: Path, fault: str, status: str, reason: str
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        _warns(tmp_path)
    )  # every Python of the trial prints them
    bench, knobs = _bench(tmp_path)
    env = {"PYTHONPATH": str(site), "AUTOTUNE_FAULT": fault}
    rec = measure(bench, knobs, tmp_path / "run", env=env)
    assert "SyntaxWarning" in (tmp_path / "run" / "worker.log").read_text()
    assert rec.status == status and rec.reason.startswith(reason), rec.reason
    assert "Warning" not in rec.reason and len(rec.reason.splitlines()) == 1
    if status == "crash":
        assert rec.reason.endswith(f"; its whole output: {(tmp_path / 'run').resolve()}/worker.log")
    else:
        assert (
            "lower it with a smaller micro_batch_size (now 2) or activation_checkpointing full"
            in rec.reason
        )


@pytest.mark.slow
def test_reasons_a_trial_past_its_limit_names_study_trial_timeout_min(tmp_path: Path) -> None:
    bench, knobs = _bench(tmp_path, timeout_s=4)
    rec = measure(bench, knobs, tmp_path / "run", env={"AUTOTUNE_FAULT": "hang"})
    assert rec.status == "timeout"
    assert rec.reason.startswith(
        "no result within the trial's limit, 4 s (study.trial_timeout_min 0.07): which phase ate it"
    ), rec.reason
    assert "; raise study.trial_timeout_min" in rec.reason
