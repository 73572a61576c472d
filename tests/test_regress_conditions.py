"""What disturbed a check (regress_conditions): the rule on real recorded conditions, and the real
sources."""

from __future__ import annotations

import os

from autotune import hardware
from autotune.check.conditions import HOST_LOAD_LIMIT, disturbances, sample
from autotune.check.regress import Verdict

# Read from /proc/loadavg on this 2-core machine on 2026-12-01: 3.54 while other engineers' tests
# ran (1.77 a core: under the limit), 5.26 minutes later with more of them (2.63 a core: past it).
# The GPU conditions are in the shape sample() records them on a 16-core GPU host: none, and another
# process holding 20 GiB.
BUSY_CPU = {"load_1min": 3.54, "cpus": 2, "gpu_processes": None}
SHARED_CPU = {"load_1min": 5.26, "cpus": 2, "gpu_processes": None}
GPU_ALONE = {"load_1min": 1.12, "cpus": 16, "gpu_processes": []}
GPU_SHARED = {
    "load_1min": 1.4,
    "cpus": 16,
    "gpu_processes": [{"pid": 48211, "name": "python3", "used_mib": 20480}],
}


def test_regress_conditions_under_the_limits_is_not_disturbed() -> None:
    assert disturbances([BUSY_CPU, BUSY_CPU, BUSY_CPU]) == []
    assert disturbances([GPU_ALONE] * 4) == []


def test_regress_conditions_names_the_other_gpu_process() -> None:
    found = disturbances([GPU_ALONE, GPU_SHARED, GPU_SHARED, GPU_ALONE])
    assert found == ["other processes on the GPU: pid 48211 (python3, 20,480 MiB)"]  # named once


def test_regress_conditions_host_load_past_the_limit_and_when() -> None:
    assert HOST_LOAD_LIMIT == 2.0
    found = disturbances([BUSY_CPU, SHARED_CPU, BUSY_CPU])
    assert found == [
        "host load 2.63 per core before repeat 2 (5.26 on 2 CPUs; limit 2, --max-load)"
    ]
    assert disturbances([BUSY_CPU, SHARED_CPU])[0].startswith(
        "host load 2.63 per core after the last repeat"
    )
    assert disturbances([BUSY_CPU, SHARED_CPU, BUSY_CPU], max_load=3.0) == []  # --max-load 3
    assert disturbances([SHARED_CPU], max_load=0) == []  # --max-load 0: load not judged


def test_regress_conditions_sample_reads_the_real_machine() -> None:
    now = sample("cpu")
    assert now["cpus"] == os.cpu_count() and now["load_1min"] >= 0 and now["gpu_processes"] is None
    # cuda: NVML's list of processes on the GPU, None (skipped, never an error) where there is no
    # driver
    listed = hardware.compute_processes(hardware.visible_gpu_index())
    assert listed is None if not hardware.detect()["gpus"] else isinstance(listed, list)
    assert sample("cuda")["gpu_processes"] == listed
    assert sample("cpu", loadavg=lambda: (5.26, 3.0, 1.0))["load_1min"] == 5.26


def _verdict(status: str, check: list[float], disturbed: list[str]) -> Verdict:
    base = [100.0, 101.0, 99.0]
    return Verdict(
        status,
        0.5,
        (0.0, float("inf")) if len(check) < 2 else (0.45, 0.55),
        5.0,
        100.0,
        50.0,
        base,
        check,
        "check --update",
        disturbed=disturbed,
    )


def test_regress_unreliable_exits_3_and_names_what_disturbed_it() -> None:
    v = _verdict("unreliable", [50.0, 51.0, 49.0], ["host load 2.63 per core before repeat 2"])
    assert v.exit_code == 3 and v.summary().startswith(
        "unreliable: 50 vs baseline 100 tokens/s/GPU"
    )
    assert "disturbed: host load 2.63 per core before repeat 2" in v.summary()
    assert _verdict("regression", [50.0, 51.0, 49.0], []).exit_code == 1


def test_regress_ratio_interval_of_too_few_samples_says_so() -> None:
    assert "(95% CI 0.450 to 0.550)" in _verdict("pass", [50.0, 51.0, 49.0], []).summary()
    one = Verdict(
        "pass",
        0.5,
        (0.0, float("inf")),
        5.0,
        100.0,
        50.0,
        [100.0],
        [50.0],
        "search trial 0 (1 process)",
    )
    assert "(95% CI: too few samples (2; an interval needs 3))" in one.summary()
