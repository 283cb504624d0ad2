//! `gdrtrace bench ...`: the tracer's own cost, measured on the machine at
//! hand. Each prints one JSON object on stdout (and a line on stderr);
//! `cargo xtask bench` runs the set and docs/perf.md holds the figures.
use std::time::Instant;

use serde::Serialize;

use crate::{
    cli::{Bench, BenchDetachArgs, BenchDutyArgs, BenchPipelineArgs, BenchUprobeHitArgs},
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

pub fn bench(b: &Bench) -> Result<i32> {
    match b {
        Bench::Pipeline(a) => pipeline(a),
        Bench::Detach(a) => detach(a),
        Bench::UprobeHit(a) => uprobe_hit(a),
        Bench::TrapCost => trap_cost(),
        Bench::Duty(a) => duty(a),
        Bench::Copies(a) => copies(a),
    }
}

/// A session with only the process-lifecycle probes: what is measured is
/// the benchmark's own source, not the rest of the catalog.
fn bare_session(load: LoadOptions) -> Result<Session> {
    Session::open(&SessionOptions {
        load,
        families: Some(vec![Family::Sched]),
        installed_libraries: false,
        collectives: crate::probes::duty::Mode::Exact,
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

#[derive(Serialize)]
struct PipelineResult {
    calls: u64,
    threads: u32,
    /// Calls per second asked for (0: unpaced).
    rate: u64,
    ringbuf_bytes: u64,
    wakeup_bytes: u64,
    delivered: u64,
    ringbuf_drops: u64,
    complete: bool,
    generator_s: f64,
    /// Events delivered per second of the generator's run.
    events_per_s: f64,
    /// CPU the tracer spent (all of it, not only decoding), per event.
    tracer_cpu_us_per_event: f64,
}

fn pipeline(a: &BenchPipelineArgs) -> Result<i32> {
    let load = LoadOptions {
        ringbuf_bytes: loader::check_ringbuf_size(a.ringbuf_bytes)?,
        targets_only: true,
        wakeup_bytes: u32::try_from(a.wakeup_bytes)
            .map_err(|_| Error::Usage(format!("--wakeup-bytes {} is too large", a.wakeup_bytes)))?,
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
        let gated = spawn::spawn_gated(&argv)?;
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
        wakeup_bytes: a.wakeup_bytes,
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

#[derive(Serialize)]
struct DetachResult {
    mode: String,
    points: usize,
    links: usize,
    attach_ms: f64,
    close_ms: f64,
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

use crate::calibrate::{COLLECTIVE, call_loop, gdrtrace_bench_collective, gdrtrace_bench_unprobed};

#[derive(Serialize)]
struct UprobeHitResult {
    mode: String,
    calls_per_round: u64,
    rounds: u32,
    /// Median over rounds of (probed - unprobed) / calls.
    ns_per_hit: f64,
    ns_per_hit_min: f64,
    ns_per_hit_max: f64,
    unprobed_ns_per_call: f64,
    /// What the kernel summed for the stand-in's row (calls, bytes).
    counted_calls: u64,
    counted_bytes: u64,
}

/// A bare session of this process with the stand-in collective probed as
/// table row ncclAllReduce is (entry-only, summed in the kernel), in
/// `group`; returns the session and the row's op.
fn probed_standin(mode: crate::probes::duty::Mode, group: Group) -> Result<(Session, u32)> {
    let (session, ops) = crate::calibrate::probed_standins(mode, group, &[COLLECTIVE])?;
    Ok((session, ops[0]))
}

#[derive(Serialize)]
struct TrapCostResult {
    entry_ns: f64,
    pair_ns: f64,
}

fn trap_cost() -> Result<i32> {
    let c = crate::calibrate::measure()?;
    let line = format!(
        "bench trap-cost: {:.0} ns a probed entry, {:.0} ns an entry and return (GDRTRACE_TRAP_COST={:.0},{:.0})",
        c.entry_ns, c.pair_ns, c.entry_ns, c.pair_ns
    );
    print(
        &TrapCostResult {
            entry_ns: c.entry_ns,
            pair_ns: c.pair_ns,
        },
        line,
    )
}

fn uprobe_hit(a: &BenchUprobeHitArgs) -> Result<i32> {
    if a.calls == 0 || a.rounds == 0 {
        return Err(Error::Usage("--calls and --rounds must be at least 1".into()));
    }
    let (mut session, op) = probed_standin(crate::probes::duty::Mode::Exact, Group::Steady)?;
    let mode = link_mode(&session);
    let (probed, unprobed): (extern "C" fn(u64, u64, u64, u64, u64, u64) -> u32, _) =
        (gdrtrace_bench_collective, gdrtrace_bench_unprobed);
    if probed as *const () == unprobed as *const () {
        return Err(Error::Workload(
            "the probed and unprobed stand-ins were folded into one function".into(),
        ));
    }
    let n = a.calls;
    // Warm both paths once.
    call_loop(unprobed, n / 10 + 1);
    call_loop(probed, n / 10 + 1);
    let mut per_hit = Vec::new();
    let mut base = Vec::new();
    for round in 0..a.rounds {
        let (off, on) = if round % 2 == 0 {
            let off = call_loop(unprobed, n);
            (off, call_loop(probed, n))
        } else {
            let on = call_loop(probed, n);
            (call_loop(unprobed, n), on)
        };
        per_hit.push((on - off) * 1e9 / n as f64);
        base.push(off * 1e9 / n as f64);
    }
    let row = session
        .aggregates()?
        .into_iter()
        .find(|(k, _)| k.tgid == std::process::id() && k.op == op);
    let (counted_calls, counted_bytes) = row.map_or((0, 0), |(_, v)| (v.calls, v.bytes));
    session.close_uprobes();
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let r = UprobeHitResult {
        mode,
        calls_per_round: n,
        rounds: a.rounds,
        ns_per_hit_min: per_hit.iter().copied().fold(f64::INFINITY, f64::min),
        ns_per_hit_max: per_hit.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ns_per_hit: median(&mut per_hit),
        unprobed_ns_per_call: median(&mut base),
        counted_calls,
        counted_bytes,
    };
    let expected = n * u64::from(a.rounds) + n / 10 + 1;
    let line = format!(
        "bench uprobe-hit: {:.0} ns per probed call ({:.0}-{:.0} over {} rounds of {} calls, {}); the kernel counted {} of {} calls, {} bytes",
        r.ns_per_hit,
        r.ns_per_hit_min,
        r.ns_per_hit_max,
        r.rounds,
        n,
        r.mode,
        r.counted_calls,
        expected,
        r.counted_bytes
    );
    if r.counted_calls != expected {
        errln!("{line}");
        return Err(Error::Workload(format!(
            "the kernel counted {} calls of the stand-in, {expected} were made",
            r.counted_calls
        )));
    }
    print(&r, line)
}

#[derive(Serialize)]
struct DutyResult {
    collectives: String,
    link_mode: String,
    work_ns: u64,
    window_s: f64,
    pairs: u32,
    /// Calls to the probed stand-in, and how many the kernel counted.
    probed_calls: u64,
    counted_calls: u64,
    /// Share of the probed windows' calls that trapped.
    trapped_share: f64,
    traps_per_s: f64,
    /// Per-call time of probed windows over unprobed ones: all windows
    /// summed, and the median of the pairs.
    ratio_of_sums: f64,
    median_pair_ratio: f64,
    unprobed_ns_per_call: f64,
    off_phases: u64,
    sampled_s: f64,
}

/// One window of calls: `work_ns` of spin, then the call.
fn spin_calls(
    f: extern "C" fn(u64, u64, u64, u64, u64, u64) -> u32,
    work_ns: u64,
    window: std::time::Duration,
) -> (u64, f64) {
    const COMM: u64 = 0xc0ffee;
    let t = Instant::now();
    let mut calls = 0u64;
    while t.elapsed() < window {
        let until = Instant::now() + std::time::Duration::from_nanos(work_ns);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        std::hint::black_box(f(std::hint::black_box(0x1000), 0x2000, 2048, 7, 0, COMM));
        calls += 1;
    }
    (calls, t.elapsed().as_secs_f64())
}

fn duty(a: &BenchDutyArgs) -> Result<i32> {
    if a.pairs == 0 || a.window.is_zero() {
        return Err(Error::Usage("--pairs and --window must be positive".into()));
    }
    let (mut session, op) = probed_standin(a.collectives, Group::Sampled)?;
    let link_mode = link_mode(&session);
    let mut agg = crate::stats::Aggregator::default();
    agg.add_process(std::process::id(), None);
    let (work_ns, window, pairs) = (a.work_ns, a.window, a.pairs);
    // The job: a thread of this process, windows alternating (probed first
    // in even pairs, unprobed first in odd ones).
    let job = std::thread::spawn(move || {
        let mut out = Vec::new();
        for pair in 0..pairs {
            let (p, u) = if pair % 2 == 0 {
                let p = spin_calls(gdrtrace_bench_collective, work_ns, window);
                (p, spin_calls(gdrtrace_bench_unprobed, work_ns, window))
            } else {
                let u = spin_calls(gdrtrace_bench_unprobed, work_ns, window);
                (spin_calls(gdrtrace_bench_collective, work_ns, window), u)
            };
            out.push((p, u));
        }
        out
    });
    // The tracing loop's tick, as `run` and `attach` tick it, and the
    // deadlines of short on phases between ticks.
    let mut next = Instant::now() + crate::trace::TICK;
    while !job.is_finished() {
        let due = session.duty_deadline().filter(|d| *d < next);
        std::thread::sleep(due.unwrap_or(next).saturating_duration_since(Instant::now()));
        if due.is_some() {
            session.duty_due();
            continue;
        }
        next += crate::trace::TICK;
        session.aggregate_tick(&mut agg);
    }
    let windows = job
        .join()
        .map_err(|_| Error::Workload("the benchmark's job thread panicked".into()))?;
    session.stop()?;
    session.aggregate_tick(&mut agg);
    let key = agg
        .collectives_counted
        .keys()
        .find(|(pid, name, _)| *pid == std::process::id() && *name == crate::probes::ops::op_name(op))
        .cloned();
    let counted_calls = key
        .as_ref()
        .and_then(|k| agg.collectives_counted.get(k))
        .map_or(0, |v| v.0);
    session.close_uprobes();
    let per_call = |(calls, secs): (u64, f64)| secs / calls.max(1) as f64;
    let mut ratios: Vec<f64> = windows.iter().map(|(p, u)| per_call(*p) / per_call(*u)).collect();
    ratios.sort_by(f64::total_cmp);
    // (calls, seconds) summed over the probed windows and over the unprobed ones.
    let ((pc, ps), (uc, us)) = windows.iter().fold(((0u64, 0f64), (0u64, 0f64)), |(p, u), (wp, wu)| {
        ((p.0 + wp.0, p.1 + wp.1), (u.0 + wu.0, u.1 + wu.1))
    });
    let (probed_calls, probed_s) = (pc, ps);
    let r = DutyResult {
        collectives: a.collectives.to_string(),
        link_mode,
        work_ns,
        window_s: window.as_secs_f64(),
        pairs,
        probed_calls,
        counted_calls,
        trapped_share: counted_calls as f64 / probed_calls.max(1) as f64,
        traps_per_s: counted_calls as f64 / probed_s.max(1e-9),
        ratio_of_sums: (ps / pc.max(1) as f64) / (us / uc.max(1) as f64),
        median_pair_ratio: ratios[ratios.len() / 2],
        unprobed_ns_per_call: us * 1e9 / uc.max(1) as f64,
        off_phases: agg.duty.off_phases,
        sampled_s: agg.duty.on_us as f64 / 1e6,
    };
    let line = format!(
        "bench duty ({}, {}): {} of {} probed calls trapped ({:.2}%, {:.0} traps/s); per call probed/unprobed {:.4} (all windows), {:.4} (median of {} pairs) at {:.1} us a call",
        r.collectives,
        r.link_mode,
        r.counted_calls,
        r.probed_calls,
        r.trapped_share * 100.0,
        r.traps_per_s,
        r.ratio_of_sums,
        r.median_pair_ratio,
        r.pairs,
        r.unprobed_ns_per_call / 1e3
    );
    print(&r, line)
}

#[derive(Serialize)]
struct CopiesResult {
    collectives: String,
    copies_per_round: u64,
    bytes: u64,
    rounds: u32,
    /// Median over rounds of (traced loop - untraced loop) / copies.
    ns_per_copy: f64,
    ns_per_copy_min: f64,
    ns_per_copy_max: f64,
    untraced_ns_per_copy: f64,
    /// Per traced round: the report's copies (counted, or estimated where
    /// the duty cycle sampled them) over those made.
    reported_share_min: f64,
    reported_share_max: f64,
    /// Copy probe traps (entries and returns) per traced round, median.
    traps: u64,
    /// Every traced round's copies were host-staged with a pageable host
    /// side, as the report's verdicts say.
    verdict_host_staged_pageable: bool,
    off_phases: u64,
}

/// One round of `drive copy-loop`: untraced, or under `run` with its JSON
/// report read back. Returns the loop's summary and the report.
fn copy_round(
    a: &crate::cli::BenchCopiesArgs,
    traced: bool,
    dir: &std::path::Path,
) -> Result<(crate::drive::copy_loop::CopyLoopSummary, Option<crate::report::Report>)> {
    let exe = std::env::current_exe().map_err(|e| Error::io("locating this executable", e))?;
    let summary = dir.join(if traced { "traced.json" } else { "untraced.json" });
    let report = dir.join("report.json");
    let mut cmd = std::process::Command::new(&exe);
    if traced {
        cmd.args(["run", "--collectives", &a.collectives.to_string(), "--json"])
            .arg(&report)
            .arg("--")
            .arg(&exe);
    }
    cmd.args(["drive", "copy-loop", "--wait-ms", "1000"])
        .args(["--copies", &a.copies.to_string(), "--bytes", &a.bytes.to_string()])
        .arg("--lib")
        .arg(&a.lib)
        .arg("--summary")
        .arg(&summary);
    let out = cmd.output().map_err(|e| Error::io("starting drive copy-loop", e))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Workload(format!(
            "the copy loop failed ({}): {}",
            out.status,
            err.lines().last().unwrap_or("")
        )));
    }
    let read =
        |p: &std::path::Path| std::fs::read_to_string(p).map_err(|e| Error::io(format!("reading {}", p.display()), e));
    let s: crate::drive::copy_loop::CopyLoopSummary =
        serde_json::from_str(&read(&summary)?).map_err(|e| Error::Workload(format!("the loop's summary: {e}")))?;
    let r = if traced {
        Some(serde_json::from_str(&read(&report)?).map_err(|e| Error::Workload(format!("the report: {e}")))?)
    } else {
        None
    };
    Ok((s, r))
}

/// The copy loop's copies in a report (counted or estimated), whether all
/// of them are host-staged with a pageable host side, and their traps.
pub fn copies_in_report(r: &crate::report::Report, pid: u32) -> (u64, bool, u64) {
    const OPS: [&str; 2] = ["cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync"];
    let mine = r.processes.iter().find(|p| p.pid == pid);
    let calls: u64 = mine.map_or(0, |p| {
        OPS.iter().map(|o| p.info.calls.get(*o).copied().unwrap_or(0)).sum()
    });
    let ops: Vec<_> = r.operations.iter().filter(|o| OPS.contains(&o.name.as_str())).collect();
    let staged = !ops.is_empty()
        && ops
            .iter()
            .all(|o| o.transport == "host-staged" && o.evidence.contains("pageable host memory"));
    let traps = r
        .probe_hits
        .iter()
        .filter(|h| OPS.contains(&h.op.as_str()))
        .map(|h| h.hits)
        .sum::<u64>()
        * 2;
    (calls, staged, traps)
}

fn copies(a: &crate::cli::BenchCopiesArgs) -> Result<i32> {
    if a.copies == 0 || a.rounds == 0 {
        return Err(Error::Usage("--copies and --rounds must be at least 1".into()));
    }
    if !a.lib.is_file() {
        return Err(Error::Usage(format!(
            "--lib {}: no such file (the stand-in libcuda the tests build)",
            a.lib.display()
        )));
    }
    let dir = std::env::temp_dir().join(format!("gdrtrace-bench-copies-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let made = 2 * a.copies;
    let (mut per_copy, mut base, mut shares, mut traps) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut staged = true;
    let mut off_phases = 0;
    for round in 0..a.rounds {
        let order = if round % 2 == 0 { [false, true] } else { [true, false] };
        let mut loops = [0.0; 2];
        for traced in order {
            let (s, r) = copy_round(a, traced, &dir)?;
            loops[traced as usize] = s.loop_s;
            if let Some(r) = r {
                let (calls, ok, t) = copies_in_report(&r, s.pid);
                shares.push(calls as f64 / made as f64);
                staged &= ok;
                traps.push(t);
                off_phases = off_phases.max(r.sampling.map_or(0, |d| d.off_phases));
            }
        }
        per_copy.push((loops[1] - loops[0]) * 1e9 / made as f64);
        base.push(loops[0] * 1e9 / made as f64);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    traps.sort_unstable();
    let r = CopiesResult {
        collectives: a.collectives.to_string(),
        copies_per_round: made,
        bytes: a.bytes,
        rounds: a.rounds,
        ns_per_copy_min: per_copy.iter().copied().fold(f64::INFINITY, f64::min),
        ns_per_copy_max: per_copy.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ns_per_copy: median(&mut per_copy),
        untraced_ns_per_copy: median(&mut base),
        reported_share_min: shares.iter().copied().fold(f64::INFINITY, f64::min),
        reported_share_max: shares.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        traps: traps[traps.len() / 2],
        verdict_host_staged_pageable: staged,
        off_phases,
    };
    let line = format!(
        "bench copies ({}): {:.0} ns per copy under run ({:.0}-{:.0} over {} rounds of {} copies; {:.1} ns untraced); the report has {:.1}-{:.1}% of the copies; {} copy traps a round; verdict host-staged from pageable memory: {}",
        r.collectives,
        r.ns_per_copy,
        r.ns_per_copy_min,
        r.ns_per_copy_max,
        r.rounds,
        made,
        r.untraced_ns_per_copy,
        r.reported_share_min * 100.0,
        r.reported_share_max * 100.0,
        r.traps,
        if r.verdict_host_staged_pageable { "yes" } else { "NO" },
    );
    print(&r, line)
}
