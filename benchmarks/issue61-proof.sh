#!/usr/bin/env bash
# Issue 61's GPU proof as ONE self-contained device call (under 10 minutes; carry .whl): the own HF job whose own
# setting does not fit (benchmarks/spaces/issue61-hf-own.yaml), searched in 12 trials with its confirmation race,
# each result written under $OUT as it comes: hw.txt, search.log (tee'd live), wall.jsonl, then the report
# (markdown, json), best.yaml, export, where the time went (trial_cost.py) and the study as a tarball.
#   bash benchmarks/issue61-proof.sh        # on the GPU machine, from the project root
set -uo pipefail
OUT=${OUT:-bench-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 COLUMNS=160
Y=${Y61:-benchmarks/spaces/issue61-hf-own.yaml}
N=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["name"])' "$Y")
at() { python3 -m autotune.cli "$@"; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  python3 -c 'import transformers, optuna, pydantic; print("transformers", transformers.__version__, "optuna", optuna.__version__, "pydantic", pydantic.__version__)'
  echo "commit ${COMMIT:-unknown} (the device's copy of the tree has no history of its own)"; } > "$OUT/hw.txt" 2>&1
at validate "$Y" > "$OUT/validate.txt" 2>&1
echo "{\"start\": $(date +%s.%N)}" >> "$OUT/wall.jsonl"
# the study as it stands every 30 s: a call cut short by its limit still brings back its measured trials
( while sleep 30; do tar czf "$OUT/study-live.tgz" "trials/$N"/study.db* 2>/dev/null; done ) & live=$!
# --timeout-min: the search launches no trial after 6 minutes (the confirmation and the files still fit the call)
timeout "${SEARCH_S:-560}" python3 -m autotune.cli search "$Y" --gpus 0 --fresh --timeout-min "${SEARCH_MIN:-6}" 2>&1 | tee "$OUT/search.log"
echo "{\"end\": $(date +%s.%N), \"rc\": ${PIPESTATUS[0]}}" >> "$OUT/wall.jsonl"
kill "$live" 2>/dev/null; rm -f "$OUT/study-live.tgz"
tar czf "$OUT/study.tgz" "trials/$N"/study.db* "trials/$N/best.yaml" "trials/$N"/runs/*/spec.json "trials/$N"/runs/*/result.json "trials/$N"/runs/*/*.log 2>/dev/null
at report "trials/$N" --format markdown > "$OUT/report.md" 2>&1
at report "trials/$N" --format json > "$OUT/report.json" 2>&1
cp "trials/$N/best.yaml" "$OUT/best.yaml" 2>/dev/null
at export "trials/$N/best.yaml" > "$OUT/export.txt" 2>&1
python3 benchmarks/trial_cost.py "trials/$N" > "$OUT/cost.md" 2>&1
tail -30 "$OUT/report.md"
