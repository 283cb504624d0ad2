//! The estimator: what the sampled rows did while their probes were off,
//! from the counts of the on phases around each gap. Each read of the
//! kernel's totals ends one interval (counted `on_us`, uncounted `off_us`);
//! a row's gap is estimated at the mean of its rate over the last beat
//! before it and the first second after it (docs/sampling.md#the-estimator).
use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub use super::rates::{Cpu, RowKey};
use super::{
    rates::{Rate, Rows, cpu_over, delta, rates},
    trap_cost::{Cost, TrapCost},
};

/// How much of a gap in which its process exited is estimated, at the rate
/// of the on phase before it.
const TAIL_US: u64 = 1_000_000;
/// An on phase closes the gap before it once it has counted this long.
const MIN_WINDOW_US: u64 = 50_000;
/// The rates after a gap are taken over this much of the next on phase's
/// counting time.
const RATE_WINDOW_US: u64 = 1_000_000;
/// The rates before a gap over this much of the end of the on phase before
/// it (its last tick: the duty cycle closes the probes after a full tick
/// over budget, `sampling/controller.rs`).
const END_WINDOW_US: u64 = 250_000;

/// An on phase in progress.
#[derive(Clone, Debug, Default)]
struct Phase {
    /// Counting time and counts of its first second, and the CPU time of
    /// each of its intervals.
    first_us: u64,
    first: Rows,
    first_cpu: Vec<Cpu>,
    /// Its last intervals, at least a tick of them.
    last: VecDeque<Counted>,
    /// When the counts of the last one were read (`CLOCK_MONOTONIC`; 0
    /// where not known).
    end_ns: u64,
    /// Whether the gap before it is estimated.
    closed_gap: bool,
}

/// An interval of an on phase with its counts.
#[derive(Clone, Debug, Default)]
struct Counted {
    /// Counting time.
    us: u64,
    rows: Rows,
    cpu: Cpu,
}

/// An interval waiting for its counts.
#[derive(Clone, Debug)]
struct Pending {
    on_us: u64,
    off_us: u64,
    cpu: Cpu,
    /// The processes alive when it ended.
    live: BTreeSet<u32>,
    /// Its number (intervals are numbered from 1 as they end).
    seq: u64,
}

/// Uncounted time of a row since the last on phase.
#[derive(Clone, Copy, Debug, Default)]
struct Gap {
    /// The row's rate at the end of the on phase before it; None when the
    /// row began in none.
    before: Option<Rate>,
    us: u64,
}

/// The estimates of the uncounted time, fed one interval at a time.
#[derive(Clone, Debug, Default)]
pub struct Estimator {
    /// The interval waiting for its counts, and the rows as counted when it
    /// began.
    pending: Option<Pending>,
    before: Rows,
    phase: Option<Phase>,
    gaps: BTreeMap<RowKey, Gap>,
    /// Estimated calls and bytes of the gaps closed so far.
    extra: BTreeMap<RowKey, (f64, f64)>,
    /// Rows with a closed gap estimated from a trap-bound rate.
    bound: BTreeSet<RowKey>,
    /// (pid, communicator) whose end was seen (`ncclCommDestroy`,
    /// `ncclCommAbort`), with the number of intervals that had ended
    /// before it: their gaps stop growing there. Numbers rather than the
    /// order of arrival, so that a replay whose totals come a tick later
    /// reaches the same estimates.
    ended: BTreeMap<(u32, u64), u64>,
    /// Processes that exited, their gaps to close once the interval
    /// waiting for its counts has them.
    exited: BTreeSet<u32>,
    /// Processes seen to exit ([`Estimator::gone`]), with the number of
    /// intervals that had ended before it: an on phase of a later one
    /// counted none of their calls whatever they did, so its rate closes no
    /// gap of theirs. Numbers, as for `ended`.
    gone: BTreeMap<u32, u64>,
    /// Intervals ended so far.
    seq: u64,
    /// What a trapped call costs its caller; None until measured.
    cost: Option<Cost>,
    /// Each process's rows probed on a single-stepped first instruction
    /// (`probes/insn.rs`), in the files it maps.
    stepped: BTreeMap<u32, Vec<String>>,
    /// Whether an interval began (`before` holds the counts it began with).
    started: bool,
    /// When each row's first call was made (`CLOCK_MONOTONIC`), where an
    /// event says so (a copy class's first row, `kind::ROW_FIRST`).
    first_call: BTreeMap<RowKey, u64>,
    /// When the kernel's totals were last read ([`Estimator::clock`]).
    now_ns: u64,
    /// What it was fed before the trap cost was known, fed again once it is.
    log: Log,
    /// The ops whose rows are counted through the off phases
    /// ([`Estimator::exact_rows`]): no gap of theirs is estimated.
    exact: BTreeSet<String>,
    /// Ops that left `exact` since the last on phase ended: their rows'
    /// next gap takes the rate after it (their counts before it include
    /// calls of off phases).
    joined: BTreeSet<String>,
    /// Whether an off phase came yet (before it, every count is an on
    /// phase's, and an op that joins keeps the rate before its gap).
    seen_off: bool,
}

/// Each call that fed the estimator before the trap cost was known
/// ([`Estimator::trap_cost`]), at most [`LOG_ROWS`] rows of them.
#[derive(Clone, Debug, Default)]
struct Log {
    steps: Vec<Step>,
    rows: usize,
    /// Too long, or the cost came: nothing more is kept.
    off: bool,
}

/// One call of [`Estimator`]'s that changes it.
#[derive(Clone, Debug)]
enum Step {
    Interval {
        counted: Rows,
        on_us: u64,
        off_us: u64,
        cpu: Cpu,
        live: BTreeSet<u32>,
    },
    Counts(Rows),
    Stepped(u32, Vec<String>),
    RowEnded(u32, u64),
    Exited(u32),
    Gone(u32),
    Clock(u64),
    RowBegan(RowKey, u64),
    Forget(u32),
    Exact(Vec<String>),
}

/// The most rows [`Log`] keeps: the trap cost comes a second or two after
/// the sampled rows attach (`calibrate.rs`), some twenty calls later, of a
/// few rows each; where it never comes (the calibration failed) the log
/// stops here, a few megabytes.
const LOG_ROWS: usize = 50_000;

impl Estimator {
    /// An interval ended: `on_us` counted, `off_us` not, and the processes
    /// in `cpu` ran that many microseconds of CPU time in `on_us`;
    /// `counted` holds the rows as counted when it began, `live` says
    /// which processes still run. Its own counts come with
    /// [`Estimator::counts`] (or, when none came, with the next interval).
    pub fn interval(&mut self, counted: &Rows, on_us: u64, off_us: u64, cpu: &Cpu, live: impl Fn(u32) -> bool) {
        let pids: BTreeSet<u32> = counted.keys().chain(self.gaps.keys()).map(|k| k.0).collect();
        let live = pids.into_iter().filter(|p| live(*p)).collect();
        if self.log.off {
            return self.interval_now(counted, on_us, off_us, cpu.clone(), live);
        }
        self.step(Step::Interval {
            counted: counted.clone(),
            on_us,
            off_us,
            cpu: cpu.clone(),
            live,
        });
    }

    fn interval_now(&mut self, counted: &Rows, on_us: u64, off_us: u64, cpu: Cpu, live: BTreeSet<u32>) {
        self.counts_now(counted);
        self.seq += 1;
        self.pending = Some(Pending {
            on_us,
            off_us,
            cpu,
            live,
            seq: self.seq,
        });
        // The interval's counts are taken from the last counts it got
        // (`counts` keeps them): totals read in between (a `serve` scrape)
        // belong to this interval (docs/sampling.md R15).
        if !self.started {
            self.started = true;
            self.before.clone_from(counted);
        }
    }

    /// The kernel's totals after the pending interval: its counts.
    pub fn counts(&mut self, counted: &Rows) {
        if self.log.off {
            return self.counts_now(counted);
        }
        self.step(Step::Counts(counted.clone()));
    }

    fn counts_now(&mut self, counted: &Rows) {
        self.counts_of_pending(counted);
        self.close_exited();
    }

    /// Makes one call, kept in the log until the trap cost is known.
    fn step(&mut self, s: Step) {
        if !self.log.off {
            self.log.rows += match &s {
                Step::Interval { counted, .. } | Step::Counts(counted) => counted.len().max(1),
                _ => 1,
            };
            if self.log.rows > LOG_ROWS {
                self.log = Log {
                    off: true,
                    ..Log::default()
                };
            } else {
                self.log.steps.push(s.clone());
            }
        }
        match s {
            Step::Interval {
                counted,
                on_us,
                off_us,
                cpu,
                live,
            } => self.interval_now(&counted, on_us, off_us, cpu, live),
            Step::Counts(counted) => self.counts_now(&counted),
            Step::Stepped(pid, rows) => {
                if rows.is_empty() {
                    self.stepped.remove(&pid);
                } else {
                    self.stepped.insert(pid, rows);
                }
            }
            Step::RowEnded(pid, handle) => {
                self.ended.insert((pid, handle), self.seq);
            }
            Step::Exited(pid) => {
                self.exited.insert(pid);
                if self.pending.is_none() {
                    self.close_exited();
                }
            }
            Step::Gone(pid) => {
                self.gone.entry(pid).or_insert(self.seq);
            }
            Step::Clock(t_ns) => self.now_ns = t_ns,
            Step::RowBegan(key, t_ns) => {
                self.first_call.entry(key).or_insert(t_ns);
            }
            Step::Forget(pid) => self.forget_now(pid),
            Step::Exact(ops) => {
                let now: BTreeSet<String> = ops.into_iter().collect();
                if self.seen_off {
                    self.joined.extend(self.exact.difference(&now).cloned());
                }
                self.exact = now;
            }
        }
    }

    fn counts_of_pending(&mut self, counted: &Rows) {
        let Some(Pending {
            on_us,
            off_us,
            cpu,
            live,
            seq,
        }) = self.pending.take()
        else {
            return;
        };
        let live = |pid: u32| live.contains(&pid);
        // Whether an on phase of this interval saw the process run.
        let gone = self.gone.clone();
        let ran = |pid: u32| live(pid) && gone.get(&pid).is_none_or(|at| seq <= *at);
        let counts = delta(counted, &self.before);
        self.before.clone_from(counted);
        // Uncounted time first: it lies before this interval's counting.
        if off_us > 0 {
            self.seen_off = true;
            // An off part before the counting of this interval ended the
            // phase in progress (an interval of a short on phase that began
            // between two beats, 40 ms uncounted then 1 ms counted, has it
            // too). Such a phase was dropped, its rates opening no gaps: a
            // copy loop closed by the beat and exited before the next one
            // was reported as counted, 1-6% of its copies, under `serve`.
            if let Some(p) = self.phase.take() {
                self.end_phase(p, counted, &ran);
            }
            for (k, g) in self.gaps.iter_mut() {
                // An interval that ended after the communicator's end adds nothing.
                if live(k.0) && self.ended.get(&(k.0, k.2)).is_none_or(|at| seq <= *at) {
                    g.us += off_us;
                }
            }
        }
        if on_us == 0 {
            return;
        }
        // Calls counted in an interval after the one an end came in: the
        // handle is a new communicator's (the allocator reused the address).
        for (k, (c, _)) in &counts {
            if *c > 0 && self.ended.get(&(k.0, k.2)).is_some_and(|at| seq > at + 1) {
                self.ended.remove(&(k.0, k.2));
            }
        }
        let p = self.phase.get_or_insert_with(Phase::default);
        if p.first_us < RATE_WINDOW_US {
            p.first_us += on_us;
            for (k, (c, b)) in &counts {
                let e = p.first.entry(k.clone()).or_default();
                e.0 += c;
                e.1 += b;
            }
            p.first_cpu.push(cpu.clone());
        }
        p.last.push_back(Counted {
            us: on_us,
            rows: counts,
            cpu,
        });
        p.end_ns = self.now_ns;
        // The last tick, or the last two where it counted for less than
        // half of one (ticks come 250 ms apart give or take a little: a
        // tick of 249.9 ms must not bring back the one before it).
        let mut total: u64 = p.last.iter().map(|c| c.us).sum();
        while p.last.len() > 1 && total - p.last[0].us >= END_WINDOW_US / 2 {
            total -= p.last[0].us;
            p.last.pop_front();
        }
        if !p.closed_gap && p.first_us >= MIN_WINDOW_US {
            p.closed_gap = true;
            let after = rates(
                p.first_us,
                &BTreeMap::new(),
                &p.first,
                self.cost.as_ref(),
                &self.stepped,
                &cpu_over(p.first_cpu.iter()),
            );
            self.close_gaps(&after, &ran);
        }
    }

    /// The kernel's totals are final (the report is being built): the
    /// interval still waiting gets them.
    pub fn settle(&mut self, counted: &Rows) {
        self.counts(counted);
    }

    /// An on phase ended: its rows' rates over its last tick open the gaps
    /// (`ran`: whether a process was seen to run in the interval after it,
    /// for the gaps a short phase closes).
    fn end_phase(&mut self, p: Phase, counted: &Rows, ran: &impl Fn(u32) -> bool) {
        let us: u64 = p.last.iter().map(|c| c.us).sum();
        let mut sums = Rows::new();
        for c in &p.last {
            for (k, (n, b)) in &c.rows {
                let e = sums.entry(k.clone()).or_default();
                e.0 += n;
                e.1 += b;
            }
        }
        let since = self.since_began(&sums, us, p.end_ns);
        let cpu = cpu_over(p.last.iter().map(|c| &c.cpu));
        let mut end = rates(us, &since, &sums, self.cost.as_ref(), &self.stepped, &cpu);
        // Rows that began in the second half of that time: their rate stays
        // the one over the whole time, marked late (docs/sampling.md R11).
        if p.end_ns > 0 {
            let half = p.end_ns.saturating_sub(us * 1000 / 2);
            for (k, r) in end.iter_mut() {
                r.late = self.first_call.get(k).is_some_and(|f| *f > half);
            }
        }
        if !p.closed_gap {
            // Too short to close the gap before it: its rates do both.
            self.close_gaps(&end, ran);
        }
        for k in counted.keys().filter(|k| !self.exact.contains(&k.1)) {
            let before = if self.joined.contains(&k.1) {
                None
            } else {
                Some(end.get(k).copied().unwrap_or_default())
            };
            self.gaps.insert(k.clone(), Gap { before, us: 0 });
        }
        self.joined.clear();
    }

    /// The processes whose calls of an on phase's last `us` (counts read
    /// at `end_ns`) all came from rows that began in its first half: the
    /// time since the first of them began, which their rates and trap
    /// share are taken over (docs/sampling.md R11). Rows that began in its
    /// second half are [`Rate::late`].
    fn since_began(&self, sums: &Rows, us: u64, end_ns: u64) -> BTreeMap<u32, u64> {
        if end_ns == 0 {
            return BTreeMap::new();
        }
        let start = end_ns.saturating_sub(us * 1000);
        let half = end_ns.saturating_sub(us * 1000 / 2);
        let mut began: BTreeMap<u32, Option<u64>> = BTreeMap::new();
        for k in sums.iter().filter(|(_, (c, _))| *c > 0).map(|(k, _)| k) {
            let first = self.first_call.get(k).copied().filter(|f| *f > start && *f <= half);
            let e = began.entry(k.0).or_insert(first);
            *e = match (*e, first) {
                (Some(a), Some(b)) => Some(a.min(b)),
                _ => None,
            };
        }
        began
            .into_iter()
            .filter_map(|(pid, f)| f.map(|f| (pid, (end_ns - f) / 1000)))
            .collect()
    }

    /// Estimates the open gaps, now that the rates after them are known.
    /// A process that did not run in the on phase that gives them (`ran`:
    /// it exited before) has its gaps closed as one that exited in them:
    /// that phase's rate of its rows is none, whatever it did before its
    /// exit. Taken as a rate after the gap, it halved the estimate of a
    /// copy loop that ended in its exit, and the mean of it and a
    /// trap-bound rate was not marked a lower bound (a short on phase of
    /// `serve` came in the tick the loop exited in; `run` ends the trace
    /// at the exit).
    fn close_gaps(&mut self, after: &BTreeMap<RowKey, Rate>, ran: &impl Fn(u32) -> bool) {
        for (k, g) in std::mem::take(&mut self.gaps) {
            let a = after.get(&k).copied();
            let alive = ran(k.0);
            self.close(k, g, a, alive);
        }
    }

    /// Adds a gap's estimate to the row's, once: at the mean of the rates
    /// on both sides of it; at the rate after it where the row began in
    /// none. Where its communicator's end was seen in it (`ncclCommDestroy`,
    /// `ncclCommAbort`: a teardown, after the last call by construction),
    /// the calls stopped somewhere between the last on phase that counted
    /// them and the end, and nothing says where: the gap, up to the end,
    /// gets the mean of the rate before it and none (R12). A process that
    /// exited in it, its communicator's end unseen, gets the rate before it
    /// for at most [`TAIL_US`] of it (R13).
    fn close(&mut self, k: RowKey, g: Gap, after: Option<Rate>, live: bool) {
        let ended = self.ended.contains_key(&(k.0, k.2));
        let a = after.unwrap_or_default();
        let mut us = g.us;
        let r = match g.before {
            Some(b) if ended => b.mean(Rate::default()),
            Some(b) if live => b.mean(a),
            Some(b) => {
                us = us.min(TAIL_US);
                Rate {
                    bound: b.bounds_alone(),
                    ..b
                }
            }
            None => a,
        };
        if r.bound && us > 0 {
            self.bound.insert(k.clone());
        }
        let e = self.extra.entry(k).or_default();
        e.0 += r.calls * us as f64;
        e.1 += r.bytes * us as f64;
    }

    /// The ops whose rows are counted through the off phases from now on
    /// (the rest are counted in on phases only): their rows get no gaps;
    /// an op that leaves the set is estimated from its next gap, at the
    /// rate after it (docs/sampling.md#exact-rows).
    pub fn exact_rows(&mut self, ops: Vec<String>) {
        self.step(Step::Exact(ops));
    }

    /// What a trapped call costs its caller (`calibrate.rs`): the rates
    /// are corrected by it. The first time, everything the estimator was
    /// fed before is fed again, as if the cost had been known from the
    /// start: it comes a second or two after the sampled rows attach
    /// (docs/sampling.md R14).
    pub fn trap_cost(&mut self, c: TrapCost) {
        let cost = Cost {
            entry: c.entry_ns / 1e3,
            pair: c.pair_ns / 1e3,
            step: (c.stepped_ns - c.entry_ns).max(0.0) / 1e3,
        };
        let log = std::mem::take(&mut self.log);
        if self.cost.is_some() || log.off {
            self.cost = Some(cost);
            return;
        }
        *self = Estimator {
            cost: Some(cost),
            log: Log {
                off: true,
                ..Log::default()
            },
            ..Estimator::default()
        };
        for s in log.steps {
            self.step(s);
        }
    }

    /// A process's rows probed on a single-stepped first instruction.
    pub fn stepped(&mut self, pid: u32, rows: Vec<String>) {
        self.step(Step::Stepped(pid, rows));
    }

    pub fn stepped_of(&self, pid: u32) -> &[String] {
        self.stepped.get(&pid).map_or(&[], Vec::as_slice)
    }

    /// A communicator ended (`ncclCommDestroy`, `ncclCommAbort`): its rows'
    /// gaps stop growing.
    pub fn row_ended(&mut self, pid: u32, handle: u64) {
        self.step(Step::RowEnded(pid, handle));
    }

    /// A process exited: its open gaps are closed by the rule of
    /// [`Estimator::close`] (no rate after them will come), once the
    /// interval waiting for its counts has them.
    pub fn exited(&mut self, pid: u32) {
        self.step(Step::Exited(pid));
    }

    /// A process was seen to exit (its `EXIT` record, or procfs): the on
    /// phases of the intervals that end from now on saw none of its calls
    /// ([`Estimator::close_gaps`]). Its gaps still grow through the tick
    /// it exited in, until [`Estimator::exited`].
    pub fn gone(&mut self, pid: u32) {
        self.step(Step::Gone(pid));
    }

    fn close_exited(&mut self) {
        if self.pending.is_some() {
            return;
        }
        for pid in std::mem::take(&mut self.exited) {
            // Done with: a later process of the same number is another.
            self.gone.remove(&pid);
            let mine: Vec<RowKey> = self.gaps.keys().filter(|k| k.0 == pid).cloned().collect();
            for k in mine {
                if let Some(g) = self.gaps.remove(&k) {
                    self.close(k, g, None, false);
                }
            }
        }
    }

    /// A row's calls and bytes: counted, plus the estimates of the gaps
    /// closed so far; never an open gap, so the figure only grows, each
    /// gap added once (`serve`'s estimated counters).
    pub fn closed(&self, key: &RowKey, counted: (u64, u64)) -> (u64, u64) {
        let (c, b) = self.extra.get(key).copied().unwrap_or_default();
        (counted.0 + c.round() as u64, counted.1 + b.round() as u64)
    }

    /// A row's calls and bytes: counted, plus the estimate of its uncounted
    /// time (an open gap at the rate before it).
    pub fn estimate(&self, key: &RowKey, counted: (u64, u64)) -> (u64, u64) {
        let (mut c, mut b) = self.extra.get(key).copied().unwrap_or_default();
        if let Some(Gap { before: Some(r), us }) = self.gaps.get(key) {
            c += r.calls * *us as f64;
            b += r.bytes * *us as f64;
        }
        (counted.0 + c.round() as u64, counted.1 + b.round() as u64)
    }

    /// Whether a row's estimate rests on a rate its traps bound (its
    /// process's calls were mostly traps while counted), or carries on
    /// alone a rate the row began late in: then the untraced rate is
    /// unknown, and the estimate a lower bound.
    pub fn lower_bound(&self, key: &RowKey) -> bool {
        self.bound.contains(key)
            || self
                .gaps
                .get(key)
                .is_some_and(|g| g.us > 0 && g.before.is_some_and(Rate::bounds_alone))
    }

    /// Whether any estimate of process `pid` is a lower bound
    /// ([`Estimator::lower_bound`]).
    pub fn lower_bound_in(&self, pid: u32) -> bool {
        self.bound
            .iter()
            .chain(self.gaps.keys())
            .any(|k| k.0 == pid && self.lower_bound(k))
    }

    /// When the kernel's totals were read: the counts that come next are
    /// those of that moment (`CLOCK_MONOTONIC`, the clock of the events).
    pub fn clock(&mut self, t_ns: u64) {
        self.step(Step::Clock(t_ns));
    }

    /// A row's first call was made at `t_ns` (its event says so); an
    /// earlier one of the same row stands.
    pub fn row_began(&mut self, key: &RowKey, t_ns: u64) {
        self.step(Step::RowBegan(key.clone(), t_ns));
    }

    /// Drops what is kept of an exited process (`Aggregator::forget`).
    pub fn forget(&mut self, pid: u32) {
        self.step(Step::Forget(pid));
    }

    fn forget_now(&mut self, pid: u32) {
        let mine = |k: &RowKey| k.0 == pid;
        self.extra.retain(|k, _| !mine(k));
        self.bound.retain(|k| !mine(k));
        self.stepped.remove(&pid);
        self.first_call.retain(|k, _| !mine(k));
        self.gaps.retain(|k, _| !mine(k));
        self.before.retain(|k, _| !mine(k));
        self.ended.retain(|k, _| k.0 != pid);
        self.exited.remove(&pid);
        self.gone.remove(&pid);
        if let Some(p) = &mut self.phase {
            p.first.retain(|k, _| !mine(k));
            for c in &mut p.first_cpu {
                c.remove(&pid);
            }
            for c in &mut p.last {
                c.rows.retain(|k, _| !mine(k));
                c.cpu.remove(&pid);
            }
        }
    }
}

#[cfg(test)]
mod examples;
#[cfg(test)]
mod tests;
