//! The workload summaries `validate` attaches to a report: the parts
//! `compare` reads, for the document and for the profile.
use serde::Deserialize;

use crate::report::Report;

/// A workload's own summary as `validate` attaches it to its report
/// (`workloads[]`): the parts `compare` reads. The drivers write it
/// (`drive cuda-copy --summary`, `drive nccl --summary`); a field one of
/// them does not write reads as absent.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Workload {
    pub workload: Option<String>,
    pub summary: Summary,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Summary {
    /// The collective (nccl), naming its bandwidth series.
    pub op: Option<String>,
    pub nccl_version: Option<String>,
    /// `cuDriverGetVersion`: 1000 * major + 10 * minor.
    pub driver_version: Option<u64>,
    /// cuda-copy: `{case, size, gbps, cpu_s_per_gb}`.
    pub results: Vec<Point>,
    /// nccl: `{size, busbw, iters, cpu_s}`.
    pub sizes: Vec<Point>,
}

/// One size of a workload's bandwidth series.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Point {
    pub case: Option<String>,
    pub size: Option<u64>,
    pub gbps: Option<f64>,
    pub busbw: Option<f64>,
    pub cpu_s_per_gb: Option<f64>,
    pub cpu_s: Option<f64>,
    pub iters: Option<f64>,
}

impl Summary {
    /// The bandwidth series, by the key they are under.
    pub fn series(&self) -> [(&'static str, &[Point]); 2] {
        [("results", &self.results), ("sizes", &self.sizes)]
    }
}

/// The workload summaries of a report (checked by `read_report`; one
/// that does not read is left out).
pub fn workloads(report: &Report) -> Vec<Workload> {
    report
        .workloads
        .iter()
        .filter_map(|w| Workload::deserialize(w).ok())
        .collect()
}
