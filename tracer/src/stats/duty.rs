//! What the sampled rows (collectives, group and UCX data calls) did while
//! the duty cycle had their probes closed (`probes/duty.rs`).
//!
//! Each tick of the tracing loop ends one interval, split into the time the
//! rows counted (`on_us`) and the time they did not (`off_us`: an off
//! phase, or the attach at the start of an on phase); its counts arrive
//! with the kernel's totals of the same tick. The uncounted time between
//! two on phases is estimated per (process, op, communicator) row at the
//! mean of the row's rate over the last tick of the on phase before it and
//! the first second of the one after it (the one before alone until that
//! is known, or when the process has exited). Which processes were alive
//! is taken when each interval ends, so a replay, whose totals can arrive
//! a tick later, reaches the same estimates. That follows a job
//! whose rate changes: a training job idles through its set-up with the
//! probes open, then runs collectives. One scale factor over its whole
//! traced time (perf stat's time enabled over time running) does not:
//! measured on the GPU machine, a torch job's all-reduces came out 85% low
//! that way.
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// (pid, op name, communicator or endpoint).
pub type RowKey = (u32, String, u64);

/// Calls and bytes of each row.
type Rows = BTreeMap<RowKey, (u64, u64)>;

/// The CPU time each process ran while the rows counted, in microseconds,
/// where it was measured (`Input::Duty`'s `cpu`).
pub type Cpu = BTreeMap<u32, u64>;

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
/// over budget, `probes/duty.rs`).
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

/// A row's rate over some counting time: calls and bytes per
/// microsecond, and whether its process's traps took more than
/// [`MAX_TRAP_SHARE`] of that time, or of the CPU time it ran in it (the
/// untraced rate is then higher than can be told, and an estimate from it
/// a lower bound).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Rate {
    calls: f64,
    bytes: f64,
    bound: bool,
    /// The row's first call came in the second half of that time
    /// ([`Estimator::row_began`]): the rate since it began is higher, and
    /// an estimate that carries it on alone (its process exited in the gap
    /// after it, or the trace ended there) a lower bound.
    late: bool,
}

impl Rate {
    fn mean(self, o: Rate) -> Rate {
        Rate {
            calls: (self.calls + o.calls) / 2.0,
            bytes: (self.bytes + o.bytes) / 2.0,
            bound: self.bound || o.bound,
            late: false,
        }
    }

    /// Whether an estimate that carries this rate on alone is a lower bound.
    fn bounds_alone(self) -> bool {
        self.bound || self.late
    }
}

/// Uncounted time of a row since the last on phase.
#[derive(Clone, Copy, Debug, Default)]
struct Gap {
    /// The row's rate at the end of the on phase before it; None when the
    /// row began in none.
    before: Option<Rate>,
    us: u64,
}

/// What a trapped call costs the caller, as `calibrate.rs` measures it:
/// entry-only, and entry plus return, on a function whose first
/// instruction the kernel emulates; and an entry-only trap on one it
/// single-steps.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct TrapCost {
    pub entry_ns: f64,
    pub pair_ns: f64,
    pub stepped_ns: f64,
}

/// What a trapped call costs its caller, in microseconds (`calibrate.rs`).
#[derive(Clone, Debug, Default)]
struct Cost {
    entry: f64,
    pair: f64,
    /// What a single-stepped first instruction adds to an entry.
    step: f64,
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
}

/// The most rows [`Log`] keeps: the trap cost comes a second or two after
/// the sampled rows attach (`calibrate.rs`), some twenty calls later, of a
/// few rows each; where it never comes (the calibration failed) the log
/// stops here, a few megabytes.
const LOG_ROWS: usize = 50_000;

fn delta(now: &Rows, before: &Rows) -> Rows {
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
fn cpu_over<'a>(intervals: impl Iterator<Item = &'a Cpu> + Clone) -> Cpu {
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
/// against its CPU time as well ([`rates`]): a process's CPU clock takes in
/// the time of a thread running on another CPU only at that CPU's
/// scheduler tick (4 ms at HZ 250), so over a short on phase it can read
/// anything from none to a few ticks. A one-rank all-reduce job spinning
/// through its 2-3 ms on phases read 0 or 64 us in them, and its estimates
/// were marked lower bounds in 2 of 5 jobs (one H200, 2026-12-06); over
/// 200 ms a thread's error is at most a tenth at HZ 100.
const CPU_WINDOW_US: u64 = 200_000;

/// The most of a caller's time the traps are taken to have had: beyond it
/// the calls are mostly traps, and the untraced rate cannot be told.
const MAX_TRAP_SHARE: f64 = 0.5;

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
/// take (the stand-in copy loop of issue 25 with both CPUs of the
/// development host busy: `~31,479` each way of 300,000, unmarked, in one
/// run of four, 2026-12-05). The correction stays the one over the wall
/// time: a job that waits on its GPU makes its calls in that, not in its
/// CPU time.
fn rates(
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
        // belong to this interval. Taking `counted` here lost them, and
        // under a scrape a second the rates, and the estimates, of a
        // duty-cycled job came out a quarter low.
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
        // Rows that began in the second half of that time: a loop that
        // started just before the beat that closed its probes, its rate
        // mostly the time before it (a stand-in copy loop on the
        // development host: 133 copies in its last 3.5 ms of a 252 ms
        // tick, then 299,867 more in the 11 ms to its exit, 2026-12-04).
        // Their rate stays the one over the whole time, marked: over the
        // few milliseconds since they began it could as well be a burst's.
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
        for k in counted.keys() {
            let rate = end.get(k).copied().unwrap_or_default();
            self.gaps.insert(
                k.clone(),
                Gap {
                    before: Some(rate),
                    us: 0,
                },
            );
        }
    }

    /// The processes whose calls of an on phase's last `us` (counts read
    /// at `end_ns`) all came from rows that began in its first half: the
    /// time since the first of them began, which their rates and trap
    /// share are taken over. Over the whole time, a copy loop that began
    /// 96 ms into a 251 ms tick and spent most of the rest in its traps
    /// came out at half of it, and was not marked a lower bound in one run
    /// of two (`serve` on the development host, 2026-12-05). Rows that
    /// began in its second half are [`Rate::late`].
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
    /// gets the mean of the rate before it and none. The rate before it
    /// alone came out +7% to +26% on one H200's 4 s all-reduce jobs
    /// (2026-12-02, replays of `scripts/gpu/estimates.sh`): each loop ended
    /// a tenth of a second into a half-second gap, its communicator only at
    /// the job's teardown. A process that exited in it, its communicator's
    /// end unseen, gets the rate before it for at most [`TAIL_US`] of it: a
    /// copy loop or a job killed mid-loop calls up to its exit, and a loop
    /// that ended seconds before its process, counted to the exit at its
    /// last rate, came out +11% to +38% (issue 24): the cap bounds both.
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

    /// What a trapped call costs its caller (`calibrate.rs`): the rates
    /// are corrected by it. The first time, everything the estimator was
    /// fed before is fed again, as if the cost had been known from the
    /// start: it comes a second or two after the sampled rows attach, and a
    /// loop over budget from its start had its on phase's rates taken
    /// before it. Its estimate was then not corrected, nor marked a lower
    /// bound: the stand-in copy loop of issue 25, `~19,000` where its
    /// traps took most of its time, in 3 of 6 runs (`run` on the
    /// development host, 2026-12-05).
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
mod tests {
    use super::*;

    fn key(pid: u32) -> RowKey {
        (pid, "ncclAllReduce".into(), 0x1)
    }

    /// Drives `e` for `ticks` intervals of 250 ms with `rate(i)` calls per
    /// interval made by process 7, counting in the intervals `on(i)` says;
    /// returns (made, counted).
    fn drive(
        e: &mut Estimator,
        ticks: u32,
        rate: impl Fn(u32) -> u64,
        on: impl Fn(u32) -> bool,
        mut counted: u64,
    ) -> (u64, u64) {
        let mut made = 0;
        let rows = |n: u64| Rows::from([(key(7), (n, n * 8192))]);
        for i in 0..ticks {
            let (on_us, off_us) = if on(i) { (250_000, 0) } else { (0, 250_000) };
            e.interval(&rows(counted), on_us, off_us, &Cpu::new(), |_| true);
            made += rate(i);
            if on(i) {
                counted += rate(i);
            }
            e.counts(&rows(counted));
        }
        (made, counted)
    }

    /// A process idles through its set-up with the probes open (no calls),
    /// then calls 10,000 times a tick; the cycle closes the probes for 39
    /// of every 40 ticks. Its estimate follows the calls it made, which one
    /// scale factor over its traced time would not.
    /// One on phase of 250 ms that counted `n` calls of `key(7)`, then a
    /// 250 ms gap; returns the estimate after it and whether it is a lower
    /// bound.
    fn after_one_gap(e: &mut Estimator, n: u64) -> (u64, bool) {
        let rows = |n: u64| Rows::from([(key(7), (n, 0))]);
        e.interval(&rows(0), 250_000, 0, &Cpu::new(), |_| true);
        e.counts(&rows(n));
        e.interval(&rows(n), 0, 250_000, &Cpu::new(), |_| true);
        e.counts(&rows(n));
        (e.estimate(&key(7), (n, 0)).0, e.lower_bound(&key(7)))
    }

    /// Entry 1 us, pair 2 us, a single-stepped entry 10 us; `stepped`:
    /// process 7's rows probed on one.
    fn costed(stepped: &[&str]) -> Estimator {
        let mut e = Estimator::default();
        e.trap_cost(TrapCost {
            entry_ns: 1000.0,
            pair_ns: 2000.0,
            stepped_ns: 10_000.0,
        });
        e.stepped(7, stepped.iter().map(|s| s.to_string()).collect());
        // Another process's stepped row is not process 7's.
        e.stepped(8, vec!["ncclAllReduce".into()]);
        e
    }

    /// A row whose first instruction is single-stepped pays the step on
    /// every trap: 10,000 calls of 10 us traps are 40% of 250 ms, and the
    /// untraced rate is the counted one over the other 60%.
    #[test]
    fn a_single_stepped_row_is_corrected_by_its_own_cost() {
        let mut plain = costed(&[]);
        let mut stepped = costed(&["ncclAllReduce"]);
        let (p, p_bound) = after_one_gap(&mut plain, 10_000);
        let (st, st_bound) = after_one_gap(&mut stepped, 10_000);
        // 10,000 / 0.96 and 10,000 / 0.6 in the gap.
        assert!((20_400..=20_430).contains(&p), "{p}");
        assert!((26_660..=26_670).contains(&st), "{st}");
        assert!(!p_bound && !st_bound);
    }

    /// Calls that were mostly traps while counted give a rate that says
    /// only how fast the traps ran: the estimate is marked a lower bound.
    #[test]
    fn a_trap_bound_rate_gives_a_lower_bound() {
        let mut e = costed(&["ncclAllReduce"]);
        // 20,000 traps of 10 us: 200 ms of the 250.
        let (calls, bound) = after_one_gap(&mut e, 20_000);
        assert!(bound, "{calls}");
        assert_eq!(calls, 60_000, "the rate at the most trap share told, 1/(1-0.5)");
        // No cost known: nothing says the calls were traps.
        let mut e = Estimator::default();
        assert!(!after_one_gap(&mut e, 20_000).1);
    }

    /// A process kept off the CPU by others: 12,000 traps of 10 us are 120
    /// ms of the 250 ms it counted, under half, but all of the 125 ms it
    /// ran. Judged over its CPU time, its estimate is a lower bound; the
    /// correction stays the one over the wall time. A process whose CPU
    /// time was not read is judged over the wall time alone.
    #[test]
    fn traps_that_took_most_of_a_starved_process_s_cpu_time_give_a_lower_bound() {
        let run = |cpu: &[(u32, u64)]| {
            let mut e = costed(&["ncclAllReduce"]);
            let cpu: Cpu = cpu.iter().copied().collect();
            let rows = |n: u64| Rows::from([(key(7), (n, 0))]);
            e.interval(&rows(0), 250_000, 0, &cpu, |_| true);
            e.counts(&rows(12_000));
            e.interval(&rows(12_000), 0, 250_000, &Cpu::new(), |_| true);
            e.counts(&rows(12_000));
            (e.estimate(&key(7), (12_000, 0)).0, e.lower_bound(&key(7)))
        };
        let (wall, wall_bound) = run(&[]);
        let (starved, starved_bound) = run(&[(7, 125_000)]);
        assert!(!wall_bound, "{wall}");
        assert!(starved_bound, "{starved}");
        assert_eq!(starved, wall, "the same correction");
        // Another process's CPU time says nothing of process 7's.
        assert!(!run(&[(8, 125_000)]).1);
        // Nor does a process that ran most of the time.
        assert!(!run(&[(7, 249_000)]).1);
        // Over a short on phase a CPU clock is told to a tick at best: 3 ms
        // that read 64 us of CPU judge nothing.
        let mut e = costed(&[]);
        let rows = |n: u64| Rows::from([(key(7), (n, 0))]);
        e.interval(&rows(0), 3_000, 0, &Cpu::from([(7, 64)]), |_| true);
        e.counts(&rows(100));
        e.interval(&rows(100), 0, 100_000, &Cpu::new(), |_| true);
        e.counts(&rows(100));
        assert!(!e.lower_bound(&key(7)));
    }

    /// The CPU time of an on phase of several intervals is summed only for
    /// the processes read in each of them.
    #[test]
    fn cpu_time_is_summed_over_the_intervals_that_read_it() {
        let a: Cpu = [(7, 100), (8, 50)].into();
        let b: Cpu = [(7, 20)].into();
        assert_eq!(cpu_over([&a, &b].into_iter()), Cpu::from([(7, 120)]));
        assert_eq!(cpu_over(std::iter::empty::<&Cpu>()), Cpu::new());
    }

    /// The trap cost measured only after a trap-bound on phase ended (the
    /// calibration takes a second or two, a loop over budget from its start
    /// does not wait): the estimates are those of a cost known from the
    /// start, corrected and marked, and the estimator goes on from there.
    #[test]
    fn a_trap_cost_that_comes_late_judges_what_came_before() {
        let cost = TrapCost {
            entry_ns: 1000.0,
            pair_ns: 2000.0,
            stepped_ns: 10_000.0,
        };
        let feed = |e: &mut Estimator, late: bool| {
            let rows = |n: u64| Rows::from([(key(7), (n, n))]);
            e.stepped(7, vec!["ncclAllReduce".into()]);
            e.interval(&rows(0), 250_000, 0, &Cpu::new(), |_| true);
            e.counts(&rows(20_000));
            e.interval(&rows(20_000), 0, 250_000, &Cpu::new(), |_| true);
            e.counts(&rows(20_000));
            if late {
                e.trap_cost(cost);
            }
            e.interval(&rows(20_000), 0, 250_000, &Cpu::new(), |_| true);
            e.counts(&rows(20_000));
        };
        let mut early = Estimator::default();
        early.trap_cost(cost);
        feed(&mut early, false);
        let mut late = Estimator::default();
        feed(&mut late, true);
        let mut never = Estimator::default();
        feed(&mut never, false);
        let got = |e: &Estimator| (e.estimate(&key(7), (20_000, 20_000)).0, e.lower_bound(&key(7)));
        assert_eq!(got(&early), (20_000 + 80_000, true), "two gaps at 40,000 a tick");
        assert_eq!(got(&late), got(&early));
        assert_eq!(
            got(&never),
            (20_000 + 40_000, false),
            "nothing says the calls were traps"
        );
    }

    #[test]
    fn off_phases_take_the_rates_of_the_on_phases_around_them() {
        let mut e = Estimator::default();
        let (_, counted) = drive(&mut e, 80, |_| 0, |_| true, 0);
        let (made, counted) = drive(&mut e, 161, |_| 10_000, |i| i % 40 == 0, counted);
        let (calls, bytes) = e.estimate(&key(7), (counted, counted * 8192));
        assert_eq!(counted, 50_000);
        let err = (calls as f64 - made as f64).abs() / made as f64;
        assert!(err < 0.01, "estimate {calls} of {made} calls made");
        assert_eq!(bytes, calls * 8192);
    }

    /// Calls that begin in the last-but-one tick of a long on phase: the
    /// gap after it takes the rate of the last tick, a little under 250 ms
    /// long as ticks often are, not a mean with the part-idle tick.
    #[test]
    fn the_gap_after_a_rise_takes_the_last_tick() {
        let mut e = Estimator::default();
        let rows = |n: u64| Rows::from([(key(7), (n, 0))]);
        for (start, on, end) in [(0, 250_000, 0), (0, 250_100, 3000), (3000, 249_900, 15_000)] {
            e.interval(&rows(start), on, 0, &Cpu::new(), |_| true);
            e.counts(&rows(end));
        }
        e.interval(&rows(15_000), 0, 1_000_000, &Cpu::new(), |_| true);
        e.counts(&rows(15_000));
        let extra = e.estimate(&key(7), (15_000, 0)).0 - 15_000;
        assert!(
            (47_000..=49_000).contains(&extra),
            "{extra}: 1 s at 12,000 calls a tick"
        );
    }

    /// A rate that doubles between two on phases: the gap between them is
    /// estimated at the mean; the open gap after the last at its rate.
    #[test]
    fn a_gap_takes_the_mean_of_the_rates_around_it() {
        let mut e = Estimator::default();
        let rows = |n: u64| Rows::from([(key(7), (n, 0))]);
        e.interval(&rows(0), 250_000, 0, &Cpu::new(), |_| true);
        e.counts(&rows(1000));
        for _ in 0..4 {
            e.interval(&rows(1000), 0, 250_000, &Cpu::new(), |_| true);
            e.counts(&rows(1000));
        }
        // Open gap: at the rate before it, 1,000 a tick.
        assert_eq!(e.estimate(&key(7), (1000, 0)).0, 5000);
        e.interval(&rows(1000), 250_000, 0, &Cpu::new(), |_| true);
        e.counts(&rows(3000));
        // Closed: 4 ticks at the mean of 1,000 and 2,000.
        assert_eq!(e.estimate(&key(7), (3000, 0)).0, 3000 + 6000);
    }

    /// A process that exited in a gap gets the rate before it for the part
    /// of the gap it lived through, at most a second of it; a row whose
    /// communicator's end was seen, the mean of the rate before the gap and
    /// none up to the end (its calls stopped before it), and nothing for
    /// the time after it.
    #[test]
    fn rows_that_end_in_a_gap() {
        let mut e = Estimator::default();
        let rows = |n: u64| Rows::from([(key(1), (n, n)), (key(2), (n, n)), (key(3), (n, n))]);
        e.interval(&rows(0), 250_000, 0, &Cpu::new(), |_| true);
        e.counts(&rows(1000));
        e.interval(&rows(1000), 0, 250_000, &Cpu::new(), |_| true);
        e.counts(&rows(1000));
        // Process 3's communicator ends; process 2 exits in this interval.
        e.row_ended(3, 0x1);
        e.interval(&rows(1000), 0, 250_000, &Cpu::new(), |pid| pid != 2);
        e.counts(&rows(1000));
        e.exited(2);
        assert_eq!(
            e.closed(&key(2), (1000, 1000)),
            (2000, 2000),
            "the interval it was seen alive in, at the rate before"
        );
        e.interval(&rows(1000), 0, 250_000, &Cpu::new(), |pid| pid == 1);
        e.counts(&rows(1000));
        e.exited(3);
        assert_eq!(e.closed(&key(3), (1000, 1000)), (1500, 1500), "one tick up to its end");
        e.interval(&rows(1000), 250_000, 0, &Cpu::new(), |pid| pid == 1);
        e.counts(&Rows::from([
            (key(1), (2000, 2000)),
            (key(2), (1000, 1000)),
            (key(3), (1000, 1000)),
        ]));
        assert_eq!(e.estimate(&key(1), (2000, 2000)), (5000, 5000));
        assert_eq!(e.closed(&key(1), (2000, 2000)), (5000, 5000));
        assert_eq!(e.estimate(&key(2), (1000, 1000)), (2000, 2000));
        assert_eq!(e.estimate(&key(3), (1000, 1000)), (1500, 1500));
        e.forget(1);
        assert_eq!(e.estimate(&key(1), (2000, 2000)), (2000, 2000));
    }

    /// A long gap that ends in the process's exit counts one second at the
    /// rate before it, not the whole gap: nothing says the calls went on.
    #[test]
    fn a_long_last_gap_is_capped() {
        let mut e = Estimator::default();
        let rows = |n: u64| Rows::from([(key(4), (n, n))]);
        e.interval(&rows(0), 250_000, 0, &Cpu::new(), |_| true);
        e.counts(&rows(1000));
        for _ in 0..12 {
            e.interval(&rows(1000), 0, 250_000, &Cpu::new(), |_| true);
            e.counts(&rows(1000));
        }
        e.exited(4);
        assert_eq!(e.closed(&key(4), (1000, 1000)), (5000, 5000), "1 s at 4,000/s");
    }

    /// A row whose first call came late in the tick that closed its probes
    /// (a loop that began 3.5 ms before the beat): its process exits in the
    /// gap after it, whose estimate carries that tick's rate on alone, a
    /// rate mostly of the time before the row began: a lower bound. The
    /// same row begun early in the tick, or a gap closed by the rate after
    /// it too, is not marked.
    #[test]
    fn a_row_begun_late_in_the_tick_before_its_exit_is_a_lower_bound() {
        const T0: u64 = 1_000_000_000_000;
        let run = |began_ns: u64, exits: bool| {
            let mut e = Estimator::default();
            let rows = |n: u64| Rows::from([(key(5), (n, n))]);
            e.row_began(&key(5), began_ns);
            e.interval(&rows(0), 252_000, 0, &Cpu::new(), |_| true);
            e.clock(T0 + 252_000_000);
            e.counts(&rows(133));
            e.interval(&rows(133), 0, 11_000, &Cpu::new(), |_| true);
            e.clock(T0 + 263_000_000);
            e.counts(&rows(133));
            if exits {
                e.exited(5);
            } else {
                e.interval(&rows(133), 50_000, 0, &Cpu::new(), |_| true);
                e.clock(T0 + 313_000_000);
                e.counts(&rows(1133));
            }
            (e.estimate(&key(5), (133, 0)).0, e.lower_bound(&key(5)))
        };
        let (late, late_bound) = run(T0 + 248_500_000, true);
        assert!(late_bound, "{late}");
        let (early, early_bound) = run(T0 + 1_000_000, true);
        assert!(!early_bound, "{early}");
        assert_eq!(late, early, "the same estimate, only marked");
        assert!(!run(T0 + 248_500_000, false).1, "closed by the rate after the gap too");
    }

    /// A loop that began 96 ms into the 251 ms tick that closed its probes
    /// (its first call's event says when) made its calls over the 155 ms
    /// since: 100,000 traps of 1 us are 65% of that time, and its estimate
    /// a lower bound; over the whole tick they would be 40%, and not.
    #[test]
    fn a_row_that_began_in_the_tick_is_judged_over_the_time_since() {
        const T0: u64 = 1_000_000_000_000;
        let run = |began_ns: u64| {
            let mut e = costed(&[]);
            let rows = |n: u64| Rows::from([(key(7), (n, n))]);
            e.row_began(&key(7), began_ns);
            e.interval(&rows(0), 251_000, 0, &Cpu::new(), |_| true);
            e.clock(T0 + 251_000_000);
            e.counts(&rows(100_000));
            e.interval(&rows(100_000), 0, 100_000, &Cpu::new(), |_| true);
            e.clock(T0 + 351_000_000);
            e.counts(&rows(100_000));
            e.exited(7);
            (e.estimate(&key(7), (100_000, 0)).0, e.lower_bound(&key(7)))
        };
        let (since, since_bound) = run(T0 + 96_000_000);
        assert!(since_bound, "{since}");
        // 100 ms at 100,000 calls in 155 ms, at most twice that untraced.
        assert_eq!(since, 100_000 + 129_032);
        let (whole, whole_bound) = run(T0);
        assert!(!whole_bound, "{whole}");
        assert_eq!(whole, 100_000 + 66_225, "100,000 in 251 ms, over the 60% not in traps");
    }

    /// The same loop, its process alive to the estimator (the tick it
    /// exited in still counts it) when a short on phase of `serve` comes
    /// 40 ms after the beat that closed its probes and finds none of its
    /// calls. The interval of that phase (40 ms uncounted, then 1 ms
    /// counted) ends the on phase before it; the loop, seen to exit before
    /// the phase, has its gap closed as one that exited in it (the rate
    /// before alone, a lower bound), not at the mean of that rate and the
    /// phase's none. Seen to exit only after the phase, the phase's rate is
    /// its own.
    #[test]
    fn an_on_phase_after_the_exit_closes_no_gap_at_its_rate() {
        const T0: u64 = 1_000_000_000_000;
        let run = |seen_before_phase: bool| {
            let mut e = Estimator::default();
            let rows = |n: u64| Rows::from([(key(5), (n, n))]);
            e.row_began(&key(5), T0 + 248_500_000);
            e.interval(&rows(0), 252_000, 0, &Cpu::new(), |_| true);
            e.clock(T0 + 252_000_000);
            e.counts(&rows(133));
            if seen_before_phase {
                e.gone(5);
            }
            e.interval(&rows(133), 1000, 40_000, &Cpu::new(), |_| true);
            e.clock(T0 + 293_000_000);
            e.counts(&rows(133));
            // The rest of the tick after the phase's counts were read.
            e.interval(&rows(133), 0, 5, &Cpu::new(), |_| true);
            if !seen_before_phase {
                e.gone(5);
            }
            e.counts(&rows(133));
            e.exited(5);
            (e.estimate(&key(5), (133, 0)).0, e.lower_bound(&key(5)))
        };
        let (gone, gone_bound) = run(true);
        assert!(gone_bound, "{gone}");
        // 133 calls over 252 ms, carried on over the 40 ms before the phase.
        assert_eq!(gone, 133 + 21, "the rate before, alone");
        let (seen_late, late_bound) = run(false);
        assert!(!late_bound, "{seen_late}");
        assert_eq!(seen_late, 133 + 11, "the mean of the rate before and the phase's none");
    }

    /// The closed estimate never includes an open gap, so it never goes
    /// down when the gap closes at a lower rate than the one before it.
    #[test]
    fn closed_estimates_only_grow() {
        let mut e = Estimator::default();
        let rows = |n: u64| Rows::from([(key(7), (n, n))]);
        let mut last = 0;
        let mut counted = 0;
        for (i, on) in [true, false, false, true, false, true, true, false, false, false, true]
            .iter()
            .enumerate()
        {
            let rate = if i < 5 { 1000 } else { 10 };
            let (on_us, off_us) = if *on { (250_000, 0) } else { (0, 250_000) };
            e.interval(&rows(counted), on_us, off_us, &Cpu::new(), |_| true);
            if *on {
                counted += rate;
            }
            e.counts(&rows(counted));
            let now = e.closed(&key(7), (counted, counted)).0;
            assert!(now >= last, "tick {i}: {now} < {last}");
            assert!(e.estimate(&key(7), (counted, counted)).0 >= now);
            last = now;
        }
    }

    /// Totals read between two intervals (a scrape) count in the interval
    /// they fall in.
    #[test]
    fn totals_read_between_intervals_are_not_lost() {
        let rows = |n: u64| Rows::from([(key(7), (n, 0))]);
        let mut e = Estimator::default();
        // Each tick ends an interval, then brings its totals.
        e.interval(&rows(0), 250_000, 0, &Cpu::new(), |_| true);
        e.counts(&rows(1000));
        // A scrape half-way through the next interval reads the totals.
        e.counts(&rows(1500));
        e.interval(&rows(1500), 250_000, 0, &Cpu::new(), |_| true);
        e.counts(&rows(2000));
        for _ in 0..2 {
            e.interval(&rows(2000), 0, 250_000, &Cpu::new(), |_| true);
            e.counts(&rows(2000));
        }
        assert_eq!(
            e.estimate(&key(7), (2000, 0)).0,
            2000 + 2 * 1000,
            "the open gap at the last on tick's 1,000 calls, half of them read by the scrape"
        );
    }

    /// Counts that arrive only with the next interval (a replay whose
    /// totals did not change) or at the report (`settle`) give the same.
    #[test]
    fn late_counts_are_the_same_counts() {
        let rows = |n: u64| Rows::from([(key(7), (n, 0))]);
        let mut live = Estimator::default();
        let mut late = Estimator::default();
        for (n, on, off) in [
            (0, 250_000, 0),
            (500, 0, 250_000),
            (500, 0, 250_000),
            (500, 200_000, 50_000),
        ] {
            live.interval(&rows(n), on, off, &Cpu::new(), |_| true);
            live.counts(&rows(n + if on > 0 { 500 } else { 0 }));
            late.interval(&rows(n), on, off, &Cpu::new(), |_| true);
            if on > 0 {
                late.counts(&rows(n + 500));
            }
        }
        late.settle(&rows(1000));
        assert_eq!(live.estimate(&key(7), (1000, 0)), late.estimate(&key(7), (1000, 0)));
    }
}
