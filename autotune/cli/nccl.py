"""`autotune nccl`: all-reduce bus bandwidth by NCCL algorithm and protocol."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autotune.api_options import parse_gpus, resolve_device
from autotune.cli._app import command
from autotune.cli._console import console as out_console
from autotune.cli._errors import funnel
from autotune.cli._options import Device, Gpus, Out, finite
from autotune.errors import NoSuccessError


@command("autotune nccl --gpus 0,1 --max-mb 256 --out trials/nccl")
def nccl(
    gpus: Gpus = None,
    algos: Annotated[
        str,
        typer.Option(
            # the default in words: as one 46-character word it would be broken mid-name
            show_default=False,
            help=(
                "NCCL_ALGO values, comma-separated; by default each of default, Ring, Tree, "
                "CollnetDirect, CollnetChain and PAT ('default' sets nothing; NVLS only if you "
                "list it)."
            ),
        ),
    ] = "default,Ring,Tree,CollnetDirect,CollnetChain,PAT",
    protos: Annotated[
        str, typer.Option(help="NCCL_PROTO values, comma-separated.")
    ] = "default,Simple,LL,LL128",
    min_mb: Annotated[
        float,
        typer.Option(
            min=0.001, max=16384, callback=finite, help="Smallest message, MB (10^6 bytes)."
        ),
    ] = 1.0,
    max_mb: Annotated[
        float,
        typer.Option(
            min=0.001,
            max=16384,
            callback=finite,
            help="Largest message, MB; sizes double from the smallest.",
        ),
    ] = 1024.0,
    warmup: Annotated[int, typer.Option(min=0, max=10_000, help="Untimed samples per size.")] = 3,
    iters: Annotated[
        int,
        typer.Option(
            min=1, max=10_000, help="Timed samples per size (median of the slowest rank's)."
        ),
    ] = 10,
    device: Device = None,
    out: Out = Path("trials/nccl"),
    timeout_min: Annotated[
        float,
        typer.Option(min=0.05, max=10_080, callback=finite, help="Limit for one setting's run."),
    ] = 3.0,
) -> None:
    """All-reduce bus bandwidth by NCCL algorithm and protocol, 1 MB to 1 GB, like nccl-tests."""
    with funnel():
        from autotune import nccl as sweep
        from autotune.views import nccl_cell_line, nccl_tables

        console = out_console()
        device = resolve_device(device)
        algo_list = sweep.parse_names("--algos", algos, sweep.ALGOS)
        proto_list = sweep.parse_names("--protos", protos, sweep.PROTOS)
        gpu_list = (
            parse_gpus("0,1" if device == "cpu" and gpus in (None, "all") else gpus or "all") or []
        )
        sizes = sweep.message_sizes(min_mb, max_mb)
        if device == "cpu":
            console.print(
                "device cpu: the gloo backend has no NCCL; --algos and --protos do not apply, one "
                "gloo run"
            )
        doc = sweep.sweep(
            out,
            device=device,
            gpus=gpu_list,
            algos=algo_list,
            protos=proto_list,
            sizes=sizes,
            warmup=warmup,
            iters=iters,
            timeout_s=60 * timeout_min,
            on_cell=lambda cell: console.print(nccl_cell_line(cell), highlight=False),
        )
        for table in nccl_tables(doc):
            console.print(table)
        console.print(f"written to {out / 'nccl.json'}")
        if not any(c["status"] == "ok" for c in doc["cells"]):
            raise NoSuccessError(
                "no setting ran; see the reasons above and the logs under " + str(out)
            )
