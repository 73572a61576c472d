"""A measurement that finished but was never stored (the storage failed, or autotune was killed,
between the trial's result and the study's write) is recorded on resume from the trial's own files.

The trial wrote runs/NNNN/result.json before it exited; its Optuna trial was left RUNNING and has
since been reaped as worker_lost. On resume each such trial whose folder holds an ok result of its
own launch is added to the study as the completed trial it was (recovered_from names the lost one),
so it is neither lost nor measured again. A trial whose numerics the loss check would have compared
(fp8, fp16, compressed gradients) is left to be measured again: its check never ran."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import optuna
from optuna.trial import TrialState

from autotune import knobs as catalogue
from autotune.documents import trial_marks
from autotune.documents.record import Metric, knobs_of, status_of, trial_of
from autotune.launch.process import Outcome
from autotune.launch.runner import record_of
from autotune.protocol import TrialResult, TrialSpec
from autotune.status import Status

if TYPE_CHECKING:
    from autotune.launch.runner import Bench


def _result_of_its_launch(run_dir: Path, trial: optuna.trial.FrozenTrial) -> TrialResult | None:
    """The ok result the trial's own launch wrote (not an earlier attempt's: launched after the
    trial began)."""
    try:
        spec = TrialSpec.read(run_dir / "spec.json")
        result = TrialResult.read(run_dir / "result.json")
    except (OSError, ValueError):
        return None
    started = trial.datetime_start.timestamp() if trial.datetime_start else None
    if result.status != Status.OK or started is None or (spec.launched_at or 0) < started:
        return None
    return result


def recover(study: optuna.Study, runs: Path, bench: Bench) -> list[int]:
    """Add the stored-never measurements of lost trials as completed trials; the numbers
    recovered."""
    taken = {trial_marks.recovered_from(t) for t in study.get_trials(deepcopy=False)}
    recovered = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        knobs = knobs_of(t)
        if (
            status_of(t) != Status.WORKER_LOST
            or t.number in taken
            or not knobs
            or catalogue.numerics(knobs)
        ):
            continue
        run_dir = runs / f"{t.number:04d}"
        result = _result_of_its_launch(run_dir, t)
        if result is None:
            continue
        record = record_of(t.number, knobs, Outcome(Status.OK, "", result), bench)
        record.run_dir = str(run_dir)
        study.add_trial(
            trial_of(
                trial_marks.recovered_attrs(record, t.number),
                state=TrialState.COMPLETE,
                value=record.metric(Metric.TOKENS_PER_GPU),
                params=t.params,
                distributions=t.distributions,
            )
        )
        recovered.append(t.number)
    return recovered
