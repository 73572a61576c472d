"""What `autotune check` prints: a line per repeat as it ends, then the verdict and what it rests
on."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from autotune.documents.record import Metric
from autotune.errors import printable
from autotune.report import fmt

if TYPE_CHECKING:
    from autotune.check.verdict import Verdict


# the verdict's colour by its status (verdict.EXIT_CODES' statuses): yellow, what decided nothing
COLORS = {
    "pass": "green",
    "faster": "cyan",
    "regression": "red",
    "unreliable": "yellow",
    "inconclusive": "yellow",
}


def _tagged(tag: str, style: str, text: str) -> Text:
    """A styled tag, then the text as it is (never read as markup)."""
    return Text.assemble((tag, style), " ", printable(text, newlines=False))


def _disturbed(verdict: Verdict) -> list[Text]:
    """What disturbed the repeats (check/conditions.py), and what that means for the verdict."""
    if not verdict.disturbed:
        return []
    what = "the numbers cannot be trusted either way, pass or regression"
    return [_tagged("disturbed:", "yellow", "; ".join(verdict.disturbed) + f" ({what})")]


def baseline_recorded(
    best_yaml: Path, samples: list[float], failures: list[str]
) -> list[Text | str]:
    """What `check --reset-baseline` says: the processes, their median and spread, and the
    tolerance a check derives from them (stats.default_tolerance)."""
    from autotune.check.record import spread_pct
    from autotune.check.stats import default_tolerance

    derived = default_tolerance(samples)[0]
    spread = (
        f", spread {spread_pct(samples):.2f}% (default tolerance {derived:g}%)"
        if len(samples) > 1
        else ""
    )
    lines = [
        f"baseline recorded in {best_yaml}: {len(samples)} processes, median "
        f"{sorted(samples)[len(samples) // 2]:,.0f} tokens/s/GPU{spread}"
    ]
    return lines + [_tagged("failed:", "yellow", failure) for failure in failures]


def verdict_lines(
    verdict: Verdict, best_yaml: Path, repeats: int, update: bool
) -> list[Text | str]:
    """What `check` says: the verdict, where its baseline came from, what changed, what failed, what
    was recorded."""
    lines: list[Text | str] = [
        Text(verdict.summary(), style=COLORS[verdict.status]),
        printable(
            f"baseline: {verdict.baseline_source}; check: {len(verdict.check_samples)} of "
            f"{verdict.repeats_run or repeats} repeats measured"
            + (
                f" (--repeats {repeats}, at most {verdict.max_repeats})"
                if verdict.max_repeats
                else ""
            )
        ),
        printable(f"tolerance: {verdict.tolerance_source}"),
    ]
    lines += _disturbed(verdict)
    if verdict.series:
        s = verdict.series
        lines.append(
            _tagged(
                "nightly series:",
                "red",
                f"a lasting step down of {-s['shift_pct']:.1f}% starting on night "
                f"{s['night']} of {s['nights']} ({s['checked_at']}), found by {s['method']} in "
                "history.jsonl since the last --reset-baseline",
            )
        )
    if verdict.history_skipped:
        shown = "; ".join(verdict.history_skipped[:3]) + (
            "; ..." if len(verdict.history_skipped) > 3 else ""
        )
        lines.append(_tagged("note:", "yellow", printable(f"history.jsonl: skipped {shown}")))
    if verdict.history_error:
        lines.append(_tagged("warning:", "yellow", printable(verdict.history_error)))
    if verdict.upgraded:
        added = ", ".join(f"{k}: {v}" for k, v in verdict.upgraded.items())
        lines.append(
            _tagged(
                "note:",
                "yellow",
                f"best.yaml from an older autotune; measured with the knobs added "
                f"since as its search would have run them ({added})",
            )
        )
    if verdict.baseline_source.startswith("search trial"):
        lines.append(
            _tagged(
                "note:",
                "yellow",
                "the baseline is the search's single measurement, the best of many, "
                "on the search's machine; record one here with --reset-baseline",
            )
        )
    lines += [
        _tagged("changed since the baseline:", "yellow", f"{key} {old} -> {new}")
        for key, (old, new) in verdict.version_changes.items()
    ]
    lines += [_tagged("failed:", "yellow", failure) for failure in verdict.failed_repeats]
    return lines + _recorded(verdict, best_yaml, update)


def _recorded(verdict: Verdict, best_yaml: Path, update: bool) -> list[str]:
    """What --update recorded, or why not; a faster check without it says how to record."""
    if update and verdict.updated:
        return [
            f"--update: recorded {len(verdict.check_samples)} samples as the new baseline in "
            f"{best_yaml}"
        ]
    if update and verdict.update_refused:
        return [f"--update: not recorded, {verdict.update_refused}"]
    if update:
        why = {
            "unreliable": "the check was disturbed",
            "regression": "the check found a regression",
            "inconclusive": "the check was inconclusive",
        }.get(verdict.status, f"the check was {verdict.status}")
        return [f"--update: not recorded, {why}"]
    if verdict.status == "faster":
        return ["faster than the baseline: run with --update to record the new baseline"]
    return []


def repeat_line(event: dict[str, Any]) -> Text:
    """One `check` repeat as it ends: its tokens/s or failure, and the host's load and the GPU's
    other processes sampled before it (regress_conditions.sample)."""
    c = event["conditions"]
    gpu = c["gpu_processes"]
    others = (
        ""
        if gpu is None
        else f"; GPU: {len(gpu)} other process(es)"
        if gpu
        else "; GPU: no other process"
    )
    cpu = event.get("cpu")  # how long its busiest process waited for a CPU (conditions.CpuWatch)
    waited = f"; waited for a CPU {cpu['wait_pct']:g}%" if cpu else ""
    where = f"(load {c['load_1min']:g} on {c['cpus']} CPUs{others}{waited})"
    n, asked = event["repeat"] + 1, event["repeats"]
    head = (
        f"repeat {n} of {asked}: "
        if n <= asked
        else f"repeat {n} of at most {event.get('max_repeats', n)} (inconclusive so far): "
    )
    if event["failure"]:
        return Text.assemble(
            head,
            ("failed", "yellow"),
            " ",
            printable(event["failure"], newlines=False),
            f" {where}",
        )
    return Text(f"{head}{fmt(event[Metric.TOKENS_PER_GPU], 'tok')} tokens/s/GPU {where}")
