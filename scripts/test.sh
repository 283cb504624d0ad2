#!/usr/bin/env bash
# The whole test suite: formatting and clippy (scripts/lint.sh), unit
# tests, root-only integration tests on this host (real BPF: tracepoints,
# uprobes, ring buffer), then the VM tier (Debian 6.1 and 6.12 kernels with
# Soft-RoCE) for the kernel probes.
set -euo pipefail
cd "$(dirname "$0")/.."
# A one-off build: incremental state would only take disk.
export CARGO_INCREMENTAL=0
bash scripts/setup.sh --vm
bash scripts/lint.sh
cargo build --quiet -p tracer
cargo build --quiet --release -p tracer
cargo test --workspace --exclude tracer-ebpf --no-fail-fast
cargo xtask vm-test --kernel all --bin target/release/gdrtrace --timeout 900
