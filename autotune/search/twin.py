"""The specialised twin of the leading trial (issue 28): search cheap to compile, measure the costly
compile once.

Per-block compile compiles a quarter of what whole-model compile does (0.6B, fp8, on an H200: 23 s
against 98 s) for about 1.5% of the speed, and a dynamic batch dimension lets trials of every
micro-batch size share one compiled program. So a search may run with the cheap values, and after a
trial that leads the study the loop enqueues, ahead of the sampler, that trial with each costly
value in its place (`compile_scope: model` for `block`, `compile_dynamic: static` for `batch`),
where the space holds it: the costly compile is measured for the configuration that can win, not for
every trial. Each twin is one trial of the budget; the confirmation then re-measures the leaders as
it does any trial."""

from __future__ import annotations

from typing import Any

import optuna

from autotune.search.history import History
from autotune.space import ResolvedSpace

# knob: (the value cheap to compile, the specialised value measured for the leader)
COSTLY = {"compile_scope": ("block", "model"), "compile_dynamic": ("batch", "static")}


def specialised(
    h: History, space: ResolvedSpace, trial: optuna.trial.FrozenTrial
) -> list[dict[str, Any]]:
    """The leading trial's params with each cheap compile value replaced by its specialised one (one
    knob each); nothing when `trial` does not lead the study or its compile values are already
    specialised."""
    best = h.best()
    if best is None or best.number != trial.number:
        return []
    knobs = trial.user_attrs.get("knobs") or {}
    twins = []
    for name, (cheap, costly) in COSTLY.items():
        if (
            knobs.get(name) == cheap
            and costly in space.searched.get(name, ())
            and name in trial.params
        ):
            twins.append({**trial.params, name: costly})
    return twins
