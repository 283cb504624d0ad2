//! Helpers for gdrtrace's root-only integration tests (run on this host by
//! the README's test command; kernel-probe tests run in the VM tier).
use std::process::{Command, Output};

/// Whether the tests can use BPF here; prints `skipping: <reason>` if not.
pub fn can_trace(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipping: {test}: needs root (BPF and tracefs)");
        return false;
    }
    true
}

/// The gdrtrace binary of this build (`$GDRTRACE_BIN`, or next to the test
/// executable's `deps/` directory: the README's test command builds it first).
pub fn gdrtrace_path() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("GDRTRACE_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target directory");
    let bin = dir.join("gdrtrace");
    assert!(
        bin.is_file(),
        "{} is missing: build it first (cargo build -p tracer)",
        bin.display()
    );
    bin
}

/// The gdrtrace binary, as a command.
pub fn gdrtrace() -> Command {
    Command::new(gdrtrace_path())
}

/// Runs gdrtrace with args and returns its output.
pub fn run(args: &[&str]) -> Output {
    gdrtrace().args(args).output().expect("spawning gdrtrace")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn compiler() -> String {
    std::env::var("CC")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cc".into())
}

/// Runs the host's C compiler (`$CC`, else `cc`) with `args`; panics with its
/// output if it fails.
pub fn compile(args: &[&str]) {
    let cc = compiler();
    let out = Command::new(&cc)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running the C compiler `{cc}` (set $CC to override): {e}"));
    assert!(
        out.status.success(),
        "{cc} {} failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}
