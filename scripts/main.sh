#!/usr/bin/env bash
# The main job: set up, build, and run `gdrtrace validate`, which picks the
# workloads this machine supports, traces them and prints the report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --quiet -p tracer
exec ./target/release/gdrtrace validate "$@"
