"""Rich renderables: the live view of a running search and the tables the CLI prints."""

from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from autotune import numerics
from autotune.documents.record import Metric, TrialRecord, knobs_of, loss_check_of
from autotune.errors import printable
from autotune.protocol import Knobs, reason_line
from autotune.report import fmt, row_of
from autotune.report._table import padding_text, record_mfu_text
from autotune.search.observer import Observer, SearchStart
from autotune.status import Status
from autotune.study.history import History, value_of

if TYPE_CHECKING:
    from autotune.space import ResolvedSpace, SpaceView


def fmt_knobs(knobs: Knobs, keys: list[str] | None = None) -> str:
    keys = keys or list(knobs)
    return printable(" ".join(f"{k}={knobs[k]}" for k in keys if k in knobs), newlines=False)


def _hms(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def past_list(beyond: Knobs | None) -> str:
    """' (past your list: micro_batch_size 24)' for a trial beyond the user's list
    (search/edges.py)."""
    if not beyond:
        return ""
    return " (past your list: " + ", ".join(f"{k} {v}" for k, v in beyond.items()) + ")"


def header_line(info: SearchStart) -> Text:
    """The search's first line: the study, the space, the sampler, the budget and what was already
    measured."""
    return Text.assemble(
        ("autotune search", "bold"),
        f" {info['name']} on {info['device']}: space of {info['space_size']} points, "
        f"sampler {info['sampler']}, budget {info['budget']} trials ({info['done']} already "
        f"measured{_imported(info)}), "
        f"storage {printable(info['storage'], newlines=False)}",
    )


def trial_line(record: TrialRecord, searched: list[str] | None, which: str | None = None) -> Text:
    """One finished trial on one line: which it is (default '#<number> '), its status, tokens/s and
    MFU (or the reason), its knobs."""
    knobs = fmt_knobs(record.knobs, searched) + past_list(record.extra.get("beyond_list"))
    which = which or f"#{record.number} "
    # measured while the host was busy (search/host.py): marked, never failed
    busy = ("  disturbed: " + "; ".join(record.disturbed), "yellow") if record.disturbed else ""
    if record.status == Status.OK:
        check = numerics.summary(record.loss_check)  # the quality cost beside the speed
        padding = padding_text(record.metric(Metric.PADDING_PCT))  # real tokens/s, padding apart
        return Text.assemble(
            which,
            ("ok", "green"),
            f" {fmt(record.tokens_per_gpu, 'tok')} tok/s" + (f" ({padding})" if padding else ""),
            f"  MFU {record_mfu_text(record)}  {knobs}",
            f"  {check}" if check else "",
            busy,
        )
    tag = " (predicted)" if record.predicted else ""
    reason = printable(reason_line(record.reason, 120), newlines=False)
    return Text.assemble(which, (record.status + tag, "red"), f" {knobs}  {reason}", busy)


class TrialLog(Observer):
    """The Python API's default progress: the header and one plain line per finished trial, on a
    stream."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.searched: list[str] | None = None

    def started(self, info: SearchStart) -> None:
        self.searched = info.get("searched") or None
        print(header_line(info).plain, file=self.stream, flush=True)

    def trial_finished(self, record: TrialRecord, history: History) -> None:
        print(trial_line(record, self.searched).plain, file=self.stream, flush=True)


class LiveProgress(Observer):
    """Trial i of N, the config being measured, best so far (tokens/s and x baseline), elapsed,
    remaining."""

    def __init__(self, console: Console, searched: list[str]) -> None:
        self.console = console
        self.searched = searched or None
        self.info: SearchStart | None = None  # once the search has started
        self.t0 = time.monotonic()
        self.current: dict[int, tuple[int, Knobs, float]] = {}
        self.beyond: dict[int, str] = {}  # the running trials' values past the user's list
        self.best: dict[str, Any] | None = None
        self.measured = 0  # trials measured, as the budget counts them
        self.baseline_value: float | None = None
        self.live = Live(
            console=console, refresh_per_second=2, get_renderable=self._render, transient=True
        )

    def __enter__(self) -> LiveProgress:
        self.live.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.current = {}
        self.live.__exit__(kind, error, trace)

    def started(self, info: SearchStart) -> None:
        self.info = info
        self.measured = info["done"]
        self.t0 = time.monotonic()
        self.console.print(header_line(info))

    def trial_started(
        self, number: int, index: int, knobs: Knobs, beyond: Knobs | None = None
    ) -> None:
        self.current[number] = (index, knobs, time.monotonic())
        self.beyond[number] = past_list(beyond)

    def trial_finished(self, record: TrialRecord, history: History) -> None:
        index = self.current.pop(record.number, (None,))[0]
        # autotune's own count (the budget's: history.MEASURED), not Optuna's trial numbers
        self.measured = history.measured
        best = history.best()
        if best is not None:
            self.baseline_value = value_of(history.baseline) if history.baseline else None
            self.best = {
                "number": best.number,
                "value": value_of(best),
                "knobs": knobs_of(best),
                "mfu": record_mfu_text(TrialRecord.of(best)),
                # its quality cost beside its speed-up (numerics.summary; '' where none ran)
                "numerics": numerics.summary(loss_check_of(best) or None),
            }
        self.console.print(trial_line(record, self.searched, self._which(record.number, index)))

    def _budget(self) -> str:
        return str(self.info.get("budget", "?")) if self.info else "?"

    def _which(self, number: int, index: int | None) -> str:
        """'trial 3 of 20 (#7) ': the budget's count beside Optuna's number; '#7 ' for a trial never
        launched."""
        if index is None:
            return f"#{number} "
        return f"trial {index} of {self._budget()} (#{number}) "

    def device_busy(self, unit: str) -> None:
        self.console.print(
            Text.assemble(
                ("waiting", "yellow"),
                f" for {printable(unit)}: another autotune process is measuring "
                "on it (one measurement per device at a time)",
            )
        )

    def confirm_started(self, candidates: list[int], rounds: int, kept: int = 0) -> None:
        again = f" (going on from {kept} samples of an interrupted confirmation)" if kept else ""
        self.console.print(
            f"racing trials {', '.join(map(str, candidates))}: up to {rounds} interleaved rounds, "
            f"each a fresh process; an arm leaves once it is clearly slower{again}"
        )

    def confirm_sample(self, number: int, round_: int, value: float | None, status: str) -> None:
        shown = (f"{fmt(value, 'tok')} tok/s", "") if value is not None else (status, "red")
        self.console.print(Text.assemble(f"  round {round_ + 1}: #{number} ", shown))

    def confirm_disturbed(self, number: int, round_: int, disturbed: list[str]) -> None:
        said = "; ".join(disturbed)
        self.console.print(Text.assemble(f"    #{number} disturbed: ", (said, "yellow")))

    def confirm_dropped(self, number: int, why: str) -> None:
        self.console.print(Text.assemble(f"  #{number} leaves the race: ", (why, "dim")))

    def _render(self) -> Group:
        elapsed = time.monotonic() - self.t0
        rows = []
        for number, (index, knobs, since) in sorted(self.current.items()):
            rows.append(
                Text.assemble(
                    f"trial {index} of {self._budget()} (#{number}): "
                    f"{fmt_knobs(knobs, self.searched)}{self.beyond.get(number, '')}  ",
                    (f"running {_hms(time.monotonic() - since)}", "dim"),
                )
            )
        if self.best:
            x = (
                f" = {self.best['value'] / self.baseline_value:.2f}x baseline"
                if self.baseline_value
                else ""
            )
            rows.append(
                Text.assemble(
                    "best: ",
                    (fmt(self.best["value"], "tok"), "bold"),
                    f" tok/s/GPU{x}, MFU {self.best['mfu']} (#{self.best['number']})"
                    + (f", {self.best['numerics']}" if self.best["numerics"] else "")
                    + f"; {self.measured} of {self._budget()} trials measured",
                )
            )
        remaining = (self.info.get("timeout_s", 0) if self.info else 0) - elapsed
        rows.append(Text(f"elapsed {_hms(elapsed)}, at most {_hms(remaining)} left (timeout)"))
        return Group(*rows)


def top_trials(
    console: Console, history: History, searched: list[str], task: str, top: int = 5
) -> None:
    """The top completed trials, best first (the report's trials view, the task's columns), readable
    at the console's width."""
    from autotune.report._terminal import trials_view

    base = value_of(history.baseline) if history.baseline else None
    rows = [row_of(t, base) for t in history.ranked()[:top]]
    trials_view(
        console, rows, searched, task, f"Top {top} of {len(history.completed)} completed trials"
    )


def _hidden(described: SpaceView) -> list[str]:
    """The knobs validate and --dry-run leave out: inert ones, unless the YAML set them (a note says
    why)."""
    return [k for k in described.get("inert", []) if k not in described["notes"]]


def config_yaml(dumped: dict[str, Any], described: SpaceView, show_all: bool = False) -> str:
    """`autotune validate`'s resolved config as YAML: its space section holds only the knobs of this
    task that can act here (another task's knobs and inert ones left out) unless show_all."""
    import yaml

    if not show_all and isinstance(dumped.get("space"), dict):
        mine = {**described["searched"], **described["fixed"], "grad_accum_steps": None}
        hidden = _hidden(described)
        dumped = {
            **dumped,
            "space": {k: v for k, v in dumped["space"].items() if k in mine and k not in hidden},
        }
    if not show_all and isinstance(dumped.get("workload"), dict):
        dumped = {**dumped, "workload": _task_fields(dumped["workload"])}
    return yaml.safe_dump(dumped, sort_keys=False)


def _task_fields(workload: dict[str, Any]) -> dict[str, Any]:
    """The workload section without the unset fields only another task reads (prompt_len for
    train)."""
    from autotune import tasks

    mine = tasks.task(workload["task"]).fields
    others = {f for t in tasks.TASKS.values() for f in t.fields if f not in mine}
    return {k: v for k, v in workload.items() if k not in others or v is not None}


def space_table(described: SpaceView, show_all: bool = False) -> Group:
    """The resolved space: each knob searched (with its baseline value) or fixed, then the reason
    for each knob where the YAML was changed. A fixed knob that cannot act here (space.py's
    `inert`: FSDP knobs on one GPU) is left out unless show_all. Readable at 80 columns: a knob's
    name is never cut (Rich gave "activation_checkp…"), a value too long for its column folds, the
    notes are lines of their own below."""
    hidden = [] if show_all else _hidden(described)
    caption = (
        f"{len(hidden)} knob(s) that cannot act here not shown (--all shows them)"
        if hidden
        else None
    )
    table = Table(title=f"Resolved space: {described['size']} points", caption=caption)
    table.add_column("knob", no_wrap=True)
    for col in ("values", "role", "baseline"):
        table.add_column(col, overflow="fold")
    base, notes = described["baseline"], described["notes"]
    for knob, values in described["searched"].items():
        shown = (
            values
            if len(values) <= 12
            else [*values[:5], f"... ({len(values) - 10} more)", *values[-5:]]
        )
        table.add_row(knob, ", ".join(map(str, shown)), "searched", str(base.get(knob)))
    for knob, value in described["fixed"].items():
        if knob not in hidden:
            table.add_row(knob, str(value), "fixed")
    shown_knobs = [*described["searched"], *described["fixed"]]
    if (
        "micro_batch_size" in {**described["searched"], **described["fixed"]}
        and "grad_accum_steps" not in described["searched"]
        and "grad_accum_steps" not in described["fixed"]
    ):
        table.add_row("grad_accum_steps", "auto", "derived")
        shown_knobs.append("grad_accum_steps")
    said = [
        Text(f"note: {knob}: {notes[knob]}")
        for knob in shown_knobs
        if notes.get(knob) and knob not in hidden
    ]
    return Group(table, *said)


def memory_table(
    model: dict[str, Any] | None, space: ResolvedSpace, world_size: int, capacity_gib: float | None
) -> Table | None:
    """`autotune validate`: the memory estimate per rank (autotune/memory) for each micro-batch size
    and activation checkpointing choice of the space, the other knobs at the baseline's values;
    None where nothing is estimated (hf_config and entrypoint models, generate)."""
    from autotune import memory

    if model is None:
        return None
    sizes = space.searched.get("micro_batch_size") or [space.baseline.get("micro_batch_size")]
    checkpoints = space.searched.get("activation_checkpointing") or [
        space.baseline.get("activation_checkpointing")
    ]
    base = space.knobs(space.baseline)
    rows: list[tuple[Any, list[memory.Estimate]]] = []
    for ac in checkpoints:
        found = [
            memory.estimate(
                model, {**base, "micro_batch_size": mbs, "activation_checkpointing": ac}, world_size
            )
            for mbs in sizes
        ]
        ests = [e for e in found if e is not None]
        if len(ests) < len(found):
            return None
        rows.append((ac, ests))
    others = ", ".join(
        f"{k} {v}"
        for k, v in base.items()
        if k not in ("micro_batch_size", "activation_checkpointing")
        and k in space.searched
        and v is not None
    )
    # the whole title, wrapped: a title cut to a length cut a knob's name ("fsdp_forward_pr...")
    title = (
        "Memory estimate per rank, GiB (uncalibrated; the search calibrates it on measured peaks)"
        + (f": {others}" if others else "")
    )
    table = Table(title=title, title_justify="left")
    table.add_column("activation_checkpointing", no_wrap=True)
    for mbs in sizes:
        table.add_column(f"mbs {mbs}", justify="right", overflow="fold")
    for ac, ests in rows:
        cells = [
            f"{e.total / memory.GIB:.1f}"
            + ("" if not capacity_gib or e.total / memory.GIB <= capacity_gib else " (no fit)")
            for e in ests
        ]
        table.add_row(str(ac), *cells)
    if capacity_gib:
        table.caption = f"GPU memory {capacity_gib:.1f} GiB (the smallest visible GPU)"
    return table


def _size(n: int) -> str:
    return f"{n / 1e9:g} GB" if n >= 1e9 else f"{n / 1e6:g} MB" if n >= 1e6 else f"{n / 1e3:g} kB"


def nccl_tables(doc: dict[str, Any]) -> list[Table]:
    """`autotune nccl`'s result: bus bandwidth per size and setting, and the settings that did not
    run."""
    ok = [c for c in doc["cells"] if c["status"] == "ok"]
    table = Table(
        title=f"all-reduce bus bandwidth, GB/s ({doc['ranks']} ranks, {doc['device']}; "
        f"median of {doc['iters']}, slowest rank)"
    )
    table.add_column("size", justify="right")
    for c in ok:
        table.add_column(f"{c['algo']}/{c['proto']}", justify="right")
    for i, size in enumerate(doc["sizes"]):
        table.add_row(_size(size), *[f"{c['rows'][i]['busbw_gbs']:.1f}" for c in ok])
    table.add_row("NCCL used", *[c["nccl_used"] or "n/a" for c in ok])
    refused = [c for c in doc["cells"] if c["status"] != "ok"]
    if not refused:
        return [table]
    t2 = Table(title="settings that did not run")
    for col in ("algo", "proto", "status", "reason"):
        t2.add_column(col)
    for c in refused:
        t2.add_row(c["algo"], c["proto"], c["status"], c["reason"][:300])
    return [table, t2]


def hw_tables(info: dict[str, Any]) -> list[Table]:
    """`autotune hw`: the GPUs pynvml sees with the peak used for their MFU, and the whole peak
    table."""
    from autotune.hardware import MFU_PRECISION, PEAKS, find_peak

    table = Table(
        title=(
            f"GPUs (driver {info['driver'] or 'none'}, CUDA driver {info['cuda_driver'] or 'none'})"
        )
    )
    for col in ("index", "name", "memory GiB", f"peak {MFU_PRECISION} TFLOP/s (MFU)", "source"):
        table.add_column(col)
    for gpu in info["gpus"]:
        row = find_peak(gpu["name"])
        table.add_row(
            str(gpu["index"]),
            gpu["name"],
            f"{gpu['memory_gib']:.1f}",
            f"{row.tflops[MFU_PRECISION]:g}" if row else "unknown: MFU n/a",
            row.source if row else "",
        )
    if not info["gpus"]:
        table.add_row("-", "no NVIDIA GPU visible: trials run on the CPU, MFU n/a", "", "", "")
    peaks = Table(title="Peak table (dense TFLOP/s; MFU uses bf16 for every precision)")
    for col in ("GPU", "fp32", "tf32", "bf16", "fp16", "fp8", "source"):
        peaks.add_column(col)
    for p in PEAKS:
        peaks.add_row(
            p.model,
            *[
                f"{p.tflops[k]:g}" if k in p.tflops else "-"
                for k in ("fp32", "tf32", "bf16", "fp16", "fp8")
            ],
            p.source,
        )
    return [table, peaks]


def nccl_cell_line(cell: dict[str, Any]) -> str:
    done = "ok" if cell["status"] == "ok" else f"{cell['status']}: {cell['reason'][:160]}"
    return f"{cell['algo']}/{cell['proto']}: {done} ({cell['wall_s']} s)"


def _imported(info: SearchStart) -> str:
    """', N imported by --warm-start' in the search's header, when a warm start copied trials."""
    n = info.get("imported") or 0
    return f", {n} imported by --warm-start (counted in no budget)" if n else ""
