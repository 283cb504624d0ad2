//! The release (issue 48): `bash scripts/release.sh` from this checkout, as
//! CI runs it for a tag, and what it produced.
//!
//! What is proven: the command succeeds and leaves the tarball, the image
//! archive and SHA256SUMS, which `sha256sum -c` accepts; the tarball's
//! binary is the release build (same `--version`, with the commit) and
//! comes with its man pages, bash/zsh/fish completions, README, CHANGELOG
//! and both license texts; the image holds the binary and no toolchain,
//! carries the version and revision as OCI labels, and runs `gdrtrace
//! doctor` under podman (runc, the DaemonSet's capabilities, host PID),
//! which finds BPF usable there; `--version` in the image is the binary's.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use crate::container::release_binary;
use gdrtrace::cmd::doctor::Doctor;
use integration_tests::{can_trace, have, repo_root, run_bounded, scratch, stderr, stdout};

const HOW: &str = "bash scripts/setup.sh --vm installs it";

fn sh(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(out.status.success(), "{what}: {}{}", stdout(&out), stderr(&out));
    stdout(&out)
}

fn podman() -> Command {
    let mut c = Command::new("podman");
    c.args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"]);
    c
}

/// `podman run` of the image (podman's default ulimits exceed this host's
/// hard limits, as in tests/it/container.rs).
fn podman_run(image: &str, options: &[&str], args: &[&str]) -> Command {
    let mut c = podman();
    c.args([
        "run",
        "--rm",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
    ])
    .args(options)
    .arg(image)
    .args(args);
    c
}

#[test]
fn the_release_command_builds_the_tarball_and_an_image_that_runs_doctor() {
    let test = "the_release_command_builds_the_tarball_and_an_image_that_runs_doctor";
    if !can_trace(test) || !have(test, "podman", HOW) || !have(test, "runc", HOW) {
        return;
    }
    let Some(bin) = release_binary() else {
        assert!(
            !integration_tests::trace_required(),
            "{test}: target/release/gdrtrace is not built (scripts/test.sh builds it before the tests)"
        );
        println!("skipping: {test}: target/release/gdrtrace is not built (cargo build --release -p tracer)");
        return;
    };
    let root = repo_root();
    let mut release = Command::new("bash");
    release.arg(root.join("scripts/release.sh")).current_dir(&root);
    // Cargo gives this test its own package's variables; build scripts that
    // watch them (ring's reruns on CARGO_MANIFEST_DIR) made release.sh's
    // `cargo build --release` rebuild the binary test.sh had just built
    // (two minutes of both cores), and the next build rebuild it back.
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(set_for_this_test) {
            release.env_remove(&key);
        }
    }
    let (out, killed) = run_bounded(&mut release, Duration::from_secs(1200));
    assert!(!killed, "scripts/release.sh did not finish in 20 minutes");
    assert!(
        out.status.success(),
        "scripts/release.sh: {}{}",
        stdout(&out),
        stderr(&out)
    );
    println!("{}", stdout(&out).trim());
    let version = sh(Command::new(&bin).arg("--version"), "gdrtrace --version");
    let version = version
        .trim()
        .strip_prefix("gdrtrace ")
        .expect("gdrtrace VERSION")
        .to_string();
    let (release, revision) = version.split_once('+').expect("RELEASE+REVISION");
    assert!(!revision.is_empty() && revision != "unknown", "{version}");

    let dist = root.join("target/dist");
    let name = format!("gdrtrace-{release}-{}-linux-gnu", std::env::consts::ARCH);
    let tarball = dist.join(format!("{name}.tar.gz"));
    let archive = dist.join(format!("gdrtrace-image-{release}.tar"));
    for f in [&tarball, &archive] {
        assert!(f.is_file(), "{} is missing", f.display());
    }
    let sums = sh(
        Command::new("sha256sum").args(["-c", "SHA256SUMS"]).current_dir(&dist),
        "sha256sum -c",
    );
    assert_eq!(sums.matches(": OK").count(), 2, "{sums}");

    let dir = scratch("release");
    sh(
        Command::new("tar").arg("-xzf").arg(&tarball).arg("-C").arg(&dir),
        "unpacking",
    );
    let top = dir.join(&name);
    let shipped = sh(
        Command::new(top.join("bin/gdrtrace")).arg("--version"),
        "the shipped binary",
    );
    assert_eq!(shipped.trim(), format!("gdrtrace {version}"));
    for f in [
        "share/man/man1/gdrtrace.1",
        "share/man/man1/gdrtrace-attach.1",
        "share/bash-completion/completions/gdrtrace",
        "share/zsh/site-functions/_gdrtrace",
        "share/fish/vendor_completions.d/gdrtrace.fish",
        "README.md",
        "CHANGELOG.md",
        "LICENSE-MIT",
        "LICENSE-APACHE",
    ] {
        assert!(top.join(f).is_file(), "{f} is not in {}", tarball.display());
    }
    assert!(
        std::fs::read_to_string(top.join("LICENSE-APACHE"))
            .expect("LICENSE-APACHE")
            .contains("Apache License"),
        "the Apache license text"
    );

    let image = format!("localhost/gdrtrace:{release}");
    let inspect = sh(
        podman().args(["image", "inspect", "--format", "{{json .Config}}", &image]),
        "podman image inspect",
    );
    let config: serde_json::Value = serde_json::from_str(&inspect).expect("the image config");
    assert_eq!(config["Labels"]["org.opencontainers.image.revision"], revision);
    assert_eq!(config["Labels"]["org.opencontainers.image.version"], version);
    assert_eq!(config["Entrypoint"], serde_json::json!(["/usr/local/bin/gdrtrace"]));
    assert_no_toolchain(&image);

    let in_image = sh(&mut podman_run(&image, &[], &["--version"]), "--version in the image");
    assert_eq!(in_image.trim(), format!("gdrtrace {version}"));
    if !Path::new("/sys/kernel/tracing/events").is_dir() {
        let _ = Command::new("mount")
            .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
            .status();
    }
    // The DaemonSet's capabilities and mounts; podman's own seccomp profile
    // refuses bpf() without SYS_ADMIN (tests/it/container.rs), hence unconfined.
    let doctor = sh(
        &mut podman_run(
            &image,
            &[
                "--pid=host",
                "--read-only",
                "--cap-drop",
                "ALL",
                "--cap-add",
                "BPF,PERFMON,SYS_PTRACE,DAC_READ_SEARCH",
                "--security-opt",
                "seccomp=unconfined",
                "-v",
                "/sys/kernel/tracing:/sys/kernel/tracing:ro",
            ],
            &["doctor", "--format", "json"],
        ),
        "gdrtrace doctor in the image",
    );
    let d: Doctor = serde_json::from_str(&doctor).expect("doctor's JSON");
    assert!(d.permitted && d.usable, "doctor in the image: {}", d.reason);
    assert!(
        d.program_kinds.iter().any(|k| k.kind == "tracepoint" && k.available),
        "{doctor}"
    );
    println!("doctor in {image}: {}", d.reason);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The image's files: the binary, and no compiler, cargo or shell.
fn assert_no_toolchain(image: &str) {
    let mount = sh(podman().args(["image", "mount", image]), "podman image mount");
    let fs = PathBuf::from(mount.trim());
    let present: Vec<&str> = [
        "usr/bin/cc",
        "usr/bin/gcc",
        "usr/bin/rustc",
        "usr/bin/cargo",
        "usr/bin/ld",
        "bin/sh",
    ]
    .into_iter()
    .filter(|p| fs.join(p).exists())
    .collect();
    let binary = fs.join("usr/local/bin/gdrtrace").is_file();
    let _ = podman().args(["image", "unmount", image]).output();
    assert!(binary, "no /usr/local/bin/gdrtrace in {image}");
    assert!(present.is_empty(), "{image} holds {present:?}");
}

/// The variables cargo sets for a test binary of its package, not the
/// user's own (`CARGO_HOME`, `CARGO_TARGET_DIR` stay), and the lint
/// wrapper scripts/test.sh builds the debug profile with (a release build
/// under it is another build than the one test.sh made).
fn set_for_this_test(key: &str) -> bool {
    matches!(
        key,
        "RUSTC_WORKSPACE_WRAPPER"
            | "CLIPPY_ARGS"
            | "CARGO_MANIFEST_DIR"
            | "CARGO_MANIFEST_PATH"
            | "CARGO_MANIFEST_LINKS"
            | "CARGO_CRATE_NAME"
            | "CARGO_TARGET_TMPDIR"
            | "CARGO_PRIMARY_PACKAGE"
            | "CARGO_RUSTC_CURRENT_DIR"
    ) || key.starts_with("CARGO_PKG_")
        || key.starts_with("CARGO_BIN_EXE_")
}
