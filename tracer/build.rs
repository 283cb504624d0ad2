//! Builds the eBPF object (tracer-ebpf) with aya-build and leaves it in
//! OUT_DIR, where `include_bytes_aligned!` embeds it into the binary.
use anyhow::{Context as _, anyhow};
use aya_build::{Package, Toolchain};

/// The nightly that builds the eBPF crate: its LLVM (22) must not be newer
/// than the LLVM bpf-linker links (scripts/setup.sh installs both).
const EBPF_TOOLCHAIN: &str = "nightly-2026-05-20";

fn main() -> anyhow::Result<()> {
    stamp_revision();
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

/// The sources of the binary: what `.dirty` is judged on, and what reruns
/// this script when edited (relative to the workspace root).
const SOURCES: &[&str] = &[
    "tracer/src",
    "tracer/build.rs",
    "tracer/Cargo.toml",
    "tracer-common/src",
    "tracer-common/Cargo.toml",
    "tracer-ebpf/src",
    "tracer-ebpf/Cargo.toml",
    "Cargo.toml",
    "Cargo.lock",
];

/// Sets `GDRTRACE_REVISION` for `version.rs`: `$GDRTRACE_REVISION` when set
/// (a build from a source archive), else the short commit, `.dirty` when the
/// binary's sources differ from it, else `unknown` (no git).
fn stamp_revision() {
    println!("cargo:rerun-if-env-changed=GDRTRACE_REVISION");
    let rev = std::env::var("GDRTRACE_REVISION")
        .ok()
        .filter(|r| !r.is_empty())
        .or_else(git_revision)
        .unwrap_or_else(|| "unknown".into());
    // Semver build metadata takes [0-9A-Za-z-] separated by dots.
    let rev: String = rev
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '-' })
        .collect();
    println!("cargo:rustc-env=GDRTRACE_REVISION={rev}");
}

/// Runs git in this package's directory. Without optional locks: `git
/// status` would rewrite an index whose entries are racily clean (a fresh
/// clone's), and this script, which watches the index, would rerun at the
/// next build (the tests' build recompiled the tracer after the release
/// build's status call).
fn git(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .args(args)
        .current_dir(manifest_dir()?)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn manifest_dir() -> Option<String> {
    std::env::var("CARGO_MANIFEST_DIR").ok()
}

fn git_revision() -> Option<String> {
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    let root = git(&["rev-parse", "--show-toplevel"])?;
    // A new commit, a checkout, a staged change or an edited source reruns
    // this script (worktrees keep HEAD and the index apart from the refs).
    let mut watch: Vec<String> = ["HEAD", "index", "packed-refs"]
        .iter()
        .filter_map(|p| git(&["rev-parse", "--git-path", p]))
        .collect();
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]).and_then(|r| git(&["rev-parse", "--git-path", &r])) {
        watch.push(r);
    }
    for p in watch {
        // `--git-path` answers relative to the directory git ran in.
        let p = std::path::Path::new(&manifest_dir()?).join(p);
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    for s in SOURCES {
        println!("cargo:rerun-if-changed={root}/{s}");
    }
    // `:/` roots the paths at the top (git runs in tracer/).
    let paths: Vec<String> = SOURCES.iter().map(|s| format!(":/{s}")).collect();
    let mut status = vec!["status", "--porcelain", "--untracked-files=no", "--"];
    status.extend(paths.iter().map(String::as_str));
    let dirty = git(&status).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{commit}.dirty") } else { commit })
}
