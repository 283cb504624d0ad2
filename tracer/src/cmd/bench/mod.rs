//! `gdrtrace bench ...`: the tracer's own cost, measured on the machine at
//! hand. Each prints one JSON object on stdout (its type is the `...Result`
//! struct here, which the tests read back) and a line on stderr;
//! `cargo xtask bench` runs the set and docs/perf.md holds the figures.
use std::time::Instant;

use serde::Serialize;

use crate::{
    cli::{Bench, BenchDetachArgs, BenchDutyArgs, BenchPipelineArgs, BenchTrapCostArgs, BenchUprobeHitArgs},
    error::{Error, Result},
    loader::{self, LoadOptions},
    probes::{
        Family, symbols, uapi,
        uprobes::{Group, Point},
    },
    session::{Session, SessionOptions},
    spawn,
    trace::Trace,
};

mod copies;
mod network;
mod uprobes;

use self::{
    copies::copies,
    uprobes::{duty, trap_cost, uprobe_hit},
};
pub use self::{
    copies::copies_in_report,
    uprobes::{DutyResult, TrapCostMedians, TrapCostResult, UprobeHitResult},
};

pub fn bench(b: &Bench) -> Result<i32> {
    match b {
        Bench::Pipeline(a) => pipeline(a),
        Bench::Detach(a) => detach(a),
        Bench::UprobeHit(a) => uprobe_hit(a),
        Bench::TrapCost(a) => trap_cost(a),
        Bench::Duty(a) => duty(a),
        Bench::Copies(a) => copies(a),
        Bench::Network(a) => network::network(a),
    }
}

/// A session with only the process-lifecycle probes: what is measured is
/// the benchmark's own source, not the rest of the catalog.
fn bare_session(load: LoadOptions) -> Result<Session> {
    Session::open(&SessionOptions {
        load,
        families: Some(vec![Family::Sched]),
        installed_libraries: false,
        collectives: crate::sampling::Mode::Exact,
    })
}

/// How the session's uprobe links were made.
fn link_mode(session: &Session) -> String {
    match session.planner.uprobes.mode() {
        Some(crate::probes::uprobes::Mode::Multi) => "uprobe_multi",
        _ => "per-point",
    }
    .to_string()
}

/// CPU seconds this process has used (user + system).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct we own.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(r.ru_utime) + t(r.ru_stime)
}

fn print<T: Serialize>(v: &T, line: String) -> Result<i32> {
    errln!("{line}");
    let json = serde_json::to_string(v).map_err(|e| Error::Workload(format!("serializing: {e}")))?;
    outln!("{json}");
    Ok(0)
}

#[derive(Debug, Serialize, serde::Deserialize)]
pub struct PipelineResult {
    pub calls: u64,
    pub threads: u32,
    /// Calls per second asked for (0: unpaced).
    pub rate: u64,
    pub ringbuf_bytes: u64,
    pub wakeup_bytes: u64,
    pub delivered: u64,
    pub ringbuf_drops: u64,
    pub complete: bool,
    pub generator_s: f64,
    /// Events delivered per second of the generator's run.
    pub events_per_s: f64,
    /// CPU the tracer spent (all of it, not only decoding), per event.
    pub tracer_cpu_us_per_event: f64,
}

fn pipeline(a: &BenchPipelineArgs) -> Result<i32> {
    let ringbuf_bytes = loader::check_ringbuf_size(a.ringbuf_bytes)?;
    // The loader wakes the reader before the buffer is a quarter full.
    let (show, quarter) = (|n: u64| n.to_string(), u64::from(ringbuf_bytes / 4));
    let wakeup_bytes = crate::clamp::at_least("--wakeup-bytes", a.wakeup_bytes, 1, show, "the smallest fill level");
    let wakeup_bytes = crate::clamp::at_most(
        "--wakeup-bytes",
        wakeup_bytes,
        quarter,
        show,
        "a quarter of the ring buffer, the largest fill level",
    );
    let load = LoadOptions {
        ringbuf_bytes,
        targets_only: true,
        // At most a quarter of a ring buffer of at most 1 GiB.
        wakeup_bytes: wakeup_bytes as u32,
        ..LoadOptions::default()
    };
    let mut session = bare_session(load)?;
    let p = &crate::probes::catalog::BENCH_POINT;
    let Session { ebpf, planner, .. } = &mut session;
    match planner.attach_point(ebpf, p) {
        Some(row) if row.status == crate::probes::Status::Attached => {}
        row => {
            return Err(Error::Usage(format!(
                "the benchmark's getppid tracepoint: {}",
                row.map_or("not a tracepoint".into(), |r| r.summary())
            )));
        }
    }
    let mut trace = Trace::new(session);
    let summary = std::env::temp_dir().join(format!("gdrtrace-bench-{}.json", std::process::id()));
    let exe = std::env::current_exe().map_err(|e| Error::io("locating this executable", e))?;
    let argv: Vec<String> = [
        exe.to_string_lossy().as_ref(),
        "drive",
        "syscalls",
        "--calls",
        &a.calls.to_string(),
        "--threads",
        &a.threads.to_string(),
        "--rate",
        &a.rate.to_string(),
        "--summary",
        &summary.to_string_lossy(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let cpu_before = cpu_seconds();
    let rt = super::runtime()?;
    rt.block_on(async {
        let gated = spawn::spawn_gated(&argv, spawn::CommandStdout::Inherit)?;
        trace.add_target(gated.pid, None)?;
        let mut child = gated.release()?;
        trace
            .run_until(async move {
                child.exited().await;
            })
            .await
    })?;
    let report = trace.report(argv, None)?;
    let cpu = cpu_seconds() - cpu_before;
    let generated: crate::drive::syscalls::SyscallsSummary = std::fs::read_to_string(&summary)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .ok_or_else(|| Error::Workload("the generator wrote no summary".into()))?;
    let _ = std::fs::remove_file(&summary);
    let delivered: u64 = report
        .operations
        .iter()
        .filter(|o| o.name == p.name)
        .map(|o| o.calls)
        .sum();
    let r = PipelineResult {
        calls: a.calls,
        threads: a.threads,
        rate: a.rate,
        ringbuf_bytes: a.ringbuf_bytes,
        wakeup_bytes,
        delivered,
        ringbuf_drops: report.loss.ringbuf_drops,
        complete: report.loss.complete,
        generator_s: generated.elapsed_s,
        events_per_s: delivered as f64 / generated.elapsed_s.max(1e-9),
        tracer_cpu_us_per_event: cpu * 1e6 / delivered.max(1) as f64,
    };
    let line = format!(
        "bench pipeline: {} of {} events delivered in {:.3} s ({:.0} events/s), {} ring-buffer drops, tracer CPU {:.2} us/event",
        r.delivered, r.calls, r.generator_s, r.events_per_s, r.ringbuf_drops, r.tracer_cpu_us_per_event
    );
    print(&r, line)
}

#[derive(Debug, Serialize, serde::Deserialize)]
pub struct DetachResult {
    pub mode: String,
    pub points: usize,
    pub links: usize,
    pub attach_ms: f64,
    pub close_ms: f64,
}

fn detach(a: &BenchDetachArgs) -> Result<i32> {
    let mut session = bare_session(LoadOptions::default())?;
    if a.per_point {
        session.planner.uprobes.force_per_point("--per-point");
    }
    let exe = std::env::current_exe().map_err(|e| Error::io("locating this executable", e))?;
    let syms = symbols::functions(&exe)?;
    // Any evented row with a return probe: the programs filter by target
    // set, and nothing here is a target.
    let op = uapi::TABLE
        .iter()
        .position(|r| r.symbol == "cuMemFreeHost")
        .map(uapi::op_of)
        .ok_or_else(|| Error::Workload("the table has no cuMemFreeHost row".into()))?;
    let mut seen = std::collections::HashSet::new();
    let points: Vec<Point> = syms
        .iter()
        .filter(|s| seen.insert(s.file_offset))
        .take(a.points)
        .map(|s| Point {
            offset: s.file_offset,
            op,
            symbol: s.display(),
            needs_return: true,
            group: Group::Steady,
        })
        .collect();
    if points.len() < a.points {
        return Err(Error::Usage(format!(
            "this binary has only {} functions to probe",
            points.len()
        )));
    }
    let started = Instant::now();
    let (attached, errors) = session.planner.uprobes.attach(&mut session.ebpf, &exe, &points);
    let attach_ms = started.elapsed().as_secs_f64() * 1e3;
    if let Some(e) = errors.first() {
        return Err(Error::Workload(format!(
            "{} of {} points did not attach: {e}",
            errors.len(),
            points.len()
        )));
    }
    let mode = link_mode(&session);
    let closed = session.close_uprobes();
    let r = DetachResult {
        mode,
        points: attached.len(),
        links: closed.links,
        attach_ms,
        close_ms: closed.ms,
    };
    let line = format!(
        "bench detach: {} points ({} entry+return) as {} link(s), {}: attach {:.0} ms, close {:.0} ms",
        r.points, r.points, r.links, r.mode, r.attach_ms, r.close_ms
    );
    print(&r, line)
}
