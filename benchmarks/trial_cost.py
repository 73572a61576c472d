"""Where a study's trial time went: per launched trial (a failed or timed-out one too), wall time,
phases, and the overhead beyond the measured steps (wall - measure); medians over the study.

    python3 benchmarks/trial_cost.py trials/<name> [...]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from autotune.study.load import load_study

# reference: its own trial
PHASES = ("start", "build", "warmup", "compile", "check", "reference", "measure")


def rows(study_dir: str) -> list[dict]:
    study, _ = load_study(Path(study_dir), None, None)
    out = []
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        if a.get("predicted") or not isinstance(a.get("wall_s"), (int, float)):
            continue  # not launched: it cost nothing (a timeout or a failure did: it is counted)
        phases = a.get("phases_s") or {}
        out.append(
            {
                "trial": t.number,
                "status": a["status"],
                "prestarted": a.get("prestarted"),
                "wall_s": a["wall_s"],
                **{p: phases.get(p, 0.0) for p in PHASES},
                "overhead_s": a["wall_s"]
                + phases.get("reference", 0.0)
                - phases.get("measure", 0.0),
                "knobs": a["knobs"],
            }
        )
    return out


def main(dirs: list[str]) -> None:
    for d in dirs:
        rs = rows(d)
        measured = sum(r["status"] in ("ok", "pruned") for r in rs)
        print(f"## {d}: {len(rs)} launched trials ({measured} measured)")
        print("| trial | status | prestarted | wall s | " + " | ".join(PHASES) + " | overhead s |")
        print("|---" * (5 + len(PHASES)) + "|")
        for r in rs:
            print(
                f"| {r['trial']} | {r['status']} | {r['prestarted']} | {r['wall_s']:.1f} | "
                + " | ".join(f"{r[p]:.1f}" for p in PHASES)
                + f" | {r['overhead_s']:.1f} |"
            )
        med = {k: statistics.median(r[k] for r in rs) for k in ("wall_s", *PHASES, "overhead_s")}
        print(
            "| median | | | "
            + " | ".join(f"{med[k]:.1f}" for k in ("wall_s", *PHASES, "overhead_s"))
            + " |"
        )
        total = sum(r["wall_s"] + r["reference"] for r in rs)
        measured = sum(r["measure"] for r in rs)
        print(
            f"total trial time {total:.0f} s (references included), measured {measured:.0f} s "
            f"({100 * measured / total:.1f}%)\n"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
