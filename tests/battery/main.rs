//! The battery (issue 13): well over a hundred bad or hostile inputs against
//! the release binary (`target/release/gdrtrace`, built by the README's test
//! command before `cargo test`; `$GDRTRACE_BIN` overrides it). For each
//! input it checks:
//! - the exit code (exactly, where the README's table fixes it);
//! - no panic line ("panicked", "internal error") on stdout or stderr;
//! - no hang: the input is killed after its time limit and counted as not
//!   handled;
//! - nothing left behind: no process of the input's process group, and (as
//!   root) the same BPF programs, BPF links and tracefs uprobe/kprobe
//!   entries as before it (counted as `tests/it/attach.rs` counts them);
//! - for some, what the input must (not) have done (a marker file the
//!   traced command would have created, a fallback file, the report).
//!
//! It prints one line per input that was not handled, and a summary line:
//! `battery: N inputs tried, M handled`. Inputs that need BPF run only with
//! the privilege (under CI they must: see `can_trace`).
use std::{
    io::Write as _,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use integration_tests::{can_trace, fixture, links_and_probe_events, our_programs, trace_required};

/// How an input may end.
#[derive(Clone, Copy, Debug)]
enum Expect {
    Code(i32),
}

type Check = Box<dyn Fn(&Output) -> Result<(), String>>;

struct Case {
    name: String,
    args: Vec<String>,
    env: Vec<(&'static str, Option<String>)>,
    stdin: Option<PathBuf>,
    /// Standard output is a pipe whose reader has gone.
    stdout_closed: bool,
    expect: Expect,
    needs_bpf: bool,
    limit: Duration,
    check: Option<Check>,
}

impl Case {
    fn new(name: impl Into<String>, args: &[&str], expect: Expect) -> Self {
        Case {
            name: name.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
            stdin: None,
            stdout_closed: false,
            expect,
            needs_bpf: false,
            limit: Duration::from_secs(20),
            check: None,
        }
    }

    fn bpf(mut self) -> Self {
        self.needs_bpf = true;
        self.limit = Duration::from_secs(90);
        self
    }

    fn check(mut self, f: impl Fn(&Output) -> Result<(), String> + 'static) -> Self {
        self.check = Some(Box::new(f));
        self
    }
}

fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GDRTRACE_BIN") {
        return Some(p.into());
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/gdrtrace");
    p.is_file().then_some(p)
}

/// Our programs, all BPF links, and tracefs probe entries.
fn kernel_objects() -> (usize, usize, usize) {
    let (links, events) = links_and_probe_events();
    (our_programs(), links, events)
}

/// Processes in process group `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().nth(2)?.parse::<u32>().ok())
                    == Some(pgid)
            })
        })
        .collect()
}

/// Runs one case; Err says why it was not handled.
fn run_case(bin: &Path, c: &Case, as_root: bool) -> Result<(), String> {
    let before = as_root.then(kernel_objects);
    let mut cmd = Command::new(bin);
    cmd.args(&c.args).stderr(Stdio::piped()).process_group(0);
    for (k, v) in &c.env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.stdin(match &c.stdin {
        Some(p) => Stdio::from(std::fs::File::open(p).map_err(|e| format!("stdin {}: {e}", p.display()))?),
        None => Stdio::null(),
    });
    if c.stdout_closed {
        let (r, w) = std::io::pipe().map_err(|e| e.to_string())?;
        drop(r);
        cmd.stdout(w);
    } else {
        cmd.stdout(Stdio::piped());
    }
    let child = cmd.spawn().map_err(|e| format!("spawning: {e}"))?;
    drop(cmd);
    let pgid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(c.limit) {
        Ok(o) => o.map_err(|e| e.to_string())?,
        Err(_) => {
            // SAFETY: the process group this case started.
            unsafe { libc::kill(-(pgid as i32), libc::SIGKILL) };
            let _ = rx.recv_timeout(Duration::from_secs(10));
            // Let the killed tracer's programs and links go before the next input.
            let until = Instant::now() + Duration::from_secs(10);
            while before.is_some_and(|b| kernel_objects() != b) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
            return Err(format!("hung: killed after {} s", c.limit.as_secs()));
        }
    };
    // Leftovers first, whatever the verdict, so that nothing of this input
    // is counted against the next: the group's processes (a traced command
    // not waited for) and kernel objects (programs and links close with
    // their descriptors; the kernel gets a moment).
    let until = Instant::now() + Duration::from_secs(5);
    let leftovers = loop {
        let left = group_members(pgid);
        let kernel_ok = before.is_none_or(|b| kernel_objects() == b);
        if left.is_empty() && kernel_ok {
            break None;
        }
        if Instant::now() > until {
            // SAFETY: the process group this case started.
            unsafe { libc::kill(-(pgid as i32), libc::SIGKILL) };
            break Some(if left.is_empty() {
                format!("kernel objects left: before {before:?}, after {:?}", kernel_objects())
            } else {
                format!("processes left behind: {left:?}")
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err.lines().next().unwrap_or("").to_string();
    if text.contains("panicked") || text.contains("internal error") || text.contains("RUST_BACKTRACE") {
        return Err(format!("panic: {first}"));
    }
    let Expect::Code(want) = c.expect;
    if out.status.code() != Some(want) {
        return Err(format!("exit {:?}, want {want}: {first}", out.status.code()));
    }
    if let Some(why) = leftovers {
        return Err(why);
    }
    if let Some(f) = &c.check {
        f(&out)?;
    }
    Ok(())
}

/// The scratch files the inputs point at.
struct Files {
    dir: PathBuf,
}

impl Files {
    fn p(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }
}

/// Whether the file a flag named was written (not empty).
fn written(path: &str) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(m) if m.len() > 0 => Ok(()),
        _ => Err(format!("{path} not written")),
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    // gzip(1) is everywhere the suite runs; the battery has no compressor of its own.
    let mut child = Command::new("gzip")
        .arg("-c")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("gzip");
    let mut stdin = child.stdin.take().expect("stdin");
    let data = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().expect("gzip output");
    writer.join().expect("writer").expect("writing to gzip");
    out.stdout
}

fn prepare(dir: &Path) -> Files {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("dir")).expect("scratch");
    let f = Files { dir: dir.to_path_buf() };
    let w = |name: &str, data: &[u8]| std::fs::write(dir.join(name), data).expect("scratch file");
    let report = std::fs::read_to_string(fixture("reports/pin-churn.json")).expect("fixture");
    let rec = std::fs::read_to_string(fixture("recordings/pin-churn.rec")).expect("fixture");
    let v: serde_json::Value = serde_json::from_str(&report).expect("fixture");
    let typed = integration_tests::report_of("the fixture report", &v);
    let wt = |name: &str, r: &integration_tests::Report| w(name, integration_tests::to_json(r).to_string().as_bytes());
    assert!(
        Command::new("mkfifo")
            .arg(dir.join("fifo"))
            .status()
            .expect("mkfifo")
            .success(),
        "mkfifo"
    );
    std::fs::File::create(dir.join("sparse"))
        .and_then(|f| f.set_len(1 << 30))
        .expect("sparse");
    w("empty", b"");
    w("nul", &[0u8; 100]);
    w("garbage.json", b"hello, world\n");
    w("trunc.json", &report.as_bytes()[..report.len() / 2]);
    w("trunc.rec", &rec.as_bytes()[..rec.len() / 2]);
    let gz = gzip(rec.as_bytes());
    w("rec.gz", &gz);
    w("trunc.gz", &gz[..gz.len() / 2]);
    w("notgz", &[0x1f, 0x8b, b'n', b'o', b't', b' ', b'g', b'z', b'i', b'p']);
    w("bomb.gz", &gzip(&vec![b'{'; 8 << 20]));
    w("long-line.rec", &vec![b'x'; 17 << 20]);
    w("binary.rec", &[0xffu8, 0xfe, 0x00, 0x01].repeat(64));
    let mut x = typed.clone();
    x.schema = "gdrtrace.report/v9";
    wt("newer.json", &x);
    let mut x = typed.clone();
    x.schema = "something/v1";
    wt("wrong-schema.json", &x);
    // untyped: values no typed report can hold, written into the raw JSON on purpose.
    let mut x = v.clone();
    x["operations"][0]["calls"] = serde_json::json!(-200);
    w("negated.json", x.to_string().as_bytes());
    let mut x = v.clone();
    x["operations"][0]["calls"] = "many".into();
    w("string-calls.json", x.to_string().as_bytes());
    let mut x = typed.clone();
    x.operations[0].errors = 1_000_000;
    wt("errors-over-calls.json", &x);
    let mut x = typed.clone();
    x.operations[0].latency.p50 = u64::MAX;
    wt("unordered.json", &x);
    let mut x = typed.clone();
    x.processes[0].cpu_seconds = Some(-1.0);
    wt("negative-cpu.json", &x);
    let mut x = typed.clone();
    x.operations.clear();
    x.processes.clear();
    x.verdicts.clear();
    wt("hollow.json", &x);
    let mut x = typed.clone();
    for p in &mut x.processes {
        p.registrations = 0;
    }
    wt("zero.json", &x);
    let mut x = v.clone();
    // A section missing on purpose: a typed report cannot be without it.
    x.as_object_mut().expect("object").remove("operations");
    w("no-operations.json", x.to_string().as_bytes());
    w("bad.toml", b"[defaults\n");
    w("negative.toml", b"[defaults]\nbandwidth_decrease_pct = -5\n");
    w("unknown-key.toml", b"[defaults]\nbandwith_decrease_pct = 5\n");
    w("nosuch.toml", b"[workloads.nosuch]\nbandwidth_decrease_pct = 5\n");
    w("nan.toml", b"[defaults]\nlatency_p50_increase_pct = nan\n");
    w("script", b"#!/bin/sh\nexit 0\n");
    // Issue 28: inputs an output may not overwrite, hostile names, values
    // no trace can have, a socket, a fake cgroup, a #! without interpreter.
    w("job.rec", rec.as_bytes());
    w("r.json", report.as_bytes());
    w(
        "hostile.rec",
        rec.replace("\"gdrtrace\"", "\"e\\u001b]0;PWN\\u0007\\u001b[2J\"")
            .as_bytes(),
    );
    // untyped: values no typed recording can hold, written into its raw lines on purpose.
    let edit_rec = |ty: &str, field: &str, value: serde_json::Value| -> String {
        let mut done = false;
        rec.lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).expect("fixture line");
                if !done && v["type"] == ty {
                    v[field] = value.clone();
                    done = true;
                }
                v.to_string() + "\n"
            })
            .collect()
    };
    w(
        "negative-duration.rec",
        edit_rec("footer", "duration_s", serde_json::json!(-1)).as_bytes(),
    );
    w(
        "negative-cpu.rec",
        edit_rec("sample", "cpu_seconds", serde_json::json!(-1.5)).as_bytes(),
    );
    w(
        "negative-dur-ns.rec",
        edit_rec("event", "dur_ns", serde_json::json!(-5)).as_bytes(),
    );
    std::fs::create_dir_all(dir.join("fakecg")).expect("fake cgroup");
    w("fakecg/cgroup.procs", b"1\n");
    drop(std::os::unix::net::UnixListener::bind(dir.join("sock")).expect("socket"));
    w("bad-interp", b"#!/nonexistent/interp\nexit 0\n");
    std::fs::set_permissions(
        dir.join("bad-interp"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let mut x = typed.clone();
    let mut p = x.processes[0].clone();
    p.pid = 999_999;
    p.registrations = u64::MAX;
    x.processes.push(p);
    wt("overflow.json", &x);
    // untyped: wrong types, written into the raw JSON on purpose.
    let mut x = v.clone();
    x["loss"] = serde_json::json!([1]);
    w("loss-array.json", x.to_string().as_bytes());
    let mut x = v.clone();
    x["kernel_histograms"][0]["calls"] = "12".into();
    w("string-kernel-calls.json", x.to_string().as_bytes());
    let mut x = v.clone();
    x["processes"][0]["errors"] = "12".into();
    w("string-process-errors.json", x.to_string().as_bytes());
    w("immutable.json", b"");
    let _ = Command::new("chattr")
        .arg("+i")
        .arg(dir.join("immutable.json"))
        .status();
    f
}

/// The baseline `main` records before the cases run.
fn baseline_path(f: &Files) -> String {
    f.p("baseline.json")
}

/// Every input of the battery.
fn cases(f: &Files) -> Vec<Case> {
    use Expect::Code;
    let report = fixture("reports/pin-churn.json");
    let recording = fixture("recordings/pin-churn.rec");
    let base = fixture("baselines/vm-6.1.json");
    let marker = f.p("ran");
    let mut v = Vec::new();

    // Command lines: one line, exit 2 (usage), nothing run.
    for args in [
        &["frobnicate"][..],
        &["doctor", "--bogus"],
        &["run"],
        &["run", "--bogus", "--", "true"],
        &["run", "--json"],
        &["run", "--duration", "soon", "--", "true"],
        &["run", "--duration", "0", "--", "true"],
        &["run", "--duration", "-1s", "--", "true"],
        &["run", "--duration", "99999999999999999h", "--", "true"],
        &["run", "--duration", "1e400s", "--", "true"],
        &["run", "--duration", "nan", "--", "true"],
        &["run", "--duration", "inf", "--", "true"],
        &["run", "--duration", "400d", "--", "true"],
        &["run", "--duration", "0.1ms", "--", "true"],
        &["run", "--duration", "", "--", "true"],
        &["run", "--ringbuf-bytes", "12345", "--", "true"],
        &["run", "--ringbuf-bytes", "0", "--", "true"],
        &["run", "--ringbuf-bytes", "1099511627776", "--", "true"],
        &["run", "--ringbuf-bytes", "-1", "--", "true"],
        &["run", "--ringbuf-bytes", "99999999999999999999", "--", "true"],
        &["run", "--format", "yaml", "--", "true"],
        &["attach"],
        &["attach", "--pid", "abc"],
        &["attach", "--pid", "-1"],
        &["attach", "--pid", "0"],
        &["attach", "--pid", "999999999"],
        &["attach", "--pid", "4294967296"],
        &["attach", "--pid", "1,,x"],
        &["attach", "--cgroup", "/nonexistent-cgroup"],
        &["attach", "--cgroup", "/etc"],
        &["attach", "--comm", "gdrtrace-no-such-comm"],
        &["attach", "--all", "--interval", "0"],
        &["attach", "--all", "--interval", "1e400s"],
        &["attach", "--all", "--duration", "99999999999999999h"],
        &["validate", "--iterations", "0"],
        &["validate", "--iterations", "-1"],
        &["validate", "--iterations", "99999999999"],
        &["compare"],
        &["compare", "--format", "pdf", "a", "b"],
        &["baseline"],
        &["baseline", "record", "--from"],
        &["explain", "x", "--max-input-size", "0"],
        &["explain", "x", "--max-input-size", "99999999999999999999G"],
        &["explain", "x", "--max-input-size", "1T"],
        &["drive", "pin-churn", "--iterations", "1", "--dir", "/nonexistent"],
        &["drive", "pin-churn", "--buffers", "0"],
        &["drive", "nccl", "--duration", "999999999999999999999s"],
        &["drive", "cuda-copy", "--sizes", "0"],
        &["drive", "cuda-copy", "--sizes", "1T"],
        &["drive", "ucx", "--size", "0"],
        &["drive", "ucx", "--iterations", "0"],
        &["drive", "ucx", "--env", "NO_EQUALS_SIGN"],
        &["drive", "ucx", "--perftest", "/nonexistent-ucx_perftest"],
        &["drive", "ucx", "--mode", "cuda", "--gpus", "0"],
        &["drive", "ucx", "--log", "/nonexistent-dir/ucx.log"],
        &["topo", "--bogus"],
        &["replay"],
        &["serve", "--cpu-budget", "0"],
        &["serve", "--cpu-budget", "nan"],
        &["serve", "--cpu-budget", "-1"],
        &["serve", "--max-targets", "0"],
        &["serve", "--max-targets", "-1"],
        &["serve", "--max-aggregate-rows", "0"],
        &["serve", "--ringbuf-bytes", "12345"],
        &["serve", "--listen", "nowhere"],
        &["serve", "--listen", "127.0.0.1:99999"],
        &["serve", "--exited-retention", "0"],
        &["serve", "--duration", "soon"],
    ] {
        v.push(Case::new(format!("args {}", args.join(" ")), args, Code(2)));
    }
    if std::fs::read_to_string("/proc/2/comm").is_ok_and(|c| c.trim() == "kthreadd") {
        v.push(Case::new(
            "attach --pid 2 (kthreadd)",
            &["attach", "--pid", "2"],
            Code(2),
        ));
    }

    // The command of `run`: checked first, as execvp would; nothing loaded.
    for (name, args, code) in [
        ("run missing path", vec!["run", "--", "/nonexistent/cmd"], 127),
        (
            "run missing in PATH",
            vec!["run", "--", "gdrtrace-no-such-command"],
            127,
        ),
        ("run empty command", vec!["run", "--", ""], 127),
        ("run a directory", vec!["run", "--", "/"], 126),
        ("run a non-executable file", vec!["run", "--", "/etc/passwd"], 126),
    ] {
        v.push(Case::new(name, &args, Code(code)));
    }
    let script = f.p("script");
    v.push(Case::new(
        "run a script without x bits",
        &["run", "--", &script],
        Code(126),
    ));
    let mut c = Case::new(
        "run with PATH of a directory without sh",
        &["run", "--", "sh"],
        Code(127),
    );
    c.env.push(("PATH", Some(f.p("dir"))));
    v.push(c);

    // Output and input paths of tracing commands: refused before anything
    // is loaded or run (the traced command would create the marker).
    let no_marker = {
        let m = marker.clone();
        move |_: &Output| {
            if Path::new(&m).exists() {
                let _ = std::fs::remove_file(&m);
                Err("the command ran".to_string())
            } else {
                Ok(())
            }
        }
    };
    let dir = f.p("dir");
    let fifo = f.p("fifo");
    for (flag, path) in [
        ("--json", "/nonexistent-dir/x.json".to_string()),
        ("--json", dir.clone()),
        ("--json", fifo.clone()),
        ("--json", f.p("immutable.json")),
        ("--record", "/nonexistent-dir/x.rec".into()),
        ("--record", dir.clone()),
        ("--transfers", "/nonexistent-dir/x.jsonl".into()),
        ("--transfers", fifo.clone()),
        ("--nccl-log", "/nonexistent-dir/nccl.log".into()),
        ("--nccl-log", fifo.clone()),
        ("--nccl-log", "/dev/zero".into()),
        ("--nccl-log", dir.clone()),
    ] {
        if path.ends_with("immutable.json") && std::fs::write(&path, b"").is_ok() {
            continue; // chattr +i did not take here
        }
        v.push(
            Case::new(
                format!("run {flag} {path}"),
                &["run", flag, &path, "--", "touch", &marker],
                Code(2),
            )
            .check(no_marker.clone()),
        );
    }
    for args in [
        vec!["attach", "--pid", "1", "--json", "/nonexistent-dir/x.json"],
        vec!["attach", "--pid", "1", "--jsonl", &dir, "--interval", "1s"],
        vec!["attach", "--pid", "1", "--nccl-log", &fifo],
        vec!["validate", "--json", "/nonexistent-dir/x.json"],
        vec!["validate", "--record", &dir],
        vec!["baseline", "record", "--out", "/nonexistent-dir/b.json"],
        vec!["baseline", "record", "--from", &report, "--out", &dir],
        vec!["compare", &base, &base, "--html", "/nonexistent-dir/c.html"],
        vec!["replay", &recording, "--json", &dir],
        vec!["replay", &recording, "--transfers", "/nonexistent-dir/t.jsonl"],
    ] {
        v.push(Case::new(format!("outputs {}", args.join(" ")), &args, Code(2)));
    }

    // Inputs: every reader, every kind of bad file: exit 2, at once.
    let bad_inputs: Vec<(String, Vec<&str>)> = vec![
        ("/nonexistent/input".into(), vec![]),
        (dir.clone(), vec![]),
        (fifo.clone(), vec![]),
        ("/dev/zero".into(), vec![]),
        ("/dev/null".into(), vec![]),
        (f.p("sparse"), vec![]),
        (f.p("empty"), vec![]),
        (f.p("nul"), vec![]),
        (f.p("garbage.json"), vec![]),
        (f.p("trunc.json"), vec![]),
        (f.p("trunc.rec"), vec![]),
        (f.p("trunc.gz"), vec![]),
        (f.p("notgz"), vec![]),
        (f.p("bomb.gz"), vec!["--max-input-size", "1M"]),
        (f.p("long-line.rec"), vec![]),
        (f.p("binary.rec"), vec![]),
        (f.p("newer.json"), vec![]),
        (report.clone(), vec!["--max-input-size", "1K"]),
    ];
    for (path, extra) in &bad_inputs {
        for (cmd, args) in [
            ("explain", vec!["explain", path.as_str()]),
            ("replay", vec!["replay", path.as_str()]),
            ("compare CURRENT", vec!["compare", base.as_str(), path.as_str()]),
            ("compare BASELINE", vec!["compare", path.as_str(), base.as_str()]),
            (
                "baseline --from",
                vec!["baseline", "record", "--from", path.as_str(), "--out", "/dev/null"],
            ),
        ] {
            let mut a = args.clone();
            a.extend(extra.iter().copied());
            v.push(Case::new(format!("{cmd} {path} {}", extra.join(" ")), &a, Code(2)));
        }
    }
    for t in [
        "/nonexistent/t.toml".to_string(),
        fifo.clone(),
        dir.clone(),
        f.p("nul"),
        f.p("bad.toml"),
        f.p("negative.toml"),
        f.p("unknown-key.toml"),
        f.p("nosuch.toml"),
        f.p("nan.toml"),
    ] {
        v.push(Case::new(
            format!("compare --thresholds {t}"),
            &["compare", &base, &base, "--thresholds", &t],
            Code(2),
        ));
    }
    for log in [
        "/nonexistent/nccl.log".to_string(),
        fifo.clone(),
        "/dev/zero".into(),
        f.p("nul"),
    ] {
        v.push(Case::new(
            format!("explain --nccl-log {log}"),
            &["explain", &report, "--nccl-log", &log],
            Code(2),
        ));
        v.push(Case::new(
            format!("replay --nccl-log {log}"),
            &["replay", &recording, "--nccl-log", &log],
            Code(2),
        ));
    }
    for (name, stdin) in [("/dev/zero", "/dev/zero".to_string()), ("garbage", f.p("garbage.json"))] {
        let mut c = Case::new(format!("explain - < {name}"), &["explain", "-"], Code(2));
        c.stdin = Some(stdin.into());
        v.push(c);
    }
    // gzip is read by every command (a good input, for contrast).
    v.push(Case::new(
        "explain a gzip recording",
        &["explain", &f.p("rec.gz")],
        Code(0),
    ));

    // Issue 28: an output that names an input or another output is refused
    // (2) and the input is left as it was.
    let job = f.p("job.rec");
    let r_json = f.p("r.json");
    let unchanged = |path: String, fixture_path: String| {
        move |_: &Output| {
            let now = std::fs::read(&path).map_err(|e| format!("{path}: {e}"))?;
            let was = std::fs::read(&fixture_path).map_err(|e| format!("{fixture_path}: {e}"))?;
            (now == was)
                .then_some(())
                .ok_or_else(|| format!("{path} was overwritten"))
        }
    };
    let new_out = f.p("new.out");
    for args in [
        vec!["replay", &job, "--json", &job],
        vec!["replay", &job, "--transfers", &job],
        vec!["replay", &job, "--json", &new_out, "--transfers", &new_out],
        vec!["baseline", "record", "--from", &r_json, "--out", &r_json],
        vec!["compare", &base, &r_json, "--html", &r_json],
        vec!["run", "--json", &new_out, "--record", &new_out, "--", "touch", &marker],
        vec!["run", "--json", &r_json, "--nccl-log", &r_json, "--", "touch", &marker],
    ] {
        let check_rec = unchanged(job.clone(), recording.clone());
        let check_rep = unchanged(r_json.clone(), report.clone());
        let marker_gone = no_marker.clone();
        v.push(
            Case::new(format!("same file: {}", args.join(" ")), &args, Code(2)).check(move |o: &Output| {
                check_rec(o)?;
                check_rep(o)?;
                marker_gone(o)
            }),
        );
    }
    // A failed streamed output keeps the report and the other outputs.
    let ok_json = f.p("ok.json");
    v.push(
        Case::new(
            "replay --json ok --transfers /dev/full",
            &["replay", &recording, "--json", &ok_json, "--transfers", "/dev/full"],
            Code(1),
        )
        .check(move |o: &Output| {
            let err = String::from_utf8_lossy(&o.stderr);
            if !err.contains("--transfers /dev/full") || !err.contains("written to ") {
                return Err(format!("no fallback named for --transfers: {err}"));
            }
            written(&ok_json)
        }),
    );
    // Names of traced processes are printed escaped.
    v.push(
        Case::new(
            "replay a process named with escapes",
            &["replay", &f.p("hostile.rec")],
            Code(0),
        )
        .check(|o: &Output| {
            if o.stdout.contains(&0x1b) || o.stdout.contains(&0x07) {
                Err("a raw escape was printed".into())
            } else {
                Ok(())
            }
        }),
    );
    for name in ["negative-duration.rec", "negative-cpu.rec", "negative-dur-ns.rec"] {
        v.push(Case::new(format!("replay {name}"), &["replay", &f.p(name)], Code(2)));
    }
    let sock = f.p("sock");
    for args in [
        vec!["attach", "--cgroup", &f.p("fakecg")],
        vec!["attach", "--comm", "gdrtrace-a-name-longer-than-a-comm"],
        vec!["compare", &baseline_path(f), &f.p("overflow.json")],
        vec!["compare", &baseline_path(f), &f.p("loss-array.json")],
        vec!["compare", &baseline_path(f), &f.p("string-kernel-calls.json")],
        vec!["compare", &baseline_path(f), &f.p("string-process-errors.json")],
        vec!["explain", &f.p("loss-array.json")],
        vec!["explain", &f.p("string-kernel-calls.json")],
        vec!["drive", "pin-churn", "--buffers", "4294967295", "--odirect-mib", "0"],
        vec![
            "drive",
            "pin-churn",
            "--buffers",
            "16384",
            "--pages",
            "262144",
            "--odirect-mib",
            "0",
        ],
        vec!["replay", &recording, "--json", &sock],
        vec!["explain", &sock],
        vec!["replay", &sock],
        vec!["compare", &base, &sock],
    ] {
        v.push(Case::new(format!("issue 28: {}", args.join(" ")), &args, Code(2)));
    }
    v.push(Case::new(
        "run a script whose #! interpreter is missing",
        &["run", "--", &f.p("bad-interp")],
        Code(126),
    ));

    // compare: structurally invalid is 2; hollow or zeroed is a regression.
    let baseline = f.p("baseline.json");
    for (name, code) in [
        ("negated.json", 2),
        ("string-calls.json", 2),
        ("errors-over-calls.json", 2),
        ("unordered.json", 2),
        ("negative-cpu.json", 2),
        ("no-operations.json", 2),
        ("wrong-schema.json", 2),
        ("hollow.json", 1),
        ("zero.json", 1),
    ] {
        v.push(Case::new(
            format!("compare baseline {name}"),
            &["compare", &baseline, &f.p(name)],
            Code(code),
        ));
    }
    v.push(Case::new(
        "compare a report as the baseline",
        &["compare", &report, &report],
        Code(2),
    ));

    // Standard output closed: quiet, files written, 141.
    let json = f.p("closed.json");
    let mut c = Case::new(
        "replay with stdout closed",
        &["replay", &recording, "--json", &json],
        Code(141),
    )
    .check(move |o: &Output| {
        if !o.stderr.is_empty() {
            return Err(format!("stderr: {}", String::from_utf8_lossy(&o.stderr)));
        }
        written(&json)
    });
    c.stdout_closed = true;
    v.push(c);
    let mut c = Case::new("compare with stdout closed", &["compare", &base, &base], Code(141));
    c.stdout_closed = true;
    v.push(c);
    let mut c = Case::new("help with stdout closed", &["--help"], Code(141));
    c.stdout_closed = true;
    v.push(c);

    // With BPF: failures at the end, signals of the deadline, closed stdout.
    let report_printed = |o: &Output| {
        if String::from_utf8_lossy(&o.stdout).contains("gdrtrace report (gdrtrace.report/v1)") {
            Ok(())
        } else {
            Err("the text report was lost".to_string())
        }
    };
    v.push(
        Case::new(
            "run --json /dev/full",
            &["run", "--json", "/dev/full", "--", "true"],
            Code(1),
        )
        .bpf()
        .check(move |o: &Output| {
            report_printed(o)?;
            let err = String::from_utf8_lossy(&o.stderr);
            let spare = err
                .split("written to ")
                .nth(1)
                .and_then(|r| r.split(" instead").next())
                .ok_or_else(|| format!("no fallback named: {err}"))?;
            let ok = std::fs::read_to_string(spare).is_ok_and(|t| t.contains("gdrtrace.report/v1"));
            let _ = std::fs::remove_file(spare);
            ok.then_some(()).ok_or_else(|| "fallback file not written".into())
        }),
    );
    v.push(
        Case::new(
            "run --record /dev/full",
            &["run", "--record", "/dev/full", "--", "true"],
            Code(1),
        )
        .bpf()
        .check(report_printed),
    );
    v.push(
        Case::new(
            "run a command that exits 7",
            &["run", "--", "sh", "-c", "exit 7"],
            Code(7),
        )
        .bpf(),
    );
    v.push(
        Case::new(
            "run --duration past a long command",
            &["run", "--duration", "1s", "--", "sh", "-c", "sleep 60; exit 5"],
            Code(143),
        )
        .bpf()
        .check(report_printed),
    );
    let json = f.p("run-closed.json");
    let mut c = Case::new(
        "run with stdout closed",
        &["run", "--json", &json, "--", "true"],
        Code(141),
    )
    .bpf()
    .check(move |_: &Output| written(&json));
    c.stdout_closed = true;
    v.push(c);
    // The grandchild ignores SIGTERM: the kill window still reaches it (a
    // process left in the group is "not handled").
    v.push(
        Case::new(
            "run --duration with a grandchild that ignores SIGTERM",
            &[
                "run",
                "--duration",
                "1s",
                "--",
                "sh",
                "-c",
                "(trap '' TERM; exec sleep 31) & sleep 32",
            ],
            Code(143),
        )
        .bpf(),
    );
    v.push(
        Case::new(
            "run --record /dev/full keeps the recording",
            &["run", "--record", "/dev/full", "--", "true"],
            Code(1),
        )
        .bpf()
        .check(|o: &Output| {
            let err = String::from_utf8_lossy(&o.stderr);
            let spare = err
                .split("written to ")
                .nth(1)
                .and_then(|r| r.split(" instead").next())
                .ok_or_else(|| format!("no fallback named: {err}"))?;
            let ok = std::fs::read_to_string(spare).is_ok_and(|t| t.contains("\"type\":\"footer\""));
            let _ = std::fs::remove_file(spare);
            ok.then_some(())
                .ok_or_else(|| "the fallback recording has no footer".into())
        }),
    );
    let mut c = Case::new(
        "run without PATH (execvp's default path)",
        &["run", "--", "sh", "-c", "exit 6"],
        Code(6),
    )
    .bpf();
    c.env.push(("PATH", None));
    v.push(c);
    v
}

fn main() {
    let Some(bin) = binary() else {
        let msg = "no release binary at target/release/gdrtrace (build it: cargo build --release -p tracer, or set GDRTRACE_BIN)";
        if trace_required() {
            panic!("battery: {msg}");
        }
        println!("skipping: battery: {msg}");
        return;
    };
    let dir = std::env::temp_dir().join(format!("gdrtrace-battery-{}", std::process::id()));
    let files = prepare(&dir);
    // A baseline of the pin-churn fixture, recorded by the binary under test.
    let o = Command::new(&bin)
        .args([
            "baseline",
            "record",
            "--from",
            &fixture("reports/pin-churn.json"),
            "--out",
        ])
        .arg(dir.join("baseline.json"))
        .output()
        .expect("baseline record");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bpf = can_trace("battery (inputs that load BPF)");
    // SAFETY: geteuid has no preconditions.
    let as_root = unsafe { libc::geteuid() } == 0;
    let all = cases(&files);
    let (mut tried, mut handled, mut skipped) = (0, 0, 0);
    for c in &all {
        if c.needs_bpf && !bpf {
            skipped += 1;
            continue;
        }
        tried += 1;
        match run_case(&bin, c, as_root) {
            Ok(()) => handled += 1,
            Err(why) => println!("NOT HANDLED: {}: {why}", c.name),
        }
    }
    let _ = Command::new("chattr")
        .arg("-i")
        .arg(dir.join("immutable.json"))
        .status();
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "battery: {tried} inputs tried, {handled} handled{} ({})",
        if skipped > 0 {
            format!(", {skipped} skipped (no BPF privilege)")
        } else {
            String::new()
        },
        bin.display()
    );
    assert!(tried >= 100, "only {tried} inputs tried");
    assert_eq!(handled, tried, "{} inputs not handled (listed above)", tried - handled);
}
