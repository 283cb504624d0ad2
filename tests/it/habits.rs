//! The habits users bring from bcc, bpftrace, perf and node_exporter
//! (issue 48), each through the real binary.
//!
//! What is proven:
//! - `attach -p PID` traces that process (the report names it);
//! - `completions SHELL` writes a script the shell itself parses, naming
//!   every subcommand, and `man` a page `man` renders, one per command with
//!   `--out-dir`;
//! - `run` says on stderr, before the command's output, what it traces:
//!   the command's pid (the report's) and how many probes attached;
//! - `serve --listen :PORT` answers on IPv4 and IPv6 loopback; `/metrics`
//!   is gzip when asked for it (the same families as the plain scrape,
//!   `Content-Encoding` and `Vary` set) and plain otherwise; the
//!   `process_*` families agree with what /proc says of the agent; with
//!   `--labels pod` every `_info` series is 1 while `gdrtrace_processes`
//!   counts two processes behind one set of labels.
use std::{
    io::Read as _,
    process::{Command, Stdio},
    time::{Duration, SystemTime},
};

use gdrtrace::report::Report;
use integration_tests::{can_trace, gdrtrace_path, have, metric_names, run, stderr, stdout};

use crate::serve::{Agent, Launcher, free_port, one_agent, serve_child, wait_for};

const SUBCOMMANDS: [&str; 8] = [
    "doctor",
    "run",
    "attach",
    "top",
    "explain",
    "replay",
    "serve",
    "completions",
];

#[test]
fn attach_takes_dash_p() {
    if !can_trace("attach_takes_dash_p") {
        return;
    }
    let mut sleeper = Command::new("sleep").arg("30").spawn().expect("spawning sleep");
    let pid = sleeper.id();
    let o = run(&[
        "attach",
        "-p",
        &pid.to_string(),
        "--duration",
        "500ms",
        "--format",
        "json",
    ]);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(o.status.success(), "{}", stderr(&o));
    let r: Report = serde_json::from_str(&stdout(&o)).expect("a gdrtrace report");
    assert!(
        r.processes.iter().any(|p| p.pid == pid),
        "pid {pid} is not in the report of attach -p {pid}"
    );
}

#[test]
fn completions_parse_in_their_shell_and_name_every_subcommand() {
    for (shell, check) in [
        ("bash", &["-n"][..]),
        ("zsh", &["-n"][..]),
        ("fish", &["--no-execute"][..]),
    ] {
        let o = run(&["completions", shell]);
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        let script = stdout(&o);
        for sub in SUBCOMMANDS {
            assert!(script.contains(sub), "{shell}: no {sub} in the completions");
        }
        if !std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(shell).is_file())) {
            println!("skipping: {shell} is not installed: its completions are not parsed");
            continue;
        }
        let mut c = Command::new(shell)
            .args(check)
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning the shell");
        std::io::Write::write_all(&mut c.stdin.take().expect("stdin"), script.as_bytes()).expect("writing the script");
        let out = c.wait_with_output().expect("the shell");
        assert!(out.status.success(), "{shell} refuses the script: {}", stderr(&out));
    }
    let o = run(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("possible values: bash"), "{}", stderr(&o));
}

#[test]
fn the_man_page_renders_with_man() {
    let test = "the_man_page_renders_with_man";
    if !have(test, "man", "Debian's man-db") {
        return;
    }
    let render = |page: &std::path::Path| {
        let out = Command::new("man")
            .args(["-l", "-P", "cat"])
            .arg(page)
            .env("MANWIDTH", "100")
            .output()
            .expect("running man");
        assert!(out.status.success(), "man -l {}: {}", page.display(), stderr(&out));
        stdout(&out)
    };
    let dir = integration_tests::scratch("man");
    let o = run(&["man"]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(dir.join("gdrtrace.1"), stdout(&o)).expect("writing the page");
    let text = render(&dir.join("gdrtrace.1"));
    for want in ["NAME", "SYNOPSIS", "SUBCOMMANDS", "gdrtrace-attach(1)", "VERSION"] {
        assert!(text.contains(want), "no {want} in gdrtrace(1):\n{text}");
    }
    assert!(text.contains(gdrtrace::version::VERSION), "the page's version:\n{text}");
    let pages = dir.join("pages");
    std::fs::create_dir_all(&pages).expect("a directory");
    let o = run(&["man", "--out-dir", integration_tests::path_str(&pages)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let attach = render(&pages.join("gdrtrace-attach.1"));
    assert!(attach.contains("-p, --pid"), "gdrtrace-attach(1) lacks -p:\n{attach}");
    assert!(
        attach.contains("--max-input-size"),
        "attach reads NCCL logs: it keeps the bound"
    );
    let doctor = render(&pages.join("gdrtrace-doctor.1"));
    assert!(
        !doctor.contains("max-input-size"),
        "doctor reads no input file:\n{doctor}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_announces_what_it_traces_before_the_command_runs() {
    let test = "run_announces_what_it_traces_before_the_command_runs";
    if !can_trace(test) {
        return;
    }
    let o = Command::new(gdrtrace_path())
        .args(["run", "--format", "json", "--", "sh", "-c", "echo from-the-command >&2"])
        .output()
        .expect("spawning gdrtrace");
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let mut lines = err.lines();
    let banner = lines.next().unwrap_or("");
    assert_eq!(lines.next(), Some("from-the-command"), "the banner comes first:\n{err}");
    let r: Report = serde_json::from_str(&stdout(&o)).expect("a gdrtrace report");
    let pid = r.processes.first().expect("the command's process").pid;
    let want = format!("gdrtrace: tracing sh (pid {pid}) and its children: ");
    assert!(banner.starts_with(&want), "expected {want:?}, got:\n{err}");
    // `10 of 41 probe points and 52 uprobes in 4 library file(s) attached`
    let figures = &banner[want.len()..];
    let n: Vec<u64> = figures
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(n.len() >= 4, "{banner}");
    // The report's coverage adds what was attached later (libraries the
    // command mapped): at least what the banner counted.
    let attached = r
        .coverage
        .iter()
        .filter(|c| c.status == gdrtrace::probes::Status::Attached)
        .count();
    assert!(n[0] >= 1 && n[0] <= n[1], "{banner}");
    assert!(attached as u64 >= n[0] && r.coverage.len() as u64 >= n[1], "{banner}");
}

/// Series lines of `name` (exact) in an exposition, with their values.
fn samples<'a>(text: &'a str, name: &str) -> Vec<(&'a str, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| Some((l, l.rsplit(' ').next()?.parse().ok()?)))
        .collect()
}

/// A raw HTTP GET with extra header lines: status, headers, body bytes.
fn get(addr: &str, path: &str, headers: &str) -> (u16, String, Vec<u8>) {
    use std::io::Write as _;
    let mut s = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("a timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n"
    )
    .expect("the request");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("the response");
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a header block");
    let head = String::from_utf8_lossy(&raw[..split]).to_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    (status, head, body)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).expect("a chunk size");
        if size == 0 {
            break;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[eol + 4 + size..];
    }
    out
}

#[test]
fn serve_listens_on_a_bare_port_compresses_and_exports_its_process() {
    let test = "serve_listens_on_a_bare_port_compresses_and_exports_its_process";
    if !can_trace(test) {
        return;
    }
    let _one = one_agent();
    let port = free_port();
    let started = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("the clock")
        .as_secs_f64();
    let agent = Agent::start_on(
        Command::new(gdrtrace_path()),
        &format!(":{port}"),
        format!("127.0.0.1:{port}"),
        &["--no-installed-libraries"],
    );
    let (status, head, plain) = get(agent.addr(), "/metrics", "");
    assert_eq!(status, 200);
    assert!(!head.contains("content-encoding"), "plain unless asked:\n{head}");
    let plain = String::from_utf8(plain).expect("UTF-8");
    if std::net::TcpStream::connect(("::1", port)).is_ok() {
        let (status, _, _) = get(&format!("[::1]:{port}"), "/healthz", "");
        assert_eq!(status, 200, ":PORT takes IPv6 too");
    } else {
        println!("{test}: no IPv6 loopback here: only IPv4 checked");
    }

    // The agent traces the whole host: a workload of a test running beside
    // this one can add families between two scrapes, so a plain and a
    // compressed scrape are compared until two in a row agree.
    let mut plain = plain;
    let (mut text, mut zipped) = (String::new(), Vec::new());
    for attempt in 1..=10 {
        let (status, head, z) = get(agent.addr(), "/metrics", "Accept-Encoding: gzip\r\n");
        assert_eq!(status, 200);
        assert!(
            head.contains("content-encoding: gzip") && head.contains("vary: accept-encoding"),
            "{head}"
        );
        text.clear();
        flate2::read::GzDecoder::new(&z[..])
            .read_to_string(&mut text)
            .expect("a gzip body");
        zipped = z;
        if metric_names(&text) == metric_names(&plain) || attempt == 10 {
            break;
        }
        let (_, _, p) = get(agent.addr(), "/metrics", "");
        plain = String::from_utf8(p).expect("UTF-8");
    }
    assert_eq!(
        metric_names(&text),
        metric_names(&plain),
        "the same families, compressed"
    );
    println!("/metrics: {} bytes plain, {} gzip", plain.len(), zipped.len());
    let (_, head, _) = get(agent.addr(), "/metrics", "Accept-Encoding: gzip;q=0, identity\r\n");
    assert!(!head.contains("content-encoding"), "q=0 refuses gzip:\n{head}");

    let one = |name: &str| {
        let s = samples(&text, name);
        assert_eq!(s.len(), 1, "one {name} series, without the node label:\n{s:?}");
        assert!(!s[0].0.contains("node="), "{}", s[0].0);
        s[0].1
    };
    let start = one("process_start_time_seconds");
    assert!((start - started).abs() < 10.0, "started at {started}, says {start}");
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", agent.pid())).expect("the agent's limits");
    let soft: f64 = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .expect("Max open files");
    assert_eq!(one("process_max_fds"), soft);
    let fds = one("process_open_fds");
    assert!(fds >= 3.0 && fds <= soft, "{fds} open of {soft}");
    let (rss, vsz) = (
        one("process_resident_memory_bytes"),
        one("process_virtual_memory_bytes"),
    );
    assert!(rss > 0.0 && vsz >= rss, "resident {rss}, virtual {vsz}");
    let cpu = one("process_cpu_seconds_total");
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", agent.pid())).expect("the agent's stat");
    let after = &stat[stat.rfind(')').expect("a comm") + 1..];
    // Field N of stat is index N - 3 after the command name.
    let ticks: Vec<f64> = after.split_whitespace().map(|v| v.parse().unwrap_or(0.0)).collect();
    // utime and stime (fields 14 and 15, in USER_HZ: 100 on Linux), read
    // after the scrape: at least as much.
    let cpu_now = (ticks[11] + ticks[12]) / 100.0;
    assert!(
        cpu > 0.0 && cpu <= cpu_now + 0.05,
        "scraped {cpu} s, /proc says {cpu_now} s later"
    );
    let build = samples(&text, "gdrtrace_build_info");
    assert!(
        build.len() == 1
            && build[0]
                .0
                .contains(&format!("revision=\"{}\"", gdrtrace::version::REVISION)),
        "{build:?}"
    );
    agent.stop();
}

#[test]
fn every_info_series_is_one_with_labels_pod() {
    let test = "every_info_series_is_one_with_labels_pod";
    if !can_trace(test) {
        return;
    }
    let _one = one_agent();
    let child = serve_child();
    let mut launcher = Launcher::start();
    let agent = Agent::start(&[
        "--labels",
        "pod",
        "--no-installed-libraries",
        "--exited-retention",
        "600s",
    ]);
    let mut pids = Vec::new();
    for _ in 0..2 {
        let pidfile = integration_tests::scratch("habits-pid").join("pid");
        assert_eq!(
            launcher.run(&format!("{} 30 & echo $! > {}", child.display(), pidfile.display())),
            0
        );
        pids.push(std::fs::read_to_string(&pidfile).expect("the pid").trim().to_string());
    }
    let text = wait_for(
        "two serve_child processes behind one comm",
        Duration::from_secs(60),
        || {
            let m = agent.metrics();
            (Agent::sum(&m, "gdrtrace_processes", &[("comm", "serve_child")]) == Some(2.0)).then_some(m)
        },
    );
    let infos: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && l.split(['{', ' ']).next().is_some_and(|n| n.ends_with("_info")))
        .collect();
    assert!(
        infos
            .iter()
            .any(|l| l.starts_with("gdrtrace_process_info{") && l.contains("comm=\"serve_child\"")),
        "{text}"
    );
    for l in &infos {
        assert!(l.ends_with(" 1"), "an _info series that is not 1: {l}");
    }
    assert!(!text.contains("pid=\""), "no pid label with --labels pod");
    for p in pids {
        // SAFETY: signalling the targets this test started.
        unsafe { libc::kill(p.parse().expect("a pid"), libc::SIGKILL) };
    }
    agent.stop();
}
