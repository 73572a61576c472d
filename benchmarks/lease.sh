#!/usr/bin/env bash
# One call of the device tool: install the carried wheels (.whl, ../shared/tools/gpu-wheels.sh), run
# benchmarks/h200-bar.sh STAGE... under LIMIT seconds (SIGINT to the whole process group at the limit: a search
# stops as on Ctrl-C, its study kept), then pack $OUT into results.tgz and the studies into trials-final.tgz
# (the tool returns at most 8 files).
#   LIMIT=555 GPUS=0 bash benchmarks/lease.sh info memcompile
set -u
OUT=${OUT:-bench-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD OUT
timeout -s INT "${LIMIT:-555}" bash benchmarks/h200-bar.sh "$@"
echo "h200-bar.sh exit $?"
tar czf /tmp/trials-final.tgz --exclude=inductor-cache --exclude='*compile-cache*' --exclude='*.pt' trials 2>/dev/null
(cd "$OUT" && tar czf /tmp/results.tgz --exclude=trials.tgz .)
rm -rf "${OUT:?}"/*
mv /tmp/results.tgz /tmp/trials-final.tgz "$OUT"/
ls -la "$OUT"
