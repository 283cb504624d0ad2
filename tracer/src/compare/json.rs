//! `compare --format json`: the comparison as one document
//! (`gdrtrace.compare/v2`, docs/formats.md), for a CI gate: the result and
//! exit status, and every metric with its baseline, current value,
//! threshold and verdict, numbers as numbers with their unit beside them.
use serde::{Deserialize, Serialize};

use super::{
    Comparison, LostProbe, Row, Status, TransportChange,
    profile::Difference,
    spread::{Bound, Sample},
};

pub const SCHEMA: &str = "gdrtrace.compare/v2";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompareDoc {
    pub schema: String,
    pub baseline: String,
    pub current: String,
    /// `regression` or `ok`, as the exit status says (1 or 0).
    pub result: String,
    pub exit_code: i32,
    /// Metrics over threshold, failing lost probes and missing workloads.
    pub regressions: usize,
    /// The text report's first line.
    pub headline: String,
    pub profile_differences: Vec<Difference>,
    pub lost_probes: Vec<LostProbe>,
    /// Whether the lost probes count as regressions (thresholds).
    pub lost_probes_fail: bool,
    pub transport_changes: Vec<TransportChange>,
    /// Workloads of the baseline the current run lacks.
    pub missing_workloads: Vec<String>,
    pub missing_workloads_fail: bool,
    pub notes: Vec<String>,
    /// Every compared metric of every workload, in the text report's order.
    pub metrics: Vec<Metric>,
}

/// One compared metric. A metric that is a measured number has `unit`,
/// `baseline`, `current`, `change` and `limit` as numbers; one that is not
/// (a transport mix) has them `null`. `text` is what the text report shows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub workload: String,
    pub metric: String,
    /// The unit of `baseline`, `current` and `limit` (`ns`, `GB/s`, `s/GB`,
    /// `%`, `count`, `1/s`).
    pub unit: Option<String>,
    pub baseline: Option<Quantity>,
    pub current: Option<Quantity>,
    /// Current median over baseline median (`unit` `%`).
    pub change: Option<Quantity>,
    /// The bound the current median was held to.
    pub limit: Option<Limit>,
    pub text: Text,
    /// `ok`, `regression`, `better` or `info` (shown, not judged).
    pub verdict: Status,
}

/// A side's value: the median of its runs, their range and count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Quantity {
    pub value: f64,
    pub unit: String,
    /// Lowest and highest run (equal to `value` with one run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<usize>,
}

/// `{"value": 9000, "unit": "ns", "side": "max"}`: a regression above
/// (`max`) or below (`min`) `value`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Limit {
    pub value: f64,
    pub unit: String,
    pub side: String,
}

/// The row as the text report shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Text {
    pub baseline: String,
    pub current: String,
    pub change: String,
    /// The threshold (`<= 9.0us`, `any change`, `present`, `-` when not judged).
    pub threshold: String,
}

fn quantity(s: &Sample, unit: &str) -> Quantity {
    Quantity {
        value: s.median,
        unit: unit.to_string(),
        min: Some(s.min),
        max: Some(s.max),
        runs: Some(s.runs),
    }
}

impl From<(&str, &Row)> for Metric {
    fn from((workload, r): (&str, &Row)) -> Self {
        let n = r.num.as_ref();
        let unit = n.map(|n| n.unit.clone());
        let side = |f: fn(&super::Numbers) -> Option<&Sample>| n.and_then(|n| Some(quantity(f(n)?, &n.unit)));
        Metric {
            workload: workload.to_string(),
            metric: r.metric.clone(),
            baseline: side(|n| n.baseline.as_ref()),
            current: side(|n| n.current.as_ref()),
            change: n.and_then(|n| n.change_pct).map(|c| Quantity {
                value: c,
                unit: "%".into(),
                min: None,
                max: None,
                runs: None,
            }),
            limit: n.and_then(|n| {
                let (value, side) = match n.bound? {
                    Bound::Max(v) => (v, "max"),
                    Bound::Min(v) => (v, "min"),
                };
                Some(Limit {
                    value,
                    unit: n.unit.clone(),
                    side: side.into(),
                })
            }),
            unit,
            text: Text {
                baseline: r.baseline.clone(),
                current: r.current.clone(),
                change: r.change.clone(),
                threshold: r.limit.clone(),
            },
            verdict: r.status,
        }
    }
}

pub fn document(c: &Comparison) -> CompareDoc {
    let code = c.exit_code();
    CompareDoc {
        schema: SCHEMA.into(),
        baseline: c.baseline.clone(),
        current: c.current.clone(),
        result: if code == 0 { "ok" } else { "regression" }.into(),
        exit_code: code,
        regressions: c.regressions(),
        headline: c.headline(),
        profile_differences: c.profile_diffs.clone(),
        lost_probes: c.lost_probes.clone(),
        lost_probes_fail: c.probe_lost_fails,
        transport_changes: c.transport_changes.clone(),
        missing_workloads: c.missing.clone(),
        missing_workloads_fail: c.missing_fails,
        notes: c.notes.clone(),
        metrics: c
            .workloads
            .iter()
            .flat_map(|w| w.rows.iter().map(move |r| Metric::from((w.name.as_str(), r))))
            .collect(),
    }
}
