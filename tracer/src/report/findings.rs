//! The report's `explain` section: the root causes the explain stage
//! (`crate::explain`, after this one) found, and the staged or unexpected
//! paths they explain. The types live with the report that holds them;
//! the rules that fill them read the finished report.
use serde::{Deserialize, Serialize};

/// A rule that fired for one process (or the host).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Finding {
    #[serde(deserialize_with = "crate::intern::str")]
    pub rule: crate::intern::Name,
    /// The process it concerns (None: the host as a whole).
    pub pid: Option<u32>,
    pub comm: Option<String>,
    #[serde(deserialize_with = "crate::intern::str")]
    pub cause: crate::intern::Name,
    pub evidence: Vec<String>,
}

/// A staged or unexpected path the report shows.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Path {
    pub pid: u32,
    pub comm: String,
    pub what: String,
    /// Rules that explain it (empty: no rule recognised a cause).
    #[serde(deserialize_with = "crate::intern::vec")]
    pub explained_by: Vec<&'static str>,
}

/// What `explain` says about a report.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Explain {
    pub paths: Vec<Path>,
    pub findings: Vec<Finding>,
}

impl Explain {
    /// Whether rule `id` fired (for any process).
    pub fn fired(&self, id: &str) -> bool {
        self.findings.iter().any(|f| f.rule == id)
    }
}
