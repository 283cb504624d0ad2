//! Issue 13: a long job's trace is never lost, exit codes tell the truth,
//! hostile input is bounded (its one-line refusals are in bad_input.rs).
//! Each test failed on the main branch before the fix. Tests
//! that load BPF say `skipping: <reason>` without the privilege (and fail
//! under CI). Time limits here only catch hangs; no test asserts a duration.
use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use gdrtrace::compare::Baseline;
use integration_tests::{
    Report, assert_one_line, can_trace, fixture, gdrtrace, gdrtrace_path, path_str as s, read_as, read_report,
    run_bounded, stderr, stdout, to_json, write_as,
};

fn scratch(name: &str) -> PathBuf {
    integration_tests::scratch(&format!("robust-{name}"))
}

/// Runs gdrtrace with `args` (60 s at most: a hang is a failure).
fn bounded(args: &[&str]) -> Output {
    let (o, killed) = run_bounded(gdrtrace().args(args), Duration::from_secs(60));
    assert!(!killed, "{args:?} hung");
    o
}

/// Every output and input path is checked before anything runs;
/// a write that still fails at the end keeps the text report and puts the
/// JSON in a fallback file.
#[test]
fn output_paths_are_checked_before_the_command_runs() {
    let dir = scratch("paths");
    let marker = dir.join("ran");
    let fifo = dir.join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().expect("mkfifo").success());
    let immutable = dir.join("immutable.json");
    std::fs::write(&immutable, "").expect("file");
    let chattr = Command::new("chattr")
        .arg("+i")
        .arg(&immutable)
        .status()
        .is_ok_and(|s| s.success());
    let mut bad: Vec<(&str, String, &str)> = vec![
        ("--json", "/nonexistent-dir/x.json".into(), "ENOENT"),
        ("--json", s(&dir).into(), "EISDIR"),
        ("--json", s(&fifo).into(), "ENXIO"),
        ("--record", "/nonexistent-dir/x.rec".into(), "ENOENT"),
        ("--transfers", s(&dir).into(), "EISDIR"),
        ("--nccl-log", "/nonexistent-dir/nccl.log".into(), "ENOENT"),
        ("--nccl-log", s(&fifo).into(), "is a FIFO"),
    ];
    if chattr {
        bad.push(("--json", s(&immutable).into(), "EPERM"));
    } else {
        println!("skipping: the immutable-file case: chattr +i is not supported here");
    }
    for (flag, path, expect) in &bad {
        let o = bounded(&["run", flag, path, "--", "touch", s(&marker)]);
        assert_one_line(&o, 2, &[expect], &format!("run {flag} {path}"));
        assert!(!marker.exists(), "run {flag} {path}: the command ran");
    }
    let o = bounded(&["attach", "--pid", "1", "--json", "/nonexistent-dir/x.json"]);
    assert_one_line(
        &o,
        2,
        &["--json /nonexistent-dir/x.json: cannot write"],
        "attach --json",
    );
    let o = bounded(&["attach", "--pid", "1", "--jsonl", s(&dir), "--interval", "1s"]);
    assert_one_line(&o, 2, &["--jsonl"], "attach --jsonl DIR");
    let o = bounded(&["validate", "--json", "/nonexistent-dir/x.json"]);
    assert_one_line(&o, 2, &["cannot write"], "validate --json");
    assert!(stdout(&o).is_empty(), "validate ran a workload: {}", stdout(&o));
    let o = bounded(&["validate", "--nccl-log", "/nonexistent-dir/nccl.log"]);
    assert_one_line(&o, 2, &["cannot read /nonexistent-dir/nccl.log"], "validate --nccl-log");
    if chattr {
        let _ = Command::new("chattr").arg("-i").arg(&immutable).status();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The end of the job: /dev/full accepts the open and refuses the
/// write. The text report is printed, the JSON is in the named fallback
/// file, the exit is non-zero (here the command's own 3).
#[test]
fn a_failed_write_at_the_end_keeps_report_and_json() {
    if !can_trace("a_failed_write_at_the_end_keeps_report_and_json") {
        return;
    }
    let o = bounded(&["run", "--json", "/dev/full", "--", "sh", "-c", "exit 3"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        stdout(&o).contains("gdrtrace report (gdrtrace.report/v1)"),
        "text report lost: {}",
        stdout(&o)
    );
    let spare = err
        .split("written to ")
        .nth(1)
        .and_then(|r| r.split(" instead").next())
        .unwrap_or_else(|| panic!("no fallback named: {err}"));
    assert_eq!(read_report(Path::new(spare)).schema, "gdrtrace.report/v1");
    let _ = std::fs::remove_file(spare);
    // A replay has no command to keep the status of: 1.
    let o = bounded(&["replay", &fixture("recordings/pin-churn.rec"), "--json", "/dev/full"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stdout(&o).contains("gdrtrace report (gdrtrace.report/v1)"));
}

/// Spawns gdrtrace with its standard output a pipe whose reader is gone.
fn closed_stdout(args: &[&str]) -> Output {
    let mut fds = [0; 2];
    // SAFETY: a valid array for two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the write end is ours; the read end is closed at once.
    let (write_end, read_end) = unsafe {
        use std::os::fd::FromRawFd as _;
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
        )
    };
    drop(read_end);
    let mut cmd = gdrtrace();
    cmd.args(args).stdout(Stdio::from(write_end)).stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawning");
    drop(cmd);
    let (tx, rx) = std::sync::mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(90)) {
        Ok(o) => o.expect("waiting"),
        Err(_) => {
            // SAFETY: killing the child we started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("{args:?} with a closed stdout hung");
        }
    }
}

/// A closed stdout stops printing quietly, the files named by
/// flags are still written, and the exit is 141 (128 + SIGPIPE).
#[test]
fn closed_stdout_is_quiet_and_files_are_written() {
    let dir = scratch("epipe");
    let json = dir.join("r.json");
    let o = closed_stdout(&[
        "replay",
        &fixture("recordings/gpu-h200-cuda-copy.rec.gz"),
        "--json",
        s(&json),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(141), "{err}");
    assert!(err.is_empty(), "closing stdout is not an error to report: {err}");
    assert_eq!(read_report(&json).schema, "gdrtrace.report/v1");
    let o = closed_stdout(&["--help"]);
    assert_eq!(o.status.code(), Some(141), "{}", stderr(&o));
    if !can_trace("closed_stdout_is_quiet_and_files_are_written (run and attach)") {
        return;
    }
    let json = dir.join("run.json");
    let o = closed_stdout(&["run", "--json", s(&json), "--", "true"]);
    assert_eq!(o.status.code(), Some(141), "{}", stderr(&o));
    assert!(
        std::fs::metadata(&json).is_ok_and(|m| m.len() > 0),
        "run --json not written"
    );
    // attach --interval: the first line hits the closed pipe, which ends
    // the trace as SIGPIPE would have, and --json is still written.
    let mut target = Command::new("sleep").arg("120").spawn().expect("sleep");
    let json = dir.join("attach.json");
    let o = closed_stdout(&[
        "attach",
        "--pid",
        &target.id().to_string(),
        "--interval",
        "200ms",
        "--json",
        s(&json),
    ]);
    let _ = target.kill();
    let _ = target.wait();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(141), "{err}");
    assert!(!err.contains("internal error"), "{err}");
    assert!(
        std::fs::metadata(&json).is_ok_and(|m| m.len() > 0),
        "attach --json not written"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--jsonl` write errors are reported and the exit is non-zero.
#[test]
fn jsonl_write_errors_are_reported() {
    if !can_trace("jsonl_write_errors_are_reported") {
        return;
    }
    let mut target = Command::new("sleep").arg("120").spawn().expect("sleep");
    let o = bounded(&[
        "attach",
        "--pid",
        &target.id().to_string(),
        "--interval",
        "100ms",
        "--duration",
        "2s",
        "--jsonl",
        "/dev/full",
    ]);
    let _ = target.kill();
    let _ = target.wait();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    // Issue 28 item 2: the records are not lost, they are in the fallback file.
    assert!(
        err.contains("--jsonl /dev/full: ENOSPC") && err.contains("written to "),
        "{err}"
    );
}

/// Starts `gdrtrace run -- sh -c SCRIPT` and waits (bounded) until the
/// script has created `ready`.
fn run_until_ready(script: &str, ready: &Path, extra: &[&str]) -> std::process::Child {
    let child = gdrtrace()
        .arg("run")
        .args(extra)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning gdrtrace run");
    let until = Instant::now() + Duration::from_secs(60);
    while !ready.exists() {
        assert!(Instant::now() < until, "the traced command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn kill(pid: u32, sig: i32) {
    // SAFETY: signalling a process this test started.
    unsafe { libc::kill(pid as i32, sig) };
}

/// `--duration` reports at the deadline and the exit status is the
/// command's: SIGTERM reaches it there (143 when that ends it, its own
/// status when it handles it), where it used to run on and exit 0.
#[test]
fn duration_reports_at_the_deadline_with_the_commands_status() {
    if !can_trace("duration_reports_at_the_deadline_with_the_commands_status") {
        return;
    }
    let o = bounded(&["run", "--duration", "2s", "--", "sh", "-c", "sleep 50; exit 5"]);
    assert_eq!(
        o.status.code(),
        Some(143),
        "ended by the deadline's SIGTERM: {}",
        stderr(&o)
    );
    assert!(
        stdout(&o).contains("gdrtrace report (gdrtrace.report/v1)"),
        "{}",
        stdout(&o)
    );
    let o = bounded(&[
        "run",
        "--duration",
        "2s",
        "--",
        "sh",
        "-c",
        "trap 'exit 5' TERM; sleep 50 & wait",
    ]);
    assert_eq!(o.status.code(), Some(5), "the command's own status: {}", stderr(&o));
}

/// SIGTERM is passed on to the command and its status is the exit
/// status; a second signal reports at once, leaving the command running.
#[test]
fn signals_are_forwarded_and_a_second_one_ends_at_once() {
    if !can_trace("signals_are_forwarded_and_a_second_one_ends_at_once") {
        return;
    }
    let dir = scratch("signals");
    let ready = dir.join("ready");
    // The command's own output goes nowhere: a process left holding the
    // tracer's stdout would keep wait_with_output waiting for its end.
    let script = format!(
        "exec >/dev/null 2>&1; trap 'kill $!; exit 8' TERM; touch {}; sleep 50 & wait",
        ready.display()
    );
    let tracer = run_until_ready(&script, &ready, &[]);
    kill(tracer.id(), libc::SIGTERM);
    let o = tracer.wait_with_output().expect("waiting");
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("gdrtrace report (gdrtrace.report/v1)"),
        "report printed"
    );

    let _ = std::fs::remove_file(&ready);
    let pidfile = dir.join("pid");
    let script = format!(
        "exec >/dev/null 2>&1; trap '' TERM; echo $$ > {}; touch {}; exec sleep 50",
        pidfile.display(),
        ready.display()
    );
    let mut tracer = run_until_ready(&script, &ready, &[]);
    let mut err = BufReader::new(tracer.stderr.take().expect("stderr"));
    kill(tracer.id(), libc::SIGTERM);
    // The tracer says it passed the signal on (other lines may come first).
    let mut line = String::new();
    while !line.contains("passed on to the command") {
        line.clear();
        assert!(
            err.read_line(&mut line).expect("stderr") > 0,
            "the tracer never passed SIGTERM on"
        );
    }
    kill(tracer.id(), libc::SIGTERM);
    let o = tracer.wait_with_output().expect("waiting");
    assert_eq!(o.status.code(), Some(143), "second signal: 128+SIGTERM");
    assert!(
        stdout(&o).contains("gdrtrace report (gdrtrace.report/v1)"),
        "reported what it had"
    );
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .expect("pid")
        .trim()
        .parse()
        .expect("pid");
    // SAFETY: signal 0 only checks existence.
    assert_eq!(unsafe { libc::kill(pid as i32, 0) }, 0, "the command is left running");
    kill(pid, libc::SIGKILL);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An unknown flag before `--` is an error, not the command.
#[test]
fn unknown_flag_keeps_clap_tip_beneath_its_line() {
    let o = bounded(&["run", "--bogus", "--", "true"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    // The error, and clap's tip beneath it (issue 48 keeps clap's tips).
    let lines: Vec<&str> = err.trim_end().lines().collect();
    assert!(lines[0].contains("unexpected argument '--bogus'"), "{err}");
    assert_eq!(
        lines[1..],
        ["  tip: to pass '--bogus' as a value, use '-- --bogus'"],
        "{err}"
    );
}

/// The command is checked first, as execvp would look it up: not
/// executable and directories are 126, missing 127, before any BPF.
#[test]
fn command_is_checked_first_as_execvp_would() {
    let dir = scratch("exec");
    let script = dir.join("script.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").expect("script");
    let o = bounded(&["run", "--", s(&script)]);
    assert_one_line(&o, 126, &["not executable"], "a file without x bits");
    let o = bounded(&["run", "--", s(&dir)]);
    assert_one_line(&o, 126, &["is a directory"], "a directory");
    let o = bounded(&["run", "--", "/nonexistent/cmd"]);
    assert_one_line(&o, 127, &["command not found"], "a missing file");
    // A directory named like the command earlier in PATH is skipped, as
    // execvp skips it.
    std::fs::create_dir_all(dir.join("sh")).expect("dir");
    let (o, killed) = run_bounded(
        gdrtrace()
            .args(["run", "--", "gdrtrace-robust-no-such"])
            .env("PATH", format!("{}:/usr/bin:/bin", dir.display())),
        Duration::from_secs(60),
    );
    assert!(!killed);
    assert_one_line(&o, 127, &["command not found in PATH"], "not in PATH");
    if can_trace("command_is_checked_first_as_execvp_would (default PATH)") {
        // Without PATH, execvp searches the C library's default path.
        let (o, killed) = run_bounded(
            gdrtrace().args(["run", "--", "sh", "-c", "exit 6"]).env_remove("PATH"),
            Duration::from_secs(60),
        );
        assert!(!killed);
        assert_eq!(o.status.code(), Some(6), "{}", stderr(&o));
        let (o, _) = run_bounded(
            gdrtrace()
                .args(["run", "--", "sh", "-c", "exit 6"])
                .env("PATH", format!("{}:/usr/bin:/bin", dir.display())),
            Duration::from_secs(60),
        );
        assert_eq!(
            o.status.code(),
            Some(6),
            "the directory ./sh is skipped: {}",
            stderr(&o)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn report(name: &str) -> Report {
    read_report(Path::new(&fixture(&format!("reports/{name}"))))
}

/// `compare` refuses impossible input (exit 2, naming the field),
/// and hollow input, vanished work and counts at 0 are regressions.
#[test]
fn compare_cannot_be_fooled() {
    let dir = scratch("compare");
    let base = dir.join("base.json");
    let o = bounded(&[
        "baseline",
        "record",
        "--from",
        &fixture("reports/pin-churn.json"),
        "--out",
        s(&base),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let write = |name: &str, v: serde_json::Value| {
        let p = dir.join(name);
        std::fs::write(&p, v.to_string()).expect("writing");
        p
    };
    let mut hollow = report("pin-churn.json");
    hollow.operations.clear();
    hollow.processes.clear();
    hollow.verdicts.clear();
    let o = bounded(&["compare", s(&base), s(&write("hollow.json", to_json(&hollow)))]);
    assert_eq!(o.status.code(), Some(1), "hollow report: {}", stdout(&o));
    assert!(stdout(&o).contains("calls missing"), "{}", stdout(&o));
    let mut negated = to_json(&report("pin-churn.json"));
    // untyped: a value no typed report can hold, written on purpose.
    negated["operations"][0]["calls"] = serde_json::json!(-200);
    let o = bounded(&["compare", s(&base), s(&write("negated.json", negated))]);
    assert_one_line(
        &o,
        2,
        &["`operations[0].calls`: invalid value: integer `-200`"],
        "negated calls",
    );
    let mut zero = report("pin-churn.json");
    for p in &mut zero.processes {
        p.registrations = 0;
    }
    let o = bounded(&["compare", s(&base), s(&write("zero.json", to_json(&zero)))]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("registrations "))
        .unwrap_or_else(|| panic!("no registrations row: {out}"));
    assert!(row.contains("falling to 0") && row.ends_with("REGRESSION"), "{row}");
    // A baseline run the current baseline lacks is a regression.
    let two = dir.join("two.json");
    let mut b: Baseline = read_as(&base);
    let mut run2 = b.runs[0].clone();
    run2.workload = "verbs-churn".into();
    b.runs.push(run2);
    write_as(&two, &b);
    let o = bounded(&["compare", s(&two), s(&base)]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stdout(&o).contains("workloads missing: verbs-churn"), "{}", stdout(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Gzip is read by every reader, and a file under `--max-input-size` is
/// read (the refusals are in bad_input.rs).
#[test]
fn gzip_and_a_file_under_the_size_limit_are_read() {
    let o = bounded(&["explain", &fixture("recordings/gpu-h200-nccl-auto.rec.gz")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("p2p/nvlink"), "{}", stdout(&o));
    let o = bounded(&[
        "replay",
        &fixture("recordings/pin-churn.rec"),
        "--max-input-size",
        "64K",
    ]);
    assert!(o.status.success(), "under the limit: {}", stderr(&o));
}

/// Targets that cannot be traced are named with a reason.
#[test]
fn bad_attach_targets_have_reasons() {
    // The tracer's own pid: sh execs gdrtrace, which keeps the pid.
    let (o, killed) = run_bounded(
        Command::new("sh").args(["-c", &format!("exec {} attach --pid $$", gdrtrace_path().display())]),
        Duration::from_secs(60),
    );
    assert!(!killed);
    assert_one_line(&o, 2, &["is this gdrtrace itself"], "own pid");
    // No such process, and no "children of pid 0" (the whole machine).
    let o = bounded(&["attach", "--pid", "0"]);
    assert_one_line(&o, 2, &["pid 0: no such process"], "pid 0");
    if std::fs::read_to_string("/proc/2/comm").is_ok_and(|c| c.trim() == "kthreadd") {
        let o = bounded(&["attach", "--pid", "2"]);
        assert_one_line(&o, 2, &["is a kernel thread"], "kthreadd");
    } else {
        println!("skipping: kthreadd case: pid 2 is not kthreadd here");
    }
    // A zombie: exited, not reaped yet by this test.
    let zombie = Command::new("true").spawn().expect("spawning true");
    let pid = zombie.id();
    let until = Instant::now() + Duration::from_secs(10);
    while gdrtrace::counters::running(pid) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    let o = bounded(&["attach", "--pid", &pid.to_string(), "--duration", "5s"]);
    assert_one_line(&o, 2, &["has exited"], "zombie target");
    drop(zombie);
}

/// `doctor` as an unprivileged user: its finding, exit 4.
#[test]
fn doctor_as_nobody_finds_bpf_not_permitted() {
    let dir = scratch("doctor");
    let bin = dir.join("gdrtrace");
    std::fs::copy(gdrtrace_path(), &bin).expect("copying the binary for nobody");
    let _ = Command::new("chmod").args(["755", s(&dir), s(&bin)]).status();
    match Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(&bin)
        .arg("doctor")
        .output()
    {
        Ok(o) if unsafe { libc::geteuid() } == 0 => {
            assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
            assert!(stdout(&o).contains("verdict: BPF not permitted"), "{}", stdout(&o));
        }
        _ => println!("skipping: doctor as nobody: needs root and setpriv"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
