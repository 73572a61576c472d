"""search/twin.py: the leading trial's whole-model and static-shape twins are enqueued, and nothing
else."""

from __future__ import annotations

from typing import Any

import optuna

from autotune.search import twin
from autotune.search.history import History
from autotune.space import ResolvedSpace

SPACE = ResolvedSpace(
    searched={
        "micro_batch_size": [4, 8],
        "compile_scope": ["model", "block"],
        "compile_dynamic": ["static", "batch"],
    },
    fixed={"compile": True},
)


def _trial(number: int, value: float, **params: Any) -> optuna.trial.FrozenTrial:
    dist = {
        k: optuna.distributions.CategoricalDistribution(v)
        for k, v in SPACE.searched.items()
        if k in params
    }
    t = optuna.trial.create_trial(
        value=value,
        params=params,
        distributions=dist,
        user_attrs={"knobs": {"compile": True, **params}, "status": "ok"},
    )
    t.number = number
    return t


def test_twin_of_the_leader_is_its_specialised_compile() -> None:
    slow = _trial(0, 100.0, micro_batch_size=4, compile_scope="model", compile_dynamic="static")
    lead = _trial(1, 200.0, micro_batch_size=8, compile_scope="block", compile_dynamic="batch")
    h = History(completed=[slow, lead])
    assert twin.specialised(h, SPACE, lead) == [
        {"micro_batch_size": 8, "compile_scope": "model", "compile_dynamic": "batch"},
        {"micro_batch_size": 8, "compile_scope": "block", "compile_dynamic": "static"},
    ]
    assert twin.specialised(h, SPACE, slow) == []  # not the leader
    specialised = _trial(
        2, 300.0, micro_batch_size=8, compile_scope="model", compile_dynamic="static"
    )
    assert twin.specialised(History(completed=[lead, specialised]), SPACE, specialised) == []
    narrow = ResolvedSpace(
        searched={"micro_batch_size": [4, 8]}, fixed={"compile": True, "compile_scope": "block"}
    )
    assert (
        twin.specialised(History(completed=[lead]), narrow, lead) == []
    )  # the space holds no twin
