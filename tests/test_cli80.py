"""The CLI at 80 columns (issue 53): every --help wraps with no text cut and shows an example,
validate never cuts a knob's name, a search's final tables fit and say the chosen median's interval
or why it has none. The real commands, COLUMNS=80."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cli_here, command_job, conf_doc, run_cli

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = {"COLUMNS": "80"}
# a cut: Rich's ellipsis, or click's "..." at the end of a summary it shortened
CUT = ("\u2026", "...")


def _commands() -> list[str]:
    from autotune.cli import app

    return sorted(c.name or c.callback.__name__ for c in app.registered_commands if c.callback)


def _fits(text: str) -> None:
    long = [line for line in text.splitlines() if len(line) > 80]
    assert not long, "\n".join(long)
    # "[ARGS]...": click's usage for "any number of", not a cut
    cut = [
        line for line in text.splitlines() if any(c in line.replace("[ARGS]...", "") for c in CUT)
    ]
    assert not cut, "\n".join(cut)


def test_cli80_lists_the_commands_it_checks() -> None:
    assert {"search", "validate", "report", "check", "export", "nccl", "hw"} <= set(_commands())


@pytest.mark.parametrize("command", ["", *_commands()])
def test_cli80_help_fits_80_columns_with_an_example(command: str, tmp_path: Path) -> None:
    proc = cli_here(*([command] if command else []), "--help", cwd=tmp_path, env=COLUMNS)
    assert proc.returncode == 0, proc.stderr
    _fits(proc.stdout)
    assert "Example:" in proc.stdout
    assert f"$ autotune {command}".rstrip() in proc.stdout


def test_cli80_top_help_lists_each_command_by_its_whole_summary(tmp_path: Path) -> None:
    proc = cli_here("--help", cwd=tmp_path, env=COLUMNS)
    said = " ".join(proc.stdout.split())
    assert "check Re-measure the chosen configuration against its baseline." in said
    assert "search Search the space with real, short benchmark trials; write" in said


def test_cli80_help_of_the_installed_command(tmp_path: Path) -> None:
    """The console script itself, in a process of its own (the terminal size as it reads it)."""
    proc = run_cli("check", "--help", cwd=tmp_path, env=COLUMNS)
    assert proc.returncode == 0, proc.stderr
    _fits(proc.stdout)
    assert "--reset-baseline" in proc.stdout and "postgresql" not in proc.stdout


YAMLS = [
    "tiny.yaml",
    "hf-trainer-tiny.yaml",
    "llama3-8b-fsdp-2k.yaml",
    "gpt2-small-grid.yaml",
    "entrypoint-example.yaml",
]


@pytest.mark.parametrize("name", YAMLS)
def test_cli80_validate_never_cuts_a_knobs_name(name: str, tmp_path: Path) -> None:
    from autotune.job import load

    path = ROOT / "search_spaces" / name
    _, space = load(path)
    described = space.describe()
    knobs = [*described["searched"], *described["fixed"], *described.get("inert", [])]
    proc = cli_here("validate", str(path), "--all", cwd=ROOT, env=COLUMNS)
    assert proc.returncode == 0, proc.stderr
    _fits(proc.stdout)
    table = proc.stdout[proc.stdout.index("Resolved space") :]
    words = set(table.replace(",", " ").replace("│", " ").split())
    missing = [k for k in knobs if k not in words]
    assert not missing, table


def test_cli80_validate_shows_the_memory_tables_whole_title(tmp_path: Path) -> None:
    """The memory table's title was cut at 200 characters: "fsdp_forward_pr..."."""
    path = ROOT / "search_spaces" / "llama3-8b-fsdp-2k.yaml"
    proc = cli_here("validate", str(path), cwd=ROOT, env=COLUMNS)
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())
    assert "fsdp_forward_prefetch 0, fsdp_backward_prefetch 1" in said


LONG_KNOB = "a_knob_with_a_rather_long_name_of_forty"


@pytest.fixture(scope="module")
def search80(tmp_path_factory) -> str:
    """A command search with a confirmation of 2 rounds (the demo's), a knob with a long name, at
    80 columns: its output."""
    root = tmp_path_factory.mktemp("search80")
    command_job(
        root,
        "s80",
        trials=4,
        command={
            "knobs": {
                "micro_batch_size": {"flag": "--bs"},
                LONG_KNOB: {"flag": "--tag", "values": ["first-value", "second-value"]},
            }
        },
        baseline={"micro_batch_size": 1, LONG_KNOB: "first-value"},
        study={"confirm_top": 2, "confirm_rounds": 2},
    )
    proc = cli_here("search", "job.yaml", "--out", "out", "--device", "cpu", cwd=root, env=COLUMNS)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_cli80_search_final_tables_fit(search80: str) -> None:
    end = search80[search80.index("Top 5 of") :]
    _fits(end)
    assert LONG_KNOB in end
    assert "Confirmation: 2 of 2 interleaved rounds" in " ".join(end.split())


@pytest.mark.slow
def test_cli80_search_says_why_its_median_has_no_interval(search80: str) -> None:
    said = " ".join(search80.split())
    assert (
        "median of 2 sample(s): no interval: too few samples (2; an interval needs 3); run more "
        "confirmation rounds for one (study.confirm_rounds: 3 or more)"
    ) in said


def test_cli80_chosen_interval_when_the_samples_bound_it() -> None:
    from autotune.report._terminal import chosen_interval

    samples = [100.0, 101.0, 99.0, 100.0, 102.0]
    conf = {"chosen": 3, "stats": [{"trial": 3, "samples": samples, "median": 100.0}]}
    said = chosen_interval(conf_doc(conf))
    assert said.startswith("the chosen median's 95% interval: ") and "(5 samples)" in said
