//! Helpers for gdrtrace's root-only integration tests (run on this host by
//! the README's test command; kernel-probe tests run in the VM tier).
use std::process::{Command, Output};

/// Whether this run must trace: under CI (`CI=true`) or wherever
/// `GDRTRACE_REQUIRE_TRACE=1` says the suite is meant to.
pub fn trace_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true") || std::env::var("GDRTRACE_REQUIRE_TRACE").is_ok_and(|v| v == "1")
}

/// Why this process cannot use BPF and tracefs, if it cannot.
pub fn trace_privilege() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root (BPF and tracefs)".into());
    }
    // Root without the capabilities (a restricted container) cannot either.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        .unwrap_or(0);
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    const CAP_BPF: u64 = 1 << 39;
    if eff & (CAP_SYS_ADMIN | CAP_BPF) == 0 {
        return Err(format!("root without CAP_SYS_ADMIN or CAP_BPF (CapEff {eff:x})"));
    }
    Ok(())
}

/// Whether the tests can use BPF here. Where the suite must trace
/// ([`trace_required`]) a missing privilege fails the test, so a CI run
/// cannot pass having traced nothing; elsewhere it prints
/// `skipping: <reason>` and the test returns.
pub fn can_trace(test: &str) -> bool {
    match trace_privilege() {
        Ok(()) => true,
        Err(why) if trace_required() => {
            panic!("{test}: {why}, and this run must trace (CI=true or GDRTRACE_REQUIRE_TRACE=1)")
        }
        Err(why) => {
            println!("skipping: {test}: {why}");
            false
        }
    }
}

/// Runs `cmd` with its output captured, killing it (and its process group)
/// after `limit`: returns the output and whether it had to be killed.
pub fn run_bounded(cmd: &mut Command, limit: std::time::Duration) -> (Output, bool) {
    use std::os::unix::process::CommandExt as _;
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawning");
    let pid = child.id() as i32;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = done.clone();
    let killer = std::thread::spawn(move || {
        let until = std::time::Instant::now() + limit;
        while std::time::Instant::now() < until {
            if d.load(std::sync::atomic::Ordering::Relaxed) {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // SAFETY: signalling the process group we started.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        true
    });
    let out = child.wait_with_output().expect("waiting");
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let killed = killer.join().unwrap_or(false);
    (out, killed)
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

/// This object's programs loaded in the kernel (by the names the object
/// gives them; the kernel keeps the first 15 bytes).
pub fn our_programs() -> usize {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|p| {
            p.name_as_str().is_some_and(|n| {
                [
                    "sched_process_f",
                    "sys_enter_io_ur",
                    "sys_exit_io_uri",
                    "sys_enter_sendt",
                    "sys_exit_recvms",
                    "uapi_entry",
                    "uapi_return",
                ]
                .contains(&n)
            })
        })
        .count()
}

/// BPF links in the kernel (all of them: callers run alone), and the
/// tracefs probe entries (legacy kprobe/uprobe attach writes them).
pub fn links_and_probe_events() -> (usize, usize) {
    let links = aya::programs::loaded_links().filter_map(Result::ok).count();
    let events = ["/sys/kernel/tracing/uprobe_events", "/sys/kernel/tracing/kprobe_events"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|t| t.lines().count())
        .sum();
    (links, events)
}
