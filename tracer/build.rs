//! Builds the eBPF object (tracer-ebpf) with aya-build and leaves it in
//! OUT_DIR, where `include_bytes_aligned!` embeds it into the binary.
use anyhow::{Context as _, anyhow};
use aya_build::{Package, Toolchain};

/// The nightly that builds the eBPF crate: its LLVM (22) must not be newer
/// than the LLVM bpf-linker links (scripts/setup.sh installs both).
const EBPF_TOOLCHAIN: &str = "nightly-2026-05-20";

fn main() -> anyhow::Result<()> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?;
    let root = std::path::Path::new(&manifest_dir)
        .parent()
        .ok_or_else(|| anyhow!("tracer has no parent directory"))?
        .join("tracer-ebpf");
    let root = root
        .to_str()
        .ok_or_else(|| anyhow!("non-UTF-8 path {}", root.display()))?;
    aya_build::build_ebpf(
        [Package {
            name: "tracer-ebpf",
            root_dir: root,
            ..Default::default()
        }],
        Toolchain::Custom(EBPF_TOOLCHAIN),
    )
    .context("building the eBPF programs (needs the nightly rust-src and bpf-linker; see README)")
}
