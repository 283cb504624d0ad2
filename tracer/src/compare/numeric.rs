//! The measured numbers of a workload (registrations, CPU per GB,
//! bandwidth, latency), each judged over every run of each side against
//! the spread the baseline measured (`spread`).
use super::{
    BwPoint, Limits, Metrics, Numbers, Row, Status,
    spread::{Bound, Rule, Sample, Worse},
};
use crate::units::{ns, size_label};

pub fn pct_change(a: f64, b: f64) -> Option<f64> {
    (a != 0.0).then(|| (b - a) * 100.0 / a.abs())
}

pub fn fmt_pct(c: Option<f64>) -> String {
    c.map_or("-".into(), |c| format!("{c:+.1}%"))
}

/// A metric the baseline has and the current run lacks: a regression (the
/// work it measured was not done, or not seen).
pub fn missing(metric: String, baseline: String, num: Option<Numbers>) -> Row {
    Row {
        metric,
        baseline,
        current: "not seen".into(),
        change: "missing".into(),
        limit: "present".into(),
        status: Status::Regression,
        num,
    }
}

/// A number as the text shows it: the median, and the range when there
/// was more than one run (`5.6us (5.1us..6.3us)`).
pub(super) fn shown(s: &Sample, fmt: &dyn Fn(f64) -> String) -> String {
    if s.runs > 1 && s.min != s.max {
        format!("{} ({}..{})", fmt(s.median), fmt(s.min), fmt(s.max))
    } else {
        fmt(s.median)
    }
}

/// One measured metric: how it is named, shown and judged.
pub struct Measure<'a> {
    pub metric: String,
    pub unit: &'static str,
    pub fmt: &'a dyn Fn(f64) -> String,
    pub worse: Worse,
    pub rule: Rule,
}

impl Measure<'_> {
    /// The row of `base` against `cur` (each run's value); `None` when the
    /// baseline has no value. Falling to 0 from a positive median is a
    /// regression, never an improvement: the workload ran, so what it
    /// counted went unseen.
    pub fn row(&self, base: &[f64], cur: &[f64]) -> Option<Row> {
        let a = Sample::of(base)?;
        let Some(b) = Sample::of(cur) else {
            let num = Numbers {
                unit: self.unit.into(),
                baseline: Some(a.clone()),
                current: None,
                change_pct: None,
                bound: None,
            };
            return Some(missing(self.metric.clone(), shown(&a, self.fmt), Some(num)));
        };
        let change_pct = pct_change(a.median, b.median);
        let zero = a.median > 0.0 && b.max == 0.0;
        let (verdict, bound) = self.rule.judge(&a, &b, self.worse);
        let status = match verdict {
            _ if zero => Status::Regression,
            Some(true) => Status::Regression,
            Some(false) => Status::Better,
            None => Status::Ok,
        };
        let limit = match bound {
            _ if zero => "falling to 0".into(),
            Bound::Max(x) => format!("<= {}", (self.fmt)(x)),
            Bound::Min(x) => format!(">= {}", (self.fmt)(x.max(0.0))),
        };
        Some(Row {
            metric: self.metric.clone(),
            baseline: shown(&a, self.fmt),
            current: shown(&b, self.fmt),
            change: fmt_pct(change_pct),
            limit,
            status,
            num: Some(Numbers {
                unit: self.unit.into(),
                baseline: Some(a),
                current: Some(b),
                change_pct,
                bound: Some(bound),
            }),
        })
    }
}

/// A percentage rule with the limits' spread factor and no floor.
pub fn rule(pct: f64, l: &Limits) -> Rule {
    Rule {
        pct,
        spread_factor: l.spread_factor,
        floor: 0.0,
    }
}

/// Registrations (same work, more churn), and their rate (shown only).
pub fn registration_rows(a: &[Metrics], b: &[Metrics], l: &Limits, rows: &mut Vec<Row>) {
    if a.iter().chain(b).all(|m| m.registrations == 0) {
        return;
    }
    let regs = |m: &[Metrics]| m.iter().map(|m| m.registrations as f64).collect::<Vec<_>>();
    rows.extend(
        Measure {
            metric: "registrations".into(),
            unit: "count",
            fmt: &|v| format!("{v:.0}"),
            worse: Worse::Up,
            rule: rule(l.registrations_increase_pct, l),
        }
        .row(&regs(a), &regs(b)),
    );
    let rate = |m: &[Metrics]| {
        m.iter()
            .filter(|m| m.duration_s > 0.0)
            .map(|m| m.registrations as f64 / m.duration_s)
            .collect::<Vec<_>>()
    };
    if let (Some(x), Some(y)) = (Sample::of(&rate(a)), Sample::of(&rate(b))) {
        let change_pct = pct_change(x.median, y.median);
        rows.push(Row {
            metric: "registration rate".into(),
            baseline: format!("{:.0}/s", x.median),
            current: format!("{:.0}/s", y.median),
            change: fmt_pct(change_pct),
            limit: "-".into(),
            status: Status::Info,
            num: Some(Numbers {
                unit: "1/s".into(),
                baseline: Some(x),
                current: Some(y),
                change_pct,
                bound: None,
            }),
        });
    }
}

/// CPU seconds of the traced processes per GB moved.
pub fn cpu_row(a: &[Metrics], b: &[Metrics], l: &Limits) -> Option<Row> {
    if !a.iter().chain(b).all(Metrics::cpu_judgeable) {
        return None;
    }
    let v = |m: &[Metrics]| m.iter().filter_map(Metrics::cpu_per_gb).collect::<Vec<_>>();
    Measure {
        metric: "CPU per GB moved (traced processes)".into(),
        unit: "s/GB",
        fmt: &|v| format!("{v:.3} s/GB"),
        worse: Worse::Up,
        rule: rule(l.cpu_per_gb_increase_pct, l),
    }
    .row(&v(a), &v(b))
}

/// One bandwidth point of `series` at `size` in each run that has it.
fn points<'m>(m: &'m [Metrics], series: &str, size: u64) -> Vec<&'m BwPoint> {
    m.iter()
        .filter_map(|m| m.bandwidth.get(series)?.iter().find(|p| p.size == size))
        .collect()
}

/// Bandwidth per series and size (of the baseline's first run); CPU per
/// GB at each series' largest size.
pub fn bandwidth_rows(a: &[Metrics], b: &[Metrics], l: &Limits, rows: &mut Vec<Row>) {
    let Some(first) = a.first() else { return };
    for (series, pa) in &first.bandwidth {
        for p in pa {
            let gbps = |ps: Vec<&BwPoint>| ps.iter().map(|p| p.gbps).collect::<Vec<_>>();
            rows.extend(
                Measure {
                    metric: format!("{series} {} bandwidth", size_label(p.size)),
                    unit: "GB/s",
                    fmt: &|v| format!("{v:.2} GB/s"),
                    worse: Worse::Down,
                    rule: rule(l.bandwidth_decrease_pct, l),
                }
                .row(&gbps(points(a, series, p.size)), &gbps(points(b, series, p.size))),
            );
        }
        let Some(last) = pa.last() else { continue };
        let cpu = |ps: Vec<&BwPoint>| ps.iter().filter_map(|p| p.cpu_s_per_gb).collect::<Vec<_>>();
        let (x, y) = (cpu(points(a, series, last.size)), cpu(points(b, series, last.size)));
        if y.is_empty() {
            continue;
        }
        rows.extend(
            Measure {
                metric: format!("{series} {} CPU per GB", size_label(last.size)),
                unit: "s/GB",
                fmt: &|v| format!("{v:.4} s/GB"),
                worse: Worse::Up,
                rule: rule(l.cpu_per_gb_increase_pct, l),
            }
            .row(&x, &y),
        );
    }
}

/// Latency percentiles of each (operation, transport) of the baseline's
/// first run, over the runs of each side with enough samples.
pub fn latency_rows(a: &[Metrics], b: &[Metrics], l: &Limits, rows: &mut Vec<Row>) {
    let Some(first) = a.first() else { return };
    for key in first.latency.keys() {
        let lats = |m: &[Metrics]| {
            m.iter()
                .filter_map(|m| m.latency.get(key))
                .filter(|x| x.count >= l.latency_min_samples)
                .cloned()
                .collect::<Vec<_>>()
        };
        let (xs, ys) = (lats(a), lats(b));
        if xs.is_empty() || ys.is_empty() {
            continue;
        }
        let fewest = xs.iter().chain(&ys).map(|x| x.count).min().unwrap_or(0);
        let exact = xs.iter().chain(&ys).all(|x| x.exact);
        for (label, pick, pct) in [
            (
                "p50",
                (|x: &super::Lat| x.p50) as fn(&super::Lat) -> u64,
                l.latency_p50_increase_pct,
            ),
            ("p99", |x: &super::Lat| x.p99, l.latency_p99_increase_pct),
        ] {
            let metric = format!("{key} latency {label}{}", if exact { "" } else { " (from report)" });
            let v = |s: &[super::Lat]| s.iter().map(|x| pick(x) as f64).collect::<Vec<_>>();
            let m = Measure {
                metric,
                unit: "ns",
                fmt: &|v| ns(v.max(0.0).round() as u64),
                worse: Worse::Up,
                rule: Rule {
                    pct,
                    spread_factor: l.spread_factor,
                    floor: l.latency_min_increase_ns as f64,
                },
            };
            let Some(mut row) = m.row(&v(&xs), &v(&ys)) else {
                continue;
            };
            if label == "p99" && fewest < l.latency_p99_min_samples {
                // Too few samples to judge a tail: shown only.
                row.status = Status::Info;
                row.limit = format!("< {} samples", l.latency_p99_min_samples);
                if let Some(n) = &mut row.num {
                    n.bound = None;
                }
            }
            rows.push(row);
        }
    }
}
