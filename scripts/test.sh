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
cargo build --quiet -p xtask
# The VM tier (KVM guests, mostly waiting on their checks) runs beside the
# host tests (mostly waiting on traced jobs): one wall-clock wait, not two.
# Its log is printed when both are done.
vm_log=target/vm-test.log
target/debug/xtask vm-test --kernel all --bin target/release/gdrtrace --timeout 900 >"$vm_log" 2>&1 &
vm_pid=$!
host=0
cargo test --workspace --exclude tracer-ebpf --no-fail-fast || host=$?
vm=0
wait "$vm_pid" || vm=$?
cat "$vm_log"
echo "test: host tests exit $host, VM tier exit $vm"
[ "$host" = 0 ] && [ "$vm" = 0 ]
