//! The exact rows (docs/sampling.md#exact-rows): UCX's data calls and CUDA
//! copies move one message or buffer each, so a few of them can carry all
//! of a path's bytes. They are counted through the duty cycle's off phases
//! until some process traps on an op of theirs over [`EXACT_SHARE`] of the
//! budget a second; at the next off switch that op joins the sampled rows
//! for good.
use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    time::Duration,
};

use super::controller::BUDGET_SPAN;

/// A process may trap on an exact op at most this share of the budget a
/// second (100 at the default 1,000) before the op is sampled.
pub const EXACT_SHARE: f64 = 0.1;

/// Traps per (process, op) of the exact rows, cumulative.
pub type ExactTraps = BTreeMap<(u32, u32), u64>;

/// The exact rows' traps at each read over the last [`BUDGET_SPAN`].
#[derive(Debug, Default)]
pub struct ExactRates {
    reads: VecDeque<(Duration, ExactTraps)>,
}

impl ExactRates {
    /// A read at `at` (the session clock) of the exact rows' traps. The
    /// newest read at least a span old stays, as the base of the rates.
    pub fn read(&mut self, at: Duration, traps: ExactTraps) {
        self.reads.push_back((at, traps));
        while self.reads.len() > 2 && at.saturating_sub(self.reads[1].0) >= BUDGET_SPAN {
            self.reads.pop_front();
        }
    }

    /// The ops some process trapped on over `EXACT_SHARE × budget_hz` a second
    /// between the oldest read kept (the session's start, none counted,
    /// while one read is kept) and the last, over at least a span: a burst
    /// of wire-up calls in the first beat is not a rate.
    pub fn hot(&self, budget_hz: f64) -> BTreeSet<u32> {
        let Some((at, last)) = self.reads.back() else {
            return BTreeSet::new();
        };
        let empty = ExactTraps::new();
        let (since, base) = match self.reads.front() {
            Some((t, b)) if self.reads.len() > 1 => (*t, b),
            _ => (Duration::ZERO, &empty),
        };
        let secs = at.saturating_sub(since).max(BUDGET_SPAN).as_secs_f64();
        last.iter()
            .filter(|(k, n)| {
                n.saturating_sub(base.get(k).copied().unwrap_or(0)) as f64 / secs > EXACT_SHARE * budget_hz
            })
            .map(|((_, op), _)| *op)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(v: &[(u32, u32, u64)]) -> ExactTraps {
        v.iter().map(|(p, o, n)| ((*p, *o), *n)).collect()
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// Ten large GETs in the first beat stay exact; a loop of 400 puts a
    /// second is hot, whichever process makes it.
    #[test]
    fn an_op_is_hot_over_a_tenth_of_the_budget_a_second() {
        let mut r = ExactRates::default();
        r.read(MS(250), calls(&[(1, 7, 10), (2, 8, 90)]));
        assert!(
            r.hot(1000.0).is_empty(),
            "90 calls in the first beat: under 100 a second over a span"
        );
        for (i, t) in [500, 750, 1000, 1250, 1500].iter().enumerate() {
            r.read(MS(*t), calls(&[(1, 7, 10), (2, 8, 90 + 100 * (i as u64 + 1))]));
        }
        assert_eq!(r.hot(1000.0), [8].into(), "op 8 at 400 a second");
        assert!(r.hot(10_000.0).is_empty(), "the share is of the budget");
    }

    /// The base is the newest read a span old: a burst long ago is not a
    /// rate now.
    #[test]
    fn an_old_burst_is_not_a_rate() {
        let mut r = ExactRates::default();
        r.read(MS(250), calls(&[(1, 7, 500)]));
        assert_eq!(r.hot(1000.0), [7].into(), "500 in the first second");
        for t in (2..=12).map(|b| b * 250) {
            r.read(MS(t), calls(&[(1, 7, 510)]));
        }
        assert!(r.hot(1000.0).is_empty());
    }
}
