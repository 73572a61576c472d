#!/usr/bin/env bash
# Stages of benchmarks/h200-bar.sh that outlive one device call (10 minutes at most): `start` runs them in a
# process session of their own (setsid: the device tool leaves it running after the call returns, while the
# machine stays warm), writing to /tmp/bg-out; `wait` waits for them up to WAIT_S seconds, then copies what
# they wrote (packed, at most 8 files) under $OUT. Issue 34's plan: one call starts, the next calls wait.
#   bash benchmarks/background.sh start numerics-gpu staged expert     # carry .whl
#   WAIT_S=570 bash benchmarks/background.sh wait
set -u
BG=/tmp/bg-out
case ${1:-} in
  start)
    shift
    mkdir -p "$BG" && rm -f "$BG/done"
    [ -n "${NO_WHEELS:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || exit 1
    OUT=$BG PYTHONPATH=/tmp/site:$PWD GPUS=${GPUS:-0} setsid nohup bash -c \
      "bash benchmarks/h200-bar.sh info $* > $BG/bar.log 2>&1; echo \$? > $BG/done" > /dev/null 2>&1 < /dev/null &
    sleep 5; echo "started: $*"; cat "$BG/bar.log" 2>/dev/null ;;
  wait)
    deadline=$(( $(date +%s) + ${WAIT_S:-570} ))
    while [ ! -f "$BG/done" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
    if [ -f "$BG/done" ]; then echo "finished, exit $(cat "$BG/done")"; else echo "still running"; fi
    tail -5 "$BG/stages.log" 2>/dev/null
    mkdir -p "${OUT:?}"
    (cd "$BG" && tar czf "$OUT/bg-out.tgz" --exclude=trials.tgz .)
    # the studies as they stand: a machine taken back mid-stage still leaves its measured trials (issue 50's
    # search lost its last trial, the confirmation and the experts when the lease ended between two calls)
    ls trials/*/study.db >/dev/null 2>&1 && tar czf "$OUT/studies.tgz" trials/*/study.db* trials/*/best.yaml 2>/dev/null
    for f in ${KEEP:-issue51-cost.md issue51-report.md issue51-truth.jsonl expert51.jsonl}; do [ -f "$BG/$f" ] && cp "$BG/$f" "$OUT/"; done
    tail -40 "$BG/bar.log" ;;
  *) echo "usage: background.sh start STAGE... | wait"; exit 2 ;;
esac
