"""Stopping hopeless trials: Optuna's pruner interface, fed with each measured step's throughput.

A one-rank trial writes its measured steps so far (workloads/trial.py: Progress); `ProgressWatch`,
called while the search waits for the trial, reports each new step's tokens/s per GPU as an
intermediate value and asks the study's pruner. `BelowBest` prunes only a trial whose *fastest* step
so far is below `below` times the best measured median: a step-to-step spread of a few percent
(BENCHMARKS.md) cannot lift it to the top, so no trial that could still win within the noise is
stopped. Optuna's own pruners compare a trial with the others at the same step (median, percentile)
and would stop a trial that is merely worse than most.
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune.protocol import PROGRESS_FILE, PRUNE_FILE


class BelowBest(optuna.pruners.BasePruner):
    """Prune when max(intermediate values) < below x the best completed value, after min_steps
    steps."""

    def __init__(self, below: float, min_steps: int = 2) -> None:
        if not 0 < below < 1:
            raise ValueError(f"below must be between 0 and 1 (exclusive) but got {below}")
        if min_steps < 1:
            raise ValueError(f"min_steps must be at least 1 but got {min_steps}")
        self.below, self.min_steps = below, min_steps

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        values = list(trial.intermediate_values.values())
        if len(values) < self.min_steps:
            return False
        best = best_value(study)
        return best is not None and max(values) < self.below * best


def best_value(study: optuna.Study) -> float | None:
    """The best completed trial's value (tokens/s per GPU), or None before any completed."""
    return max(
        (
            t.values[0]
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.values
        ),
        default=None,
    )


class ProgressWatch:
    """Called while a trial runs: new measured steps become intermediate values; when the study's
    pruner says so, a `prune` file asks the trial to stop, and `why` says what it had measured
    against what."""

    def __init__(self, trial: optuna.Trial, run_dir: Path, below: float) -> None:
        self.trial, self.path, self.stop_file, self.below = (
            trial,
            run_dir / PROGRESS_FILE,
            run_dir / PRUNE_FILE,
            below,
        )
        self.reported, self.seen_ns = 0, -1
        self.why, self.off = "", False

    def __call__(self) -> None:
        if self.why or self.off:
            return
        try:
            self._look()
        # the storage refused a report (locked, or the trial was reaped): never prune it then
        except Exception:
            self.off = True

    def _look(self) -> None:
        try:
            stamp = self.path.stat().st_mtime_ns
            if stamp == self.seen_ns:
                return
            data = json.loads(self.path.read_text())
            steps, tokens = data["step_times_s"], data["tokens_per_step"]
        except (OSError, ValueError, KeyError, TypeError):
            return  # not written yet (or being replaced): read it at the next poll
        self.seen_ns = stamp
        if not tokens or not isinstance(steps, list):
            return
        for i in range(self.reported, len(steps)):
            self.trial.report(tokens / steps[i], i)
        self.reported = max(self.reported, len(steps))
        if self.reported and self.trial.should_prune():
            self.stop_file.touch()
            fastest = tokens / min(steps)
            self.why = (
                f"pruned after {len(steps)} measured steps: its fastest step, {fastest:,.0f} "
                f"tokens/s, is below {self.below:.0%} of the best measured "
                f"({best_value(self.trial.study) or 0:,.0f})"
            )
