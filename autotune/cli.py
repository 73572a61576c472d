"""The `autotune` command line: thin commands over the library, one error funnel.

Exit codes: 0 done (check: pass or faster); 1 no trial succeeded (check: regression);
2 bad input (usage, file, YAML, schema); 3 check could not measure; 130 interrupted.
"""

from __future__ import annotations

import contextlib
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Optional

import typer

from autotune.errors import EXIT_INTERRUPTED, AutotuneError, ConfigError, NoSuccessError

app = typer.Typer(
    name="autotune",
    help="Measured auto-tuning of LLM training on NVIDIA GPUs. Exit codes: 0 done (check: pass), 1 no trial "
    "succeeded (check: regression), 2 bad input, 3 check could not measure, 130 interrupted.",
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
    storage: Annotated[Optional[str], typer.Option(
        help="Optuna storage (overrides study.storage): sqlite:///f.db, postgresql://user@host/db, journal:PATH. "
        "The same command on several nodes makes them workers of one study.")] = None,
    gpus: Annotated[Optional[str], typer.Option(
        help="Run one trial per listed GPU at once: 0,1,2,3 or all (on the CPU: how many trials at once).")] = None,
    dry_run: Annotated[bool, typer.Option(help="Print the resolved space, its size and the baseline; run nothing.")] = False,
) -> None:
    """Search the space with real, short benchmark trials; write OUT/<name>/best.yaml."""
    from rich.console import Console

    from autotune.config import load_config
    from autotune.space import resolve_space
    from autotune.views import LiveProgress, confirmation_table, space_table, trials_table

    console = Console()
    with _funnel():
        device = _device(device)
        cfg = load_config(model_yaml)
        space = resolve_space(cfg, device)
        if dry_run:
            console.print(space_table(space.describe()))
            return
        from autotune.study import run_search

        gpu_list = _parse_gpus(gpus)
        searched = list(space.searched)
        with LiveProgress(console, searched) as view:
            result = run_search(cfg, out_root=out, device=device, trials=trials, timeout_min=timeout_min,
                                fresh=fresh, storage=storage, gpus=gpu_list, observer=view)
        if result.best is None:
            raise NoSuccessError(f"no trial succeeded ({result.history.launched} launched); see {result.study_dir}/runs/*/worker.log")
        base = result.baseline.value if result.baseline else None
        console.print(trials_table(result.history, searched or ["micro_batch_size"], base))
        if result.confirmation:
            console.print(confirmation_table(result.confirmation))
            console.print(f"chosen: trial {result.confirmation['chosen']}: {result.confirmation['why']}", highlight=False)
        console.print(f"{result.stop_reason}; {result.new_trials} new trial(s). Best: trial {result.chosen_number}, "
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


def _device(device: str | None) -> str:
    """--device cuda or cpu; not given: cuda when a GPU is visible."""
    if device not in (None, "cuda", "cpu"):
        raise ConfigError(f"--device: {device!r} is not allowed; use cuda or cpu")
    from autotune.hardware import default_device

    return device or default_device()


def _parse_gpus(gpus: str | None) -> list[str] | None:
    """--gpus 0,1,2 or all -> ["0", "1", "2"]; None when not given."""
    if gpus is None:
        return None
    if gpus == "all":
        from autotune.hardware import detect

        found = [str(g["index"]) for g in detect()["gpus"]]
        if not found:
            raise ConfigError("--gpus: all, but pynvml sees no NVIDIA GPU; list CPU workers as --gpus 0,1")
        return found
    listed = [g.strip() for g in gpus.split(",") if g.strip()]
    if not listed or not all(g.isdigit() for g in listed) or len(set(listed)) != len(listed):
        raise ConfigError(f"--gpus: {gpus!r} is not allowed; use distinct GPU indices such as 0,1,2,3, or all")
    return listed


def _names(option: str, given: str, allowed: tuple[str, ...]) -> list[str]:
    names = [n.strip() for n in given.split(",") if n.strip()]
    bad = [n for n in names if n not in allowed]
    if not names or bad:
        raise ConfigError(f"{option}: {bad[0] if bad else given!r} is not allowed; allowed: {', '.join(allowed)}")
    return list(dict.fromkeys(names))


@app.command()
def nccl(
    gpus: Annotated[str, typer.Option(help="GPUs of the group (0,1,... or all); on the CPU, one gloo rank per entry.")] = "all",
    algos: Annotated[str, typer.Option(help="NCCL_ALGO values, comma-separated (default sets nothing; NVLS only if "
                                            "you list it).")] = "default,Ring,Tree,CollnetDirect,CollnetChain,PAT",
    protos: Annotated[str, typer.Option(help="NCCL_PROTO values, comma-separated.")] = "default,Simple,LL,LL128",
    min_mb: Annotated[float, typer.Option(min=0.001, help="Smallest message, MB (10^6 bytes).")] = 1.0,
    max_mb: Annotated[float, typer.Option(min=0.001, help="Largest message, MB; sizes double from the smallest.")] = 1024.0,
    warmup: Annotated[int, typer.Option(min=0, help="Untimed all-reduces per size.")] = 3,
    iters: Annotated[int, typer.Option(min=1, help="Timed all-reduces per size (median of the slowest rank's).")] = 10,
    device: Annotated[Optional[str], typer.Option(help="cuda or cpu (gloo); default cuda when a GPU is visible.")] = None,
    out: Annotated[Path, typer.Option(help="Folder for nccl.json and each setting's logs.")] = Path("trials/nccl"),
    timeout_min: Annotated[float, typer.Option(min=0.05, help="Limit for one setting's run.")] = 3.0,
) -> None:
    """All-reduce bus bandwidth by NCCL algorithm and protocol, 1 MB to 1 GB, like nccl-tests."""
    from rich.console import Console
    from rich.table import Table

    from autotune.config import NcclAlgo, NcclProto
    from autotune.nccl import message_sizes, sweep

    console = Console()
    with _funnel():
        device = _device(device)
        algo_list = _names("--algos", algos, typing.get_args(NcclAlgo))
        proto_list = _names("--protos", protos, typing.get_args(NcclProto))
        gpu_list = ["0", "1"] if device == "cpu" and gpus == "all" else _parse_gpus(gpus)  # CPU: two gloo ranks
        if len(gpu_list or []) < 2:
            raise ConfigError(f"--gpus: {gpus!r} gives {len(gpu_list or [])} rank(s); an all-reduce needs at least 2")
        if min_mb > max_mb:
            raise ConfigError(f"--min-mb: {min_mb} is above --max-mb {max_mb}; swap them")
        sizes = message_sizes(int(min_mb * 1e6), int(max_mb * 1e6))
        if device == "cpu":
            console.print("device cpu: the gloo backend has no NCCL; --algos and --protos do not apply, one gloo run")

        def show(cell: dict) -> None:
            done = "ok" if cell["status"] == "ok" else f"{cell['status']}: {cell['reason'][:160]}"
            console.print(f"{cell['algo']}/{cell['proto']}: {done} ({cell['wall_s']} s)", highlight=False)

        doc = sweep(out, device=device, ranks=len(gpu_list), gpus=gpu_list if device == "cuda" else None,
                    algos=algo_list, protos=proto_list, sizes=sizes, warmup=warmup, iters=iters,
                    timeout_s=60 * timeout_min, on_cell=show)
        ok = [c for c in doc["cells"] if c["status"] == "ok"]
        table = Table(title=f"all-reduce bus bandwidth, GB/s ({len(gpu_list)} ranks, {device}; "
                            f"median of {iters}, slowest rank)")
        table.add_column("size", justify="right")
        for c in ok:
            table.add_column(f"{c['algo']}/{c['proto']}", justify="right")
        for i, size in enumerate(sizes):
            table.add_row(_size(size), *[f"{c['rows'][i]['busbw_gbs']:.1f}" for c in ok])
        table.add_row("NCCL used", *[c["nccl_used"] or "n/a" for c in ok])
        console.print(table)
        refused = [c for c in doc["cells"] if c["status"] != "ok"]
        if refused:
            t2 = Table(title="settings that did not run")
            for col in ("algo", "proto", "status", "reason"):
                t2.add_column(col)
            for c in refused:
                t2.add_row(c["algo"], c["proto"], c["status"], c["reason"][:300])
            console.print(t2)
        console.print(f"written to {out / 'nccl.json'}")
        if not ok:
            raise NoSuccessError("no setting ran; see the reasons above and the logs under " + str(out))


def _size(n: int) -> str:
    return f"{n / 1e9:g} GB" if n >= 1e9 else f"{n / 1e6:g} MB" if n >= 1e6 else f"{n / 1e3:g} kB"


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


@app.command()
def check(
    best_yaml: Annotated[Path, typer.Argument(help="trials/<name>/best.yaml written by autotune search.")],
    model: Annotated[Optional[Path], typer.Option(help="MODEL_YAML whose model and workload replace best.yaml's.")] = None,
    repeats: Annotated[int, typer.Option(min=1, help="Measurements, each in a fresh process.")] = 5,
    tolerance: Annotated[float, typer.Option(min=0.0, help="Slowdown in percent tolerated before failing.")] = 5.0,
    junit: Annotated[Optional[Path], typer.Option(help="Write a JUnit XML file with one test case.")] = None,
    update: Annotated[bool, typer.Option(help="On pass or faster, record this check's samples as the new baseline.")] = False,
    reset_baseline: Annotated[bool, typer.Option(
        help="Measure and record the samples as the baseline, compare nothing (do this once on the CI machine).")] = False,
) -> None:
    """Re-measure the chosen configuration; exit 1 on a regression beyond tolerance and noise, 3 if unmeasurable."""
    import datetime as dt
    import time

    from rich.console import Console

    from autotune import regress

    console = Console()
    with _funnel():
        t0 = time.monotonic()
        name = regress.read_best(best_yaml)["name"]
        if reset_baseline:
            samples, _, failures, fingerprint = regress.measure(best_yaml, model_yaml=model, repeats=repeats)
            regress.update_baseline(best_yaml, samples, dt.datetime.now(dt.timezone.utc).isoformat(), fingerprint)
            console.print(f"baseline recorded in {best_yaml}: {len(samples)} processes, median "
                          f"{sorted(samples)[len(samples) // 2]:,.0f} tokens/s/GPU", highlight=False)
            for failure in failures:
                console.print(f"[yellow]failed:[/] {failure}", highlight=False)
            return
        verdict = regress.check(best_yaml, model_yaml=model, repeats=repeats, tolerance_pct=tolerance)
        color = {"pass": "green", "faster": "cyan", "regression": "red"}[verdict.status]
        console.print(f"[{color}]{verdict.summary()}[/]", highlight=False, soft_wrap=True)
        console.print(f"baseline: {verdict.baseline_source}; check: {len(verdict.check_samples)} of {repeats} repeats "
                      f"measured", highlight=False)
        if verdict.baseline_source.startswith("search trial"):
            console.print("[yellow]note:[/] the baseline is the search's single measurement, the best of many, on "
                          "the search's machine; record one here with --reset-baseline", highlight=False)
        for key, (old, new) in verdict.version_changes.items():
            console.print(f"[yellow]changed since the baseline:[/] {key} {old} -> {new}", highlight=False)
        for failure in verdict.failed_repeats:
            console.print(f"[yellow]failed:[/] {failure}", highlight=False)
        regress.record_history(best_yaml, verdict, name)
        if junit:
            regress.write_junit(junit, name, verdict, time.monotonic() - t0)
        if update:
            if verdict.status == "regression":
                console.print("--update: not recorded, the check found a regression")
            else:
                regress.update_baseline(best_yaml, verdict.check_samples, verdict.checked_at, verdict.fingerprint)
                console.print(f"--update: recorded {len(verdict.check_samples)} samples as the new baseline in {best_yaml}")
        elif verdict.status == "faster":
            console.print("faster than the baseline: run with --update to record the new baseline")
    raise typer.Exit(verdict.exit_code)


@app.command()
def report(
    study_dir: Annotated[Optional[Path], typer.Argument(help="trials/<name> (holds study.db).")] = None,
    study: Annotated[Optional[str], typer.Option(help="Study name in --storage.")] = None,
    storage: Annotated[Optional[str], typer.Option(help="Optuna storage URL instead of STUDY_DIR/study.db.")] = None,
    format: Annotated[str, typer.Option("--format", help="rich, json or markdown.")] = "rich",
    html: Annotated[Optional[Path], typer.Option(help="Write report.html and PNG plots to this folder.")] = None,
    no_html: Annotated[bool, typer.Option("--no-html", help="Do not write the HTML report.")] = False,
) -> None:
    """What a study found (also while it runs): trials, failures, knob importance, time; HTML with plots."""
    from rich.console import Console

    from autotune import report as rep

    console = Console()
    with _funnel():
        if format not in ("rich", "json", "markdown"):
            raise ConfigError(f"--format: {format!r} is not allowed; use rich, json or markdown")
        opened, folder = rep.open_study(study_dir, study, storage)
        data = rep.collect(opened, folder)
        if format == "json":
            print(rep.to_json(data))
        elif format == "markdown":
            print(rep.to_markdown(data), end="")
        else:
            rep.render_rich(data, console)
        target = html or ((folder / "report") if folder is not None and not no_html and format == "rich" else None)
        if target is not None and not no_html:
            from autotune.plots import write_html

            path = write_html(data, target)
            if format == "rich":
                console.print(f"HTML report: {path}")


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
