"""What the compile cache served a trial (workloads/compiling.py): cold, warm or partly warm from
torch's counters; the checkpointing policy's cache key."""

from __future__ import annotations

import pytest

from autotune.workloads.compiling import compile_state


def _counts(**given: int) -> dict[str, int]:
    keys = ("fxgraph_hit", "fxgraph_miss", "fxgraph_bypass")
    keys += ("autograd_hit", "autograd_miss", "autograd_bypass")
    return {k: given.get(k, 0) for k in keys}


@pytest.mark.parametrize(
    ("counts", "state"),
    [
        (_counts(autograd_hit=3, fxgraph_hit=6), "warm"),
        (_counts(autograd_miss=3, fxgraph_miss=6), "cold"),
        # AOTAutograd passed it by (torchao's float8), Inductor's cache served the kernels
        (_counts(autograd_bypass=2, fxgraph_hit=4), "partly warm"),
        (_counts(autograd_hit=2, autograd_miss=1, fxgraph_miss=2), "partly warm"),
        # AOTAutograd's cache off: Inductor's decides
        (_counts(fxgraph_hit=4), "warm"),
        (_counts(fxgraph_hit=2, fxgraph_miss=2), "partly warm"),
    ],
)
def test_compile_state_from_the_cache_counters(counts: dict[str, int], state: str) -> None:
    assert compile_state(counts) == state


def test_checkpointing_policy_has_a_stable_cache_hash() -> None:
    """AOTAutograd's cache skips a selective-checkpointing graph whose context_fn has no cache_hash;
    the policy's is its source's digest, the same in every process."""
    from autotune.workloads import model

    digest = model._op_policy.cache_hash
    assert isinstance(digest, str) and len(digest) == 64
