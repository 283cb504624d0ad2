//! What a trap costs on this machine, measured on stand-ins in this
//! process: an entry-only probe (a collective's) and an entry and return
//! pair (a copy's, which keeps its return probe), each against an
//! identical unprobed function, interleaved.
//!
//! The duty cycle's estimates extrapolate the rates its on phases measured,
//! and a call loop runs slower while its probes trap: at 40,000 copies a
//! second with two traps of 1 us each, the on phases see 8% fewer calls
//! than the loop makes untraced. Where the calls are the loop's critical
//! path (a launch-bound GPU loop, a data loader's copies: the rates at
//! which traps matter at all), the untraced rate is the traced one with
//! the traps' time taken out (`sampling/estimator.rs`). `gdrtrace bench
//! uprobe-hit` measures the entry cost the same way.
//!
//! A trap costs more where the kernel cannot emulate the probed
//! function's first instruction and single-steps it (`probes/insn.rs`:
//! about ten times as much on the development host), so a third stand-in
//! begins with such an instruction, and rows probed on one are corrected
//! by its cost.
//!
//! The measurement loads a session of its own (its own maps and target
//! set, only the process-lifecycle probes and the stand-ins), so nothing of
//! it reaches the traced session's aggregates; it runs once, on a thread,
//! when the duty cycle first samples (`Trace`, `serve`).
use std::{sync::mpsc, time::Instant};

use crate::{
    error::{Error, Result},
    loader::LoadOptions,
    probes::{
        Family, uapi,
        uprobes::{Group, Point},
    },
    session::{Session, SessionOptions},
};

/// The probed stand-in for a collective: ncclAllReduce's argument layout
/// (send, recv, count, data type, reduction, communicator) and a C
/// function's prologue, whose first instruction (`push`) the kernel
/// emulates at the breakpoint as it does for a library's function (a
/// first instruction it cannot emulate would add a single-step trap).
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn gdrtrace_bench_collective(_: u64, _: u64, _: u64, _: u64, _: u64, _: u64) -> u32 {
    core::arch::naked_asm!("push rbp", "mov rbp, rsp", "xor eax, eax", "pop rbp", "ret")
}

/// The probed stand-in for a copy (probed with its return, as a copy row
/// is). Distinct bodies keep the linker from folding the stand-ins into
/// one function (a probe on one would then fire for all).
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn gdrtrace_bench_copy(_: u64, _: u64, _: u64, _: u64, _: u64, _: u64) -> u32 {
    core::arch::naked_asm!("push rbp", "mov rbp, rsp", "mov eax, 0", "pop rbp", "ret")
}

/// The same function, never probed: the baseline of each round.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn gdrtrace_bench_unprobed(_: u64, _: u64, _: u64, _: u64, _: u64, _: u64) -> u32 {
    core::arch::naked_asm!("push rbp", "mov rbp, rsp", "mov eax, 1", "pop rbp", "ret")
}

/// The collective stand-in's twin whose first instruction (a `mov`) the
/// kernel single-steps, as it does `ibv_reg_mr`'s on Debian 12 or any
/// CET build's `endbr64`.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn gdrtrace_bench_stepped(_: u64, _: u64, _: u64, _: u64, _: u64, _: u64) -> u32 {
    core::arch::naked_asm!("mov eax, 2", "ret")
}

/// A stand-in's signature.
pub type StandIn = extern "C" fn(u64, u64, u64, u64, u64, u64) -> u32;

/// Seconds for `n` calls of `f` with an 8 KiB float all-reduce's arguments
/// (for the copy stand-in: destination, source, bytes).
pub fn call_loop(f: StandIn, n: u64) -> f64 {
    evicting_loop(f, n, &[])
}

/// [`call_loop`], reading a line of every 64 bytes of `evict` before each
/// call (`bench trap-cost --evict-kib`).
fn evicting_loop(f: StandIn, n: u64, evict: &[u8]) -> f64 {
    const COMM: u64 = 0xc0ffee;
    let t = Instant::now();
    for _ in 0..n {
        let mut sum = 0u8;
        for b in evict.iter().step_by(64) {
            sum = sum.wrapping_add(*b);
        }
        std::hint::black_box(sum);
        // 2048 float32 (NCCL data type 7): 8 KiB.
        std::hint::black_box(f(std::hint::black_box(0x1000), 0x2000, 2048, 7, 0, COMM));
    }
    t.elapsed().as_secs_f64()
}

/// A stand-in probed as a table row is.
pub struct Probe {
    /// The exported symbol in this binary.
    pub symbol: &'static str,
    /// The function itself: where it is mapped gives its file offset.
    pub function: StandIn,
    /// The table row whose op (and so whose kernel-side handling) it gets.
    pub row: &'static str,
    pub needs_return: bool,
}

/// The collective stand-in as ncclAllReduce is probed (entry-only, summed
/// in the kernel).
pub const COLLECTIVE: Probe = Probe {
    symbol: "gdrtrace_bench_collective",
    function: gdrtrace_bench_collective,
    row: "ncclAllReduce",
    needs_return: false,
};

/// The single-stepped stand-in, probed as the collective one is.
pub const STEPPED: Probe = Probe {
    symbol: "gdrtrace_bench_stepped",
    function: gdrtrace_bench_stepped,
    row: "ncclAllReduce",
    needs_return: false,
};

/// The copy stand-in as cuMemcpyHtoDAsync is probed (entry and return,
/// summed per address pair).
pub const COPY: Probe = Probe {
    symbol: "gdrtrace_bench_copy",
    function: gdrtrace_bench_copy,
    row: "cuMemcpyHtoDAsync",
    needs_return: true,
};

/// A bare session of this process (its own maps: only the lifecycle
/// probes) with `probes` attached in `group`; returns it and their ops.
pub fn probed_standins(mode: crate::sampling::Mode, group: Group, probes: &[Probe]) -> Result<(Session, Vec<u32>)> {
    let mut session = Session::open(&SessionOptions {
        load: LoadOptions {
            targets_only: true,
            ..LoadOptions::default()
        },
        families: Some(vec![Family::Sched]),
        installed_libraries: false,
        collectives: mode,
    })?;
    let exe = std::env::current_exe().map_err(|e| Error::io("locating this executable", e))?;
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(|e| Error::io("reading /proc/self/maps", e))?;
    session
        .planner
        .configure_table(&mut session.ebpf)
        .map_err(|e| Error::Workload(format!("writing the op table: {e}")))?;
    session.add_target(std::process::id())?;
    let mut points = Vec::new();
    let mut ops = Vec::new();
    for p in probes {
        let offset = file_offset(&maps, p.function as usize)
            .ok_or_else(|| Error::Workload(format!("{} is in no executable mapping of this process", p.symbol)))?;
        let op = uapi::TABLE
            .iter()
            .position(|r| r.symbol == p.row)
            .map(uapi::op_of)
            .ok_or_else(|| Error::Workload(format!("the table has no {} row", p.row)))?;
        points.push(Point {
            offset,
            op,
            symbol: p.symbol.to_string(),
            needs_return: p.needs_return,
            group,
        });
        ops.push(op);
    }
    let (_, errors) = session.planner.uprobes.attach(&mut session.ebpf, &exe, &points);
    if let Some(e) = errors.first() {
        return Err(Error::Workload(format!("the stand-in did not attach: {e}")));
    }
    Ok((session, ops))
}

/// The file offset of `addr`, an address in an executable mapping of a
/// file, from this process's maps: the stand-ins are found where they are
/// loaded, not by reading this binary's symbol table (tens of megabytes,
/// read at every calibration).
fn file_offset(maps: &str, addr: usize) -> Option<u64> {
    let addr = addr as u64;
    maps.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (start, end) = f.next()?.split_once('-')?;
        let (start, end) = (u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?);
        let perms = f.next()?;
        let offset = u64::from_str_radix(f.next()?, 16).ok()?;
        (start <= addr && addr < end && perms.contains('x')).then(|| addr - start + offset)
    })
}

/// Nanoseconds a probed call of `probed` costs over an unprobed one, per
/// round of `n` calls each, `rounds` rounds interleaved (unprobed first in
/// even rounds).
pub fn per_call_ns(probed: StandIn, n: u64, rounds: u32) -> Vec<f64> {
    evicting_per_call_ns(probed, n, rounds, &[])
}

fn evicting_per_call_ns(probed: StandIn, n: u64, rounds: u32, evict: &[u8]) -> Vec<f64> {
    let run = |f: StandIn, n: u64| evicting_loop(f, n, evict);
    run(gdrtrace_bench_unprobed, n / 10 + 1);
    run(probed, n / 10 + 1);
    (0..rounds)
        .map(|round| {
            let (off, on) = if round % 2 == 0 {
                let off = run(gdrtrace_bench_unprobed, n);
                (off, run(probed, n))
            } else {
                let on = run(probed, n);
                (run(gdrtrace_bench_unprobed, n), on)
            };
            (on - off).max(0.0) * 1e9 / n as f64
        })
        .collect()
}

/// The lowest quarter's mean of `v`: a round in which this thread lost its
/// CPU for a while (the traced job runs beside it) costs more, never less.
fn low_quarter(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let k = v.len().div_ceil(4);
    v[..k].iter().sum::<f64>() / k as f64
}

/// What it measures (defined with the estimates that use it).
pub use crate::sampling::TrapCost;

/// Measures [`TrapCost`] with the sampled group's link kind of this kernel
/// (a few tens of milliseconds of calls, after the session's load).
pub fn measure() -> Result<TrapCost> {
    Ok(measure_evicting(0)?.0)
}

/// [`measure`] with `evict_kib` of reads before each call: the low
/// quarter's means, and the medians.
pub fn measure_evicting(evict_kib: u64) -> Result<(TrapCost, TrapCost)> {
    let (mut session, _) = probed_standins(
        crate::sampling::Mode::Exact,
        Group::Steady,
        &[COLLECTIVE, COPY, STEPPED],
    )?;
    let evict = vec![1u8; (evict_kib * 1024) as usize];
    // Short rounds, many of them: a few will run undisturbed.
    const N: u64 = 500;
    const ROUNDS: u32 = 24;
    let rounds = |f: StandIn| evicting_per_call_ns(f, N, ROUNDS, &evict);
    let (entry, pair, stepped) = (
        rounds(gdrtrace_bench_collective),
        rounds(gdrtrace_bench_copy),
        rounds(gdrtrace_bench_stepped),
    );
    session.stop()?;
    session.close_uprobes();
    let of = |pick: fn(Vec<f64>) -> f64| TrapCost {
        entry_ns: pick(entry.clone()),
        pair_ns: pick(pair.clone()),
        stepped_ns: pick(stepped.clone()),
    };
    Ok((of(low_quarter), of(median)))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The variable that gives the trap cost instead of measuring it.
pub const COST_VAR: &str = "GDRTRACE_TRAP_COST";

/// `ENTRY,PAIR[,STEPPED]` in nanoseconds (without STEPPED, a
/// single-stepped entry is taken to cost an emulated one's).
fn parse(v: &str) -> Result<TrapCost> {
    let bad = || {
        Error::Usage(format!(
            "{COST_VAR}={v}: expected ENTRY_NS,PAIR_NS[,STEPPED_NS] (e.g. 600,1400,9000)"
        ))
    };
    let mut parts = v.split(',');
    let (e, p, st) = (
        parts.next().ok_or_else(bad)?,
        parts.next().ok_or_else(bad)?,
        parts.next(),
    );
    if parts.next().is_some() {
        return Err(bad());
    }
    let ns = |x: &str| {
        x.trim()
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite() && *n >= 0.0)
            .ok_or_else(bad)
    };
    let entry_ns = ns(e)?;
    Ok(TrapCost {
        entry_ns,
        pair_ns: ns(p)?,
        stepped_ns: st.map(ns).transpose()?.unwrap_or(entry_ns),
    })
}

/// One measurement on a thread of its own, started on first need and
/// polled from the tracing loop.
#[derive(Default)]
pub struct Background {
    rx: Option<mpsc::Receiver<Result<TrapCost>>>,
    done: bool,
}

impl Background {
    /// Starts the measurement, once; `GDRTRACE_TRAP_COST=ENTRY,PAIR[,STEPPED]` (in
    /// nanoseconds, e.g. from `gdrtrace bench uprobe-hit`; `0,0` for no
    /// correction) gives the cost instead, for runs that must not load a
    /// second session or that must replay a known figure.
    pub fn start(&mut self) {
        if self.rx.is_some() || self.done {
            return;
        }
        let (tx, rx) = mpsc::channel();
        if let Ok(v) = std::env::var(COST_VAR) {
            let _ = tx.send(parse(&v));
            self.rx = Some(rx);
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("gdrtrace-calibrate".into())
            .spawn(move || {
                let _ = tx.send(measure());
            });
        match spawned {
            Ok(_) => self.rx = Some(rx),
            Err(e) => {
                log::info!(
                    "trap cost not measured (no thread: {e}): the duty cycle's estimates are not corrected for it"
                );
                self.done = true;
            }
        }
    }

    /// The result, once it is in (then never again).
    pub fn poll(&mut self) -> Option<TrapCost> {
        let r = self.rx.as_ref()?.try_recv().ok()?;
        self.taken(r)
    }

    /// The result of a measurement under way, waited for up to `limit`
    /// (the trace is over, and its estimates need it).
    pub fn wait(&mut self, limit: std::time::Duration) -> Option<TrapCost> {
        let r = self.rx.as_ref()?.recv_timeout(limit).ok()?;
        self.taken(r)
    }

    fn taken(&mut self, r: Result<TrapCost>) -> Option<TrapCost> {
        self.rx = None;
        self.done = true;
        match r {
            Ok(c) => {
                log::info!(
                    "trap cost: {:.0} ns a probed entry, {:.0} ns an entry and return, {:.0} ns a single-stepped entry",
                    c.entry_ns,
                    c.pair_ns,
                    c.stepped_ns
                );
                Some(c)
            }
            Err(e) => {
                log::info!("trap cost not measured ({e}): the duty cycle's estimates are not corrected for it");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_cost_is_parsed_or_refused() {
        assert_eq!(
            parse("600,1400.5").ok(),
            Some(TrapCost {
                entry_ns: 600.0,
                pair_ns: 1400.5,
                stepped_ns: 600.0,
            })
        );
        assert_eq!(parse("600,1400,9000").ok().map(|c| c.stepped_ns), Some(9000.0));
        for bad in ["", "600", "a,b", "-1,2", "1,nan", "1,2,3,4", "1,2,x"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_low_quarter_ignores_disturbed_rounds() {
        let v = vec![1.0, 1.1, 9.0, 1.2, 50.0, 0.9, 1.0, 30.0];
        assert!((low_quarter(v) - 0.95).abs() < 1e-9);
    }
}
