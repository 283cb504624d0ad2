//! `attach` in the middle of a busy two-process job, as a user leaves a
//! tracer attached (issue 50): the shape of a NIXL READ with the UCX
//! backend on one GPU, whose UCX stages every tcp fragment through host
//! memory and retains the primary context around each copy.
//!
//! The job is a stand-in, as no GPU is here: Debian's `ucx_perftest`
//! (`ucp_get` over tcp: real `ucp_get_nbx` calls and socket traffic between
//! a server and a client) with `tests/standin/cuda_copy_shim.c` preloaded
//! into both, a **stand-in** for UCX's cuda_copy staging that calls the
//! libcuda stand-in around each data send and receive:
//! `cuDevicePrimaryCtxRetain`, then one `cuMemcpyAsync` between the
//! fragment and the next 8176 bytes of a 32 MiB "device" buffer.
//!
//! What is proven, under `attach --pid SERVER,CLIENT` and `attach --all`,
//! both attached a second into the job:
//! - nothing is lost: no ring-buffer drop, no table full (`loss.complete`);
//! - every copy is summed in the kernel in the row of its address pair:
//!   none is evented one by one (the copy-row table never filled), and no
//!   pair makes a second row (the retain does not start copy rows anew);
//! - every process in the report has its name, and the line that says the
//!   probes are live names what was attached to (`--all`: every process,
//!   and those that map a traced library);
//! - the client's GETs made while the sampled links were open are counted
//!   (`ucx.processes[].data_calls`): libucp was attached after the job
//!   started, and its data calls come back in the duty cycle's on phases;
//! - both are known to have been running at attach (their set-up unseen),
//!   under `--all` as under `--pid`, and the server, whose bytes moved with
//!   no data call of its own while the client's were seen, has a `served`
//!   path inferred from the steady state;
//! - the job's data paths (class and transport of the server's and the
//!   client's paths over 1 MiB) are those `gdrtrace run` gives of the same
//!   job traced from its start.
//!
//! The GETs are 1 MiB (NIXL's were 32 MiB) so that several fall in the on
//! phases of a few seconds; the fragments walk 32 MiB as NIXL's do.
//!
//! And where a walk has more address pairs than the copy-row table has
//! rows (`tests/standin/copy_walk.c`, the shim's copies without UCX, traced
//! with a table of 512 rows): the table is renewed and its old rows
//! reclaimed, and every copy is counted once.
use std::{
    collections::BTreeSet,
    io::{BufRead as _, BufReader, Write as _},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use gdrtrace::{
    classify::path::{Basis, OpClass},
    loader::LoadOptions,
    probes::ops::op_code,
    report::Report,
    sampling::Mode,
    session::{Session, SessionOptions},
    stats::feed::Input,
    trace::Trace,
};
use integration_tests::{
    can_trace, compile, gdrtrace_path, path_str, read_report, read_text,
    standin::{StandIns, runtime},
    stderr, stdout,
};
use tracer_common::{Event, kind};

/// Each test runs a busy job and a tracer on this host's CPUs (and
/// `--all` would trace the other's job): one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn perftest(test: &str) -> bool {
    let found =
        std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("ucx_perftest").is_file()));
    if !found {
        println!("skipping: {test}: ucx_perftest is not installed (Debian: apt-get install ucx-utils)");
    }
    found
}

/// The job's two perftest processes, killed when dropped (before the
/// stand-ins' directory goes).
struct Job {
    server: Child,
    client: Child,
    /// The libcuda stand-in and the shim; the tracer's outputs go there too.
    standins: StandIns,
}

impl Drop for Job {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The job's environment: UCX over tcp, the shim preloaded and the libcuda
/// stand-in it calls.
fn job_env(s: &StandIns) -> Vec<(String, String)> {
    vec![
        ("UCX_TLS".into(), "tcp".into()),
        ("LD_PRELOAD".into(), path_str(&s.dir.join("cuda_copy_shim.so")).into()),
        ("GDRTRACE_STANDIN_CUDA".into(), path_str(&s.cuda).into()),
    ]
}

impl Job {
    fn stop(&mut self) {
        for c in [&mut self.client, &mut self.server] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Builds the stand-ins and starts the server and the client, and
    /// returns once the client has reported its first second of GETs.
    fn start(test: &str) -> Job {
        let s = integration_tests::standin::build_standins(Path::new(env!("CARGO_TARGET_TMPDIR")), test);
        let shim = s.dir.join("cuda_copy_shim.so");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("standin/cuda_copy_shim.c");
        compile(&[
            "-O2",
            "-fPIC",
            "-shared",
            "-Wall",
            "-o",
            path_str(&shim),
            path_str(&src),
            "-ldl",
        ]);
        let port = crate::serve::free_port().to_string();
        let perftest = |args: &[&str]| {
            let mut c = Command::new("ucx_perftest");
            c.args(args)
                .envs(job_env(&s))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null());
            c.spawn().expect("spawning ucx_perftest")
        };
        let server = perftest(&["-p", &port]);
        // The server listens within a moment; the client retries its connect.
        std::thread::sleep(Duration::from_millis(500));
        let mut client = perftest(&[
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "ucp_get",
            "-s",
            "1048576",
            "-n",
            "100000000",
            "-w",
            "0",
        ]);
        // The client prints a line a second once GETs run.
        let mut out = BufReader::new(client.stdout.take().expect("piped stdout"));
        let until = Instant::now() + Duration::from_secs(60);
        let mut line = String::new();
        loop {
            line.clear();
            let n = out.read_line(&mut line).expect("reading ucx_perftest");
            assert!(n > 0 && Instant::now() < until, "ucx_perftest did not start its GETs");
            if line.starts_with("[thread 0]") {
                break;
            }
        }
        // Keep draining: a full pipe would stop the client.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Job {
            server,
            client,
            standins: s,
        }
    }
}

/// `gdrtrace attach TARGETS --duration 4s`: the report, the recording's
/// events and the tracer's stderr.
fn attach(job: &Job, targets: &[&str]) -> (Report, Vec<Event>, String) {
    let dir = &job.standins.dir;
    let (json, rec) = (dir.join("report.json"), dir.join("trace.rec"));
    let out = Command::new(gdrtrace_path())
        .arg("attach")
        .args(targets)
        .args([
            "--duration",
            "4s",
            "--json",
            path_str(&json),
            "--record",
            path_str(&rec),
        ])
        .output()
        .expect("running gdrtrace attach");
    assert!(out.status.success(), "attach: {}{}", stdout(&out), stderr(&out));
    let recording = gdrtrace::recording::parse(&read_text(&rec)).unwrap_or_else(|e| panic!("{}: {e}", rec.display()));
    let events = recording
        .inputs
        .into_iter()
        .filter_map(|(input, _)| match input {
            Input::Event(e) => Some(e),
            _ => None,
        })
        .collect();
    (read_report(&json), events, stderr(&out))
}

/// The job's paths that carry its data (over 1 MiB), as (process, class,
/// transport), the process being the server or the client.
fn data_paths(report: &Report, server: u32, client: u32) -> BTreeSet<(&'static str, String, String)> {
    report
        .paths
        .iter()
        .filter(|p| p.bytes > 1 << 20)
        .filter_map(|p| {
            let who = if p.pid == server {
                "server"
            } else if p.pid == client {
                "client"
            } else {
                return None;
            };
            Some((who, p.op.name().to_string(), p.transport.name().to_string()))
        })
        .collect()
}

/// The same job traced from its start by `gdrtrace run` (2,000 GETs): its
/// data paths, as [`data_paths`] gives them.
fn run_paths(standins: &StandIns) -> BTreeSet<(&'static str, String, String)> {
    let port = crate::serve::free_port().to_string();
    let json = standins.dir.join("run.json");
    let script = format!(
        "ucx_perftest -p {port} >/dev/null 2>&1 & echo $! > {dir}/server.pid; sleep 0.5; \
         ucx_perftest 127.0.0.1 -p {port} -t ucp_get -s 1048576 -n 2000 -w 0 >/dev/null 2>&1 & \
         echo $! > {dir}/client.pid; wait",
        dir = path_str(&standins.dir)
    );
    let out = Command::new(gdrtrace_path())
        .args(["run", "--json", path_str(&json), "--", "sh", "-c", &script])
        .envs(job_env(standins))
        .output()
        .expect("running gdrtrace run");
    assert!(out.status.success(), "run: {}{}", stdout(&out), stderr(&out));
    let pid = |f: &str| -> u32 {
        read_text(&standins.dir.join(f))
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{f}: {e}"))
    };
    data_paths(&read_report(&json), pid("server.pid"), pid("client.pid"))
}

/// What both modes must show of the job.
fn check(job: &Job, report: &Report, events: &[Event], err: &str) {
    let (server, client) = (job.server.id(), job.client.id());
    assert!(report.loss.complete, "{:?}\n{err}", report.loss);
    assert_eq!(report.loss.ringbuf_drops, 0);
    // Every process is named; the job's two by their command.
    for p in &report.processes {
        assert!(!p.comm.is_empty(), "pid {} has no name: {:?}", p.pid, p.calls);
    }
    for pid in [server, client] {
        let p = report
            .processes
            .iter()
            .find(|p| p.pid == pid)
            .unwrap_or_else(|| panic!("pid {pid} not in the report"));
        assert_eq!(p.comm, "ucx_perftest");
        assert!(
            p.calls.get("cuMemcpyAsync").is_some_and(|n| *n > 0),
            "pid {pid}: {:?}",
            p.calls
        );
    }
    // Copies: each address pair one row, no copy evented one by one.
    let copy = op_code("cuMemcpyAsync").expect("a table row");
    let job_copies = || {
        events
            .iter()
            .filter(|e| e.op == copy && [server, client].contains(&e.pid))
    };
    let one_by_one = job_copies().filter(|e| e.kind == kind::CALL).count();
    assert_eq!(one_by_one, 0, "copies evented one by one: the copy-row table filled");
    let firsts: Vec<(u32, u64, u64)> = job_copies()
        .filter(|e| e.kind == kind::ROW_FIRST)
        .map(|e| (e.pid, e.args[0], e.args[1]))
        .collect();
    assert!(!firsts.is_empty(), "no copy row began while attached");
    let pairs: BTreeSet<&(u32, u64, u64)> = firsts.iter().collect();
    assert_eq!(
        pairs.len(),
        firsts.len(),
        "an address pair made a second row: something started copy rows anew"
    );
    // The GETs made in the on phases are counted.
    let ucx = report.ucx.as_ref().expect("a UCX section");
    let get = ucx
        .processes
        .iter()
        .find(|p| p.pid == client)
        .unwrap_or_else(|| panic!("the client {client} is not in the UCX section: {ucx:?}"));
    assert!(get.data_calls > 0, "the client's GETs were not counted: {get:?}");
    // Both were attached to while running: their set-up was not seen, under
    // `--all` as under `--pid`, so their paths are judged alike.
    for p in &ucx.processes {
        if [server, client].contains(&p.pid) {
            assert!(!p.traced_from_start, "pid {} was running at attach: {p:?}", p.pid);
        }
    }
    // The server makes no data call of its own: with the client's GETs
    // seen, its bytes are a `served` path, as a trace from the start says,
    // inferred from the steady state.
    let server_paths: Vec<_> = report.paths.iter().filter(|p| p.pid == server).collect();
    assert!(
        server_paths
            .iter()
            .any(|p| p.op == OpClass::Served && p.basis == Basis::SteadyState),
        "the server's paths: {server_paths:?}"
    );
}

/// The attached report's data paths are those of the same job traced from
/// its start: the job is stopped and run again under `gdrtrace run`.
fn same_paths_as_run(job: &mut Job, report: &Report) {
    let attached = data_paths(report, job.server.id(), job.client.id());
    assert!(!attached.is_empty(), "no data path: {:?}", report.paths);
    job.stop();
    let run = run_paths(&job.standins);
    println!("data paths, attached and run: {attached:?}");
    assert_eq!(attached, run, "attached / run");
}

#[test]
fn attach_by_pid_to_a_busy_job_loses_nothing() {
    let test = "attach_by_pid_to_a_busy_job_loses_nothing";
    if !can_trace(test) || !perftest(test) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut job = Job::start("busy-pid");
    let pids = format!("{},{}", job.server.id(), job.client.id());
    let (report, events, err) = attach(&job, &["--pid", &pids]);
    let first = err.lines().next().unwrap_or("");
    assert!(
        first.contains(&format!(
            "attached to 2 process(es): {} ucx_perftest, {} ucx_perftest",
            job.server.id(),
            job.client.id()
        )),
        "{err}"
    );
    check(&job, &report, &events, &err);
    same_paths_as_run(&mut job, &report);
}

#[test]
fn attach_all_to_a_busy_job_names_every_process() {
    let test = "attach_all_to_a_busy_job_names_every_process";
    if !can_trace(test) || !perftest(test) {
        return;
    }
    // `--all` traces every process of the host: no other test's traced
    // workload (busy copy loops, socket floods) runs beside it, as on a
    // node whose one busy job is this one.
    let _alone = integration_tests::exclusive_bpf();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut job = Job::start("busy-all");
    let (report, events, err) = attach(&job, &["--all"]);
    let first = err.lines().next().unwrap_or("");
    assert!(first.contains("attached to every process ("), "{err}");
    // The line names the first few; the report lists them all.
    let attached = integration_tests::attach_section(&report);
    assert!(attached.all, "{attached:?}");
    assert!(attached.running.is_some_and(|n| n >= 2), "{attached:?}");
    for pid in [job.server.id(), job.client.id()] {
        assert!(
            attached.with_libraries.as_ref().is_some_and(|a| a.contains(&pid)),
            "{pid} maps the libcuda stand-in and libucp: {attached:?}"
        );
    }
    check(&job, &report, &events, &err);
    same_paths_as_run(&mut job, &report);
}

/// The copy-row table holds fewer rows than the walk has address pairs
/// (512 for 600), traced with every call counted (`--collectives exact`)
/// for 3 s: the table fills and is renewed, its old rows, each hit a few
/// times, reclaimed with their totals, and the copies counted are the
/// copies the walk made, no more and no fewer, with nothing lost.
#[test]
fn a_walk_wider_than_the_copy_table_is_counted_exactly() {
    let test = "a_walk_wider_than_the_copy_table_is_counted_exactly";
    if !can_trace(test) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = integration_tests::standin::build_standins(Path::new(env!("CARGO_TARGET_TMPDIR")), "walk");
    let walk = s.dir.join("copy_walk");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("standin/copy_walk.c");
    compile(&["-O2", "-Wall", "-o", path_str(&walk), path_str(&src), "-ldl"]);
    let mut child = Command::new(&walk)
        .args([path_str(&s.cuda), "3", "600"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawning copy_walk");
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("reading copy_walk");
    let pid: u32 = line
        .trim()
        .strip_prefix("ready pid=")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("copy_walk did not get ready: {line:?}"));
    let session = Session::open(&SessionOptions {
        load: LoadOptions {
            ringbuf_bytes: 1 << 22,
            targets_only: true,
            max_entries: vec![("COPY_ROWS", 512)],
            ..LoadOptions::default()
        },
        families: None,
        installed_libraries: false,
        collectives: Mode::Exact,
    })
    .expect("opening a session");
    let mut trace = Trace::new(session);
    trace.add_target(pid, None).expect("adding the walk");
    assert!(
        trace.session.attach_libraries_of(pid) > 0,
        "the libcuda stand-in attached"
    );
    let mut stdin = child.stdin.take().expect("piped stdin");
    runtime()
        .block_on(trace.run_until(async {
            stdin.write_all(b"g").expect("releasing copy_walk");
            let until = Instant::now() + Duration::from_secs(60);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // Let the last events reach the ring buffer reader.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }))
        .expect("tracing");
    let _ = child.kill();
    let status = child.wait().expect("waiting for copy_walk");
    assert!(status.success(), "copy_walk failed: {status}");
    line.clear();
    out.read_line(&mut line).expect("reading copy_walk");
    let made: u64 = line
        .trim()
        .strip_prefix("copies=")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("copy_walk's count: {line:?}"));
    let report = trace.report(Vec::new(), None).expect("the report");
    let counted: u64 = report
        .operations
        .iter()
        .filter(|o| o.name == "cuMemcpyAsync")
        .map(|o| o.calls)
        .sum();
    println!(
        "{made} copies made, {counted} counted, table renewed {} times",
        trace.session.copy_renewals()
    );
    assert!(report.loss.complete, "{:?}", report.loss);
    assert!(trace.session.copy_renewals() >= 1, "the table was never renewed");
    assert_eq!(counted, made, "every copy counted once");
}
