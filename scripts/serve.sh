#!/usr/bin/env bash
# Fleet mode on this machine, from a fresh checkout, as root: set up (as
# scripts/setup.sh), build the release binary, then run the node agent in
# the foreground with any `gdrtrace serve` options given (Ctrl-C stops it).
#
#   bash scripts/serve.sh                     # metrics on http://127.0.0.1:9464/metrics
#   bash scripts/serve.sh --listen 0.0.0.0:9464 --cpu-budget 0.1
#
# Then `bash scripts/prometheus.sh` starts a Prometheus scraping it
# (docs/serve.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --quiet --release -p tracer
exec target/release/gdrtrace serve "$@"
