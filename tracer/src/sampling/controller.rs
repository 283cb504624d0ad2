//! The controller: when the sampled rows' probes are on and off, from the
//! counted traps the tracing loop reads (docs/sampling.md#the-controller).
//!
//! The state machine is pure: the tracing loop feeds it the session clock
//! and each process's counted traps every beat, asks it for its next
//! deadline between beats, and carries out what it returns
//! (`Session::aggregate_tick`, `Session::duty_due`).
use std::{
    collections::{BTreeMap, VecDeque},
    time::Duration,
};

use super::mode::Mode;
use crate::units::fmt_duration;

/// The tracing loop's beat: where the controller decides, and where on
/// phases of per-point links begin (docs/sampling.md#words).
pub const BEAT: Duration = Duration::from_millis(250);
/// The period `auto` aims at with `uprobe_multi` links: ten on phases a
/// second, so estimates rest on ten samples (docs/sampling.md#rules, R1).
pub const TARGET_PERIOD: Duration = Duration::from_millis(100);
/// The shortest on phase with `uprobe_multi` links, counted from attach:
/// a 300,000-traps-a-second copy loop gets three a second (R2).
pub const MIN_ON: Duration = Duration::from_millis(1);
/// Short on phases must find every process under budget for this long
/// before `auto` counts on again: a job's own stalls are not a drop (R3).
pub const QUIET_FOR: Duration = Duration::from_secs(1);
/// ... and at least this many of them, so two phases that fell into
/// stalls a second apart are not a second of quiet (R3).
pub const QUIET_PHASES: u32 = 5;
/// Counting on after a process was over budget, the totals are read at
/// least this often, to close the links within [`CHECK_SHARE`] (R4).
pub const MAX_CHECK: Duration = Duration::from_millis(25);
/// The pool: short on phases measured in this last span plan the next one
/// and time the off phases ([`DutyCycle::measure_ended`], R5).
pub const POOL: Duration = Duration::from_secs(1);
/// The longest off phase after a short on phase: a slow closing's traps
/// are not paid for with a gap too long to estimate (R6).
pub const MAX_OFF: Duration = Duration::from_secs(1);
/// The most traps a process may count in any [`BUDGET_SPAN`] after its
/// first one over budget, as a multiple of the budget (R7).
pub const PEAK: f64 = 1.25;
/// The longest period (on plus off) of `auto`: a process that starts in
/// an off phase is seen within it.
pub const MAX_PERIOD: Duration = Duration::from_secs(60);
/// The span the budget (traps per second) is held over: [`PEAK`] holds in
/// every such span after the first one over budget, which is not paid (R8).
pub const BUDGET_SPAN: Duration = Duration::from_secs(1);
/// A check closes the links once a process trapped this share of a
/// second's budget at over the budget's rate (R4).
pub const CHECK_SHARE: f64 = 0.25;
/// Added to a deadline computed from the pool, for the clock's rounding.
const CLOCK_SLACK: Duration = Duration::from_millis(1);

/// What the loop must do now.
#[derive(Clone, Debug, PartialEq)]
pub enum Switch {
    /// Set `control::SAMPLE_OFF`, then close the sampled links; `why`.
    Off { why: String },
    /// Open the sampled links again, then clear `control::SAMPLE_OFF`.
    On,
}

/// Where the controller is: whether the probes are on, and whether `auto`
/// found a process over budget and cycles (docs/sampling.md#states).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// On, every call counted: `exact`, `auto` under budget, a fixed
    /// cycle's on phase.
    Counting,
    /// `auto` over budget: an on phase of the cycle.
    CycleOn,
    /// `auto` over budget: an off phase of the cycle.
    CycleOff,
    /// Off, and the next on phase counts on: a fixed cycle's off phase, or
    /// `auto`'s last off phase once on phases found every process quiet.
    OffThenCount,
}

impl State {
    fn of(on: bool, cycling: bool) -> State {
        match (on, cycling) {
            (true, false) => State::Counting,
            (true, true) => State::CycleOn,
            (false, true) => State::CycleOff,
            (false, false) => State::OffThenCount,
        }
    }

    /// Whether the probes are on.
    pub fn is_on(self) -> bool {
        matches!(self, State::Counting | State::CycleOn)
    }

    /// Whether `auto` cycles (until on phases find every process under
    /// budget again for [`QUIET_FOR`]).
    pub fn cycling(self) -> bool {
        matches!(self, State::CycleOn | State::CycleOff)
    }

    fn with_on(self, on: bool) -> State {
        State::of(on, self.cycling())
    }

    fn with_cycling(self, cycling: bool) -> State {
        State::of(self.is_on(), cycling)
    }
}

/// The controller's state (docs/sampling.md#the-controller).
#[derive(Clone, Debug)]
pub struct DutyCycle {
    pub mode: Mode,
    /// The sampled links are `uprobe_multi` links: on phases may be
    /// shorter than a beat, and off phases end on deadlines of their own
    /// (`Session` says, once it knows).
    pub quick: bool,
    state: State,
    /// When the current phase began (session clock).
    since: Duration,
    /// The current on phase ends at `since` plus this, between beats
    /// ([`DutyCycle::deadline`]); None: it ends on a beat.
    on_for: Option<Duration>,
    /// How long the current off phase lasts.
    off_for: Duration,
    /// Counted traps per process when the current window or on phase
    /// began: the session's start (none counted yet) until the first beat.
    mark: (Duration, BTreeMap<u32, u64>),
    /// The counted traps per process as last read (an on phase that begins
    /// between two reads begins with them: nothing counts in an off phase).
    last: BTreeMap<u32, u64>,
    /// A short on phase that ended: how long it counted and the traps when
    /// it began. Its rate is measured at the next read of the kernel's
    /// totals (`Session::duty_due` reads them as it ends).
    ended: Option<(Duration, BTreeMap<u32, u64>)>,
    /// The length of the next short on phase.
    next_on: Duration,
    /// When the short on phases that found the busiest process under
    /// budget, in a row, began, and how many there were.
    quiet_since: Option<(Duration, u32)>,
    /// Counting on after a process was over budget: how often the
    /// kernel's totals are read, and when next ([`MAX_CHECK`]).
    check: Option<(Duration, Duration)>,
    /// When the kernel's totals were last checked, and the traps then.
    checked: (Duration, BTreeMap<u32, u64>),
    /// The highest rate over budget seen, traps a second.
    peak: f64,
    /// The rate the next short on phase is planned for.
    planned: f64,
    /// The short phases measured in the last [`POOL`]: (when measured,
    /// counting time, traps of the busiest process).
    pool: VecDeque<(Duration, Duration, f64)>,
    /// Traps in off phases, all processes (links being attached or closed,
    /// `counter::SAMPLE_OFF_TRAPS`): as last read, and as when the last
    /// short on phase was measured.
    off_traps: (u64, u64),
    /// When a process first went over budget: the short phases that begin
    /// in the [`BUDGET_SPAN`] after it, and the switches before them, are
    /// not paid for ([`DutyCycle::measure_ended`], docs/sampling.md R8).
    over_at: Option<Duration>,
    /// The state of the generator that jitters the off phases of short on
    /// phases ([`DutyCycle::seed`]; 0: none, the lengths as planned).
    rng: u64,
    /// Off phases so far.
    pub off_phases: u64,
    /// Why the first off phase began (the coverage detail says it).
    pub first_reason: Option<String>,
}

/// The busiest process over a window: (pid, traps).
fn busiest(calls: &BTreeMap<u32, u64>, before: &BTreeMap<u32, u64>) -> Option<(u32, u64)> {
    calls
        .iter()
        .map(|(pid, n)| (*pid, n.saturating_sub(before.get(pid).copied().unwrap_or(0))))
        .max_by_key(|(_, n)| *n)
}

impl DutyCycle {
    pub fn new(mode: Mode) -> Self {
        Self {
            mode,
            quick: false,
            state: State::Counting,
            since: Duration::ZERO,
            on_for: None,
            off_for: Duration::ZERO,
            mark: (Duration::ZERO, BTreeMap::new()),
            last: BTreeMap::new(),
            ended: None,
            next_on: BEAT,
            quiet_since: None,
            check: None,
            checked: (Duration::ZERO, BTreeMap::new()),
            peak: 0.0,
            planned: 0.0,
            pool: Default::default(),
            off_traps: (0, 0),
            over_at: None,
            rng: 0,
            off_phases: 0,
            first_reason: None,
        }
    }

    /// Whether the sampled rows are counting now.
    pub fn is_on(&self) -> bool {
        self.state.is_on()
    }

    /// The controller's state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Jitters the off phases of short on phases from now on (a factor
    /// drawn evenly from 0.5 to 1.5), so on phases do not keep falling into
    /// the same part of a job's own period (docs/sampling.md#rules, R9).
    pub fn seed(&mut self, seed: u64) {
        // splitmix64's finalizer: nearby seeds start far apart.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        self.rng = (z ^ (z >> 31)) | 1;
    }

    /// The next jitter factor (1 without a seed): xorshift64*, the top 53
    /// bits as a fraction.
    fn jitter(&mut self) -> f64 {
        if self.rng == 0 {
            return 1.0;
        }
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
        0.5 + x as f64 / (1u64 << 53) as f64
    }

    /// Whether a short on phase may begin at `now`: the traps counted in
    /// the last second's phases (those ending in the second that would
    /// end with it) and the ones it is planned for fit in a second's
    /// budget, or it would be alone in that second. Otherwise the off
    /// phase lasts until enough of them are a second old. The off phases
    /// hold the budget on average; this holds it in every [`BUDGET_SPAN`]
    /// after the first over budget (docs/sampling.md#rules, R7).
    fn room(&mut self, now: Duration, budget_hz: f64) -> bool {
        if !self.quick || self.over_at.is_none_or(|t| now < t + BUDGET_SPAN) {
            return true;
        }
        // What the next phase will trap: as planned, or as many as the
        // phases of the last second did (they run past their deadlines).
        let mean = self.pool.iter().map(|(_, _, n)| n).sum::<f64>() / self.pool.len().max(1) as f64;
        let next = (self.next_on.as_secs_f64() * self.planned).max(mean);
        let from = (now + self.next_on).saturating_sub(BUDGET_SPAN);
        // Phases that began in the first second over budget are not held.
        let held = self.over_at.map_or(Duration::ZERO, |t| t + BUDGET_SPAN);
        let recent = || {
            self.pool
                .iter()
                .filter(move |(t, len, _)| *t > from && t.saturating_sub(*len) >= held)
        };
        let mut sum: f64 = recent().map(|(_, _, n)| n).sum();
        let mut until = None;
        for (t, _, n) in recent() {
            if sum <= 0.0 || sum + next <= budget_hz * PEAK {
                break;
            }
            sum -= n;
            until = Some(*t);
        }
        match until {
            None => true,
            Some(t) => {
                // The oldest phase left in the way leaves the second, and a
                // millisecond for the clock.
                let at = t + BUDGET_SPAN + CLOCK_SLACK - self.next_on.min(BUDGET_SPAN);
                self.off_for = at.saturating_sub(self.since).max(self.off_for);
                false
            }
        }
    }

    /// Whether counts can be anything but exact.
    pub fn cycles(&self) -> bool {
        self.mode != Mode::Exact
    }

    /// Whether off phases end on deadlines of their own.
    fn timed_off(&self) -> bool {
        self.quick && self.state.cycling() && matches!(self.mode, Mode::Auto { .. })
    }

    /// When the current phase ends, where that is between beats: a short
    /// on phase, or an off phase of `auto` with `uprobe_multi` links.
    fn phase_end(&self) -> Option<Duration> {
        match self.state.is_on() {
            true => self.on_for.map(|d| self.since + d),
            false => self.timed_off().then_some(self.since + self.off_for),
        }
    }

    /// When the loop must next act between beats: a phase's end
    /// ([`DutyCycle::at_deadline`]), or a read of the kernel's totals while
    /// counting on after a process was over budget (a tick).
    pub fn deadline(&self) -> Option<Duration> {
        let check = self
            .check
            .filter(|_| self.state.is_on() && self.on_for.is_none())
            .map(|(_, at)| at);
        match (self.phase_end(), check) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The traps of the sampled rows in off phases so far, all processes:
    /// the next off phase makes room for them in the budget.
    pub fn uncounted(&mut self, traps: u64) {
        self.off_traps.0 = traps;
    }

    /// The links of an on phase are attached and counting began at `at`:
    /// a short on phase counts for its whole length from there.
    pub fn opened(&mut self, at: Duration) {
        if self.state.is_on() {
            self.since = self.since.max(at);
        }
    }

    /// One read of the kernel's totals: `now` on the session clock, `calls`
    /// each process's counted sampled traps so far (cumulative, from the
    /// kernel's aggregation). On every beat, as a short on phase ends and
    /// at the checks of [`DutyCycle::deadline`].
    pub fn tick(&mut self, now: Duration, calls: &BTreeMap<u32, u64>) -> Option<Switch> {
        self.last.clone_from(calls);
        let in_phase = now.saturating_sub(self.since);
        let switch = match self.mode {
            Mode::Exact => None,
            // A short on phase whose deadline the loop missed ends now (an
            // off phase's is in_phase >= off_for below, once the phase
            // before it is measured).
            _ if self.state.is_on() && self.phase_end().is_some_and(|d| now >= d) => self.at_deadline(now),
            Mode::Fixed { on, period } if self.state.is_on() => (in_phase >= on).then(|| {
                self.off_for = period - on;
                Switch::Off {
                    why: format!(
                        "{}: on {} of every {}",
                        self.mode,
                        fmt_duration(on),
                        fmt_duration(period)
                    ),
                }
            }),
            Mode::Fixed { .. } => (in_phase >= self.off_for).then_some(Switch::On),
            Mode::Auto { budget_hz } if self.state.is_on() => self.window(now, calls, budget_hz),
            Mode::Auto { budget_hz } => {
                self.measure_ended(now, calls, budget_hz);
                (in_phase >= self.off_for && self.room(now, budget_hz)).then_some(Switch::On)
            }
        };
        self.apply(now, calls, &switch);
        switch
    }

    /// The current phase is over (`now` at or past its end): a short on
    /// phase ends, or an off phase with a deadline of its own.
    pub fn at_deadline(&mut self, now: Duration) -> Option<Switch> {
        let end = self.phase_end().filter(|d| now >= *d)?;
        debug_assert!(now >= end);
        let switch = Some(if self.state.is_on() {
            self.ended = Some((now - self.since, self.mark.1.clone()));
            Switch::Off { why: String::new() }
        } else {
            if let Mode::Auto { budget_hz } = self.mode
                && !self.room(now, budget_hz)
            {
                return None;
            }
            Switch::On
        });
        // An on phase begins with the traps as last read.
        let calls = self.last.clone();
        self.apply(now, &calls, &switch);
        switch
    }

    fn apply(&mut self, now: Duration, calls: &BTreeMap<u32, u64>, switch: &Option<Switch>) {
        match switch {
            Some(Switch::On) => {
                self.state = self.state.with_on(true);
                self.since = now;
                self.mark = (now, calls.clone());
                self.on_for = (self.state.cycling() && self.quick).then_some(self.next_on);
                self.arm_check(now);
            }
            Some(Switch::Off { why }) => {
                self.state = self.state.with_on(false);
                self.since = now;
                self.on_for = None;
                self.off_phases += 1;
                if !why.is_empty() {
                    self.first_reason.get_or_insert_with(|| why.clone());
                }
            }
            None => {}
        }
    }

    /// Counting on after a process was over budget (`uprobe_multi` links):
    /// the first check of the kernel's totals, after about [`CHECK_SHARE`] of a
    /// second's budget at the highest rate seen.
    fn arm_check(&mut self, now: Duration) {
        self.check = match self.mode {
            Mode::Auto { budget_hz } if self.quick && !self.state.cycling() && self.peak > 0.0 => {
                let every = Duration::from_secs_f64(budget_hz * CHECK_SHARE / self.peak).clamp(MIN_ON, MAX_CHECK);
                self.checked = (now, self.mark.1.clone());
                Some((every, now + every))
            }
            _ => None,
        };
    }

    /// An off phase of short on phases, jittered ([`DutyCycle::seed`]);
    /// those of beat-long phases end on beats, as planned.
    fn jittered(&mut self, off: Duration) -> Duration {
        if self.quick { off.mul_f64(self.jitter()) } else { off }
    }

    /// The on phase and off phase that hold `rate` traps a second to the
    /// budget: a short on phase of about [`CYCLE`]'s budget where links
    /// are quick, else a beat.
    fn plan(&self, rate: f64, budget_hz: f64) -> (Duration, Duration) {
        let on = if self.quick {
            TARGET_PERIOD.mul_f64(budget_hz / rate).clamp(MIN_ON, BEAT)
        } else {
            BEAT
        };
        let period = on.mul_f64(rate / budget_hz).min(MAX_PERIOD);
        (on, period.saturating_sub(on))
    }

    /// Over budget at `rate`: cycle from now.
    fn over(&mut self, now: Duration, pid: u32, rate: f64, budget_hz: f64) -> Switch {
        let (on, off) = self.plan(rate, budget_hz);
        self.state = self.state.with_cycling(true);
        self.check = None;
        self.quiet_since = None;
        self.peak = self.peak.max(rate);
        self.planned = rate;
        self.pool.clear();
        self.over_at.get_or_insert(now);
        self.next_on = on;
        self.off_for = self.jittered(off);
        Switch::Off {
            why: format!(
                "{rate:.0} traps/s by pid {pid} > {budget_hz:.0}/s: on {} of every {}, from {:.2} s into the trace",
                fmt_duration(on),
                fmt_duration(on + off),
                now.as_secs_f64()
            ),
        }
    }

    /// Counting continuously: the busiest process's rate since the window
    /// began; over budget, an off phase that brings its average down to
    /// the budget, from the first beat over it (the first window of a
    /// trace starts with the session: a window in which the calls began
    /// part-way is under-rated, so its off phase is short, and the next on
    /// phase measures the full rate). At a check between beats (counting
    /// on after a process was over budget), a process that has trapped
    /// [`CHECK_SHARE`] of a second's budget at over the budget's rate closes the
    /// links at once.
    fn window(&mut self, now: Duration, calls: &BTreeMap<u32, u64>, budget_hz: f64) -> Option<Switch> {
        let (t0, before) = &self.mark;
        let span = now.saturating_sub(*t0);
        let busy = busiest(calls, before);
        let secs = span.as_secs_f64().max(1e-6);
        // Beats arrive a little early or late: a window of 249.9 ms is one.
        if span + BEAT / 10 < BEAT {
            let (every, at) = self.check?;
            if now < at {
                return None;
            }
            // The rate since the last check: the one the links close at (the
            // window's own is an average over a pause and what came after).
            let (t1, at_last) = std::mem::replace(&mut self.checked, (now, calls.clone()));
            self.check = Some((every, now + every));
            let recent = busiest(calls, &at_last)
                .map_or(0.0, |(_, n)| n as f64 / now.saturating_sub(t1).as_secs_f64().max(1e-6));
            return match busy {
                Some((pid, n)) if n as f64 >= budget_hz * CHECK_SHARE && n as f64 / secs > budget_hz => {
                    Some(self.over(now, pid, recent.max(n as f64 / secs), budget_hz))
                }
                _ => None,
            };
        }
        match busy {
            Some((pid, n)) if n as f64 / secs > budget_hz => Some(self.over(now, pid, n as f64 / secs, budget_hz)),
            _ => {
                // Under budget: count on (a beat found the rate down again).
                self.state = self.state.with_cycling(false);
                self.mark = (now, calls.clone());
                self.arm_check(now);
                None
            }
        }
    }

    /// In an off phase after a short on phase: that phase's traps, now that
    /// the kernel's totals hold them, join those of the short phases of
    /// the last [`POOL`], whose rate (their traps over their counting
    /// time) plans the next on phase and times this off phase from the
    /// phase's length (however late the loop's timer ended it) and the
    /// traps of the last switches; after [`QUIET_FOR`] of phases under
    /// budget in a row, the next on phase counts on. Not from the phase's
    /// own traps, which biases bursty jobs high (docs/sampling.md#rules, R5).
    fn measure_ended(&mut self, now: Duration, calls: &BTreeMap<u32, u64>, budget_hz: f64) {
        let Some((len, before)) = self.ended.take() else {
            return;
        };
        let n = busiest(calls, &before).map_or(0, |(_, n)| n) as f64;
        let rate = n / len.as_secs_f64().max(1e-6);
        self.pool.push_back((now, len, n));
        while self.pool.front().is_some_and(|(t, _, _)| now.saturating_sub(*t) > POOL) {
            self.pool.pop_front();
        }
        if rate <= budget_hz {
            // A short phase may have caught the caller off its CPU or in a
            // stall of its own: only a second of such phases counts on (R3).
            let (first, phases) = self.quiet_since.get_or_insert((now.saturating_sub(len), 0));
            *phases += 1;
            if now.saturating_sub(*first) >= QUIET_FOR && *phases >= QUIET_PHASES {
                self.quiet_since = None;
                self.state = self.state.with_cycling(false);
                self.off_for = Duration::ZERO;
                return;
            }
        } else {
            self.quiet_since = None;
            self.peak = self.peak.max(rate);
        }
        // The pooled rate: a phase that caught part of a stall, or missed a
        // burst, moves it by its share of the counting time only (R5).
        let (t, k) = self
            .pool
            .iter()
            .fold((0.0, 0.0), |(t, k), (_, l, n)| (t + l.as_secs_f64(), k + n));
        self.planned = (k / t.max(1e-6)).max(budget_hz);
        let (on, off) = self.plan(self.planned, budget_hz);
        self.next_on = on;
        // The traps of the last switches count too: breakpoints stay until
        // a closing link's grace period is over (R10).
        let extra = self.off_traps.0.saturating_sub(self.off_traps.1) as f64;
        self.off_traps.1 = self.off_traps.0;
        // A phase that began in the first second over budget was planned
        // from a window the calls may have begun part-way into: unpaid (R8).
        let exempt = self.over_at.is_some_and(|t| now.saturating_sub(len) < t + BUDGET_SPAN);
        let paid = self.quick && !exempt;
        let off = if paid {
            Duration::from_secs_f64((len.as_secs_f64() * self.planned + extra) / budget_hz).saturating_sub(len)
        } else {
            off
        };
        self.off_for = self.jittered(off);
        if paid {
            self.off_for = self.off_for.min(MAX_OFF);
        }
    }
}

#[cfg(test)]
mod tests;
