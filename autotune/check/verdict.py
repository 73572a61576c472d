"""check's verdict as a value with its evidence: the status and its exit code, the ratio and its
interval, why in words, how many repeats ran and why they stopped, what would settle it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune import intervals
from autotune.errors import ExitCode

# Every status a verdict can have, and its exit code: anything else is no verdict (a KeyError, exit
# 4), never a default that reads as pass.
EXIT_CODES = {
    "pass": ExitCode.OK,
    "faster": ExitCode.OK,  # a kind of pass
    "regression": ExitCode.FAILED,
    "unreliable": ExitCode.UNMEASURED,  # measured beside other work (check/conditions.py)
    "inconclusive": ExitCode.INCONCLUSIVE,  # measured, and the interval decides nothing
}
PASSES = ("pass", "faster")  # what --update records, and JUnit passes
# why the repeats stopped (Verdict.stopped)
SETTLED, AT_MAX, DISTURBED = "settled", "max", "disturbed"


@dataclass
class Verdict:
    """The check's decision and everything behind it."""

    status: str  # one of EXIT_CODES: pass | faster | regression | unreliable | inconclusive
    ratio: float  # median(check) / median(baseline), tokens/s
    ci: tuple[float, float]  # 95% interval of the ratio (Student t on log tokens/s, see decide)
    tolerance_pct: float
    baseline_median: float
    check_median: float
    baseline_samples: list[float]
    check_samples: list[float]
    baseline_source: str
    version_changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    failed_repeats: list[str] = field(default_factory=list)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    checked_at: str = ""
    # per process: tokens/s, clock, power
    repeats: list[dict[str, Any]] = field(default_factory=list)
    updated: bool = False  # --update recorded these samples as the new baseline
    # --update after a pass or faster did not record them, and why (they spread more than the gate
    # can use: check/record.py); the exit code is then 3
    update_refused: str = ""
    # generate: the same decision on the median time per output token
    tpot: dict[str, Any] | None = None
    tolerance_source: str = ""  # how the tolerance was set (--tolerance, or the baseline's noise)
    # a step down across nights (series_drift), None when there is none
    series: dict[str, Any] | None = None
    # best.yaml of an older release: the knobs added since (best._upgrade)
    upgraded: dict[str, Any] | None = None
    # history.jsonl's lines that are not nights, and why
    history_skipped: list[str] = field(default_factory=list)
    # history.jsonl could not be appended to (a full disk): the verdict stands
    history_error: str = ""
    # host load, GPU processes: beside each repeat
    conditions: list[dict[str, Any]] = field(default_factory=list)
    # what disturbed the repeats (check/conditions.py)
    disturbed: list[str] = field(default_factory=list)
    # why, in words, with the interval's numbers (stats.Decision.reason)
    reason: str = ""
    # inconclusive: besides more repeats, what would settle it (stats.Decision.settle)
    settle: str = ""
    repeats_run: int = 0  # repeats started, the failed ones too
    max_repeats: int = 0  # the most it would start (--max-repeats); 0: not said
    stopped: str = ""  # why no more were started: SETTLED, AT_MAX or DISTURBED

    @property
    def exit_code(self) -> int:
        """The status's (EXIT_CODES); 3 when --update refused to record a pass's samples."""
        code = EXIT_CODES[self.status]
        return ExitCode.UNMEASURED if self.update_refused else code

    def summary(self) -> str:
        """One line: the status, both medians, the ratio, its interval, the tolerance, what
        disturbed the repeats, why, how many repeats were measured and why they stopped."""
        n = len(self.check_samples) + len(self.baseline_samples)
        line = (
            f"{self.status}: {self.check_median:,.0f} vs baseline {self.baseline_median:,.0f} "
            f"tokens/s/GPU, ratio {self.ratio:.3f} ({_ci_text(self.ratio, self.ci, n)}), "
            f"tolerance {self.tolerance_pct:g}%"
        )
        if self.disturbed:
            line += "; disturbed: " + "; ".join(self.disturbed)
        line += "".join(f"; {part}" for part in (self.reason, self.repeats_said()) if part)
        if self.series:
            line += (
                f"; the nightly series stepped down {-self.series['shift_pct']:.1f}% from night "
                f"{self.series['night']} ({self.series['checked_at'][:10]})"
            )
        if self.tpot:
            t = self.tpot
            line += (
                f"; time per output token {t['check_median_ms']:.3f} vs baseline "
                f"{t['baseline_median_ms']:.3f} ms, "
                f"speed ratio {t['ratio']:.3f} ({_ci_text(t['ratio'], t['ci'], n)}): {t['status']}"
            )
        return line

    def repeats_said(self) -> str:
        """How many repeats ran of at most how many, and why they stopped ("" when not said)."""
        if not self.max_repeats:
            return ""
        failed = f" ({len(self.failed_repeats)} failed)" if self.failed_repeats else ""
        ran = f"{self.repeats_run} of at most {self.max_repeats} repeats{failed}"
        if self.stopped == DISTURBED:
            return f"stopped after {ran}: more, measured beside other work, would not be trusted"
        if self.status == "unreliable":
            return f"after {ran}"
        if self.status != "inconclusive":
            return f"decided after {ran}"
        more = min(1000, -(-2 * self.max_repeats // 10) * 10)  # twice as many, rounded up to 10
        return (
            f"inconclusive after {ran}: run check with --max-repeats {more}, or "
            f"{self.settle or 'on a quieter machine'}"
        )


def _ci_text(ratio: float, ci: tuple[float, float], n: int) -> str:
    """'95% CI LO to HI', or why the samples bound nothing (intervals.unbounded)."""
    why = intervals.unbounded(ratio, ci, n)
    return f"95% CI: {why}" if why else f"95% CI {ci[0]:.3f} to {ci[1]:.3f}"
