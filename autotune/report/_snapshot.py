"""The study as Optuna's plots read it: its launched trials in memory without their records, and
the objective a plot draws (report/_plots.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from autotune.documents.record import is_repeat

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial


def bare_snapshot(study: optuna.Study) -> optuna.Study:
    """The study's launched trials in memory without their records (user attributes: telemetry, raw
    steps), which no plot reads: each of Optuna's plots copies every trial again, and from SQLite
    with the records that costs seconds for a hundred trials."""
    import optuna

    previous = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not "A new study created in memory"
    try:
        snapshot = optuna.create_study(directions=study.directions, study_name=study.study_name)
    finally:
        optuna.logging.set_verbosity(previous)
    trials = study.get_trials(deepcopy=False)
    # a repeat is told as the trial it repeats (search/repeats.py): drawn once
    snapshot.add_trials([_bare(t) for t in trials if not is_repeat(t)])
    return snapshot


def _bare(t: FrozenTrial) -> FrozenTrial:
    from optuna.trial import FrozenTrial

    return FrozenTrial(
        number=t.number,
        state=t.state,
        value=None,
        values=t.values,
        datetime_start=t.datetime_start,
        datetime_complete=t.datetime_complete,
        params=t.params,
        distributions=t.distributions,
        user_attrs={},
        system_attrs={},
        intermediate_values=t.intermediate_values,
        trial_id=t._trial_id,
    )


def target(study: optuna.Study, minimize: bool = False) -> Callable[[FrozenTrial], float] | None:
    """Optuna's target for a plot: None (the objective) in a single-objective study; else tokens/s
    per GPU, the first objective of every study (a pareto study's second is p99), negated where
    Optuna assumes lower is better (PED-ANOVA)."""
    if len(study.directions) == 1:
        return None
    sign = -1.0 if minimize else 1.0
    return lambda t: sign * t.values[0]
