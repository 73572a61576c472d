"""GPU-only behaviour, run on the device machine (`pytest -m gpu -s tests/test_gpu.py`); skipped
without CUDA.

A real CUDA search end to end (CUDA-event timing, allocator peak memory, NVML telemetry, fp8 through
torchao), and issue 7's crash-safety check on the GPU: kill -9 of `autotune search` while a trial is
training leaves no process on the GPU (asked of NVML, as nvidia-smi does), and the same command then
finishes the study, measuring the lost configuration again.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import load_trials, ours, run_cli, start_cli, tiny, wait_until

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

SMALL = {
    "family": "gpt",
    "n_layers": 2,
    "d_model": 256,
    "n_heads": 4,
    "vocab_size": 50257,
    "seq_len": 256,
}


def _gpu_pids() -> dict[int, int]:
    """pid -> bytes used, of every compute process on every GPU (NVML's view, the one nvidia-smi
    prints)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        found = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(
                pynvml.nvmlDeviceGetHandleByIndex(i)
            ):
                found[p.pid] = p.usedGpuMemory or 0
        return found
    finally:
        pynvml.nvmlShutdown()


def _nvidia_smi() -> str:
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"nvidia-smi: {err}"


def _children_of(pid: int) -> set[int]:
    """Every descendant of pid (through /proc)."""
    parents = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            pass
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def test_gpu_search_end_to_end(tmp_path: Path, write_yaml) -> None:
    """bf16 and fp8, compiled: every trial ok, CUDA-event timing, allocator peak, NVML telemetry,
    fp8 applied."""
    pytest.importorskip("torchao")
    path = write_yaml(
        tiny(
            model=SMALL,
            workload={"global_batch_size": 32, "warmup_steps": 2, "measure_steps": 4},
            space={
                "micro_batch_size": [16],
                "precision": ["bf16", "fp8"],
                "compile": True,
                "fp8_recipe": ["tensorwise"],
            },
            baseline={"micro_batch_size": 16, "precision": "bf16"},
            study={"trials": 2, "sampler": "grid"},
        )
    )
    proc = run_cli(
        "search",
        str(path),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cuda",
        cwd=tmp_path,
        timeout=600,
    )
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = load_trials(tmp_path / "out")
    assert [t.user_attrs["status"] for t in trials] == ["ok", "ok"]
    for t in trials:
        m = t.user_attrs["metrics"]
        assert m["peak_mem_kind"] == "cuda_max_memory_allocated" and m["peak_mem_gib"] > 0
        assert m["mfu"] > 0 and m["step_time"]["n"] == 4
        assert (
            t.user_attrs["telemetry"]["samples"] > 0
            and t.user_attrs["telemetry"]["power_w_mean"] > 0
        )
        assert t.user_attrs["phases_s"]["compile"] > 0
    fp8 = next(t for t in trials if t.params["precision"] == "fp8")
    # 4 linears a block, the head kept in bf16
    assert fp8.user_attrs["applied"]["fp8_linears"] == 2 * 4


def test_gpu_kill_9_leaves_no_process_on_gpu_and_resume_finishes(
    tmp_path: Path, write_yaml
) -> None:
    path = write_yaml(
        tiny(
            model=SMALL,
            workload={"global_batch_size": 64, "warmup_steps": 1, "measure_steps": 3},
            space={"micro_batch_size": [8, 16], "precision": "bf16"},
            baseline={"micro_batch_size": 8, "precision": "bf16"},
            study={"trials": 2},
        )
    )
    out = tmp_path / "out"
    before = set(_gpu_pids())
    proc = start_cli(
        "search",
        str(path),
        "--out",
        str(out),
        "--device",
        "cuda",
        cwd=tmp_path,
        # trial 1 trains slowly
        env={"AUTOTUNE_FAULT": "slow:5000@micro_batch_size=16"},
    )
    spec = out / "t" / "runs" / "0001" / "spec.json"
    on_gpu = wait_until(
        lambda: spec.exists() and (set(_gpu_pids()) - before) & _children_of(proc.pid),
        300,
        "trial 1 holding GPU memory",
    )
    print("before kill -9:\n" + _nvidia_smi())
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    wait_until(
        lambda: not set(_gpu_pids()) & on_gpu, 20, "the end of the trial's process on the GPU"
    )
    print("after kill -9:\n" + _nvidia_smi())
    assert not set(_gpu_pids()) & on_gpu, "the trial process outlived autotune and keeps the GPU"
    assert not [pid for pid in _gpu_pids() if ours(pid)]  # nothing of ours (this test's) on any GPU
    again = run_cli(
        "search", str(path), "--out", str(out), "--device", "cuda", cwd=tmp_path, timeout=600
    )
    print(again.stdout[-2000:])
    assert again.returncode == 0, again.stdout + again.stderr
    trials = load_trials(out)
    assert [t.user_attrs.get("status") for t in trials] == ["ok", "worker_lost", "ok"]
    assert trials[2].params == {"micro_batch_size": 16}  # the lost configuration, measured again


def test_gpu_prestarted_trials_and_block_compile(tmp_path: Path, write_yaml) -> None:
    """Issue 13 on CUDA: trials after the first run in processes started ahead (prestart is on by
    default with CUDA), whose build is no longer the imports; compile_scope block compiles each
    block in place."""
    path = write_yaml(
        tiny(
            model=SMALL,
            workload={"global_batch_size": 32, "warmup_steps": 2, "measure_steps": 4},
            space={
                "micro_batch_size": [16],
                "precision": ["bf16"],
                "compile": True,
                "compile_scope": ["model", "block"],
                "fused_optimizer": [False, True],
            },
            baseline={"micro_batch_size": 16, "precision": "bf16"},
            study={"trials": 4, "sampler": "grid", "confirm_top": 0},
        )
    )
    proc = run_cli(
        "search",
        str(path),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cuda",
        cwd=tmp_path,
        timeout=900,
    )
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = sorted(load_trials(tmp_path / "out"), key=lambda t: t.number)
    assert [t.user_attrs["status"] for t in trials] == ["ok"] * 4
    assert [t.user_attrs["prestarted"] for t in trials] == [False, True, True, True]
    for t in trials[1:]:
        print(t.number, t.user_attrs["phases_s"])
    block = [t for t in trials if t.user_attrs["knobs"]["compile_scope"] == "block"]
    assert len(block) == 2 and all(
        "per block (2 x Block" in t.user_attrs["applied"]["compile_mode"] for t in block
    )


def test_gpu_progress_reads_finished_events_and_stops_early() -> None:
    from autotune.workloads.timing import time_steps

    a = torch.randn(2048, 2048, device="cuda")
    seen: list[int] = []

    def progress(done: list[float]) -> bool:
        seen.append(len(done))
        return len(done) >= 3

    t = time_steps(torch, lambda: a @ a, warmup=2, measure=50, device="cuda", progress=progress)
    # stopped within a few steps of the third: the host ran at most AHEAD steps in front of the
    # device
    assert t.stopped_early and 3 <= len(t.step_s) <= 3 + 2 + 1 and all(s > 0 for s in t.step_s)
    assert seen == sorted(seen)  # finished steps only grow; none was waited for
