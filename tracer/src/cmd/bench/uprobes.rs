//! `bench uprobe-hit` and `bench duty`: what a probed call costs, and what
//! the duty cycle keeps of it, on a stand-in collective in this binary.
use super::*;

use crate::calibrate::{COLLECTIVE, call_loop, gdrtrace_bench_collective, gdrtrace_bench_unprobed};

#[derive(Debug, Serialize, serde::Deserialize)]
pub struct UprobeHitResult {
    pub mode: String,
    pub calls_per_round: u64,
    pub rounds: u32,
    /// Median over rounds of (probed - unprobed) / calls.
    pub ns_per_hit: f64,
    pub ns_per_hit_min: f64,
    pub ns_per_hit_max: f64,
    pub unprobed_ns_per_call: f64,
    /// What the kernel summed for the stand-in's row (calls, bytes).
    pub counted_calls: u64,
    pub counted_bytes: u64,
}

/// A bare session of this process with the stand-in collective probed as
/// table row ncclAllReduce is (entry-only, summed in the kernel), in
/// `group`; returns the session and the row's op.
fn probed_standin(mode: crate::sampling::Mode, group: Group) -> Result<(Session, u32)> {
    let (session, ops) = crate::calibrate::probed_standins(mode, group, &[COLLECTIVE])?;
    Ok((session, ops[0]))
}

#[derive(Debug, Serialize, serde::Deserialize)]
pub struct TrapCostResult {
    pub entry_ns: f64,
    pub pair_ns: f64,
    pub stepped_ns: f64,
    /// `--evict-kib`, and with it the medians of the rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evict_kib: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub median: Option<TrapCostMedians>,
}

/// The medians of the `--evict-kib` rounds (the fields of `TrapCost`).
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct TrapCostMedians {
    pub entry_ns: f64,
    pub pair_ns: f64,
    pub stepped_ns: f64,
}

pub(super) fn trap_cost(a: &BenchTrapCostArgs) -> Result<i32> {
    let (c, m) = crate::calibrate::measure_evicting(a.evict_kib)?;
    let mut line = format!(
        "bench trap-cost: {:.0} ns a probed entry, {:.0} ns an entry and return, {:.0} ns a probed entry whose first instruction is single-stepped (GDRTRACE_TRAP_COST={:.0},{:.0},{:.0})",
        c.entry_ns, c.pair_ns, c.stepped_ns, c.entry_ns, c.pair_ns, c.stepped_ns
    );
    let evicting = a.evict_kib > 0;
    if evicting {
        line.push_str(&format!(
            "; reading {} KiB before each call; medians {:.0}, {:.0}, {:.0} ns",
            a.evict_kib, m.entry_ns, m.pair_ns, m.stepped_ns
        ));
    }
    print(
        &TrapCostResult {
            entry_ns: c.entry_ns,
            pair_ns: c.pair_ns,
            stepped_ns: c.stepped_ns,
            evict_kib: evicting.then_some(a.evict_kib),
            median: evicting.then_some(TrapCostMedians {
                entry_ns: m.entry_ns,
                pair_ns: m.pair_ns,
                stepped_ns: m.stepped_ns,
            }),
        },
        line,
    )
}

pub(super) fn uprobe_hit(a: &BenchUprobeHitArgs) -> Result<i32> {
    if a.calls == 0 || a.rounds == 0 {
        return Err(Error::Usage("--calls and --rounds must be at least 1".into()));
    }
    let (mut session, op) = probed_standin(crate::sampling::Mode::Exact, Group::Steady)?;
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

#[derive(Debug, Serialize, serde::Deserialize)]
pub struct DutyResult {
    pub collectives: String,
    pub link_mode: String,
    pub work_ns: u64,
    pub window_s: f64,
    pub pairs: u32,
    /// Calls to the probed stand-in, and how many the kernel counted.
    pub probed_calls: u64,
    pub counted_calls: u64,
    /// Share of the probed windows' calls that trapped.
    pub trapped_share: f64,
    pub traps_per_s: f64,
    /// Per-call time of probed windows over unprobed ones: all windows
    /// summed, and the median of the pairs.
    pub ratio_of_sums: f64,
    pub median_pair_ratio: f64,
    pub unprobed_ns_per_call: f64,
    pub off_phases: u64,
    pub sampled_s: f64,
    /// Traps in off phases (links being attached or closed), not counted.
    pub off_phase_traps: u64,
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

pub(super) fn duty(a: &BenchDutyArgs) -> Result<i32> {
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
            session.duty_due(&mut agg);
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
        .collectives_counted()
        .keys()
        .find(|(pid, name, _)| *pid == std::process::id() && *name == crate::probes::ops::op_name(op))
        .cloned();
    let counted_calls = key
        .as_ref()
        .and_then(|k| agg.collectives_counted().get(k))
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
    let off_phase_traps = session.off_phase_traps();
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
        off_phases: agg.duty_totals().off_phases,
        sampled_s: agg.duty_totals().on_us as f64 / 1e6,
        off_phase_traps,
    };
    let line = format!(
        "bench duty ({}, {}): {} of {} probed calls trapped ({:.2}%, {:.0} traps/s); per call probed/unprobed {:.4} (all windows), {:.4} (median of {} pairs) at {:.1} us a call; {} traps in off phases (links being attached or closed)",
        r.collectives,
        r.link_mode,
        r.counted_calls,
        r.probed_calls,
        r.trapped_share * 100.0,
        r.traps_per_s,
        r.ratio_of_sums,
        r.median_pair_ratio,
        r.pairs,
        r.unprobed_ns_per_call / 1e3,
        r.off_phase_traps
    );
    print(&r, line)
}
