"""JSON as autotune writes every file and output (export, report, history.jsonl, nccl.json, a
command's rendered config): strict JSON (RFC 8259), which any parser reads. Python's json writes a
number that is not finite as the tokens NaN, Infinity and -Infinity, which are not JSON; here it is
null instead (a bound that is null is unbounded: history.jsonl's interval (0, inf) is [0.0, null]).
A trial's working files under runs/ (spec, result, steps) are the parent's and the trial's own
hand-over, read back only by autotune, and keep Python's form."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: object) -> Any:
    """value with every float that is not finite (in dicts, lists and tuples, at any depth) made
    None; anything else as it is."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {finite(k): finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value: object, **options: Any) -> str:
    """json.dumps of value made finite, strict (allow_nan=False); options as json.dumps takes
    them (indent, sort_keys, default, ...)."""
    return json.dumps(finite(value), allow_nan=False, **options)
