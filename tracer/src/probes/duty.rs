//! The duty cycle of the sampled rows: collectives, point-to-point and
//! group calls, UCX data calls. Each of them is one uprobe trap per call
//! (0.6 us on the GPU machine, 1 us on the development host: docs/perf.md),
//! and an 8 KiB all-reduce on two H200s takes 20-36 us, so a link that
//! stays open costs such a job 1.7-3% per rank. Their counts and bytes are
//! arguments, summed in the kernel, so they sample well: the link is open
//! in on phases and closed in off phases, and the aggregator estimates
//! each off phase's calls from the rates around it (`stats/duty.rs`, fed by
//! `Input::Duty`).
//!
//! `auto` (the default of `run`, `attach` and `serve`) keeps the link open,
//! every call counted, while each process makes at most `budget_hz` of
//! these calls a second; above that, on phases of [`ON_PHASE`] (a tick of
//! the loop: `serve`'s is 1 s) alternate with off phases long enough that a
//! process traps at most `budget_hz` times a second on average (the cycle
//! at most [`MAX_PERIOD`]). A job of large collectives is counted exactly;
//! one of 40,000 small ones a second is sampled 2.5% of the time (250 ms of
//! every 10 s), and pays about 1,000 traps a second.
//!
//! The state machine is pure: the tracing loop feeds it the session clock
//! and each process's counted calls every tick, and carries out what it
//! returns (`Session::aggregate_tick`).
use std::{collections::BTreeMap, fmt, str::FromStr, time::Duration};

use crate::units::{fmt_duration, parse_duration};

/// Calls per second per process that `auto` counts exactly.
pub const DEFAULT_BUDGET_HZ: f64 = 1000.0;
/// An on phase of `auto`: one tick of the tracing loop, enough to measure
/// the call rate again (an 8 KiB all-reduce loop makes about 10,000 calls
/// in it), short enough that an `attach` of a few seconds pays little for
/// its first one.
pub const ON_PHASE: Duration = Duration::from_millis(250);
/// The longest cycle (on plus off) of `auto`: a process that starts in an
/// off phase is seen within it.
pub const MAX_PERIOD: Duration = Duration::from_secs(60);
/// The shortest on phase of a fixed cycle: the loop switches on its ticks.
pub const MIN_ON: Duration = Duration::from_millis(250);

/// How the sampled rows are traced (`--collectives`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// Always attached: every call counted.
    Exact,
    /// Exact while every process stays at or under `budget_hz` calls a
    /// second, duty-cycled above it.
    Auto { budget_hz: f64 },
    /// On for `on` of every `period`, whatever the rate (benchmarks).
    Fixed { on: Duration, period: Duration },
}

impl Default for Mode {
    fn default() -> Self {
        Mode::Auto {
            budget_hz: DEFAULT_BUDGET_HZ,
        }
    }
}

impl FromStr for Mode {
    type Err = String;

    /// `exact`, `auto`, `auto:HZ` or `ON/PERIOD` (e.g. `1s/10s`).
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let usage = "use exact, auto, auto:HZ (calls per second per process) or ON/PERIOD (e.g. 1s/10s)";
        match s {
            "exact" => return Ok(Mode::Exact),
            "auto" => return Ok(Mode::default()),
            _ => {}
        }
        if let Some(hz) = s.strip_prefix("auto:") {
            let budget_hz: f64 = hz
                .parse()
                .map_err(|_| format!("invalid call budget '{hz}' in '{s}': {usage}"))?;
            if !budget_hz.is_finite() || budget_hz <= 0.0 {
                return Err(format!(
                    "the call budget in '{s}' must be a positive number of calls per second"
                ));
            }
            return Ok(Mode::Auto { budget_hz });
        }
        let Some((on, period)) = s.split_once('/') else {
            return Err(format!("invalid collectives mode '{s}': {usage}"));
        };
        let on = parse_duration(on)?;
        let period = parse_duration(period)?;
        if on < MIN_ON {
            return Err(format!(
                "the on phase in '{s}' is too short (at least {})",
                fmt_duration(MIN_ON)
            ));
        }
        if on >= period {
            return Err(format!("the on phase in '{s}' must be shorter than the period"));
        }
        Ok(Mode::Fixed { on, period })
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Exact => write!(f, "exact"),
            Mode::Auto { budget_hz } => write!(f, "auto:{budget_hz}"),
            Mode::Fixed { on, period } => write!(f, "{}/{}", fmt_duration(*on), fmt_duration(*period)),
        }
    }
}

/// What the loop must do now.
#[derive(Clone, Debug, PartialEq)]
pub enum Switch {
    /// Set `control::SAMPLE_OFF`, then close the sampled links; `why`.
    Off { why: String },
    /// Open the sampled links again, then clear `control::SAMPLE_OFF`.
    On,
}

/// The duty cycle's state.
#[derive(Clone, Debug)]
pub struct DutyCycle {
    pub mode: Mode,
    on: bool,
    /// When the current phase began (session clock).
    since: Duration,
    /// How long the current off phase lasts.
    off_for: Duration,
    /// Counted calls per process when the rate window began.
    mark: Option<(Duration, BTreeMap<u32, u64>)>,
    /// This on phase began with its links attached (after an off phase):
    /// its first window is all counting time. Otherwise a window over
    /// budget may be the one in which the calls began, part idle: the
    /// probes close after a second one (`was_over`), so the window the
    /// estimates start from is a full one (`stats/duty.rs`).
    fresh: bool,
    was_over: bool,
    /// Off phases so far.
    pub off_phases: u64,
    /// Why the first off phase began (the coverage detail says it).
    pub first_reason: Option<String>,
}

impl DutyCycle {
    pub fn new(mode: Mode) -> Self {
        Self {
            mode,
            on: true,
            since: Duration::ZERO,
            off_for: Duration::ZERO,
            mark: None,
            fresh: false,
            was_over: false,
            off_phases: 0,
            first_reason: None,
        }
    }

    /// Whether the sampled rows are counting now.
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Whether counts can be anything but exact.
    pub fn cycles(&self) -> bool {
        self.mode != Mode::Exact
    }

    /// One tick: `now` on the session clock, `calls` each process's counted
    /// sampled calls so far (cumulative, from the kernel's aggregation).
    pub fn tick(&mut self, now: Duration, calls: &BTreeMap<u32, u64>) -> Option<Switch> {
        let in_phase = now.saturating_sub(self.since);
        let switch = match self.mode {
            Mode::Exact => None,
            _ if !self.on => (in_phase >= self.off_for).then_some(Switch::On),
            Mode::Fixed { on, period } => (in_phase >= on).then(|| {
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
            Mode::Auto { budget_hz } => self.over_budget(now, calls, budget_hz),
        };
        match &switch {
            Some(Switch::On) => {
                self.on = true;
                self.since = now;
                self.mark = Some((now, calls.clone()));
                self.fresh = true;
            }
            Some(Switch::Off { why }) => {
                self.on = false;
                self.since = now;
                self.mark = None;
                self.was_over = false;
                self.off_phases += 1;
                self.first_reason.get_or_insert_with(|| why.clone());
            }
            None => {}
        }
        switch
    }

    /// In an on phase of `auto`: the busiest process's rate over the last
    /// [`ON_PHASE`]; over budget (in the phase's first window, or in two
    /// windows in a row), an off phase that brings its average down to the
    /// budget.
    fn over_budget(&mut self, now: Duration, calls: &BTreeMap<u32, u64>, budget_hz: f64) -> Option<Switch> {
        let (t0, before) = self.mark.get_or_insert_with(|| (now, calls.clone()));
        let span = now.saturating_sub(*t0);
        if span < ON_PHASE {
            return None;
        }
        let busiest = calls
            .iter()
            .map(|(pid, n)| (*pid, n.saturating_sub(before.get(pid).copied().unwrap_or(0))))
            .max_by_key(|(_, n)| *n);
        let secs = span.as_secs_f64();
        let over = busiest.is_some_and(|(_, n)| n as f64 / secs > budget_hz);
        let decided = over && (self.fresh || self.was_over);
        self.fresh = false;
        self.was_over = over;
        match busiest {
            Some((pid, n)) if decided => {
                let rate = n as f64 / secs;
                // On for `span`, off for the rest of a period of span * rate / budget.
                let off = span.mul_f64(rate / budget_hz - 1.0);
                self.off_for = off.min(MAX_PERIOD.saturating_sub(span));
                Some(Switch::Off {
                    why: format!(
                        "{:.0} calls/s by pid {pid} > {budget_hz:.0}/s: on {} of every {}",
                        rate,
                        fmt_duration(span),
                        fmt_duration(span + self.off_for)
                    ),
                })
            }
            _ => {
                self.mark = Some((now, calls.clone()));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Feeds `rate` calls/s of one process at 250 ms ticks until `until`,
    /// counting only while on (the kernel counts nothing in off phases);
    /// returns the switches with their times and the counted calls.
    fn run(d: &mut DutyCycle, rate: u64, until: u64) -> (Vec<(u64, Switch)>, u64) {
        let mut counted = 0;
        let mut out = Vec::new();
        let mut t = 0;
        while t <= until {
            let calls = BTreeMap::from([(7u32, counted)]);
            if let Some(s) = d.tick(ms(t), &calls) {
                out.push((t, s));
            }
            t += 250;
            if d.is_on() {
                counted += rate / 4;
            }
        }
        (out, counted)
    }

    #[test]
    fn parses_and_prints_every_mode() {
        assert_eq!("exact".parse::<Mode>(), Ok(Mode::Exact));
        assert_eq!("auto".parse::<Mode>(), Ok(Mode::default()));
        assert_eq!("auto:5000".parse::<Mode>(), Ok(Mode::Auto { budget_hz: 5000.0 }));
        assert_eq!(
            "1s/10s".parse::<Mode>(),
            Ok(Mode::Fixed {
                on: ms(1000),
                period: ms(10_000)
            })
        );
        for bad in [
            "",
            "sometimes",
            "auto:",
            "auto:-1",
            "auto:nan",
            "10s/1s",
            "1s/1s",
            "100ms/1s",
            "1s",
        ] {
            let e = bad.parse::<Mode>().expect_err(bad);
            assert!(!e.is_empty(), "{bad}");
        }
        for m in ["exact", "auto:1000", "1s/10s", "500ms/1m"] {
            let parsed: Mode = m.parse().unwrap();
            assert_eq!(parsed.to_string().parse::<Mode>().unwrap(), parsed, "{m}");
        }
    }

    #[test]
    fn exact_never_switches() {
        let mut d = DutyCycle::new(Mode::Exact);
        let (switches, counted) = run(&mut d, 100_000, 30_000);
        assert!(switches.is_empty());
        assert_eq!(counted, 100_000 / 4 * 121);
        assert!(!d.cycles());
    }

    /// Under budget the link stays open: counts are exact.
    #[test]
    fn auto_under_budget_stays_on() {
        let mut d = DutyCycle::new(Mode::default());
        let (switches, _) = run(&mut d, 800, 60_000);
        assert!(switches.is_empty(), "{switches:?}");
        assert!(d.is_on());
    }

    /// Over budget: on phases of a tick, off phases that bring the
    /// busiest process down to its budget on average.
    #[test]
    fn auto_over_budget_keeps_the_average_at_the_budget() {
        let mut d = DutyCycle::new(Mode::default());
        let until = 600_000;
        let (switches, counted) = run(&mut d, 40_000, until);
        let Some((t, Switch::Off { why })) = switches.first() else {
            panic!("no off phase: {switches:?}")
        };
        assert_eq!(
            *t, 500,
            "decided after two windows over budget (the first may be part idle)"
        );
        assert!(why.contains("40000 calls/s by pid 7 > 1000/s"), "{why}");
        assert!(why.contains("on 250ms of every 10s"), "{why}");
        // Phases alternate, on first after every off.
        for pair in switches.windows(2) {
            assert_ne!(
                matches!(pair[0].1, Switch::On),
                matches!(pair[1].1, Switch::On),
                "{switches:?}"
            );
        }
        let traps_per_s = counted as f64 / (until as f64 / 1000.0);
        assert!(
            (900.0..=1200.0).contains(&traps_per_s),
            "{traps_per_s} traps/s against a budget of 1000/s"
        );
        assert!(d.off_phases >= 55, "{}", d.off_phases);
    }

    /// The cycle is capped, so a process that starts in an off phase is
    /// seen within a minute.
    #[test]
    fn auto_caps_the_period() {
        let mut d = DutyCycle::new(Mode::default());
        let (switches, _) = run(&mut d, 10_000_000, 200_000);
        let offs: Vec<u64> = switches
            .iter()
            .filter(|(_, s)| matches!(s, Switch::Off { .. }))
            .map(|(t, _)| *t)
            .collect();
        assert!(offs.len() >= 3, "{switches:?}");
        for w in offs.windows(2) {
            assert!(w[1] - w[0] <= MAX_PERIOD.as_millis() as u64 + 250, "{offs:?}");
        }
    }

    /// A job whose rate drops below the budget is counted exactly again.
    #[test]
    fn auto_returns_to_exact_when_the_rate_drops() {
        let mut d = DutyCycle::new(Mode::default());
        let (switches, _) = run(&mut d, 50_000, 10_000);
        assert!(!switches.is_empty());
        let (later, _) = run(&mut d, 10, 200_000);
        assert!(matches!(later.last(), Some((_, Switch::On))), "{later:?}");
        assert!(d.is_on());
    }

    #[test]
    fn fixed_cycles_whatever_the_rate() {
        let mut d = DutyCycle::new("1s/10s".parse().unwrap());
        let (switches, counted) = run(&mut d, 0, 30_000);
        let times: Vec<u64> = switches.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, vec![1000, 10_000, 11_000, 20_000, 21_000, 30_000]);
        assert_eq!(counted, 0);
        assert_eq!(d.off_phases, 3);
        assert!(d.first_reason.as_deref().unwrap().contains("on 1s of every 10s"));
    }

    /// Calls that begin after an idle stretch close the probes after a
    /// second window over budget (the first may be part idle); after an
    /// off phase the first window decides.
    #[test]
    fn a_rise_over_budget_is_confirmed_once() {
        let mut d = DutyCycle::new(Mode::default());
        let calls = |n: u64| BTreeMap::from([(1u32, n)]);
        assert_eq!(d.tick(ms(0), &calls(0)), None);
        assert_eq!(d.tick(ms(250), &calls(0)), None, "idle");
        assert_eq!(d.tick(ms(500), &calls(3000)), None, "first window over budget");
        assert!(matches!(d.tick(ms(750), &calls(8000)), Some(Switch::Off { .. })));
        let mut t = 750;
        while d.tick(ms(t), &calls(8000)) != Some(Switch::On) {
            t += 250;
        }
        assert!(
            matches!(d.tick(ms(t + 250), &calls(13000)), Some(Switch::Off { .. })),
            "the first window after an off phase decides"
        );
    }

    /// The busiest process decides: one rank over budget among quiet ones.
    #[test]
    fn auto_judges_the_busiest_process() {
        let mut d = DutyCycle::new(Mode::default());
        assert_eq!(d.tick(ms(0), &BTreeMap::from([(1, 0), (2, 0)])), None);
        assert_eq!(d.tick(ms(250), &BTreeMap::from([(1, 125), (2, 1250)])), None);
        let s = d.tick(ms(500), &BTreeMap::from([(1, 250), (2, 2500)]));
        assert!(
            matches!(s, Some(Switch::Off { ref why }) if why.contains("pid 2")),
            "{s:?}"
        );
    }
}
