"""Multi-rank trials on the CPU: torchrun with world_size 2 on gloo, DDP and FSDP2, a failing rank,
a hung rank, the NCCL knobs (validated, not applicable to gloo), the launcher prefix for
multi-node."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import load_trials, none_left, run_cli, tiny

from autotune import nccl_log
from autotune.errors import ConfigError
from autotune.job import parse_config
from autotune.knobs import env_of
from autotune.launch.runner import Bench, launch_command, run_trial
from autotune.protocol import TrialSpec
from autotune.space import resolve_space

# every test here runs searches, checks or several processes: `make test-fast` leaves them out
pytestmark = pytest.mark.slow


WS2 = {"global_batch_size": 8, "world_size": 2, "warmup_steps": 1, "measure_steps": 3}


def _spec(tmp_path: Path, **workload) -> tuple[TrialSpec, Path]:
    cfg = parse_config(
        tiny(
            workload={**WS2, **workload},
            space={"micro_batch_size": [2], "precision": "fp32"},
            baseline={"micro_batch_size": 2, "precision": "fp32"},
        )
    )
    space = resolve_space(cfg, "cpu")
    bench = Bench.of(
        cfg.model, cfg.workload, device="cpu", timeout_s=120, home=tmp_path / "study", base_dir=None
    )
    return bench.spec(space.knobs(space.baseline)), tmp_path / "run"


def test_distributed_search_ddp_and_fsdp_on_gloo(tmp_path: Path, write_yaml) -> None:
    path = write_yaml(
        tiny(
            workload=WS2,
            space={
                "micro_batch_size": [2, 4],
                "precision": "fp32",
                "parallel": ["ddp", "fsdp"],
                "bucket_cap_mb": [1, 25],
                "nccl_algo": ["default", "Ring"],
                "nccl_proto": ["default", "LL128"],
            },
            baseline={"micro_batch_size": 2, "precision": "fp32", "parallel": "ddp"},
            study={"trials": 3, "sampler": "grid"},
        )
    )
    proc = run_cli(
        "search", str(path), "--out", str(tmp_path / "out"), "--device", "cpu", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = load_trials(tmp_path / "out")
    ok = [t for t in trials if t.user_attrs.get("status") == "ok"]
    assert len(ok) == 3
    for t in ok:
        k, a, m = t.user_attrs["knobs"], t.user_attrs["applied"], t.user_attrs["metrics"]
        # the global batch stays exact
        assert k["micro_batch_size"] * k["grad_accum_steps"] * 2 == 8
        assert (
            a["world_size"] == 2
            and a["backend"] == "gloo"
            and a["nccl_env"] == "not applicable to gloo"
        )
        assert a["parallel"]["strategy"] == k["parallel"]
        # a ddp knob means nothing to fsdp
        assert (k["bucket_cap_mb"] is None) == (k["parallel"] == "fsdp")
        assert k["nccl_algo"] == "default" and k["nccl_proto"] == "default"  # not searched on gloo
        ranks = t.user_attrs["ranks"]
        assert [r["rank"] for r in ranks] == [0, 1]
        slowest = [
            max(a_, b_) for a_, b_ in zip(ranks[0]["step_times_s"], ranks[1]["step_times_s"])
        ]
        # each step as long as its slowest rank
        assert t.user_attrs["raw"]["step_times_s"] == slowest
        assert m["tokens_per_s"] == pytest.approx(2 * m["tokens_per_s_per_gpu"])
    fsdp = [t for t in ok if t.user_attrs["knobs"]["parallel"] == "fsdp"]
    assert fsdp and fsdp[0].user_attrs["applied"]["parallel"]["sharded_blocks"] == 1
    none_left(str(tmp_path / "out"))  # no rank left running


@pytest.mark.parametrize(
    ("fault", "status", "reason"),
    [
        ("error@rank=1", "crash", "rank 1: RuntimeError: AUTOTUNE_FAULT=error"),
        ("oom@rank=1", "oom", "rank 1: AUTOTUNE_FAULT=oom"),
        ("nan@rank=0", "nonfinite_loss", "rank 0: loss became nan"),
    ],
)
def test_distributed_failing_rank_fails_the_trial_with_its_reason(
    tmp_path: Path, monkeypatch, fault: str, status: str, reason: str
) -> None:
    spec, run_dir = _spec(tmp_path)
    outcome = run_trial(spec, run_dir, timeout_s=120, env={"AUTOTUNE_FAULT": fault})
    # torchrun ended the other rank: the trial ended by the rank's failure, not by waiting for its
    # timeout (that ends as "timeout", the rank's reason after "before that")
    assert outcome.status == status, outcome.reason
    assert outcome.reason.startswith(reason)
    none_left(str(run_dir / "spec.json"))


def test_distributed_hung_rank_times_out_and_no_rank_survives(tmp_path: Path) -> None:
    spec, run_dir = _spec(tmp_path)
    # 15 s (was 25): rank 1 hangs at its start, seconds after torchrun starts it; what is waited
    # out past that is the limit itself
    outcome = run_trial(spec, run_dir, timeout_s=15, env={"AUTOTUNE_FAULT": "hang@rank=1"})
    assert outcome.status == "timeout"
    none_left(str(run_dir / "spec.json"))  # neither the hung rank nor the waiting one


def test_distributed_launch_command_single_node_multi_node_and_launcher(tmp_path: Path) -> None:
    spec, run_dir = _spec(tmp_path)
    cmd = launch_command(spec, run_dir / "spec.json", run_dir / "result.json")
    assert (
        cmd[1:5] == ["-m", "torch.distributed.run", "--nproc-per-node", "2"]
        and "--standalone" in cmd
    )
    spec.run.world_size, spec.run.nnodes, spec.run.rdzv_endpoint = 4, 2, "node1:29400"
    spec.run.launcher = ["srun", "--nodes=2"]
    cmd = launch_command(spec, run_dir / "spec.json", run_dir / "result.json")
    assert cmd[:2] == ["srun", "--nodes=2"] and "--standalone" not in cmd
    assert cmd[cmd.index("--nproc-per-node") + 1] == "2" and cmd[cmd.index("--nnodes") + 1] == "2"
    assert cmd[cmd.index("--rdzv-endpoint") + 1] == "node1:29400"
    spec.run.world_size, spec.run.nnodes, spec.run.launcher = 1, 1, None
    assert launch_command(spec, run_dir / "s", run_dir / "r")[1:3] == [
        "-m",
        "autotune.workloads.trial",
    ]


def test_distributed_launcher_prefix_runs_the_trial(tmp_path: Path) -> None:
    marker = tmp_path / "launched"
    spec, run_dir = _spec(tmp_path, launcher=["sh", "-c", 'touch "$0" && exec "$@"', str(marker)])
    outcome = run_trial(spec, run_dir, timeout_s=120)
    assert outcome.status == "ok", outcome.reason
    assert marker.exists()  # the prefix started torchrun


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"workload": {**WS2, "nnodes": 2}}, r"workload\.rdzv_endpoint: needed with nnodes 2"),
        (
            {"workload": {**WS2, "world_size": 3, "nnodes": 2, "global_batch_size": 6}},
            r"workload\.world_size: 3 is not divisible by workload\.nnodes \(2\)",
        ),
        (
            {"workload": {**WS2, "nnodes": 2, "rdzv_endpoint": "node1"}},
            r"workload\.rdzv_endpoint: 'node1' is not host:port",
        ),
        ({"space": {"nccl_algo": ["Ring", "Fast"]}}, r"space\.nccl_algo"),
        ({"space": {"nccl_proto": ["LL256"]}}, r"space\.nccl_proto"),
        ({"space": {"nccl_nchannels": [0]}}, r"space\.nccl_nchannels.*0 is not a channel count"),
        ({"space": {"parallel": ["zero3"]}}, r"space\.parallel"),
    ],
)
def test_distributed_config_errors(override: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(tiny(**override))


def test_distributed_nccl_knobs_on_gpus_and_gloo() -> None:
    cfg = parse_config(
        tiny(
            workload=WS2,
            space={
                "nccl_algo": ["default", "Ring", "Tree"],
                "nccl_proto": ["default", "Simple", "LL"],
                "nccl_nchannels": ["default", 8],
            },
        )
    )
    gpu, cpu = resolve_space(cfg, "cuda"), resolve_space(cfg, "cpu")
    assert {"nccl_algo", "nccl_proto", "nccl_nchannels"} <= set(gpu.searched)
    assert not {"nccl_algo", "nccl_proto", "nccl_nchannels"} & set(cpu.searched)
    assert "not applicable to gloo" in cpu.notes["nccl_algo"]
    knobs = gpu.knobs(
        {**gpu.baseline, "nccl_algo": "Ring", "nccl_proto": "LL", "nccl_nchannels": 8}
    )
    env = env_of(knobs)
    assert env == {
        "NCCL_ALGO": "Ring",
        "NCCL_PROTO": "LL",
        "NCCL_MIN_NCHANNELS": "8",
        "NCCL_MAX_NCHANNELS": "8",
    }
    default = env_of(gpu.knobs(gpu.baseline))
    assert not any(k.startswith("NCCL_") for k in default)  # default sets nothing
    assert "NVLS" not in parse_config(tiny()).space.nccl_algo  # never offered unless listed
    one = resolve_space(
        parse_config(tiny(space={"nccl_algo": ["Ring", "Tree"], "parallel": ["ddp", "fsdp"]})),
        "cuda",
    )
    assert not {"nccl_algo", "parallel"} & set(one.searched)  # world_size 1: nothing to communicate


def test_distributed_gpus_must_split_into_trials(tmp_path: Path, write_yaml) -> None:
    path = write_yaml(
        tiny(
            workload=WS2,
            space={"micro_batch_size": [2], "precision": "fp32"},
            baseline={"micro_batch_size": 2, "precision": "fp32"},
        )
    )
    proc = run_cli(
        "search",
        str(path),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        "--gpus",
        "0,1,2",
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "--gpus: 3 GPUs cannot be split into trials of 2" in proc.stderr
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_distributed_nccl_command_on_gloo(tmp_path: Path) -> None:
    """`autotune nccl` on the CPU: one gloo group of two ranks, a bandwidth per size, nccl.json
    written."""
    import json

    proc = run_cli(
        "nccl",
        "--device",
        "cpu",
        "--gpus",
        "0,1",
        "--min-mb",
        "1",
        "--max-mb",
        "4",
        "--iters",
        "3",
        "--out",
        str(tmp_path / "nccl"),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "gloo backend has no NCCL" in proc.stdout
    doc = json.loads((tmp_path / "nccl" / "nccl.json").read_text())
    (cell,) = doc["cells"]
    assert cell["status"] == "ok" and [r["bytes"] for r in cell["rows"]] == [
        1_000_000,
        2_000_000,
        4_000_000,
    ]
    for row in cell["rows"]:
        assert (
            row["busbw_gbs"] == pytest.approx(row["algbw_gbs"] * 2 * (2 - 1) / 2)
            and row["time_us"] > 0
        )
        assert len(row["samples_s"]) == 3
    none_left(str(tmp_path / "nccl"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--algos", "Ring,Fast"), "--algos: 'Fast' is not allowed"),
        (("--protos", "LL256"), "--protos: 'LL256' is not allowed"),
        (("--gpus", "0"), "an all-reduce needs at least 2"),
        (("--min-mb", "8", "--max-mb", "1"), "--min-mb: 8.0 is above --max-mb 1.0"),
    ],
)
def test_distributed_nccl_command_bad_input(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    proc = run_cli("nccl", "--device", "cpu", *args, "--out", str(tmp_path / "nccl"), cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr
    assert not (tmp_path / "nccl").exists()


def test_distributed_static_graph_with_accumulation_is_invalid(tmp_path: Path) -> None:
    """PyTorch's static_graph with no_sync stops synchronising gradients: never measured as if it
    trained."""
    spec, run_dir = _spec(tmp_path)
    assert spec.knobs["grad_accum_steps"] == 2
    spec.knobs["static_graph"] = True
    outcome = run_trial(spec, run_dir, timeout_s=120)
    assert outcome.status == "invalid_config"
    assert outcome.reason.startswith(
        "rank 0: DDP static_graph with gradient accumulation"
    ) or outcome.reason.startswith("rank 1: DDP static_graph with gradient accumulation")


def test_distributed_fsdp_shards_the_layers_of_an_hf_model(tmp_path: Path, write_yaml) -> None:
    pytest.importorskip("transformers")
    hf = Path(__file__).resolve().parents[1] / "search_spaces" / "hf" / "tiny-llama.json"
    path = write_yaml(
        {
            "name": "t",
            "model": {"hf_config": str(hf), "seq_len": 32},
            "workload": {**WS2, "global_batch_size": 4},
            "space": {"micro_batch_size": [2], "precision": "fp32", "parallel": "fsdp"},
            "study": {"trials": 1, "confirm_rounds": 0},
        }
    )
    proc = run_cli(
        "search", str(path), "--out", str(tmp_path / "out"), "--device", "cpu", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = load_trials(tmp_path / "out")
    applied = trial.user_attrs["applied"]["parallel"]
    # the config's two decoder layers
    assert applied["strategy"] == "fsdp" and applied["sharded_blocks"] == 2
    assert "failed_rank" not in trial.user_attrs


def test_distributed_nccl_report_reads_both_log_formats(tmp_path: Path) -> None:
    """A synthetic log in the two TUNING line formats of NCCL's source (named, and numeric ids of
    older releases); not captured from a GPU run."""
    (tmp_path / "nccl.h.1.log").write_text(
        "h:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n"
        "h:1:1 [0] NCCL INFO AllReduce: 26214400 Bytes -> Algo RING proto SIMPLE "
        "channel{Lo..Hi}={0..15}\n"
        "h:1:1 [0] NCCL INFO AllReduce: 26214400 Bytes -> Algo RING proto SIMPLE "
        "channel{Lo..Hi}={0..15}\n"
        "h:1:1 [0] NCCL INFO Broadcast: 4096 Bytes -> Algo 1 proto 0 time 12.000000\n"
        "h:1:1 [0] NCCL WARN no algorithm/protocol available for function AllGather with datatype "
        "ncclInt8. NCCL_ALGO was set to Tree.\n"
    )
    report = nccl_log.report(tmp_path)
    assert report["algo_proto_used"] == {"AllReduce RING/SIMPLE": 2, "Broadcast RING/LL": 1}
    assert report["version"] == "2.28.9+cuda13.0" and report["warnings"][0].startswith(
        "no algorithm/protocol"
    )
    assert nccl_log.report(tmp_path / "none") is None


# trials 21 and 6 of the 2x H200 DDP search
CAPTURED = Path(__file__).resolve().parent / "data" / "h200x2-nccl-2.28.9"


def test_distributed_nccl_report_on_logs_captured_on_h200() -> None:
    ok = nccl_log.report(CAPTURED / "ddp-ring-ok")  # NCCL_ALGO/PROTO unset, bucket_cap_mb 100
    assert ok["version"] == "2.28.9+cuda13.0" and ok["warnings"] == [] and ok["logs"] == 2
    assert ok["algo_proto_used"] == {
        "AllGather RING/LL": 1,
        "Broadcast RING/LL": 3,
        "Broadcast RING/SIMPLE": 2,
        "AllReduce RING/SIMPLE": 26,
    }
    refused = nccl_log.report(CAPTURED / "ddp-tree-refused")  # NCCL_ALGO=Tree NCCL_PROTO=LL
    assert refused["algo_proto_used"] == "not reported by NCCL (no tuning lines in its INFO log)"
    assert refused["warnings"] == [
        "Error : no algorithm/protocol available for function AllGather with datatype "
        "ncclInt8. NCCL_ALGO was set to Tree. NCCL_PROTO was set to LL."
    ]


def test_distributed_rank_refused_by_nccl_gives_its_message_once(tmp_path: Path) -> None:
    """Replays what the ranks of the refused H200 trial left: rank 0's failure file and both NCCL
    logs."""
    spec, run_dir = _spec(tmp_path)
    tests = str(Path(__file__).resolve().parent)
    outcome = run_trial(
        spec,
        run_dir,
        timeout_s=120,
        module="fake_nccl_rank",
        env={
            "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]),
            "FAKE_NCCL_REPLAY": str(CAPTURED / "ddp-tree-refused"),
        },
    )
    assert outcome.status == "invalid_config"
    assert outcome.reason == (
        "rank 0: NCCL refused this setting: Error : no algorithm/protocol available for function "
        "AllGather with datatype ncclInt8. NCCL_ALGO was set to Tree. NCCL_PROTO was set to LL."
    )


def test_distributed_report_shows_whatnccl_used() -> None:
    assert (
        nccl_log.used(
            {
                "algo_proto_used": {
                    "AllReduce RING/LL128": 30,
                    "Broadcast RING/LL": 2,
                    "AllReduce TREE/SIMPLE": 3,
                }
            }
        )
        == "RING/LL128, TREE/SIMPLE"
    )
    assert (
        nccl_log.used({"algo_proto_used": "not reported by NCCL (no tuning lines in its INFO log)"})
        is None
    )
    assert nccl_log.used(None) is None


def test_distributed_nccl_abort_with_a_refusal_is_invalid_config(tmp_path: Path) -> None:
    """When NCCL's watchdog aborts the ranks (no Python exception, no rank file), its log still says
    why."""
    spec, run_dir = _spec(tmp_path)
    tests = str(Path(__file__).resolve().parent)
    outcome = run_trial(
        spec,
        run_dir,
        timeout_s=120,
        module="fake_nccl_rank",
        env={"PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])},
    )
    assert outcome.status == "invalid_config"
    assert (
        outcome.reason.startswith(
            "NCCL refused this setting: Error : no algorithm/protocol available for function "
            "AllGather"
        )
        and "NCCL_ALGO was set to Tree" in outcome.reason
    )


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_distributed_block_compile_before_wrapping(tmp_path: Path, parallel: str) -> None:
    """compile_scope block compiles each block in place before DDP or FSDP2 wraps the model (gloo, 2
    ranks)."""
    spec, run_dir = _spec(tmp_path)
    spec.knobs.update(parallel=parallel, compile=True, compile_scope="block")
    if parallel == "fsdp":
        spec.knobs.update(
            bucket_cap_mb=None,
            gradient_as_bucket_view=None,
            static_graph=None,
            reshard_after_forward=True,
        )
    outcome = run_trial(spec, run_dir, timeout_s=300)
    assert outcome.status == "ok", outcome.reason
    assert (
        outcome.result.applied["compile_mode"]
        == "default, per block (1 x Block, compiled in place) + head_loss"
    )
    assert outcome.result.applied["parallel"]["strategy"] == parallel


def test_ddp_compile_whole_and_split_graphs_train_the_same(tmp_path: Path) -> None:
    """ddp_compile: Dynamo's DDPOptimizer on (split) or off (whole), applied as said, from the same
    loss (same weights, same data). Issue 16: whether the split costs fusion is measured on the GPU
    (stage ddp-truth)."""
    losses = {}
    for order in ("whole", "split"):
        cfg = parse_config(
            tiny(
                workload={**WS2, "measure_steps": 2},
                space={
                    "micro_batch_size": [2],
                    "precision": "fp32",
                    "compile": True,
                    "parallel": "ddp",
                    "ddp_compile": order,
                },
                baseline={"micro_batch_size": 2, "precision": "fp32"},
            )
        )
        space = resolve_space(cfg, "cpu")
        bench = Bench.of(
            cfg.model,
            cfg.workload,
            device="cpu",
            timeout_s=240,
            home=tmp_path / order,
            base_dir=None,
        )
        outcome = run_trial(
            bench.spec(space.knobs(space.baseline)), tmp_path / order / "run", timeout_s=300
        )
        assert outcome.status == "ok", outcome.reason
        want = (
            "one graph (optimize_ddp false)"
            if order == "whole"
            else "split at the buckets (optimize_ddp true)"
        )
        assert outcome.result.applied["ddp_graph"] == want
        losses[order] = outcome.result.losses
    assert losses["whole"][0] == pytest.approx(losses["split"][0], rel=1e-4)


def test_plain_ddp_reference_script_runs_on_gloo(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(root / "benchmarks/plain_ddp.py"),
            "--tiny",
            "--compile",
            "none",
            "--mbs",
            "2",
            "--accum",
            "2",
            "--warmup",
            "1",
            "--steps",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["world_size"] == 2 and len(out["step_s"]) == 3 and out["tokens_per_s_per_gpu"] > 0
    assert out["tokens_per_s_per_gpu"] == pytest.approx(2 * 2 * 32 / sorted(out["step_s"])[1])
