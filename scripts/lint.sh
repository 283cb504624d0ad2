#!/usr/bin/env bash
# The habits every change keeps: formatting, and clippy with warnings as
# errors on every crate. User space with the pinned stable
# (rust-toolchain.toml); the eBPF crate with the dated nightly that builds
# it (tracer/build.rs), for its own target, the way aya-build compiles it.
# Run by scripts/test.sh before the long tests; fast on its own.
set -euo pipefail
cd "$(dirname "$0")/.."
nightly=$(sed -n 's/^const EBPF_TOOLCHAIN: &str = "\(.*\)";/\1/p' tracer/build.rs)

cargo fmt --all --check
cargo clippy --quiet --workspace --exclude tracer-ebpf --all-targets -- -D warnings
# Its own target directory: the nightly's artifacts never evict the stable's.
cargo "+$nightly" clippy --quiet -p tracer-ebpf --bins --release \
  --target bpfel-unknown-none -Z build-std=core --target-dir target/ebpf-clippy -- -D warnings
