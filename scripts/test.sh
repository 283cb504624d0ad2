#!/usr/bin/env bash
# The whole test suite: formatting and clippy (scripts/lint.sh; the
# user-space workspace is linted while it builds), unit tests, root-only
# integration tests on this host (real BPF: tracepoints, uprobes, ring
# buffer), and the VM tier (Debian 6.1 and 6.12 kernels with
# Soft-RoCE, booted side by side) for the kernel probes. Each step says
# how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."
# A one-off build: incremental state would only take disk.
export CARGO_INCREMENTAL=0
# Runs a step and says how long it took; returns its status (a caller's
# `step ... || x=$?` turns errexit off inside, so the status is passed on
# by hand).
step() {
    local started=$SECONDS rc=0
    "$@" || rc=$?
    echo "test.sh: $* took $((SECONDS - started)) s (exit $rc)" >&2
    return "$rc"
}
step bash scripts/setup.sh --vm
mkdir -p target/release
# Clippy lints the workspace while it compiles: its debug and test builds
# run with clippy-driver as the workspace's wrapper (`lint.sh --env`), so
# the tree is compiled once, not also checked by `cargo clippy`; a lint
# fails the build step it is found in.
mapfile -t lint_env < <(bash scripts/lint.sh --env)
linted() { env "${lint_env[@]}" "$@"; }
# xtask first: it runs the VM tier.
step linted cargo build --quiet -p xtask

# The VM tier (software emulation: CPU-bound) starts now at the lowest CPU
# priority: it fetches its kernels and boots beside the builds, its guests
# wait for the release binary (--wait-for), and its checks run beside the
# host tests, on the CPU they leave idle while they wait on their
# workloads (at equal priority it starved the serve tests' agent). Its
# output follows theirs.
ready=target/release/.ready-for-vm
rm -f "$ready"
vm_log=target/vm-test.log
vm_started=$SECONDS
CHECK_TIMEOUT=600 nice -n 19 target/debug/xtask vm-test --kernel all --bin target/release/gdrtrace \
    --wait-for "$ready" --timeout 1800 --jobs 2 > "$vm_log" 2>&1 &
vm=$!
echo "test.sh: VM tier started at nice 19, its checks waiting for the release build; its output follows the host tests' ($vm_log)" >&2
# The release build beside the lints and the debug build: its profile has
# a directory and a lock of its own. Its end lets the VM checks start.
release_log=target/release-build.log
release_started=$SECONDS
bash -c 'cargo build --quiet --release -p tracer && touch "$1"' release "$ready" > "$release_log" 2>&1 &
release=$!
# An interrupted suite stops the builds and the VMs (xtask kills them on
# SIGTERM).
trap 'pkill -P "$release" 2>/dev/null; kill "$release" "$vm" 2>/dev/null || true' EXIT
step bash scripts/lint.sh --except-workspace
# The tests' build, binaries included: `cargo build -p tracer` would build
# them with other features (the tests' dev-dependencies add some to libc,
# flate2's backends and aya's dependencies), and the test step would
# compile the tracer a second time.
step linted cargo test --quiet --workspace --exclude tracer-ebpf --no-run
release_rc=0
wait "$release" || release_rc=$?
cat "$release_log"
echo "test.sh: cargo build --quiet --release -p tracer (beside them) took $((SECONDS - release_started)) s (exit $release_rc)" >&2
[ "$release_rc" = 0 ]

host=0
step linted cargo test --workspace --exclude tracer-ebpf --no-fail-fast || host=$?
vm_rc=0
wait "$vm" || vm_rc=$?
trap - EXIT
cat "$vm_log"
echo "test.sh: the VM tier took $((SECONDS - vm_started)) s (exit $vm_rc)" >&2
if [ "$host" != 0 ] || [ "$vm_rc" != 0 ]; then
    echo "test.sh: FAILED: host tests exit $host, VM tier exit $vm_rc" >&2
    exit 1
fi
echo "test.sh: all steps passed in $SECONDS s" >&2
