//! `gdrtrace serve` on this host, with real parts: the agent's BPF
//! discovery, a real Prometheus (Debian's 2.42, started through
//! scripts/prometheus.sh) scraping it, `promtool` on its exposition, real
//! cgroups laid out like a kubelet pod's, and the capability list of the
//! DaemonSet applied with `setpriv`.
//!
//! What is proven:
//! - a process started after the agent, from a parent that is not traced,
//!   is found by the kernel's open of libibverbs (`discovered_by`), and
//!   Prometheus's query API returns exactly the registrations the workload
//!   made, with every loss and shed counter at 0; `histogram_quantile` of
//!   the registration and operation latency is finite and within one
//!   bucket of the p99 the workload timed itself;
//! - 2,000 short-lived targets are traced (their syscalls counted) and then
//!   forgotten: no series, tracked process or kernel aggregation row of
//!   them is left;
//! - through a verdict change (socket to unknown) of a duty-cycled stand-in
//!   job, no gdrtrace counter goes down (`resets()` is 0 in Prometheus), and
//!   the estimated collective bytes are within 15% of the job's own count;
//! - the copy loop of issue 25, trap-bound while counted and done before
//!   the next on phase, has its estimate marked a lower bound in
//!   Prometheus, below the bytes it copied;
//! - a process in a pod's cgroup gets the pod's namespace, pod and container;
//! - the DaemonSet's capabilities are enough, and without CAP_BPF the agent
//!   says so in one line;
//! - a full target set and an exhausted CPU budget refuse processes, and
//!   say how many.
//!
//! Timing is never asserted; deadlines only stop a test that would hang.
use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader, Write as _},
    path::PathBuf,
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use integration_tests::{
    can_trace, compile, documented_metrics, field, gdrtrace_path, have, http_get, metric_names, repo_root, url_encode,
};

const HOW: &str = "bash scripts/setup.sh --vm installs it";

/// Every agent traces the whole machine: one at a time, or each would see
/// (and count) the others' workloads.
static ONE_AGENT: Mutex<()> = Mutex::new(());

pub(crate) fn one_agent() -> std::sync::MutexGuard<'static, ()> {
    ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn scratch(name: &str) -> PathBuf {
    integration_tests::scratch(&format!("serve-{name}"))
}

/// Waits for `f` to return Some, or panics with `what` at the deadline.
pub(crate) fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < limit, "gave up waiting for {what} after {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A running agent.
pub(crate) struct Agent {
    child: Child,
    addr: String,
    stderr: Arc<Mutex<String>>,
}

impl Agent {
    pub(crate) fn start(args: &[&str]) -> Agent {
        Self::start_with(Command::new(gdrtrace_path()), args)
    }

    /// Starts `gdrtrace serve ARGS` through `cmd` (the binary, or a wrapper
    /// whose last argument is the binary) and waits until it serves.
    fn start_with(cmd: Command, args: &[&str]) -> Agent {
        let addr = format!("127.0.0.1:{}", free_port());
        Self::start_on(cmd, &addr, addr.clone(), args)
    }

    /// As `start_with`, the agent listening on `listen` (as `--listen`
    /// takes it) and scraped at `addr`.
    pub(crate) fn start_on(mut cmd: Command, listen: &str, addr: String, args: &[&str]) -> Agent {
        let mut child = cmd
            .arg("serve")
            .args(["--listen", listen])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning gdrtrace serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let pipe = child.stderr.take().expect("piped stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().expect("stderr sink poisoned");
                s.push_str(&line);
                s.push('\n');
            }
        });
        let mut agent = Agent { child, addr, stderr };
        let start = Instant::now();
        while !agent.stderr().contains("serving metrics on") {
            if let Ok(Some(status)) = agent.child.try_wait() {
                panic!("gdrtrace serve exited ({status}):\n{}", agent.stderr());
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "the agent did not start:\n{}",
                agent.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        agent
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr sink poisoned").clone()
    }

    pub(crate) fn metrics(&self) -> String {
        let (status, _, body) = http_get(&self.addr, "/metrics", None).expect("scraping the agent");
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Sums the samples of `name` whose labels contain every `label="value"` of `with`.
    pub(crate) fn sum(exposition: &str, name: &str, with: &[(&str, &str)]) -> Option<f64> {
        let mut found = None;
        for line in exposition.lines().filter(|l| !l.starts_with('#')) {
            let Some(rest) = line.strip_prefix(name) else { continue };
            if !(rest.starts_with('{') || rest.starts_with(' ')) {
                continue;
            }
            if !with.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))) {
                continue;
            }
            let v: f64 = rest.rsplit(' ').next()?.parse().ok()?;
            found = Some(found.unwrap_or(0.0) + v);
        }
        found
    }

    pub(crate) fn stop(mut self) -> String {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().expect("waiting for the agent");
        std::thread::sleep(Duration::from_millis(100));
        let err = self.stderr();
        assert!(status.success(), "gdrtrace serve failed ({status}):\n{err}");
        assert!(!err.contains("internal error"), "{err}");
        err
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A shell started before the agent (so neither it nor its children are
/// followed from a traced parent): each line written to it runs as a
/// command of its own, and it answers `done STATUS`.
pub(crate) struct Launcher {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Launcher {
    pub(crate) fn start() -> Launcher {
        let mut child = Command::new("sh")
            .args(["-c", "while read -r line; do sh -c \"$line\"; echo \"done $?\"; done"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawning sh");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Launcher { child, stdin, stdout }
    }

    /// Runs `cmd` and waits for it; returns its exit status.
    pub(crate) fn run(&mut self, cmd: &str) -> i32 {
        writeln!(self.stdin, "{cmd}").expect("writing to the launcher");
        self.stdin.flush().expect("writing to the launcher");
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                self.stdout.read_line(&mut line).expect("reading the launcher") > 0,
                "the launcher exited"
            );
            if let Some(code) = line.trim().strip_prefix("done ") {
                return code.parse().expect("the launcher prints a number");
            }
        }
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The short-lived target (tests/standin/serve_child.c), built once.
pub(crate) fn serve_child() -> PathBuf {
    let dir = integration_tests::scratch("serve-bin");
    let out = dir.join("serve_child");
    if !out.is_file() {
        let src = repo_root().join("tests/standin/serve_child.c");
        compile(&[
            "-O2",
            "-o",
            out.to_str().expect("UTF-8 path"),
            src.to_str().expect("UTF-8 path"),
            "-libverbs",
        ]);
    }
    out
}

/// Prometheus started by scripts/prometheus.sh, scraping `target` every second.
pub(crate) struct Prometheus {
    child: Child,
    pub(crate) addr: String,
    dir: PathBuf,
}

impl Prometheus {
    pub(crate) fn start(target: &str) -> Prometheus {
        let addr = format!("127.0.0.1:{}", free_port());
        let dir = scratch("prometheus");
        let child = Command::new("bash")
            .arg(repo_root().join("scripts/prometheus.sh"))
            .args(["--target", target, "--listen", &addr, "--scrape-interval", "1s"])
            .arg("--data")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning scripts/prometheus.sh");
        let p = Prometheus { child, addr, dir };
        wait_for("Prometheus to be ready", Duration::from_secs(120), || {
            http_get(&p.addr, "/-/ready", None).ok().filter(|r| r.0 == 200)
        });
        // Ready is not scraping yet: a workload started before the first
        // scrape could be over (or past the phase a test looks for) before
        // Prometheus saw it.
        wait_for("Prometheus to scrape the agent", Duration::from_secs(60), || {
            (!p.query("up == 1").is_empty()).then_some(())
        });
        p
    }

    /// An instant query: each result's labels and value.
    pub(crate) fn query(&self, q: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let (status, _, body) =
            http_get(&self.addr, &format!("/api/v1/query?query={}", url_encode(q)), None).expect("querying Prometheus");
        assert_eq!(status, 200, "{q}: {body}");
        let v: PromResponse<Vector> = integration_tests::parse_as(q, &body);
        assert_eq!(v.status, "success", "{q}: {body}");
        v.data
            .result
            .into_iter()
            .map(|r| (r.metric, r.value.1.parse().unwrap_or(f64::NAN)))
            .collect()
    }

    fn scalar(&self, q: &str) -> Option<f64> {
        self.query(q).first().map(|r| r.1)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn prometheus_sees_the_registrations_of_a_discovered_workload() {
    let test = "prometheus_sees_the_registrations_of_a_discovered_workload";
    if !can_trace(test) || !have(test, "prometheus", HOW) || !have(test, "promtool", HOW) {
        return;
    }
    let _one = one_agent();
    let mut launcher = Launcher::start();
    // Debug builds are several times slower than release: a budget that
    // leaves this test nothing to shed (shedding has its own test).
    let agent = Agent::start(&["--exited-retention", "600s", "--cpu-budget", "0.5"]);
    let prom = Prometheus::start(&agent.addr);
    let dir = scratch("pin-churn");
    let out = dir.join("pin-churn.txt");
    let status = launcher.run(&format!(
        "exec {} drive pin-churn --iterations 300 --buffers 2 --pages 4 --odirect-mib 0 > {}",
        gdrtrace_path().display(),
        out.display()
    ));
    assert_eq!(status, 0);
    let summary = std::fs::read_to_string(&out).unwrap();
    let line = summary
        .lines()
        .find(|l| l.starts_with("pin-churn: pid="))
        .expect("the workload's summary");
    let (pid, regs, unregs) = (
        field(line, "pid"),
        field(line, "registrations"),
        field(line, "unregistrations"),
    );
    assert_eq!(regs, 300);

    // Through Prometheus: the workload's own counts.
    let q = format!("sum(gdrtrace_registrations_total{{pid=\"{pid}\"}})");
    let seen = wait_for("Prometheus to scrape the final count", Duration::from_secs(120), || {
        prom.scalar(&q).filter(|v| *v == regs as f64)
    });
    assert_eq!(seen, regs as f64);
    let q = format!("sum(gdrtrace_deregistrations_total{{pid=\"{pid}\",backing=\"io_uring\"}})");
    assert_eq!(prom.scalar(&q), Some(unregs as f64), "{q}");
    let info = prom.query(&format!("gdrtrace_process_info{{pid=\"{pid}\"}}"));
    assert_eq!(info.len(), 1, "{info:?}");
    assert_eq!(
        info[0].0.get("discovered_by").map(String::as_str),
        Some("libibverbs"),
        "found by the kernel's open of libibverbs: {info:?}"
    );
    assert_eq!(info[0].0.get("comm").map(String::as_str), Some("gdrtrace"));
    // Every loss and shed counter exists and is 0.
    assert_eq!(prom.scalar("count(gdrtrace_events_lost_total)"), Some(6.0));
    assert_eq!(prom.scalar("sum(gdrtrace_events_lost_total)"), Some(0.0));
    assert_eq!(
        prom.scalar("sum(gdrtrace_shed_total)"),
        Some(0.0),
        "{:?}",
        prom.query(
            "gdrtrace_shed_total > 0 or gdrtrace_agent_shed_level or rate(gdrtrace_agent_cpu_seconds_total[1m])"
        )
    );
    assert_eq!(prom.scalar("sum(gdrtrace_discovery_read_errors_total)"), Some(0.0));
    // Prometheus asked for OpenMetrics and parsed it; so does promtool's
    // linter with the classic format.
    let (_, head, om) = http_get(
        &agent.addr,
        "/metrics",
        Some("application/openmetrics-text; version=1.0.0"),
    )
    .unwrap();
    assert!(
        head.contains("application/openmetrics-text") && om.ends_with("# EOF\n"),
        "{head}"
    );
    let text = agent.metrics();
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    promtool.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let lint = promtool.wait_with_output().unwrap();
    let lint_text = String::from_utf8_lossy(&lint.stdout).into_owned() + &String::from_utf8_lossy(&lint.stderr);
    assert!(lint.status.success() && lint_text.trim().is_empty(), "{lint_text}");
    let undocumented: Vec<String> = metric_names(&text)
        .into_iter()
        .filter(|n| !["_bucket", "_sum", "_count"].iter().any(|s| n.ends_with(s)))
        .filter(|n| !documented_metrics().contains(n))
        .collect();
    assert!(undocumented.is_empty(), "not in docs/serve.md: {undocumented:?}");
    latency_quantiles_match_the_workloads_own(&mut launcher, &prom, &dir);
    let err = agent.stop();
    assert!(err.contains("serve stopped"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The index of the exported bucket (powers of four from 256 ns, as in
/// `serve/metrics`) that holds `seconds`: its `le` bound is the first one
/// at or above it.
fn bucket_of(seconds: f64) -> i32 {
    let ns = seconds * 1e9;
    (0..15).find(|j| ns <= (1u64 << (8 + 2 * j)) as f64).unwrap_or(15)
}

/// Latency through the real Prometheus: `histogram_quantile` over the
/// OpenMetrics exposition it scraped (which once lacked `le="+Inf"`, making
/// every quantile NaN) is finite and in the bucket of the p99 the workload
/// timed itself, or the next one. The first pin-churn run made the
/// histograms' series exist, so `rate` sees all of this run.
fn latency_quantiles_match_the_workloads_own(launcher: &mut Launcher, prom: &Prometheus, dir: &std::path::Path) {
    let out = dir.join("pin-churn-quantiles.txt");
    // Registrations of 128 pages: tens of microseconds of pinning, against
    // which the tracer's own cost around each call (microseconds) is small.
    let iterations = 2000;
    let status = launcher.run(&format!(
        "exec {} drive pin-churn --iterations {iterations} --buffers 2 --pages 64 --odirect-mib 0 > {}",
        gdrtrace_path().display(),
        out.display()
    ));
    assert_eq!(status, 0);
    let summary = std::fs::read_to_string(&out).expect("the workload's output");
    let line = summary
        .lines()
        .find(|l| l.starts_with("pin-churn: pid="))
        .expect("the workload's summary");
    let pid = field(line, "pid");
    let q = format!("sum(gdrtrace_registrations_total{{pid=\"{pid}\"}})");
    wait_for("Prometheus to scrape the second run", Duration::from_secs(60), || {
        prom.scalar(&q).filter(|v| *v == iterations as f64)
    });
    // One more scrape interval, so the last sample holds every call.
    std::thread::sleep(Duration::from_secs(2));
    for (what, query, own, wall) in [
        (
            "registration",
            "histogram_quantile(0.99, sum by (le) (rate(gdrtrace_registration_duration_seconds_bucket{backing=\"io_uring\"}[30s])))",
            "register_cpu_p99_ns",
            "register_p99_ns",
        ),
        (
            "operation io_uring_register",
            "histogram_quantile(0.99, sum by (le) (rate(gdrtrace_operation_duration_seconds_bucket{op=\"io_uring_register\"}[30s])))",
            "io_uring_register_cpu_p99_ns",
            "io_uring_register_p99_ns",
        ),
    ] {
        let p99 = prom.scalar(query).unwrap_or(f64::NAN);
        // The workload's timing on its thread's CPU clock: its wall-clock
        // tail on this 2-CPU host is the wait for a CPU after the call
        // (the agent, woken by the call's record, takes it), which the
        // kernel's timing of the call leaves out.
        let (own, wall) = (field(line, own) as f64 / 1e9, field(line, wall) as f64 / 1e9);
        assert!(p99.is_finite() && p99 > 0.0, "{what}: {query} = {p99}");
        assert!(
            (bucket_of(p99) - bucket_of(own)).abs() <= 1,
            "{what}: Prometheus's p99 {p99:e} s and the workload's own {own:e} s (on CPU; wall clock {wall:e} s) are more than one bucket apart"
        );
        println!("{what} p99: Prometheus {p99:e} s, the workload's own {own:e} s on CPU, {wall:e} s wall clock");
    }
}

/// `rank R ready pid=P` and `rank R calls=N` lines of the stand-in job,
/// as (pid, calls) per rank.
fn job_ranks(out: &str) -> Vec<(u32, u64)> {
    let mut pids = BTreeMap::new();
    let mut calls = BTreeMap::new();
    for l in out.lines() {
        let Some(rest) = l.strip_prefix("rank ") else { continue };
        let Some((rank, tail)) = rest.split_once(' ') else {
            continue;
        };
        let rank: u32 = rank.parse().unwrap_or(u32::MAX);
        if let Some(p) = tail.strip_prefix("ready pid=") {
            pids.insert(rank, p.trim().parse::<u32>().expect("a pid"));
        } else if let Some(n) = tail.strip_prefix("calls=") {
            calls.insert(rank, n.trim().parse::<u64>().expect("a call count"));
        }
    }
    pids.iter().map(|(r, p)| (*p, calls[r])).collect()
}

/// A job whose verdict changes while it runs, its collectives duty-cycled,
/// scraped by the real Prometheus every second (issue 24):
/// - the libnccl stand-in's two ranks all-reduce 256 KiB over their socket
///   pair, then (`STANDIN_NCCL_SOCKET_CALLS`) through a host buffer: the
///   steady-state verdict goes from `socket` (host-staged) to `unknown` once
///   the sockets carry less than a tenth of the bytes. Before, the host-staged
///   counter then dropped by the job's whole history;
/// - `resets()` of every gdrtrace counter over the run is 0;
/// - with `--collectives 2s/4s` the kernel counts half of the calls, and
///   each rank's estimated bytes (counted plus the closed off phases, the
///   last up to its `ncclCommDestroy`) are within 15% of its own count;
///   the counted ones are below it.
#[test]
fn counters_stay_monotonic_through_a_verdict_change_and_estimates_follow_the_job() {
    let test = "counters_stay_monotonic_through_a_verdict_change_and_estimates_follow_the_job";
    if !can_trace(test) || !have(test, "prometheus", HOW) || !have(test, "cc", "apt-get install gcc") {
        return;
    }
    let _one = one_agent();
    let job = integration_tests::standin::build_nccl_job(
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")),
        &format!("gdrtrace-serve-flip-{}", std::process::id()),
        "nccl_flip",
    );
    let mut launcher = Launcher::start();
    let agent = Agent::start(&[
        "--exited-retention",
        "600s",
        "--cpu-budget",
        "0.5",
        "--collectives",
        "2s/4s",
    ]);
    let prom = Prometheus::start(&agent.addr);
    let out = job.dir.join("job.txt");
    let status = launcher.run(&format!(
        "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 STANDIN_NCCL_SOCKET_CALLS={SOCKET_CALLS} NCCL_JOB_WARMUP_MS=1500 exec {} {} 30 256 > {}",
        job.job.display(),
        job.nccl.display(),
        out.display()
    ));
    let text = std::fs::read_to_string(&out).expect("the job's output");
    assert_eq!(status, 0, "{text}");
    let ranks = job_ranks(&text);
    assert_eq!(ranks.len(), 2, "{text}");
    // Prometheus has the final figures once it has scraped the exits.
    for (pid, _) in &ranks {
        let q = format!("gdrtrace_process_info{{pid=\"{pid}\",exited=\"true\"}}");
        wait_for("Prometheus to scrape the exits", Duration::from_secs(30), || {
            (!prom.query(&q).is_empty()).then_some(())
        });
    }
    std::thread::sleep(Duration::from_secs(2));
    for (pid, own_calls) in &ranks {
        let verdicts = prom.query(&format!(
            "count by (transport) (count_over_time(gdrtrace_transport_verdict_info{{pid=\"{pid}\"}}[5m]))"
        ));
        let seen: Vec<&str> = verdicts
            .iter()
            .filter_map(|v| v.0.get("transport").map(String::as_str))
            .collect();
        let own = (*own_calls * 256 * 1024) as f64;
        let got = |name: &str| {
            prom.scalar(&format!("sum({name}{{pid=\"{pid}\"}})"))
                .unwrap_or(f64::NAN)
        };
        let estimated = got("gdrtrace_collective_estimated_bytes_total");
        let counted = got("gdrtrace_collective_bytes_total");
        let staged = got("gdrtrace_host_staged_bytes_total");
        println!(
            "rank {pid}: own {own} B, counted {counted} B, estimated {estimated} B ({:+.1}%), host-staged {staged} B, verdicts {seen:?}",
            (estimated / own - 1.0) * 100.0
        );
        assert!(
            seen.contains(&"socket") && seen.len() >= 2,
            "rank {pid}: the verdict did not change from socket while scraped: {seen:?}"
        );
        assert!(
            counted < own,
            "rank {pid}: the duty cycle counted every call ({counted} of {own})"
        );
        assert!(
            (estimated / own - 1.0).abs() <= 0.15,
            "rank {pid}: estimated {estimated} B against its own {own} B"
        );
        assert!(
            staged > 0.0 && staged < estimated,
            "rank {pid}: host-staged {staged} B: the socket phase is staged, the rest is not"
        );
        assert_eq!(
            got("gdrtrace_moved_estimated_bytes_total"),
            estimated,
            "rank {pid}: moved = its collectives (no copies)"
        );
        assert_eq!(
            got("gdrtrace_estimates_lower_bound"),
            0.0,
            "rank {pid}: its calls were not mostly traps, so its estimates are not lower bounds"
        );
    }
    // resets() drops the metric name, so one query per counter.
    let (_, _, body) = http_get(&prom.addr, "/api/v1/label/__name__/values", None).expect("querying Prometheus");
    let names: PromResponse<Vec<String>> = integration_tests::parse_as("label values", &body);
    let counters: Vec<&str> = names
        .data
        .iter()
        .map(String::as_str)
        .filter(|n| n.starts_with("gdrtrace_") && n.ends_with("_total"))
        .collect();
    assert!(counters.len() >= 20, "{counters:?}");
    for name in counters {
        let went_down = prom.query(&format!("resets({name}[5m]) > 0"));
        assert!(went_down.is_empty(), "{name} went down: {went_down:?}");
    }
    agent.stop();
}

/// The copy loop of issue 25 under the agent, scraped by the real
/// Prometheus every second: `gdrtrace drive copy-loop` makes 300,000
/// pageable copies each way through the libcuda stand-in (4 ns a copy
/// untraced, 10-14 us trapped here, its `cuMemcpyDtoHAsync_v2` probed on a
/// single-stepped instruction), and exits. The beat after it began closes
/// its probes, and the rest of the loop runs in a few milliseconds before
/// the next on phase: what it copied then is estimated from a rate that its
/// traps set, so Prometheus must see its estimated bytes marked a lower
/// bound (`gdrtrace_estimates_lower_bound` 1), and below the bytes it
/// copied. Before, the off phase after the beat went unestimated (the
/// interval of the next short on phase dropped the phase before it) and
/// the loop unmarked, in 13 of 14 runs.
#[test]
fn a_trap_bound_copy_loop_is_marked_a_lower_bound_in_prometheus() {
    let test = "a_trap_bound_copy_loop_is_marked_a_lower_bound_in_prometheus";
    if !can_trace(test) || !have(test, "prometheus", HOW) || !have(test, "cc", "apt-get install gcc") {
        return;
    }
    let _one = one_agent();
    let s = integration_tests::standin::build_standins(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")), test);
    let mut launcher = Launcher::start();
    let agent = Agent::start(&["--exited-retention", "600s"]);
    let prom = Prometheus::start(&agent.addr);
    let summary = s.dir.join("copy-loop.json");
    let status = launcher.run(&format!(
        "exec {} drive copy-loop --wait-ms 1000 --copies 300000 --bytes 8 --lib {} --summary {} > /dev/null",
        gdrtrace_path().display(),
        s.cuda.display(),
        summary.display()
    ));
    assert_eq!(status, 0, "the copy loop failed");
    let sum: gdrtrace::drive::copy_loop::CopyLoopSummary = integration_tests::read_as(&summary);
    let pid = sum.pid;
    let copied = sum.bytes as f64;
    let q = format!("gdrtrace_process_info{{pid=\"{pid}\",exited=\"true\"}}");
    wait_for("Prometheus to scrape the exit", Duration::from_secs(30), || {
        (!prom.query(&q).is_empty()).then_some(())
    });
    // The gaps of the exit close within a beat or two after it.
    std::thread::sleep(Duration::from_secs(3));
    let got = |name: &str| {
        prom.scalar(&format!("sum({name}{{pid=\"{pid}\"}})"))
            .unwrap_or(f64::NAN)
    };
    let moved = got("gdrtrace_moved_bytes_total");
    let marked = got("gdrtrace_estimates_lower_bound");
    println!(
        "copy loop {pid}: copied {copied} B in {:.3} s, moved (counted and estimated) {moved} B ({:.1}%), lower bound {marked}",
        sum.loop_s,
        moved / copied * 100.0
    );
    assert!(moved > 0.0, "no copies seen: {moved}");
    assert!(
        moved < copied,
        "a trap-bound loop's estimate is below what it copied: {moved} of {copied} B"
    );
    assert_eq!(
        marked, 1.0,
        "the loop's copies were mostly traps while counted: its estimate is a lower bound ({moved} of {copied} B)"
    );
    agent.stop();
}

/// All-reduces the stand-in sends over its socket pair before the host
/// buffer takes over: half a second to a second of socket traffic on this
/// host (2,000 to 4,500 calls a second, untraced). Its sockets then carry
/// twice the bytes of those calls (sent and received), so the verdict
/// stays `socket` until 20 times as many calls went through the host
/// buffer (`classify/steady.rs`: a tenth of the collective bytes): 7 to 15
/// seconds into the job's 30, long enough for a scrape to see it even
/// when the socket phase fell in an off phase of the duty cycle (with 1,000
/// calls, on an idle host, the socket verdict once lasted under a second).
const SOCKET_CALLS: u64 = 2_000;

#[test]
fn thousands_of_short_lived_targets_are_traced_and_forgotten() {
    let test = "thousands_of_short_lived_targets_are_traced_and_forgotten";
    if !can_trace(test) {
        return;
    }
    let _one = one_agent();
    const N: u64 = 2000;
    let child = serve_child();
    let mut launcher = Launcher::start();
    let agent = Agent::start(&[
        "--exited-retention",
        "1s",
        "--no-installed-libraries",
        "--cpu-budget",
        "0.5",
    ]);
    let before = agent.metrics();
    let v = |text: &str, name: &str, with: &[(&str, &str)]| Agent::sum(text, name, with).unwrap_or(0.0);
    let discovered0 = v(
        &before,
        "gdrtrace_targets_discovered_total",
        &[("reason", "libibverbs")],
    );
    let forgotten0 = v(&before, "gdrtrace_targets_forgotten_total", &[]);
    let sends0 = v(&before, "gdrtrace_probe_hits_total", &[("op", "sendto")]);
    let rss0 = v(&before, "gdrtrace_agent_resident_memory_bytes", &[]);
    let status = launcher.run(&format!(
        "i=0; while [ $i -lt {N} ]; do {}; i=$((i+1)); done",
        child.display()
    ));
    assert_eq!(status, 0);
    let after = wait_for("the agent to forget the children", Duration::from_secs(300), || {
        let m = agent.metrics();
        let forgotten = v(&m, "gdrtrace_targets_forgotten_total", &[]) - forgotten0;
        let left = Agent::sum(&m, "gdrtrace_process_info", &[("comm", "serve_child")]).unwrap_or(0.0);
        (forgotten >= N as f64 && left == 0.0).then_some(m)
    });
    let discovered = v(&after, "gdrtrace_targets_discovered_total", &[("reason", "libibverbs")]) - discovered0;
    let sends = v(&after, "gdrtrace_probe_hits_total", &[("op", "sendto")]) - sends0;
    let lost = v(&after, "gdrtrace_events_lost_total", &[]);
    let tracked = v(&after, "gdrtrace_tracked_processes", &[]);
    let rows = v(&after, "gdrtrace_bpf_map_entries", &[("map", "AGGREGATE")]);
    let rss = v(&after, "gdrtrace_agent_resident_memory_bytes", &[]);
    println!(
        "{N} children: discovered {discovered}, sendto hits {sends}, tracked after {tracked}, aggregation rows after {rows}, lost {lost}, agent RSS {:.1} -> {:.1} MiB",
        rss0 / 1048576.0,
        rss / 1048576.0
    );
    assert!(discovered >= N as f64, "each child was found by its open of libibverbs");
    assert!(sends >= N as f64, "each child's sendto was traced");
    assert_eq!(lost, 0.0);
    // Without forgetting there would be N rows and N processes.
    assert!(rows < (N / 10) as f64, "{rows} aggregation rows left");
    assert!(tracked < (N / 10) as f64, "{tracked} processes still tracked");
    agent.stop();
}

/// Cardinality under churn (issue 24): 500 short-lived targets that map
/// libibverbs and move nothing, beside three long-lived ones that send a
/// datagram each. The quiet ones are tracked (gdrtrace_idle_processes) but
/// never get series of their own, so no scrape while they come and go shows
/// more per-process series than the long ones have; once they are
/// forgotten the exposition is as large as before, and the agent's resident
/// memory did not grow with them.
#[test]
fn idle_short_lived_targets_leave_a_bounded_series_count() {
    let test = "idle_short_lived_targets_leave_a_bounded_series_count";
    // The agent traces the whole host, and its RSS and series are the
    // measure: no other test's traced workload may run beside it (one
    // moving 200 MiB over TCP grew the agent's RSS by 60 MiB).
    let _alone = integration_tests::exclusive_bpf();
    if !can_trace(test) {
        return;
    }
    let _one = one_agent();
    const N: u64 = 500;
    const LONG: u64 = 3;
    let child = serve_child();
    let dir = scratch("idle");
    let mut launcher = Launcher::start();
    let agent = Agent::start(&[
        "--exited-retention",
        "1s",
        "--no-installed-libraries",
        "--cpu-budget",
        "0.5",
    ]);
    let v = |text: &str, name: &str, with: &[(&str, &str)]| Agent::sum(text, name, with).unwrap_or(0.0);
    let procs_of = |text: &str| {
        text.lines()
            .filter(|l| l.starts_with("gdrtrace_process_info{") && l.contains("comm=\"serve_child\""))
            .count() as u64
    };
    // Every series of a serve_child process (the long ones' and any a
    // quiet child got). The node's total is not the measure: the agent
    // traces the whole host, and other tests' workloads beside this one
    // add series of their own (an op first seen, its latency buckets).
    let child_series = |text: &str| {
        text.lines()
            .filter(|l| !l.starts_with('#') && l.contains("comm=\"serve_child\""))
            .count() as u64
    };
    // The long ones outlive the whole test (the children and the wait for
    // them to be forgotten took over 120 s on a loaded CI host, after which
    // long ones of 120 s were gone too); they are killed when it ends.
    let pids = dir.join("pids");
    let _long = KillListed(pids.clone());
    assert_eq!(
        launcher.run(&format!(
            "for i in 1 2 3; do {} 1200 & echo $! >> {}; done",
            child.display(),
            pids.display()
        )),
        0
    );
    let before = wait_for("the long-lived targets", Duration::from_secs(60), || {
        let m = agent.metrics();
        (procs_of(&m) == LONG).then_some(m)
    });
    let series0 = v(&before, "gdrtrace_exported_series", &[]);
    let children0 = child_series(&before);
    let rss0 = v(&before, "gdrtrace_agent_resident_memory_bytes", &[]);
    let forgotten0 = v(&before, "gdrtrace_targets_forgotten_total", &[]);
    let discovered0 = v(&before, "gdrtrace_targets_discovered_total", &[]);
    let refused0 = v(&before, "gdrtrace_shed_total", &[("what", "target")]);
    let done = dir.join("done");
    assert_eq!(
        launcher.run(&format!(
            "(i=0; while [ $i -lt {N} ]; do SERVE_CHILD_QUIET=1 {}; i=$((i+1)); done; touch {}) >/dev/null 2>&1 &",
            child.display(),
            done.display()
        )),
        0
    );
    let (mut max_procs, mut max_series, mut max_idle, mut max_children) = (0u64, 0f64, 0f64, 0u64);
    let start = Instant::now();
    while !done.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "the {N} children did not finish"
        );
        let m = agent.metrics();
        max_procs = max_procs.max(procs_of(&m));
        max_children = max_children.max(child_series(&m));
        max_series = max_series.max(v(&m, "gdrtrace_exported_series", &[]));
        max_idle = max_idle.max(v(&m, "gdrtrace_idle_processes", &[]));
        std::thread::sleep(Duration::from_millis(100));
    }
    // Every child the agent made a target is forgotten once it exits. On
    // a loaded host the agent's CPU budget (0.5) can refuse some children
    // (counted in gdrtrace_shed_total): those never become targets, so the
    // wait is for the discovered ones, not for all N.
    let waited = Instant::now();
    let (after, last) = loop {
        let m = agent.metrics();
        let discovered = v(&m, "gdrtrace_targets_discovered_total", &[]) - discovered0;
        let forgotten = v(&m, "gdrtrace_targets_forgotten_total", &[]) - forgotten0;
        let idle = v(&m, "gdrtrace_idle_processes", &[]);
        let last = format!("discovered {discovered}, forgotten {forgotten}, idle {idle}");
        // Not `idle == 0`: the agent traces the whole host, and a test
        // running beside this one can leave idle targets of its own.
        if discovered > 0.0 && forgotten >= discovered {
            break (m, last);
        }
        // On a timeout the counts say which part did not happen.
        assert!(
            waited.elapsed() < Duration::from_secs(300),
            "the agent did not forget the quiet children in 300 s: {last}, shed {:?}",
            Agent::sum(&m, "gdrtrace_shed_total", &[])
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let refused = v(&after, "gdrtrace_shed_total", &[("what", "target")]) - refused0;
    println!("after the children: {last}, refused {refused}");
    let series = v(&after, "gdrtrace_exported_series", &[]);
    let rss = v(&after, "gdrtrace_agent_resident_memory_bytes", &[]);
    println!(
        "{N} quiet children beside {LONG} long ones: per-process series sets at most {max_procs}, exported series {series0} before, at most {max_series} during, {series} after; idle at most {max_idle}; agent RSS {:.1} -> {:.1} MiB",
        rss0 / 1048576.0,
        rss / 1048576.0
    );
    assert!(max_idle >= 1.0, "the quiet children were tracked (as idle)");
    assert_eq!(max_procs, LONG, "a quiet child got series of its own");
    assert_eq!(procs_of(&after), LONG);
    println!(
        "serve_child series: {children0} before, at most {max_children} during, {} after",
        child_series(&after)
    );
    assert!(
        max_children <= children0 && child_series(&after) <= children0,
        "the children added series: {children0} -> {max_children} / {}",
        child_series(&after)
    );
    assert!(
        rss <= rss0 + 16.0 * 1048576.0,
        "the agent's RSS grew with the children: {rss0} -> {rss}"
    );
    agent.stop();
    drop(_long);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Kills, when dropped (the test ended or failed), the processes whose pids
/// the file lists.
struct KillListed(PathBuf);

impl Drop for KillListed {
    fn drop(&mut self) {
        for pid in std::fs::read_to_string(&self.0)
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .filter(|p| *p > 1)
        {
            // SAFETY: signalling the long-lived targets this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Where cgroup v2 is mounted (the unified hierarchy, on hybrid hosts too).
fn cgroup2_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
    })
}

#[test]
fn a_process_in_a_pod_cgroup_gets_the_pod_labels() {
    let test = "a_process_in_a_pod_cgroup_gets_the_pod_labels";
    if !can_trace(test) {
        return;
    }
    let _one = one_agent();
    let Some(cg_root) = cgroup2_root() else {
        println!("skipping: {test}: no cgroup v2 hierarchy mounted");
        return;
    };
    let uid = "3c2d9f0e-7a41-4b8e-9d2c-5f6a7b8c9d0e";
    let cid = "9f".repeat(32);
    let pod_cg = cg_root
        .join("kubepods.slice/kubepods-besteffort.slice")
        .join(format!("kubepods-besteffort-pod{}.slice", uid.replace('-', "_")));
    let cg = pod_cg.join(format!("cri-containerd-{cid}.scope"));
    if let Err(e) = std::fs::create_dir_all(&cg) {
        println!("skipping: {test}: cannot create {}: {e}", cg.display());
        return;
    }
    let logs = scratch("kubelet-logs");
    std::fs::create_dir_all(logs.join(format!("pods/team-a_trainer-0_{uid}/worker"))).unwrap();
    std::fs::create_dir_all(logs.join("containers")).unwrap();
    std::fs::write(logs.join(format!("containers/trainer-0_team-a_worker-{cid}.log")), "").unwrap();

    let child = serve_child();
    let mut launcher = Launcher::start();
    let agent = Agent::start(&["--kubelet-log-root", logs.to_str().unwrap()]);
    // Into the pod's cgroup first, then exec the target (it sleeps 60 s).
    let procs = cg.join("cgroup.procs");
    assert_eq!(
        launcher.run(&format!(
            "sh -c 'echo $$ > {} && exec {} 60' & echo $! > {}",
            procs.display(),
            child.display(),
            logs.join("pid").display()
        )),
        0
    );
    let pid: String = wait_for("the target's pid", Duration::from_secs(30), || {
        std::fs::read_to_string(logs.join("pid"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    });
    let line = wait_for("the pod labels", Duration::from_secs(60), || {
        agent
            .metrics()
            .lines()
            .find(|l| l.starts_with("gdrtrace_process_info{") && l.contains(&format!("pid=\"{pid}\"")))
            .map(str::to_string)
    });
    for want in ["namespace=\"team-a\"", "pod=\"trainer-0\"", "container=\"worker\""] {
        assert!(line.contains(want), "{want} missing: {line}");
    }
    // SAFETY: signalling the target this test started.
    unsafe { libc::kill(pid.parse().unwrap(), libc::SIGKILL) };
    agent.stop();
    wait_for("the cgroup to empty", Duration::from_secs(30), || {
        std::fs::read_to_string(&procs).ok().filter(|s| s.trim().is_empty())
    });
    for d in [
        &cg,
        &pod_cg,
        &pod_cg.parent().unwrap().to_path_buf(),
        &cg_root.join("kubepods.slice"),
    ] {
        let _ = std::fs::remove_dir(d);
    }
    let _ = std::fs::remove_dir_all(&logs);
}

/// The capabilities the DaemonSet adds, as `setpriv` names them.
fn daemonset_capabilities() -> Vec<String> {
    let ds: integration_tests::k8s::DaemonSet =
        integration_tests::k8s::read(&repo_root().join("deploy/kubernetes/daemonset.yaml"));
    let add = &ds.spec.template.spec.container().security_context.capabilities.add;
    assert!(!add.is_empty(), "capabilities.add");
    add.iter().map(|c| c.to_ascii_lowercase()).collect()
}

/// A Prometheus HTTP API answer (prometheus.io/docs/prometheus/latest/querying/api/).
#[derive(serde::Deserialize)]
struct PromResponse<T> {
    status: String,
    data: T,
}

/// An instant query's `data`.
#[derive(serde::Deserialize)]
struct Vector {
    result: Vec<Sample>,
}

#[derive(serde::Deserialize)]
struct Sample {
    metric: BTreeMap<String, String>,
    /// (time, value as text).
    value: (f64, String),
}

fn with_capabilities(caps: &[String]) -> Command {
    let mut c = Command::new("setpriv");
    let set: String = caps.iter().map(|c| format!(",+{c}")).collect();
    c.arg(format!("--bounding-set=-all{set}"))
        .arg("--")
        .arg(gdrtrace_path());
    c
}

#[test]
fn serve_with_only_the_daemonset_capabilities() {
    let test = "serve_with_only_the_daemonset_capabilities";
    if !can_trace(test) || !have(test, "setpriv", "util-linux") || !have(test, "python3", "Debian's python3") {
        return;
    }
    let _one = one_agent();
    let caps = daemonset_capabilities();
    assert!(caps.contains(&"bpf".to_string()), "{caps:?}");
    let child = serve_child();
    let mut launcher = Launcher::start();
    let agent = Agent::start_with(with_capabilities(&caps), &["--exited-retention", "600s"]);
    let status = launcher.run(&format!("exec {} 0", child.display()));
    assert_eq!(status, 0);
    let m = wait_for("the child to be found", Duration::from_secs(60), || {
        let m = agent.metrics();
        Agent::sum(
            &m,
            "gdrtrace_process_info",
            &[("discovered_by", "libibverbs"), ("comm", "serve_child")],
        )
        .map(|_| m)
    });
    assert!(Agent::sum(&m, "gdrtrace_probe_hits_total", &[("op", "sendto")]).unwrap_or(0.0) >= 1.0);
    agent.stop();

    // Without CAP_BPF: one line that says what is missing, and a failure.
    let without: Vec<String> = caps.into_iter().filter(|c| c != "bpf").collect();
    let out = with_capabilities(&without)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
            "--duration",
            "1s",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.starts_with("gdrtrace: ") && !err.contains("panicked"), "{err}");
}

#[test]
fn full_target_set_and_spent_cpu_budget_refuse_and_count() {
    let test = "full_target_set_and_spent_cpu_budget_refuse_and_count";
    if !can_trace(test) {
        return;
    }
    let _one = one_agent();
    let child = serve_child();
    let mut launcher = Launcher::start();
    // One entry, and five targets alive at once: at most one gets it.
    let agent = Agent::start(&["--max-targets", "1", "--exited-retention", "600s"]);
    let c = child.display();
    assert_eq!(launcher.run(&format!("for i in 1 2 3 4 5; do {c} 3 & done; wait")), 0);
    let m = agent.metrics();
    let full = Agent::sum(
        &m,
        "gdrtrace_shed_total",
        &[("what", "target"), ("reason", "targets-full")],
    )
    .unwrap_or(0.0);
    assert!(full >= 4.0, "{full} refused:\n{m}");
    assert_eq!(
        Agent::sum(&m, "gdrtrace_bpf_map_max_entries", &[("map", "TARGETS")]),
        Some(1.0)
    );
    agent.stop();

    // A budget no agent can keep: it sheds to level 2 and refuses newcomers.
    let agent = Agent::start(&["--cpu-budget", "0.000001", "--exited-retention", "600s"]);
    wait_for("shed level 2", Duration::from_secs(60), || {
        (Agent::sum(&agent.metrics(), "gdrtrace_agent_shed_level", &[]) == Some(2.0)).then_some(())
    });
    for _ in 0..3 {
        assert_eq!(launcher.run(&format!("exec {} 0", child.display())), 0);
    }
    let m = wait_for("the refusals", Duration::from_secs(60), || {
        let m = agent.metrics();
        (Agent::sum(
            &m,
            "gdrtrace_shed_total",
            &[("what", "target"), ("reason", "cpu-budget")],
        )
        .unwrap_or(0.0)
            >= 3.0)
            .then_some(m)
    });
    assert_eq!(
        Agent::sum(&m, "gdrtrace_process_info", &[("comm", "serve_child")]),
        None,
        "a refused process is not tracked"
    );
    assert!(
        Agent::sum(&m, "gdrtrace_shed_total", &[("what", "process-sample")]).is_some(),
        "process samples are shed and counted at level 1 and above"
    );
    agent.stop();
}

/// The value of `label` in a series line (`name{a="x",...} v`).
fn label_of<'a>(line: &'a str, label: &str) -> Option<&'a str> {
    let start = line.find(&format!("{label}=\""))? + label.len() + 2;
    let len = line[start..].find('"')?;
    Some(&line[start..start + len])
}

/// Both ranks of one communicator carry the same `communicator` label, the
/// hash of the ncclUniqueId they passed (NCCL's commId), with their own
/// `rank` and the `nranks` they passed: series that join across processes
/// and nodes, where the local ncclComm_t addresses differed per process.
#[test]
fn both_ranks_of_a_communicator_share_its_label() {
    let test = "both_ranks_of_a_communicator_share_its_label";
    if !can_trace(test) || !have(test, "cc", "apt-get install gcc") {
        return;
    }
    let _one = one_agent();
    let job = integration_tests::standin::build_nccl_job(
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")),
        &format!("gdrtrace-serve-commid-{}", std::process::id()),
        "nccl_commid",
    );
    let mut launcher = Launcher::start();
    let agent = Agent::start(&["--exited-retention", "600s", "--collectives", "exact"]);
    let out = job.dir.join("job.txt");
    let status = launcher.run(&format!(
        // The agent attaches a library it sees opened within a second
        // (RESCANS); the init comes after, as torch's init_process_group
        // comes after its import of libnccl.
        "NCCL_JOB_INIT_DELAY_MS=1500 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 exec {} {} 2 64 > {}",
        job.job.display(),
        job.nccl.display(),
        out.display()
    ));
    let text = std::fs::read_to_string(&out).expect("the job's output");
    assert_eq!(status, 0, "{text}");
    let ranks = job_ranks(&text);
    assert_eq!(ranks.len(), 2, "{text}");
    let m = wait_for("both ranks' collectives", Duration::from_secs(60), || {
        let m = agent.metrics();
        ranks
            .iter()
            .all(|(pid, _)| {
                m.lines()
                    .any(|l| l.starts_with("gdrtrace_collective_calls_total{") && l.contains(&format!("pid=\"{pid}\"")))
            })
            .then_some(m)
    });
    let mut seen = Vec::new();
    for (pid, _) in &ranks {
        let line = m
            .lines()
            .find(|l| l.starts_with("gdrtrace_collective_calls_total{") && l.contains(&format!("pid=\"{pid}\"")))
            .expect("a collective series");
        let (c, r, n) = (
            label_of(line, "communicator").unwrap_or(""),
            label_of(line, "rank").unwrap_or(""),
            label_of(line, "nranks").unwrap_or(""),
        );
        let verdict = m
            .lines()
            .find(|l| l.starts_with("gdrtrace_transport_verdict_info{") && l.contains(&format!("pid=\"{pid}\"")))
            .expect("a verdict series");
        assert_eq!(label_of(verdict, "communicator"), Some(c), "{verdict}");
        // The cause the report's sentence gives, as a bounded kind.
        assert_eq!(
            label_of(verdict, "cause"),
            Some("env-nccl-p2p-shm-disable"),
            "{verdict}"
        );
        seen.push((c.to_string(), r.to_string(), n.to_string()));
    }
    println!("ranks' labels: {seen:?}");
    assert_eq!(seen[0].0, seen[1].0, "one communicator, one label: {seen:?}");
    assert!(
        seen[0].0.starts_with("0x") && seen[0].0.len() == 18,
        "NCCL's commId (0x and 16 hex digits): {seen:?}"
    );
    let mut rank_labels: Vec<&str> = seen.iter().map(|s| s.1.as_str()).collect();
    rank_labels.sort();
    assert_eq!(rank_labels, ["0", "1"], "{seen:?}");
    assert!(seen.iter().all(|s| s.2 == "2"), "{seen:?}");

    // A one-rank communicator's collectives cross no link: their bytes are
    // counted as collective bytes, none as moved (as in the report).
    let status = launcher.run(&format!(
        "NCCL_JOB_INIT_DELAY_MS=1500 NCCL_JOB_RANK=0 NCCL_JOB_NRANKS=1 exec {} {} 1 64 > {}",
        job.job.display(),
        job.nccl.display(),
        out.display()
    ));
    let text = std::fs::read_to_string(&out).expect("the job's output");
    assert_eq!(status, 0, "{text}");
    let one = job_ranks(&text);
    assert_eq!(one.len(), 1, "{text}");
    let pid = one[0].0.to_string();
    let m = wait_for("the one rank's collectives", Duration::from_secs(60), || {
        let m = agent.metrics();
        Agent::sum(&m, "gdrtrace_collective_bytes_total", &[("pid", &pid)])
            .filter(|b| *b > 0.0)
            .map(|_| m)
    });
    let moved = Agent::sum(&m, "gdrtrace_moved_bytes_total", &[("pid", &pid)]).unwrap_or(0.0);
    let moved_est = Agent::sum(&m, "gdrtrace_moved_estimated_bytes_total", &[("pid", &pid)]).unwrap_or(0.0);
    assert_eq!((moved, moved_est), (0.0, 0.0), "one rank moved nothing between devices");
    agent.stop();
    let _ = std::fs::remove_dir_all(&job.dir);
}

/// `--web-config-file` in node_exporter's format: the metrics port speaks
/// TLS with the given certificate and asks for the bcrypt-hashed user's
/// password (curl as the client: a wrong password is 401, plain HTTP is
/// refused); `/healthz` and `/readyz` answer without one. A file with a
/// field the agent does not implement is refused in one line.
#[test]
fn tls_and_basic_auth_from_a_web_config_file() {
    let test = "tls_and_basic_auth_from_a_web_config_file";
    if !can_trace(test)
        || !have(test, "openssl", "apt-get install openssl")
        || !have(test, "curl", "apt-get install curl")
    {
        return;
    }
    let _one = one_agent();
    let dir = scratch("web-config");
    let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
        ])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let hash = bcrypt::hash("s3cret", 6).unwrap();
    let config = dir.join("web-config.yml");
    std::fs::write(
        &config,
        format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  prometheus: {hash}\n",
            crt.display(),
            key.display()
        ),
    )
    .unwrap();
    let agent = Agent::start(&["--web-config-file", config.to_str().unwrap()]);
    assert!(
        agent.stderr().contains("serving metrics on https://"),
        "{}",
        agent.stderr()
    );
    let curl = |args: &[&str], path: &str| -> String {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20"])
            .arg("--cacert")
            .arg(&crt)
            .args(args)
            .arg(format!("https://{}{path}", agent.addr))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(curl(&["-u", "prometheus:s3cret"], "/metrics"), "200");
    assert_eq!(curl(&["-u", "prometheus:wrong"], "/metrics"), "401");
    assert_eq!(curl(&[], "/metrics"), "401");
    assert_eq!(curl(&[], "/healthz"), "200", "the liveness probe needs no password");
    assert_eq!(curl(&[], "/readyz"), "200");
    // The body is the exposition.
    let out = Command::new("curl")
        .args(["-s", "--max-time", "20", "-u", "prometheus:s3cret", "--cacert"])
        .arg(&crt)
        .arg(format!("https://{}/metrics", agent.addr))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("gdrtrace_build_info{"));
    // Plain HTTP gets no exposition.
    let plain = http_get(&agent.addr, "/metrics", None);
    assert!(plain.as_ref().map(|r| r.0 != 200).unwrap_or(true), "{plain:?}");
    agent.stop();

    std::fs::write(
        &config,
        "tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [x]\n",
    )
    .unwrap();
    let out = integration_tests::run(&["serve", "--web-config-file", config.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("cipher_suites"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
