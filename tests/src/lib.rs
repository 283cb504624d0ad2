//! Helpers for gdrtrace's root-only integration tests (run on this host by
//! the README's test command; kernel-probe tests run in the VM tier).
pub mod k8s;
pub mod standin;
pub mod trace_event;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

pub use gdrtrace::report::Report;

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
        Ok(()) => {
            share_bpf();
            true
        }
        Err(why) if trace_required() => {
            panic!("{test}: {why}, and this run must trace (CI=true or GDRTRACE_REQUIRE_TRACE=1)")
        }
        Err(why) => {
            println!("skipping: {test}: {why}");
            false
        }
    }
}

/// The tests share one binary (cargo links it once) and run in parallel.
/// A test that counts what every tracer leaves in the kernel (programs,
/// links) takes the kernel alone ([`exclusive_bpf`]); every other tracing
/// test shares it, from [`can_trace`] to the end of its thread (libtest runs
/// each test on a thread of its own when it runs tests in parallel).
static BPF: std::sync::RwLock<()> = std::sync::RwLock::new(());

enum Held {
    Shared(#[expect(dead_code, reason = "held for its drop")] std::sync::RwLockReadGuard<'static, ()>),
    Alone,
}

thread_local! {
    static HELD: std::cell::RefCell<Option<Held>> = const { std::cell::RefCell::new(None) };
}

fn share_bpf() {
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        if h.is_none() {
            *h = Some(Held::Shared(BPF.read().unwrap_or_else(|e| e.into_inner())));
        }
    });
}

/// Takes the kernel's BPF state for this test alone: no other test of the
/// binary runs a tracer until the guard is dropped.
pub fn exclusive_bpf() -> std::sync::RwLockWriteGuard<'static, ()> {
    // A thread that ran a test before (one test thread) gives its share back.
    HELD.with(|h| *h.borrow_mut() = None);
    let guard = BPF.write().unwrap_or_else(|e| e.into_inner());
    HELD.with(|h| *h.borrow_mut() = Some(Held::Alone));
    guard
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

/// The repository root.
pub fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Whether a command is on PATH; prints `skipping: <why>` if not. Where
/// the run must trace ([`trace_required`]) a missing tool is a failure:
/// the test set-up installs it.
pub fn have(test: &str, command: &str, how: &str) -> bool {
    let found =
        std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(command).is_file()));
    if !found {
        assert!(
            !trace_required(),
            "{test}: `{command}` is not installed ({how}), and this run must trace (CI=true or GDRTRACE_REQUIRE_TRACE=1)"
        );
        println!("skipping: {test}: `{command}` is not installed ({how})");
    }
    found
}

/// Percent-encodes a URL query value.
pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A plain HTTP/1.1 GET (no client library: the tests talk to two servers
/// on 127.0.0.1). Returns the status code, the headers and the body, or the
/// error text if the server is not there.
pub fn http_get(addr: &str, path: &str, accept: Option<&str>) -> Result<(u16, String, String), String> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| format!("connecting to {addr}: {e}"))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("reading from {addr}: {e}"))?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP header end")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("no HTTP status")?;
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, head.to_string(), body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Metric names an exposition (text format) defines: each `# TYPE` family,
/// with `_bucket`, `_sum` and `_count` for histograms.
pub fn metric_names(exposition: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut it = rest.split_whitespace();
        let (Some(name), Some(kind)) = (it.next(), it.next()) else {
            continue;
        };
        out.insert(name.to_string());
        if kind == "histogram" {
            for s in ["_bucket", "_sum", "_count"] {
                out.insert(format!("{name}{s}"));
            }
        }
    }
    out
}

/// The metric names in docs/serve.md's table.
pub fn documented_metrics() -> std::collections::BTreeSet<String> {
    let doc = std::fs::read_to_string(repo_root().join("docs/serve.md")).expect("docs/serve.md");
    // The agent's own families and the `process_*` ones of client libraries.
    doc.lines()
        .filter_map(|l| {
            ["gdrtrace_", "process_"]
                .into_iter()
                .find_map(|p| l.strip_prefix(&format!("| `{p}")).map(|rest| (p, rest)))
        })
        .filter_map(|(p, rest)| rest.split('`').next().map(|n| format!("{p}{n}")))
        .collect()
}

/// Metric names (`gdrtrace_*`) a PromQL text refers to.
pub fn promql_metric_names(expr: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("gdrtrace_") {
        let start = i + at;
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
            end += 1;
        }
        // A label value or a word inside an annotation is no metric.
        let quoted = start > 0 && matches!(b[start - 1], b'"' | b'\'' | b'`');
        if !quoted {
            out.insert(expr[start..end].to_string());
        }
        i = end;
    }
    out
}

/// YAML documents as JSON, through python3's yaml (kubernetes-validate's
/// own dependency): one YAML reader, the one the validator uses.
pub fn yaml(path: &std::path::Path) -> Vec<serde_json::Value> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys, json, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
        ])
        .arg(path)
        .output()
        .expect("running python3");
    assert!(
        out.status.success(),
        "python3 yaml on {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON from python3")
}

/// `KEY=N` from a workload's summary line (`pin-churn: pid=42 registrations=200 ...`).
pub fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {line}"))
        .parse()
        .unwrap_or_else(|e| panic!("{key}= in {line}: {e}"))
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

/// The path of a file under tests/fixtures/ (`reports/x.json`).
pub fn fixture(rel: &str) -> String {
    format!("{}/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"))
}

/// A fresh, empty scratch directory `gdrtrace-NAME-PID` for one test.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(unique(&format!("gdrtrace-{name}")));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("creating {}: {e}", d.display()));
    d
}

/// `name` made unique to this test process and call: the tests share one
/// process and run in parallel, so a pid alone does not tell two apart.
pub fn unique(name: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{name}-{}-{n}", std::process::id())
}

/// A path as the `&str` an argument list wants.
pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// A file's text (a test fails naming the file otherwise).
pub fn read_text(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A JSON document of the project's own (a baseline, a comparison, a job
/// document...) read into its type: a renamed or retyped field fails here,
/// naming the field, where an untyped lookup would read null.
pub fn parse_as<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> T {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).unwrap_or_else(|e| panic!("{what}: `{}`: {}\n{text}", e.path(), e.inner()))
}

/// As [`parse_as`], from a file.
pub fn read_as<T: serde::de::DeserializeOwned>(p: &Path) -> T {
    parse_as(&p.display().to_string(), &read_text(p))
}

/// A report, through the reader `compare` and `explain` use
/// (`report::read_typed`: every section into its type, shapes checked).
pub fn parse_report(what: &str, text: &str) -> Report {
    let v: serde_json::Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: {e}\n{text}"));
    gdrtrace::report::read_typed(&v).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// As [`parse_report`], from a file.
pub fn read_report(p: &Path) -> Report {
    parse_report(&p.display().to_string(), &read_text(p))
}

/// As [`parse_report`], from a report held as JSON (a baseline's run).
pub fn report_of(what: &str, v: &serde_json::Value) -> Report {
    gdrtrace::report::read_typed(v).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// A document of the project's own written as the project writes it.
pub fn write_as<T: serde::Serialize>(p: &Path, v: &T) {
    std::fs::write(p, serde_json::to_string_pretty(v).expect("serializable"))
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
}

/// A value as the JSON the project writes (to compare two typed sections
/// that do not implement `PartialEq`, or to print one).
pub fn to_json<T: serde::Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).expect("serializing")
}

/// A JSON file, parsed (a test fails naming the file otherwise).
pub fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&read_text(p)).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The rule for bad input: exit `code`, one line on stderr that starts
/// `gdrtrace: ` and holds every one of `expect`, never a panic or a
/// backtrace.
pub fn assert_one_line(o: &Output, code: i32, expect: &[&str], what: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{what}: {err}{}", stdout(o));
    // clap's tip ("  tip: ...") may follow the line, as the field's tools keep it.
    let lines = err.trim_end().lines().filter(|l| !l.starts_with("  tip: ")).count();
    assert_eq!(lines, 1, "{what}: one line expected:\n{err}");
    assert!(err.starts_with("gdrtrace: "), "{what}: {err}");
    for e in expect {
        assert!(err.contains(e), "{what}: want '{e}' in: {err}");
    }
    for bug in ["panicked", "backtrace", "internal error"] {
        assert!(!err.contains(bug), "{what}: {err}");
    }
}

/// The `attach` section `gdrtrace attach` adds to a report's workloads, the
/// fields the tests read. `Report::workloads` keeps each workload's section
/// as open JSON (each command writes its own), so the section is read here
/// into its type; a renamed field fails naming it.
#[derive(Debug, serde::Deserialize)]
pub struct AttachSection {
    pub latency_ms: f64,
    pub all: bool,
    /// With `--all`: the processes running at attach, and those of them
    /// that mapped a traced library.
    pub running: Option<usize>,
    pub with_libraries: Option<Vec<u32>>,
}

/// The report's `attach` section (a test fails if it has none).
pub fn attach_section(r: &Report) -> AttachSection {
    let v = r
        .workloads
        .iter()
        .find_map(|w| w.get("attach"))
        .unwrap_or_else(|| panic!("no attach section in {:?}", r.workloads));
    parse_as("the attach section", &v.to_string())
}
