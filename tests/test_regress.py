"""autotune check: the noise-aware decision, exit codes, JUnit, history, --update (real CPU
trials)."""

from __future__ import annotations

import json
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from conftest import run_cli

from autotune.check.regress import decide
from autotune.documents.digest import baseline_digest
from autotune.documents.nightly import Night

# This CPU VM's process-to-process noise is large and bimodal (per-process medians of one config:
# 40k to 72k tokens/s in 35 processes, while a step lies a median 2-3% from its own process's median
# step), and its speed drifts: one CI run recorded a baseline median of 67,580 and then ten checks
# at 50-52k (ratio 0.75-0.77), one of which crossed a 40% tolerance. Resampling the 35 medians with
# the check's own decide() and that 0.75 drift, a check of 5 repeats at 50% fails with p = 0.0003 (6
# in 20,000 draws; 0.003 for ten checks), at 40% and 3 repeats with p = 0.04 (0.31 for ten). So the
# real-trial tests use 50% and the default 5 repeats, and a slowdown (5x) far beyond it; the
# decision rule itself is pinned with synthetic samples below, and its 5% GPU behaviour in
# BENCHMARKS.md.
CPU_TOLERANCE = "50"
# The tests of the decision leave the host's load unjudged (--max-load 0): this 2-core machine is
# shared with other test runs, whose load would otherwise make a regression "unreliable"
# (regress_conditions; tested below).
UNJUDGED = ("--max-load", "0")

ONE_POINT = {
    "name": "c",
    "model": {
        "family": "gpt",
        "n_layers": 2,
        "d_model": 64,
        "n_heads": 2,
        "vocab_size": 256,
        "seq_len": 64,
    },
    "workload": {"global_batch_size": 16, "warmup_steps": 2, "measure_steps": 6},
    "space": {"micro_batch_size": 8, "precision": "fp32"},
    "study": {"trials": 1},
}


def test_regress_decide_unchanged_passes() -> None:
    base = [100.0, 101.0, 99.0, 100.5, 99.5]
    d = decide(base, [99.8, 100.6, 99.1, 100.2, 100.9], 5)
    assert d.status == "pass" and 0.95 < d.ci[0] < 1 < d.ci[1]
    assert d.reason == (
        "the 98% interval 0.988 to 1.02 lies above 0.95: no slowdown past the tolerance"
    )


def test_regress_decide_slowdown_beyond_noise_fails() -> None:
    base = [100.0, 101.0, 99.0, 100.5, 99.5]
    d = decide(base, [87.0, 86.5, 87.4, 86.9, 87.2], 5)  # 13% slower, 1% noise
    assert d.status == "regression" and d.ratio == pytest.approx(87.0 / 100.0) and d.ci[1] < 0.95
    assert d.reason.endswith("lies below 0.95: slower than the tolerance allows, beyond the noise")


def test_regress_decide_slowdown_within_tolerance_passes() -> None:
    d = decide([100.0, 100.2, 99.8], [97.0, 97.1, 96.9], 5)  # 3% slower: under 5%, 0.2% noise
    assert d.status == "pass" and d.ratio < 1 and d.ci[0] > 0.95


def test_regress_decide_noise_that_could_hide_a_slowdown_is_inconclusive() -> None:
    """12% slower with 20% noise: the interval reaches from far below 0.95 to above 1. The old rule
    passed it (its upper end reached 1); nothing rules out a slowdown, so it is no pass."""
    base = [100.0, 130.0, 80.0, 115.0, 90.0]
    d = decide(base, [88.0, 120.0, 70.0, 95.0, 84.0], 5)
    assert d.ratio < 0.95 and d.ci[0] < 0.95 < 1 < d.ci[1] and d.status == "inconclusive"
    assert d.reason.endswith("reaches both below 0.95 and above it: the repeats scatter")
    assert d.settle == "on a quieter machine"


def test_regress_decide_faster() -> None:
    d = decide([100.0, 101.0, 99.0], [120.0, 121.0, 119.5], 5)
    assert d.status == "faster" and d.ci[0] > 1
    assert d.reason.endswith(
        "lies above 1 and its centre 1.202 lies above 1.05: faster beyond the noise"
    )


def test_regress_decide_one_sample_each_is_inconclusive() -> None:
    """One sample a side: the noise is unknown, no interval; the old rule passed a check at half the
    baseline's speed (exit 0)."""
    d = decide([100.0], [50.0], 5)
    assert d.status == "inconclusive" and d.ratio == 0.5 and d.ci == (0.0, float("inf"))
    assert d.reason == (
        "one sample a side (1 baseline, 1 check): the noise is unknown, so no interval"
    )
    assert "check --reset-baseline --repeats 5" in d.settle


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("check")
    (root / "m.yaml").write_text(yaml.safe_dump(ONE_POINT))
    proc = run_cli("search", "m.yaml", "--out", "out", "--device", "cpu", cwd=root)
    assert proc.returncode == 0, proc.stderr
    return root


@pytest.mark.slow
@pytest.mark.serial
def test_regress_unchanged_passes_on_every_split_of_real_samples(searched: Path) -> None:
    """An unchanged configuration passes. `check --reset-baseline --repeats 10` records ten real
    per-process measurements; a check of the default 5 repeats then passes (exit 0, its verdict in
    the nightly history, --update records its samples); and decide() at the CPU tolerance finds no
    regression in any 5-against-5 split of the ten (252 verdicts) nor in the real check's five
    against any five of them (252 more): 504 verdicts on this machine's real noise, from 15 trial
    processes. (Ten checks in a row, 55 processes for 10 verdicts, proved less at almost four
    times the cost.) The baseline is recorded, not passed: against the search's single
    measurement (the best of many) a check on this CPU may honestly be inconclusive."""
    from itertools import combinations

    best = searched / "out" / "c" / "best.yaml"
    # this VM's ten processes, whatever their spread (--tolerance 100: a gate that can use any),
    # the load unjudged (issue 62)
    reset = ("--reset-baseline", "--repeats", "10", "--tolerance", "100", *UNJUDGED)
    first = run_cli("check", str(best), *reset, cwd=searched)
    assert first.returncode == 0, first.stdout + first.stderr
    recorded = yaml.safe_load(best.read_text())["check_baseline"]["tokens_per_s_samples"]
    assert len(recorded) == 10  # the new baseline: ten processes
    proc = run_cli(
        "check", str(best), "--tolerance", CPU_TOLERANCE, "--update", *UNJUDGED, cwd=searched
    )
    # a pass; --update records its samples unless they spread more than a 50% gate can use (23%:
    # issue 62), which it then says, exit 3
    refused = "--update: not recorded, the check's processes spread " in proc.stdout
    assert proc.returncode == (3 if refused else 0), proc.stdout + proc.stderr
    history = (searched / "out" / "c" / "history.jsonl").read_text().splitlines()
    night = json.loads(history[-1])
    assert len(history) == 1 and night["status"] in ("pass", "faster")
    assert night["updated"] is not refused
    checked = night["check_samples"]
    assert len(checked) >= 5  # 5, or more where the first five were inconclusive
    now = yaml.safe_load(best.read_text())["check_baseline"]["tokens_per_s_samples"]
    assert now == (recorded if refused else checked)
    checked = checked[:5]
    tolerance = float(CPU_TOLERANCE)
    verdicts = []
    for base in combinations(range(10), 5):
        rest = [recorded[i] for i in range(10) if i not in base]
        chosen = [recorded[i] for i in base]
        verdicts.append(decide(chosen, rest, tolerance)[0])
        verdicts.append(decide(chosen, checked, tolerance)[0])
    assert len(verdicts) == 504 and "regression" not in verdicts, (recorded, checked)


# check's verdicts on real measurements (serial): beside another worker's trials a steady step
# looks slowed or sped up, so these run alone, after the parallel pass (make test). The other checks
# here are decided by what they test (a crash, a refused file, a host load, no verdict at all).
@pytest.mark.slow
@pytest.mark.serial
def test_regress_slowed_step_fails_with_junit(searched: Path, tmp_path: Path) -> None:
    best = tmp_path / "best.yaml"
    best.write_text((searched / "out" / "c" / "best.yaml").read_text())
    assert (
        run_cli(
            "check",
            str(best),
            # any spread (a gate that can use any), the load unjudged (issue 62)
            *("--reset-baseline", "--repeats", "4", "--tolerance", "100", *UNJUDGED),
            cwd=searched,
        ).returncode
        == 0
    )
    junit = tmp_path / "junit.xml"
    proc = run_cli(
        "check",
        str(best),
        "--repeats",
        "4",
        "--tolerance",
        CPU_TOLERANCE,
        "--junit",
        str(junit),
        *UNJUDGED,
        cwd=searched,
        env={"AUTOTUNE_FAULT": "slow:400"},
    )  # every measured step 5x as long
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith("regression: ")
    ratio = float(proc.stdout.split("ratio ")[1].split()[0])
    assert "95% CI" in proc.stdout and ratio < 0.5
    suite = ET.parse(junit).getroot()
    assert suite.tag == "testsuite" and suite.get("failures") == "1"
    case = suite.find("testcase")
    assert case.get("name") == "c" and case.find("failure").get("type") == "regression"


@pytest.mark.slow
@pytest.mark.parametrize("speed, would", [(10, "regression"), (0.1, "faster")])
def test_regress_disturbed_check_is_unreliable_exit_3(
    searched: Path, tmp_path: Path, speed: float, would: str
) -> None:
    """A check measured on a loaded host is "unreliable" (exit 3, the load named), a regression and
    a faster check alike, and --update records nothing; each repeat said on stderr as it ends. The
    baseline recorded is 10x this machine's speed (a sure regression, without slowing the repeats)
    or a tenth of it (surely faster); --max-load 0.001: any real load is past it (the rule's
    limits: test_regress_conditions)."""
    doc = yaml.safe_load((searched / "out" / "c" / "best.yaml").read_text())
    fast = speed * doc["metrics"]["tokens_per_s_per_gpu"]
    samples = [fast, 1.01 * fast, 0.99 * fast]
    doc["check_baseline"] = {
        "tokens_per_s_samples": samples,
        "recorded_at": "2026-12-01",
        # the digest a check baseline of these samples carries (documents/digest.py)
        "measured": baseline_digest(doc, {"tokens_per_s_samples": samples}),
    }
    best = tmp_path / "best.yaml"
    best.write_text(yaml.safe_dump(doc))
    proc = run_cli(
        "check", str(best), "--repeats", "2", "--max-load", "0.001", "--update", cwd=searched
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.startswith("unreliable: ") and "disturbed: host load " in proc.stdout
    # what they would read undisturbed: `would`, or nothing where the loaded host scattered the
    # repeats past an interval (2 repeats at 24,233 and 44,044 tokens/s on one CI run)
    named = f"the numbers cannot be trusted either way (undisturbed they would read {would}: "
    unnamed = "the numbers cannot be trusted either way, pass or regression"
    assert named in proc.stdout or unnamed in proc.stdout, proc.stdout
    assert "they would read pass" not in proc.stdout
    assert "--update: not recorded, the check was disturbed" in proc.stdout
    assert yaml.safe_load(best.read_text())["check_baseline"] == doc["check_baseline"]
    assert [line.split(":")[0] for line in proc.stderr.splitlines()] == [
        "repeat 1 of 2",
        "repeat 2 of 2",
    ]
    night = json.loads((tmp_path / "history.jsonl").read_text().splitlines()[-1])
    assert night["status"] == "unreliable" and len(night["conditions"]) == 3 and night["disturbed"]


@pytest.mark.slow
def test_regress_reset_baseline_records_without_verdict(searched: Path, tmp_path: Path) -> None:
    best = tmp_path / "best.yaml"
    best.write_text((searched / "out" / "c" / "best.yaml").read_text())
    proc = run_cli(
        "check",
        str(best),
        "--reset-baseline",
        "--repeats",
        "2",
        # a gate that can use any spread, on a host not judged: this shared CPU's 2 processes are
        # what they are
        *("--tolerance", "100", *UNJUDGED),
        cwd=searched,
        env={"AUTOTUNE_FAULT": "slow:200"},
    )  # even a slow machine: recorded, never judged
    assert proc.returncode == 0, proc.stderr
    assert "baseline recorded in" in proc.stdout and "2 processes" in proc.stdout
    assert len(yaml.safe_load(best.read_text())["check_baseline"]["tokens_per_s_samples"]) == 2
    assert not (tmp_path / "history.jsonl").exists()


@pytest.mark.slow
def test_regress_unmeasurable_exit_3(searched: Path) -> None:
    best = searched / "out" / "c" / "best.yaml"
    proc = run_cli(
        "check", str(best), "--repeats", "2", cwd=searched, env={"AUTOTUNE_FAULT": "crash"}
    )
    assert proc.returncode == 3
    assert "could not measure: all 2 repeats failed; repeat 0: crash" in proc.stderr


@pytest.mark.slow
def test_regress_bad_inputs_exit_2(searched: Path, tmp_path: Path) -> None:
    assert run_cli("check", str(tmp_path / "none.yaml"), cwd=searched).returncode == 2
    (tmp_path / "other.yaml").write_text("name: x\n")
    proc = run_cli("check", str(tmp_path / "other.yaml"), cwd=searched)
    assert proc.returncode == 2 and "is this a best.yaml written by autotune search?" in proc.stderr
    doc = yaml.safe_load((searched / "out" / "c" / "best.yaml").read_text())
    doc["fingerprint"]["gpu_model"] = "NVIDIA H200"
    (tmp_path / "best.yaml").write_text(yaml.safe_dump(doc))
    proc = run_cli("check", str(tmp_path / "best.yaml"), cwd=searched)
    assert proc.returncode == 2
    assert (
        "fingerprint.gpu_model: measured on 'NVIDIA H200'" in proc.stderr
        and "nothing compared" in proc.stderr
    )
    assert not (tmp_path / "history.jsonl").exists()


@pytest.mark.slow
def test_regress_version_changes_listed(searched: Path, tmp_path: Path) -> None:
    doc = yaml.safe_load((searched / "out" / "c" / "best.yaml").read_text())
    doc["fingerprint"]["torch"] = "2.0.0"
    doc.pop("check_baseline", None)
    (tmp_path / "best.yaml").write_text(yaml.safe_dump(doc))
    # --tolerance 100: no slowdown can be a regression; against the search's one sample two repeats
    # may bound nothing (inconclusive, exit 5): the exit code is the verdict's, whatever this VM's
    # speed
    proc = run_cli(
        "check",
        str(tmp_path / "best.yaml"),
        *("--repeats", "2", "--max-repeats", "0", "--tolerance", "100", *UNJUDGED),
        cwd=searched,
    )
    status = proc.stdout.split(":")[0]
    assert proc.returncode == {"pass": 0, "faster": 0, "inconclusive": 5}[status], proc.stdout
    assert "changed since the baseline: torch 2.0.0 -> 2." in proc.stdout


def test_regress_generate_gates_time_per_output_token_too() -> None:
    """generate: the check decides on decode speed (1 / TPOT) as on tokens/s: a 3% slower token with
    0.1% noise fails at a 2% tolerance, the same numbers pass at 5%, one sample each is
    inconclusive (the reason and what would settle it beside); training best.yaml files have no
    TPOT gate."""
    from autotune import tasks
    from autotune.check.regress import decide

    def tpot_decision(best: dict, ms: list[float], tolerance: float) -> dict | None:
        details = [{"tpot_ms_median": x} for x in ms]
        return tasks.task("generate").check_gate(best, details, tolerance, decide)

    best = {
        "metrics": {"tokens_per_s_per_gpu": 200.0, "tpot_ms_median": 4.75},
        "check_baseline": {"tpot_ms_samples": [4.750, 4.752, 4.748, 4.751, 4.749]},
    }
    slow = [4.75 * 1.03 + d for d in (0.0, 0.002, -0.002, 0.001, -0.001)]
    got = tpot_decision(best, slow, 2.0)
    assert got["status"] == "regression" and got["ratio"] == pytest.approx(1 / 1.03, rel=1e-3)
    assert got["ci"][1] < 1 and got["check_median_ms"] == pytest.approx(4.8925)
    assert tpot_decision(best, slow, 5.0)["status"] == "pass"
    no_recorded = {"metrics": {"tokens_per_s_per_gpu": 200.0, "tpot_ms_median": 4.75}}
    one = tpot_decision(
        no_recorded, slow, 2.0
    )  # no check baseline yet: the search's single measurement
    assert one["baseline_samples_ms"] == [4.75] and one["status"] == "regression"
    unknown = tpot_decision(no_recorded, slow[:1], 2.0)  # one sample each: noise unknown
    assert unknown["status"] == "inconclusive" and unknown["reason"].startswith("one sample a side")
    assert "--reset-baseline" in unknown["settle"] and got["reason"].endswith("beyond the noise")
    assert tpot_decision({"metrics": {"tokens_per_s_per_gpu": 1.0}}, [], 2.0) is None
    assert tasks.task("train").check_gate(best, [{"tpot_ms_median": 9.0}], 2.0, decide) is None


# --- issue 16: the tolerance follows the noise; the nightly series
# --------------------------------------------

H200_CHECK = (
    Path(__file__).resolve().parents[1]
    / "benchmarks/results/2026-11-29-h200-gpt2-small-check/history.jsonl"
)


def _h200_samples() -> list[float]:
    """The 20 per-process medians (tokens/s) of five checks on an H200 (GPT-2 small, compiled;
    2026-11-29)."""
    return [
        x for line in H200_CHECK.read_text().splitlines() for x in json.loads(line)["check_samples"]
    ]


def test_default_tolerance_follows_the_baseline_noise() -> None:
    from autotune.check.regress import default_tolerance

    assert default_tolerance([500_000.0])[0] == 5.0  # one sample: its noise is unknown
    assert (
        default_tolerance(_h200_samples()[:5])[0] == 2.0
    )  # H200: 0.16% spread, the 2% floor decides
    cpu = [100.0, 80.0, 120.0, 95.0, 110.0]  # a CPU swinging 20%: wide by itself
    tol, how = default_tolerance(cpu)
    # issue 62: at most 30%, said so (a noisy baseline cannot open the gate)
    assert tol == 30 and "bounded; 3 x the baseline's process-to-process spread" in how


def test_replayed_h200_checks_pass_unchanged_and_fail_a_3pct_slowdown() -> None:
    """Baseline and check drawn from the recorded H200 samples (5 processes each), 1,000 draws:
    every unchanged check passes (none fails, none is inconclusive) and every check slowed by 3%
    fails, with the default tolerance."""
    import random

    from autotune.check.regress import decide, default_tolerance

    samples, rng = _h200_samples(), random.Random(0)
    passes = misses = 0
    for _ in range(1000):
        base, check = rng.sample(samples, 5), [rng.choice(samples) for _ in range(5)]
        tol, _ = default_tolerance(base)
        passes += decide(base, check, tol).status == "pass"
        misses += decide(base, [0.97 * x for x in check], tol).status != "regression"
    assert passes == 1000 and misses == 0


def _nights(levels: list[float], seed: int) -> list[Night]:
    """Nights whose 5 processes are recorded H200 samples scaled to each night's level."""
    import random

    rng, samples = random.Random(seed), _h200_samples()
    mid = statistics.median(samples)
    out = []
    for i, level in enumerate(levels):
        s = [rng.choice(samples) / mid * level for _ in range(5)]
        out.append(
            Night(
                status="pass",
                check_median=statistics.median(s),
                ratio=1.0,
                check_samples=s,
                ci=(0.9, 1.1),
                checked_at=f"2026-12-{i + 1:02d}",
            )
        )
    return out


def test_series_flags_a_drift_of_1pct_a_night_by_the_fourth_and_a_flat_series_never() -> None:
    from autotune.check.regress import series_drift

    for seed in range(50):
        assert (
            series_drift(_nights([500_000.0] * 10, seed)) is None
        )  # 10 flat nights: no false alarm
        ramp = _nights(
            [500_000.0 * (1 - 0.01 * i) for i in range(4)], seed
        )  # night 1 the baseline, then -1% a night
        found = series_drift(ramp)
        assert found is not None and found["night"] <= 4 and found["shift_pct"] <= -1.0, seed
    step = series_drift(_nights([500_000.0] * 5 + [490_000.0] * 3, 0))  # a 2% step on night 6
    assert step is not None and step["night"] == 6 and step["checked_at"] == "2026-12-06"
    assert -2.5 < step["shift_pct"] < -1.5
    assert (
        series_drift(_nights([500_000.0] * 5 + [510_000.0] * 3, 0)) is None
    )  # faster is not a regression


def test_series_step_below_an_explicit_tolerance_is_not_flagged() -> None:
    """check --tolerance T: a series step smaller than T passes (a CPU whose speed fell 25% between
    checks failed an explicit 50% tolerance on the series alone, in CI); the same step is flagged
    without one."""
    from autotune.check.regress import series_drift

    nights = _nights([500_000.0] * 6 + [375_000.0] * 4, 0)  # 25% slower from night 7
    assert series_drift(nights)["night"] == 7
    assert series_drift(nights, min_shift_pct=50) is None
    assert series_drift(nights, min_shift_pct=20)["night"] == 7


def test_series_is_quiet_on_a_machine_that_wanders() -> None:
    """11 nights of a CPU-like machine (each process 10% off at random): at most 2% of series
    flagged."""
    import random

    from autotune.check.regress import series_drift

    flagged = 0
    for seed in range(200):
        rng, nights = random.Random(seed), []
        for i in range(11):
            s = [100 * (1 + rng.gauss(0, 0.10)) for _ in range(5)]
            median = statistics.median(s)
            nights.append(Night("pass", median, 1.0, s, (0.9, 1.1), str(i)))
        flagged += series_drift(nights) is not None
    assert flagged <= 4


@pytest.mark.slow
def test_check_replay_script_reports_both_error_rates() -> None:
    """benchmarks/check_replay.py over the recorded H200 pool: no false alarm, every 3% slowdown
    caught."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [
            sys.executable,
            str(root / "benchmarks/check_replay.py"),
            "--draws",
            "200",
            "--check",
            "5",
            "--slow",
            "1.5",
            "3",
            "--pool",
            f"h200={H200_CHECK}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    (row,) = [line for line in proc.stdout.splitlines() if "same sitting" in line]
    cells = [c.strip() for c in row.split("|")]
    assert cells[3] == "5 / 5" and cells[4] == "2%"
    assert (
        cells[5].startswith("0/200")
        and cells[6].startswith("200/200")
        and cells[7].startswith("0/200")
    )
