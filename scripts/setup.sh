#!/usr/bin/env bash
# Installs what building and testing gdrtrace needs on a fresh Debian 12
# machine, idempotently: Debian packages (LLVM 22 for bpf-linker, the C
# libraries the -sys crates need), the nightly toolchain's rust-src and
# clippy, and bpf-linker built against LLVM 22. With --vm, also what the VM test tier
# needs (QEMU, virtme-ng, rdma-core, perftest), Chromium for the
# compare page's screenshot test and tmux for the `top` tests.
set -euo pipefail
cd "$(dirname "$0")/.."

want_vm=0
[ "${1:-}" = "--vm" ] && want_vm=1

export DEBIAN_FRONTEND=noninteractive
pkgs=(llvm-22-dev libibverbs-dev librdmacm-dev libclang-dev clang pkg-config util-linux)
# The test suite renders `gdrtrace compare`'s HTML page in headless Chromium
# and drives `gdrtrace top` in a tmux pane.
if [ "$want_vm" = 1 ]; then pkgs+=(chromium tmux); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The pinned stable of rust-toolchain.toml (user space) and the dated nightly
# of tracer/build.rs (eBPF; its LLVM matches bpf-linker's).
stable=$(sed -n 's/^channel = "\(.*\)"/\1/p' rust-toolchain.toml)
nightly=$(sed -n 's/^const EBPF_TOOLCHAIN: &str = "\(.*\)";/\1/p' tracer/build.rs)
if ! rustup toolchain list | grep -q "^$stable-"; then
  echo "setup: installing Rust $stable (rust-toolchain.toml)"
  rustup toolchain install "$stable" --profile minimal -c rustfmt -c clippy >/dev/null
fi
installed=$(rustup component list --toolchain "$nightly" --installed 2>/dev/null || true)
if ! grep -q '^rust-src' <<<"$installed" || ! grep -q '^clippy' <<<"$installed"; then
  echo "setup: installing $nightly with rust-src (for the BPF target) and clippy (for the eBPF crate's lints)"
  rustup toolchain install "$nightly" --profile minimal -c rust-src -c clippy >/dev/null
fi

if ! command -v bpf-linker >/dev/null 2>&1; then
  echo "setup: building bpf-linker against LLVM 22 (about a minute)"
  LLVM_PREFIX=/usr/lib/llvm-22 cargo install --quiet bpf-linker --version 0.13.0 --no-default-features --features llvm-22
fi

if [ "$want_vm" = 1 ]; then
  bash scripts/install-vm-deps.sh
fi
