"""The `autotune` command line: thin commands over the library, one error funnel.

Exit codes: 0 done; 1 no trial succeeded; 2 bad input (usage, file, YAML, schema); 130 interrupted.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Optional

import typer

from autotune.errors import EXIT_INTERRUPTED, AutotuneError, NoSuccessError

app = typer.Typer(
    name="autotune",
    help="Measured auto-tuning of LLM training on NVIDIA GPUs. Exit codes: 0 done, 1 no trial succeeded, "
    "2 bad input, 130 interrupted.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

ModelYaml = Annotated[Path, typer.Argument(help="The YAML file: model, workload, space, study, baseline.")]
_state = {"debug": False}


@contextlib.contextmanager
def _funnel() -> Iterator[None]:
    """Known errors become one line on stderr and their exit code; tracebacks only with --debug."""
    from rich.console import Console

    err = Console(stderr=True)
    try:
        yield
    except AutotuneError as e:
        if _state["debug"]:
            raise
        err.print(f"[red]error:[/] {e}", soft_wrap=True, highlight=False)
        raise typer.Exit(e.exit_code) from None
    except KeyboardInterrupt:
        err.print("interrupted: the study is kept; run the same command again to resume")
        raise typer.Exit(EXIT_INTERRUPTED) from None


@app.callback()
def _main(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False) -> None:
    _state["debug"] = debug


@app.command()
def search(
    model_yaml: ModelYaml,
    trials: Annotated[Optional[int], typer.Option(min=1, help="Trials to measure (overrides study.trials).")] = None,
    timeout_min: Annotated[
        Optional[float], typer.Option(min=0.01, help="Stop launching trials after M minutes (overrides study.timeout_min).")
    ] = None,
    out: Annotated[Path, typer.Option(help="Output root: results go to OUT/<name>/.")] = Path("trials"),
    device: Annotated[
        Optional[str], typer.Option(help="cuda or cpu; default cuda when a GPU is visible, else cpu.")
    ] = None,
    fresh: Annotated[bool, typer.Option(help="Archive an existing study of this name and start anew.")] = False,
    dry_run: Annotated[bool, typer.Option(help="Print the resolved space, its size and the baseline; run nothing.")] = False,
) -> None:
    """Search the space with real, short benchmark trials; write OUT/<name>/best.yaml."""
    from rich.console import Console

    from autotune.config import load_config
    from autotune.errors import ConfigError
    from autotune.space import resolve_space
    from autotune.views import LiveProgress, space_table, trials_table

    console = Console()
    with _funnel():
        if device not in (None, "cuda", "cpu"):
            raise ConfigError(f"--device: {device!r} is not allowed; use cuda or cpu")
        cfg = load_config(model_yaml)
        space = resolve_space(cfg)
        if dry_run:
            console.print(space_table(space.describe()))
            return
        from autotune.study import run_search

        searched = list(space.searched)
        with LiveProgress(console, searched) as view:
            result = run_search(cfg, out_root=out, device=device, trials=trials, timeout_min=timeout_min,
                                fresh=fresh, observer=view)
        if result.best is None:
            raise NoSuccessError(f"no trial succeeded ({result.history.launched} launched); see {result.study_dir}/runs/*/worker.log")
        base = result.baseline.value if result.baseline else None
        console.print(trials_table(result.history, searched or ["micro_batch_size"], base))
        console.print(f"{result.stop_reason}; {result.new_trials} new trial(s). Best: trial {result.best.number}, "
                      f"written to {result.best_yaml}")


@app.command()
def validate(model_yaml: ModelYaml) -> None:
    """Check MODEL_YAML and print the resolved config and space."""
    import yaml
    from rich.console import Console

    from autotune.config import load_config
    from autotune.space import resolve_space
    from autotune.views import space_table

    console = Console()
    with _funnel():
        cfg = load_config(model_yaml)
        console.print(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), highlight=False)
        console.print(space_table(resolve_space(cfg).describe()))
        console.print(f"[green]ok[/]: {model_yaml} is valid")


@app.command()
def hw() -> None:
    """Detected GPUs (pynvml), the peak FLOPs used for MFU, and software versions."""
    import platform

    from rich.console import Console
    from rich.table import Table

    from autotune.hardware import MFU_PRECISION, PEAKS, detect, find_peak

    console = Console()
    info = detect()
    table = Table(title=f"GPUs (driver {info['driver'] or 'none'}, CUDA driver {info['cuda_driver'] or 'none'})")
    for col in ("index", "name", "memory GiB", f"peak {MFU_PRECISION} TFLOP/s (MFU)", "source"):
        table.add_column(col)
    for gpu in info["gpus"]:
        row = find_peak(gpu["name"])
        table.add_row(str(gpu["index"]), gpu["name"], f"{gpu['memory_gib']:.1f}",
                      f"{row.tflops[MFU_PRECISION]:g}" if row else "unknown: MFU n/a", row.source if row else "")
    if not info["gpus"]:
        table.add_row("-", "no NVIDIA GPU visible: trials run on the CPU, MFU n/a", "", "", "")
    console.print(table)
    peaks = Table(title="Peak table (dense TFLOP/s; MFU uses bf16 for every precision)")
    for col in ("GPU", "fp32", "tf32", "bf16", "fp16", "fp8", "source"):
        peaks.add_column(col)
    for p in PEAKS:
        peaks.add_row(p.model, *[f"{p.tflops[k]:g}" if k in p.tflops else "-" for k in ("fp32", "tf32", "bf16", "fp16", "fp8")], p.source)
    console.print(peaks)
    import torch

    nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "n/a"
    console.print(f"python {platform.python_version()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
                  f"NCCL {nccl}, host {platform.node()}")


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
