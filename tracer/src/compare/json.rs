//! `compare --format json`: the comparison as one document
//! (`gdrtrace.compare/v1`, docs/formats.md), for a CI gate: the result and
//! exit status, and every metric with its baseline, current value,
//! threshold and verdict.
use serde::{Deserialize, Serialize};

use super::{Comparison, LostProbe, Row, Status, TransportChange, profile::Difference};

pub const SCHEMA: &str = "gdrtrace.compare/v1";

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

/// One compared metric: values as the text report shows them (with units).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub workload: String,
    pub metric: String,
    pub baseline: String,
    pub current: String,
    pub change: String,
    /// The threshold it was held to (`+10%`, `any change`, `-` when not judged).
    pub threshold: String,
    /// `ok`, `regression`, `better` or `info` (shown, not judged).
    pub verdict: Status,
}

impl From<(&str, &Row)> for Metric {
    fn from((workload, r): (&str, &Row)) -> Self {
        Metric {
            workload: workload.to_string(),
            metric: r.metric.clone(),
            baseline: r.baseline.clone(),
            current: r.current.clone(),
            change: r.change.clone(),
            threshold: r.limit.clone(),
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
