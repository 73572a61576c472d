#!/usr/bin/env bash
# Render an autotune HTML report in headless Chromium and keep a screenshot (docs/report.png).
#   docs/screenshot.sh [STUDY_DIR] [OUT_PNG]
# Installs Debian's chromium when it is missing (root, apt). Uses the committed GPT-2 small study by default.
set -euo pipefail
cd "$(dirname "$0")/.."
study=${1:-benchmarks/results/2026-11-29-h200-gpt2-small}
png=${2:-docs/report.png}
command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
html=$(mktemp -d)
.venv/bin/autotune report "$study" --html "$html" >/dev/null
profile=$(mktemp -d)
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$profile" --hide-scrollbars \
  --window-size=1200,2400 --screenshot="$png" "file://$html/report.html" 2>/dev/null
echo "wrote $png"
