#!/usr/bin/env bash
# A/B on one lease: the old code (6e190c1, .ab/old) and the new code check the same best.yaml, interleaved.
set -u
export PYTHONUNBUFFERED=1 COLUMNS=160
for side in old new; do mkdir -p /tmp/ab-$side; cp benchmarks/results/2026-11-29-h200-gpt2-small/best.yaml /tmp/ab-$side/; done
for round in 1 2 3; do
  for side in old new; do
    root=$PWD; [ $side = old ] && root=$PWD/.ab/old
    echo "=== round $round $side $(date -u +%T)"
    PYTHONPATH=/tmp/site:$root python3 -m autotune.cli check /tmp/ab-$side/best.yaml --repeats 2 --tolerance 100 2>&1 | head -3
  done
done
for side in old new; do cp /tmp/ab-$side/history.jsonl $OUT/ab-$side-history.jsonl; done
python3 - <<'PY'
import json, os, statistics
for side in ("old", "new"):
    rows = [r for line in open(f"{os.environ['OUT']}/ab-{side}-history.jsonl") for r in json.loads(line)["repeats"]]
    tok = [r["tokens_per_s_per_gpu"] for r in rows]
    print(side, "processes", len(tok), "median", round(statistics.median(tok)), "min", round(min(tok)), "max", round(max(tok)),
          "clock", [round(r["sm_clock_mhz_mean"] or 0) for r in rows], "power", [round(r["power_w_mean"] or 0) for r in rows])
PY
