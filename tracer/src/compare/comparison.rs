//! The judged comparison: per workload and metric, the change and whether
//! it crosses its threshold, plus transport changes, lost probes and
//! missing workloads. Built by `judge`, shown through `sections`.
use super::{
    Metrics, Profile, profile,
    spread::{Bound, Sample},
};

/// How a row came out (`compare --format json` writes the lowercase name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Within its threshold.
    Ok,
    /// Crossed its threshold in the bad direction.
    Regression,
    /// Crossed its threshold in the good direction.
    Better,
    /// Shown, not judged.
    Info,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Regression => "REGRESSION",
            Status::Better => "better",
            Status::Info => "info",
        }
    }
}

/// One compared metric.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Row {
    pub metric: String,
    pub baseline: String,
    pub current: String,
    pub change: String,
    pub limit: String,
    pub status: Status,
    /// The numbers behind the text, for a metric that is a measured number
    /// (`compare --format json` writes them as numbers).
    pub num: Option<Numbers>,
}

/// A numeric row's values, in `unit` (`ns`, `GB/s`, `s/GB`, `%`, `count`,
/// `1/s`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Numbers {
    pub unit: String,
    /// The baseline's runs (median, range, how many); `None` when it has none.
    pub baseline: Option<Sample>,
    /// The current side's runs; `None` when it has none (`not seen`).
    pub current: Option<Sample>,
    /// Current median over baseline median, in percent.
    pub change_pct: Option<f64>,
    /// The bound the current median was held to, when judged by the spread model.
    pub bound: Option<Bound>,
}

/// One workload, compared.
#[derive(Clone, Debug)]
pub struct WorkloadCmp {
    pub name: String,
    /// Set when the current run has another name (two single runs paired).
    pub current_name: Option<String>,
    pub rows: Vec<Row>,
    pub base: Metrics,
    pub cur: Metrics,
}

/// A transport change: always a failure.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TransportChange {
    pub workload: String,
    /// `verdicts` or an operation name.
    pub what: String,
    pub baseline: String,
    pub current: String,
}

/// A probe point that was attached in the baseline and is not now.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LostProbe {
    pub point: String,
    pub baseline: String,
    pub current: String,
}

/// The whole comparison.
#[derive(Clone, Debug)]
pub struct Comparison {
    pub baseline: String,
    pub current: String,
    pub baseline_profile: Profile,
    pub current_profile: Profile,
    /// Identity differences (kernel, GPU, versions...) and probe-matrix ones.
    pub profile_diffs: Vec<profile::Difference>,
    pub lost_probes: Vec<LostProbe>,
    pub probe_lost_fails: bool,
    pub transport_changes: Vec<TransportChange>,
    pub workloads: Vec<WorkloadCmp>,
    pub notes: Vec<String>,
    /// Workloads of the baseline the current document lacks (a failure when
    /// the current document is a baseline too).
    pub missing: Vec<String>,
    pub missing_fails: bool,
}

impl Comparison {
    /// Rows over their thresholds, transport changes, lost probes (when
    /// they fail) and missing workloads (when they fail).
    pub fn regressions(&self) -> usize {
        self.workloads
            .iter()
            .flat_map(|w| &w.rows)
            .filter(|r| r.status == Status::Regression)
            .count()
            + if self.probe_lost_fails {
                self.lost_probes.len()
            } else {
                0
            }
            + if self.missing_fails { self.missing.len() } else { 0 }
    }

    /// 0: no regression, 1: regression.
    pub fn exit_code(&self) -> i32 {
        i32::from(self.regressions() > 0)
    }

    /// One line: what happened.
    pub fn headline(&self) -> String {
        let n = self.regressions();
        if n == 0 {
            return format!("compare: no regression ({} workloads compared)", self.workloads.len());
        }
        let mut parts = Vec::new();
        if !self.transport_changes.is_empty() {
            parts.push(format!(
                "transport changed: {}",
                self.transport_changes
                    .iter()
                    .map(|t| format!("{} {} {} -> {}", t.workload, t.what, t.baseline, t.current))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        if self.missing_fails && !self.missing.is_empty() {
            parts.push(format!("workloads missing: {}", self.missing.join(", ")));
        }
        if self.probe_lost_fails && !self.lost_probes.is_empty() {
            parts.push(format!("{} probe points became unavailable", self.lost_probes.len()));
        }
        let metrics: Vec<String> = self
            .workloads
            .iter()
            .flat_map(|w| w.rows.iter().map(move |r| (w, r)))
            .filter(|(_, r)| r.status == Status::Regression && r.limit != "any change")
            .map(|(w, r)| format!("{} {} {}", w.name, r.metric, r.change))
            .collect();
        if !metrics.is_empty() {
            let more = metrics.len().saturating_sub(3);
            parts.push(format!(
                "{}{}",
                metrics[..metrics.len().min(3)].join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        format!(
            "compare: REGRESSION: {n} over threshold{}",
            if parts.is_empty() {
                String::new()
            } else {
                format!(" ({})", parts.join("; "))
            }
        )
    }
}
