"""Compare a study's measured trials with the recorded GPT-2-small grid, configuration by
configuration.

    python3 benchmarks/compare_grid.py trials/gpt2-small-hopper
    [benchmarks/results/2026-11-29-h200-bar/grid.csv]

Prints one row per completed trial (its tokens/s, the grid's for the same knobs, the ratio) and the
median and range of the ratios; writes the rows as CSV beside the study (compare-grid.csv). Reads
the study with the report's own reader (autotune.read_report), so nothing is re-derived here.
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

import autotune

KNOBS = ("micro_batch_size", "precision", "compile", "pad_vocab_multiple")


def grid_key(row: dict[str, str]) -> tuple[str, ...]:
    return (
        row["micro_batch_size"],
        row["precision"],
        row["compile"],
        row["pad_vocab_multiple"] or "None",
    )


def main(study_dir: str, grid_csv: str = "benchmarks/results/2026-11-29-h200-bar/grid.csv") -> None:
    grid = {grid_key(r): float(r["tokens_per_s"]) for r in csv.DictReader(open(grid_csv))}
    data = autotune.read_report(study_dir)
    rows = []
    for r in sorted((r for r in data["trials"] if r["state"] == "ok"), key=lambda r: r["number"]):
        k = tuple(str(r["knobs"][n]) for n in KNOBS)
        ref = grid.get(k)
        rows.append(
            {
                "trial": r["number"],
                **dict(zip(KNOBS, k)),
                "tokens_per_s": round(r["tokens_per_s_per_gpu"], 1),
                "grid_tokens_per_s": ref,
                "ratio": round(r["tokens_per_s_per_gpu"] / ref, 4) if ref else None,
            }
        )
    out = Path(study_dir) / "compare-grid.csv"
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        print(" ".join(f"{k}={v}" for k, v in row.items()))
    ratios = [row["ratio"] for row in rows if row["ratio"]]
    if ratios:
        print(
            f"{len(ratios)} configurations: ratio to the grid median "
            f"{statistics.median(ratios):.4f}, "
            f"range {min(ratios):.4f} to {max(ratios):.4f}; written to {out}"
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
