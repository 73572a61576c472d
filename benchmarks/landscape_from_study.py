"""A measured grid study as a replay landscape (benchmarks/landscapes/*.json, read by
search/replay.py).

    python3 benchmarks/landscape_from_study.py trials/gpt2-medium-landscape YAML "SOURCE" >
    LANDSCAPE.json

Every measured point of the study: its knobs (the YAML's searched knobs), its status, what its trial
cost (cost_s: the trial's wall time, its loss-check reference trial's included; none for a point
predicted without a launch), and for a completed point the raw step times (CUDA events), which the
replay draws its noise from.
Predicted failures are kept with their status (the search would predict them again).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from autotune.job import load_config
from autotune.study.history import History
from autotune.study.load import load_study


def main(study_dir: str, yaml_path: str, source: str) -> None:
    cfg = load_config(Path(yaml_path))
    searched = [k for k, v in cfg.space.model_dump().items() if isinstance(v, list) and len(v) > 1]
    study, _ = load_study(Path(study_dir), None, None)
    h = History.of(study)
    points, tokens = [], set()
    causes = [t.user_attrs["cause"] for t in h.seen.values() if t.user_attrs.get("cause")]
    for t in sorted(h.seen.values(), key=lambda t: t.number):
        a = t.user_attrs
        point = {
            "knobs": {k: a["knobs"][k] for k in searched},
            "status": a["status"],
            "trial": t.number,
        }
        if not a.get("predicted") and isinstance(a.get("wall_s"), (int, float)):  # the GPU's cost
            reference = (a.get("phases_s") or {}).get("reference", 0.0)
            point["cost_s"] = round(a["wall_s"] + reference, 2)
        if a["status"] == "ok":
            point["step_times_s"] = a["raw"]["step_times_s"]
            tokens.add(
                round(
                    a["metrics"]["tokens_per_s_per_gpu"] * statistics.median(point["step_times_s"])
                )
            )
        else:
            point["reason"] = a.get("reason", "")
            # the rule it failed by: its own cause, or (a predicted point) the cause of the trial
            # that taught it
            cause = a.get("cause") or next(
                (c for c in causes if all(a["knobs"].get(k) == v for k, v in c.items())), None
            )
            if cause:
                point["cause"] = cause
        points.append(point)
    assert len(tokens) == 1, f"one tokens_per_step expected, found {tokens}"
    doc = {
        "name": cfg.name,
        "source": source,
        "yaml": yaml_path,
        "tokens_per_step": tokens.pop(),
        "points": points,
    }
    json.dump(doc, sys.stdout, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
