#!/usr/bin/env bash
# Render an autotune HTML report in headless Chromium and keep a screenshot (docs/report.png).
#   docs/screenshot.sh [SOURCE] [MEMBER] [OUT_PNG]
# SOURCE is a study folder (holds study.db) or a tarball of trials/, MEMBER the study's folder inside it. The
# study is copied to a temporary folder first: benchmarks/results is never written to. Installs Debian's
# chromium when it is missing (root, apt). Default: the confirmed GPT-2 small search on one H200. AUTOTUNE:
# the autotune command (default .venv/bin/autotune).
set -euo pipefail
cd "$(dirname "$0")/.."
source=${1:-benchmarks/results/2026-11-29-h200-bar/trials.tgz}
member=${2:-trials/gpt2-small-hopper}
png=${3:-docs/report.png}
command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -d "$source" ]; then
  cp -r "$source" "$work/study"
else
  tar xzf "$source" -C "$work" "$member" && mv "$work/$member" "$work/study"
fi
${AUTOTUNE:-.venv/bin/autotune} report "$work/study" --html "$work/html" >/dev/null
# --virtual-time-budget: the screenshot waits for plotly's scripts to draw
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$work/profile" --hide-scrollbars \
  --window-size=1400,3000 --virtual-time-budget=15000 --screenshot="$png" "file://$work/html/report.html" 2>/dev/null
echo "wrote $png"
