//! A row's rate over some counting time, corrected for what its traps cost
//! (docs/sampling.md#what-the-estimate-guarantees).
use std::collections::BTreeMap;

use super::trap_cost::Cost;

/// (pid, op name, communicator or endpoint).
pub type RowKey = (u32, String, u64);

/// Calls and bytes of each row.
pub(super) type Rows = BTreeMap<RowKey, (u64, u64)>;

/// The CPU time each process ran while the rows counted, in microseconds,
/// where it was measured (`Input::Duty`'s `cpu`).
pub type Cpu = BTreeMap<u32, u64>;

/// A row's rate over some counting time: calls and bytes per
/// microsecond, and whether its process's traps took more than
/// [`MAX_TRAP_SHARE`] of that time, or of the CPU time it ran in it (the
/// untraced rate is then higher than can be told, and an estimate from it
/// a lower bound).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Rate {
    pub(super) calls: f64,
    pub(super) bytes: f64,
    pub(super) bound: bool,
    /// The row's first call came in the second half of that time
    /// ([`Estimator::row_began`]): the rate since it began is higher, and
    /// an estimate that carries it on alone (its process exited in the gap
    /// after it, or the trace ended there) a lower bound.
    pub(super) late: bool,
}

impl Rate {
    pub(super) fn mean(self, o: Rate) -> Rate {
        Rate {
            calls: (self.calls + o.calls) / 2.0,
            bytes: (self.bytes + o.bytes) / 2.0,
            bound: self.bound || o.bound,
            late: false,
        }
    }

    /// Whether an estimate that carries this rate on alone is a lower bound.
    pub(super) fn bounds_alone(self) -> bool {
        self.bound || self.late
    }
}

pub(super) fn delta(now: &Rows, before: &Rows) -> Rows {
    now.iter()
        .map(|(k, (c, b))| {
            let (c0, b0) = before.get(k).copied().unwrap_or_default();
            (k.clone(), (c.saturating_sub(c0), b.saturating_sub(b0)))
        })
        .collect()
}

/// The CPU time of each process over several intervals: of those measured
/// in every one of them only (one left out would make the sum too short,
/// and its traps' share too large).
pub(super) fn cpu_over<'a>(intervals: impl Iterator<Item = &'a Cpu> + Clone) -> Cpu {
    let mut sum = Cpu::new();
    let Some(first) = intervals.clone().next() else {
        return sum;
    };
    for pid in first.keys() {
        let all: Option<u64> = intervals.clone().map(|c| c.get(pid).copied()).sum();
        if let Some(us) = all {
            sum.insert(*pid, us);
        }
    }
    sum
}

/// The shortest counting time over which a process's traps are judged
/// against its CPU time as well ([`rates`]): a CPU clock is only as fine as
/// the scheduler tick (docs/sampling.md R16).
const CPU_WINDOW_US: u64 = 200_000;

/// The most of a caller's time the traps are taken to have had: beyond it
/// the calls are mostly traps, and the untraced rate cannot be told.
pub(super) const MAX_TRAP_SHARE: f64 = 0.5;

/// Each row's rate (calls, bytes per microsecond) over `us` of counting.
/// With the trap cost known, the rate its process makes the calls at
/// untraced: every call took its traps' time longer while counted (the
/// traps of all its sampled rows), which a loop whose calls are its
/// critical path (where traps matter at all: launch-bound GPU loops, copy
/// loops) gives back when its probes are off.
/// A row probed on a single-stepped first instruction (`stepped`: per
/// process) pays the step on its entry trap ([`Cost::step`]). A process
/// in `since` made its calls over that much of the time only (its rows
/// began in it: [`Estimator::since_began`]).
/// A process in `cpu` ran that long on a CPU in the time: its traps are
/// judged over that as well, as a process kept off the CPU by others
/// spends less of its wall time in its traps however much of its own they
/// take (docs/sampling.md R16). The correction stays the one over the wall
/// time: a job that waits on its GPU makes its calls in that.
pub(super) fn rates(
    us: u64,
    since: &BTreeMap<u32, u64>,
    counts: &Rows,
    cost: Option<&Cost>,
    stepped: &BTreeMap<u32, Vec<String>>,
    cpu: &Cpu,
) -> BTreeMap<RowKey, Rate> {
    let us_of = |pid: u32| since.get(&pid).copied().unwrap_or(us).max(1) as f64;
    let per_call = |k: &RowKey| {
        cost.map_or(0.0, |c| {
            let step = match stepped.get(&k.0) {
                Some(rows) if rows.contains(&k.1) => c.step,
                _ => 0.0,
            };
            match crate::probes::uapi::row_named(&k.1).map(|r| r.traps_per_call()) {
                Some(1) => c.entry + step,
                Some(_) => c.pair + step,
                None => 0.0,
            }
        })
    };
    // The time each process's traps took.
    let mut trapped: BTreeMap<u32, f64> = BTreeMap::new();
    for (k, (c, _)) in counts {
        *trapped.entry(k.0).or_default() += *c as f64 * per_call(k);
    }
    counts
        .iter()
        .map(|(k, (c, b))| {
            let wall = us_of(k.0);
            let trapped = trapped.get(&k.0).copied().unwrap_or(0.0);
            let share = trapped / wall;
            let of_cpu = match cpu.get(&k.0) {
                Some(c) if *c > 0 && us >= CPU_WINDOW_US => trapped / *c as f64,
                _ => 0.0,
            };
            let scale = 1.0 / (1.0 - share.min(MAX_TRAP_SHARE));
            let rate = Rate {
                calls: *c as f64 / wall * scale,
                bytes: *b as f64 / wall * scale,
                bound: share.max(of_cpu) > MAX_TRAP_SHARE,
                late: false,
            };
            (k.clone(), rate)
        })
        .collect()
}
