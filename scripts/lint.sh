#!/usr/bin/env bash
# The habits every change keeps: formatting, and clippy with warnings as
# errors on every crate. User space with the pinned stable
# (rust-toolchain.toml); the eBPF crate with the dated nightly that builds
# it (tracer/build.rs), for its own target, the way aya-build compiles it.
# Fast on its own.
#
# Usage: bash scripts/lint.sh [--env | --except-workspace]
#   --env               prints the environment that makes a debug build or
#                       test build of the workspace a linted one (clippy-driver
#                       as the workspace's compiler wrapper, warnings denied:
#                       what `cargo clippy` runs, there with `check`), one
#                       NAME=VALUE a line;
#   --except-workspace  everything but the user-space workspace's clippy, for
#                       a caller that builds the workspace with that
#                       environment (scripts/test.sh: the tree is then
#                       compiled once, not a second time by `cargo clippy`).
set -euo pipefail
cd "$(dirname "$0")/.."
nightly=$(sed -n 's/^const EBPF_TOOLCHAIN: &str = "\(.*\)";/\1/p' tracer/build.rs)

case "${1:-}" in
--env)
    echo "RUSTC_WORKSPACE_WRAPPER=$(rustup which clippy-driver)"
    echo "CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
    exit 0
    ;;
--except-workspace | "") ;;
*)
    echo "lint.sh: unknown option $1 (expected --env or --except-workspace)" >&2
    exit 2
    ;;
esac

cargo fmt --all --check
if [ "${1:-}" != --except-workspace ]; then
    cargo clippy --quiet --workspace --exclude tracer-ebpf --all-targets -- -D warnings
fi
# Its own target directory: the nightly's artifacts never evict the stable's.
cargo "+$nightly" clippy --quiet -p tracer-ebpf --bins --release \
  --target bpfel-unknown-none -Z build-std=core --target-dir target/ebpf-clippy -- -D warnings
