#!/usr/bin/env bash
# Issue 64's GPU proof: the 1.3B study (benchmarks/spaces/issue64-gpt-1.3b.yaml: 20 trials and the confirmation
# race) and the plain-script fp8 experts (benchmarks/plain_train.py), back to back on one GPU. Each stage writes
# its results under $OUT as it goes (carry .whl). The study resumes where a call's limit cut it: run
# `study` again on the same warm machine, then `expert`.
#   bash benchmarks/issue64-proof.sh study [expert]     # on the GPU machine, from the project root
#   SEARCH_S: the study stage's limit (s); EXPERTS: "precision:micro-batch" list; EXPERT_S: one expert's limit
set -uo pipefail
OUT=${OUT:-bench-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 COLUMNS=160
Y=${Y64:-benchmarks/spaces/issue64-gpt-1.3b.yaml}
if [ "${FORK:-1}" = 0 ]; then  # the same study with trials started without the fork server
  python3 -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); d["study"]["fork_server"] = False; print(yaml.safe_dump(d))' "$Y" > /tmp/nofork.yaml; Y=/tmp/nofork.yaml
fi
N=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["name"])' "$Y")
at() { python3 -m autotune.cli "$@"; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv
  python3 -c 'import torch, torchao; print("torch", torch.__version__, "cuda", torch.version.cuda, "torchao", torchao.__version__)'
  python3 -c 'import optuna, pydantic; print("optuna", optuna.__version__, "pydantic", pydantic.__version__)'
  echo "commit ${COMMIT:-unknown} (the device's copy of the tree has no history of its own)"; } >> "$OUT/hw.txt" 2>&1
study() {
  echo "{\"stage\": \"study\", \"start\": $(date +%s.%N)}" >> "$OUT/wall.jsonl"
  # the study as it stands every 30 s: a call cut short by its limit still brings back its measured trials
  ( while sleep 30; do tar czf "$OUT/study-live.tgz" "trials/$N"/study.db* 2>/dev/null; done ) & live=$!
  # resumes: a study a call's limit cut goes on where it stopped (its compile cache is on this machine's disk)
  timeout -s INT "${SEARCH_S:-540}" python3 -m autotune.cli search "$Y" --gpus 0 2>&1 | tee -a "$OUT/search.log"
  echo "{\"stage\": \"study\", \"end\": $(date +%s.%N), \"rc\": ${PIPESTATUS[0]}}" >> "$OUT/wall.jsonl"
  kill "$live" 2>/dev/null; rm -f "$OUT/study-live.tgz"
  tar czf "$OUT/study.tgz" "trials/$N"/study.db* "trials/$N/best.yaml" "trials/$N"/runs/*/spec.json "trials/$N"/runs/*/result.json "trials/$N"/runs/*/*.log 2>/dev/null
  at report "trials/$N" --format markdown > "$OUT/report.md" 2>&1
  at report "trials/$N" --format json > "$OUT/report.json" 2>&1
  cp "trials/$N/best.yaml" "$OUT/best.yaml" 2>/dev/null
  python3 benchmarks/trial_cost.py "trials/$N" > "$OUT/cost.md" 2>&1
  tail -25 "$OUT/report.md"
}
expert() {  # each expert a process of its own: whole-model compile, fused AdamW, vocabulary padded to 64
  for e in ${EXPERTS:-fp8:8 fp8:16}; do IFS=: read -r prec mbs <<< "$e"
    echo "{\"stage\": \"expert $e\", \"start\": $(date +%s.%N)}" >> "$OUT/wall.jsonl"
    timeout "${EXPERT_S:-240}" python3 benchmarks/plain_train.py --yaml "$Y" --precision "$prec" --mbs "$mbs" \
      --compile --fused --pad-vocab 64 --warmup 3 --steps 10 2>>"$OUT/expert.err" | tee -a "$OUT/expert.jsonl"
    echo "{\"stage\": \"expert $e\", \"end\": $(date +%s.%N)}" >> "$OUT/wall.jsonl"
  done
}
for stage in "$@"; do "$stage"; done
