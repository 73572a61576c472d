"""Stopping hopeless trials: Optuna's pruner interface, fed with each measured step's throughput.

A one-rank trial writes its measured steps so far (workloads/trial.py: Progress); `ProgressWatch`,
called while the search waits for the trial, reports each new step's tokens/s per GPU as an
intermediate value and asks the study's pruner. `BelowBest` prunes only a trial whose *fastest* step
so far, or the 95% upper limit of its figure from the steps so far, is below `below` times the best
measured: a step-to-step spread of a few percent (BENCHMARKS.md) cannot lift it to the top, so no
trial that could still win within the noise is stopped, and one whose steps scatter (a job's
variable lengths) is judged on its figure, not on its luckiest step. Optuna's own pruners compare a
trial with the others at the same step (median, percentile) and would stop a trial that is merely
worse than most.
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune import atomic
from autotune.protocol import AGAINST_FILE, PROGRESS_FILE, PRUNE_FILE

# steps before the upper limit of a trial's figure may prune it (Student's t at 4 dof is 2.8)
UPPER_STEPS = 5


class BelowBest(optuna.pruners.BasePruner):
    """Prune when max(intermediate values) < below x the best completed value, after min_steps
    steps, or (UPPER_STEPS steps or more) when the 95% upper limit of its figure is (upper_bound).
    """

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
        if best is None:
            return False
        upper = upper_bound(values)
        return max(values) < self.below * best or upper is not None and upper < self.below * best


def upper_bound(rates: list[float]) -> float | None:
    """The 95% upper limit of the figure the steps so far give (tokens over time, each step's
    rate at the same tokens: the steps' times are 1/rate), as a command trial's window computes it
    (command/window.py); None under UPPER_STEPS steps. A trial whose steps scatter (variable
    lengths) is pruned on it once even its upper limit is below the bar, where its fastest step,
    an outlier, would keep it running to the end."""
    if len(rates) < UPPER_STEPS or min(rates) <= 0:
        return None
    from autotune import ratio

    steps = [(1.0 / r, 1.0) for r in rates]
    width = ratio.half_width_pct(steps)
    figure = ratio.rate(steps)
    return figure * (1 + width / 100) if width is not None else None


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
        self.against = run_dir / AGAINST_FILE
        self.told_best = False

    def __call__(self) -> None:
        if self.why or self.off:
            return
        if not self.told_best:
            self.tell_best()
        try:
            self._look()
        # the storage refused a report (locked, or the trial was reaped): never prune it then
        except Exception:
            self.off = True

    def tell_best(self) -> None:
        """The study's best figure, written once beside the trial as it starts (AGAINST_FILE)."""
        if not self.against.parent.is_dir():
            return  # not created yet: at the next poll
        atomic.write_text(
            self.against, json.dumps({"tokens_per_s_per_gpu": best_value(self.trial.study)})
        )
        self.told_best = True

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
            atomic.touch(self.stop_file)
            fastest = tokens / min(steps)
            best = best_value(self.trial.study) or 0
            upper = upper_bound([tokens / s for s in steps])
            what = f"its fastest step, {fastest:,.0f} tokens/s,"
            if fastest >= self.below * best and upper is not None:
                what = f"the 95% upper limit of its figure, {upper:,.0f} tokens/s,"
            self.why = (
                f"pruned after {len(steps)} measured steps: {what} is below {self.below:.0%} of "
                f"the best measured ({best:,.0f})"
            )
