//! Judging a measured number against the spread the baseline measured
//! (docs/compare.md, "The noise model"): a baseline recorded with
//! `--repeat N` holds N runs of each workload, so each metric has N values.
//! A regression is every current run outside the baseline's range (its
//! lowest to highest run) by more than a margin (the median is what is
//! shown):
//!
//! margin = max(threshold % of the baseline median,
//!              spread_factor x (baseline max - baseline min),
//!              the metric's absolute floor)
//!
//! With one run on each side the range is one value and the spread 0: the
//! rule is the plain percentage threshold.
use serde::{Deserialize, Serialize};

/// The values of one metric across a side's runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The median of the runs (the mean of the middle two for an even count).
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub runs: usize,
}

impl Sample {
    /// The sample of `values`; `None` when there are none (or one is not a
    /// finite number).
    pub fn of(values: &[f64]) -> Option<Sample> {
        if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Sample {
            median,
            min: v[0],
            max: v[n - 1],
            runs: n,
        })
    }

    /// Highest run minus lowest.
    pub fn spread(&self) -> f64 {
        self.max - self.min
    }
}

/// Which way a metric gets worse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Worse {
    /// Latency, CPU per GB: up is bad.
    Up,
    /// Bandwidth: down is bad.
    Down,
}

/// The bound the current median was held to.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    /// Regression above this value.
    Max(f64),
    /// Regression below this value.
    Min(f64),
}

/// The limits of one judgement: the percentage threshold, the spread
/// factor, and an absolute floor under the margin (latency's
/// `latency_min_increase_ns`; 0 elsewhere).
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    pub pct: f64,
    pub spread_factor: f64,
    pub floor: f64,
}

impl Rule {
    /// The margin around the baseline's range.
    pub fn margin(&self, base: &Sample) -> f64 {
        (self.pct / 100.0 * base.median.abs())
            .max(self.spread_factor * base.spread())
            .max(self.floor)
    }

    /// The bound a current median must not cross, and the one past which it
    /// is better.
    pub fn bounds(&self, base: &Sample, worse: Worse) -> (Bound, f64) {
        let m = self.margin(base);
        match worse {
            Worse::Up => (Bound::Max(base.max + m), base.min - m),
            Worse::Down => (Bound::Min(base.min - m), base.max + m),
        }
    }

    /// `Some(true)` regression, `Some(false)` better, `None` within. Every
    /// current run must be past the bound: the best of them decides a
    /// regression (one or two slow runs of three on a busy machine are
    /// not one), the worst an improvement.
    pub fn judge(&self, base: &Sample, cur: &Sample, worse: Worse) -> (Option<bool>, Bound) {
        let (bound, better) = self.bounds(base, worse);
        let verdict = match (worse, bound) {
            (Worse::Up, Bound::Max(b)) if cur.min > b => Some(true),
            (Worse::Up, _) if cur.max < better => Some(false),
            (Worse::Down, Bound::Min(b)) if cur.max < b => Some(true),
            (Worse::Down, _) if cur.min > better => Some(false),
            _ => None,
        };
        (verdict, bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[f64]) -> Sample {
        Sample::of(v).expect("values")
    }

    #[test]
    fn median_min_max() {
        assert_eq!(s(&[3.0, 1.0, 2.0]).median, 2.0);
        assert_eq!(s(&[4.0, 1.0, 2.0, 3.0]).median, 2.5);
        let x = s(&[5.0, 9.0, 7.0]);
        assert_eq!((x.min, x.max, x.runs, x.spread()), (5.0, 9.0, 3, 4.0));
        assert!(Sample::of(&[]).is_none());
        assert!(Sample::of(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn one_run_each_is_the_percentage_threshold() {
        let r = Rule {
            pct: 50.0,
            spread_factor: 1.0,
            floor: 1000.0,
        };
        // 10us -> 15.1us: +51%, over; 10us -> 14.9us within.
        assert_eq!(r.judge(&s(&[10_000.0]), &s(&[15_100.0]), Worse::Up).0, Some(true));
        assert_eq!(r.judge(&s(&[10_000.0]), &s(&[14_900.0]), Worse::Up).0, None);
        // The floor: 1.0us -> 1.9us is +90% but under 1000ns more.
        assert_eq!(r.judge(&s(&[1_000.0]), &s(&[1_900.0]), Worse::Up).0, None);
        // Better past the same margin below.
        assert_eq!(r.judge(&s(&[10_000.0]), &s(&[4_000.0]), Worse::Up).0, Some(false));
    }

    #[test]
    fn a_noisy_baseline_widens_its_own_limit() {
        let r = Rule {
            pct: 50.0,
            spread_factor: 1.0,
            floor: 0.0,
        };
        // Runs of 10, 12 and 30us: the range is 10-30, the spread 20us; the
        // bound is 30 + max(6, 20) = 50us.
        let base = s(&[10.0, 12.0, 30.0]);
        let (v, bound) = r.judge(&base, &s(&[40.0, 45.0, 48.0]), Worse::Up);
        assert_eq!((v, bound), (None, Bound::Max(50.0)));
        assert_eq!(r.judge(&base, &s(&[51.0, 55.0, 60.0]), Worse::Up).0, Some(true));
        // One current run within: not every run regressed.
        assert_eq!(r.judge(&base, &s(&[40.0, 55.0, 60.0]), Worse::Up).0, None);
        // Bandwidth: 100, 95 and 105 GB/s, 10% -> bound 95 - max(10, 10) = 85.
        let r = Rule {
            pct: 10.0,
            spread_factor: 1.0,
            floor: 0.0,
        };
        let bw = s(&[100.0, 95.0, 105.0]);
        assert_eq!(r.judge(&bw, &s(&[86.0]), Worse::Down), (None, Bound::Min(85.0)));
        assert_eq!(r.judge(&bw, &s(&[84.0]), Worse::Down).0, Some(true));
        assert_eq!(r.judge(&bw, &s(&[116.0]), Worse::Down).0, Some(false));
    }
}
