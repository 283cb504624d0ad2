//! Baselines and their comparison: per workload and metric, the change and
//! whether it crosses its threshold. Documented in docs/compare.md.
//!
//! One way through: `document` reads and checks the inputs, `metrics`
//! takes what is compared out of each report, `judge` builds the one
//! `Comparison`, `sections` lays it out once, and `render` (text,
//! Markdown) and `html` render those sections; `json` writes the
//! comparison as a document (`gdrtrace.compare/v1`).
pub mod comparison;
pub mod document;
pub mod html;
pub mod json;
pub mod judge;
pub mod metrics;
pub mod numeric;
pub mod profile;
pub mod render;
pub mod sections;
pub mod spread;
pub mod thresholds;
pub mod workload;

pub use comparison::{Comparison, LostProbe, Numbers, Row, Status, TransportChange, WorkloadCmp};
pub use document::{
    Baseline, Document, Run, SCHEMA, Workload, decode_hist, document, load, read_report, record, workload_name,
    workloads,
};
pub use judge::compare;
pub use metrics::{BwPoint, Lat, Metrics, staged_transport};
pub use profile::Profile;
pub use thresholds::{Limits, Thresholds};

#[cfg(test)]
mod tests;
