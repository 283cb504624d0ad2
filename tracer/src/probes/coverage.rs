//! What the planner found for each probe point and library: the coverage
//! record every report carries (attached via which strategy, or why not).
use serde::Serialize;

use super::{catalog::Family, uapi::Lib};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Attached,
    Unavailable,
}

/// One refused strategy.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Attempt {
    #[serde(deserialize_with = "crate::intern::str")]
    pub strategy: crate::intern::Name,
    pub error: String,
}

/// The coverage row of one probe point.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Coverage {
    pub point: String,
    pub family: Family,
    pub status: Status,
    /// The strategy that attached.
    #[serde(default, deserialize_with = "crate::intern::opt")]
    pub via: Option<crate::intern::Name>,
    /// Why the point is unavailable (or what is partial about it).
    pub reason: Option<String>,
    /// Strategies tried before the one that attached, or all of them.
    pub tried: Vec<Attempt>,
    /// Free-form detail (files and symbols for libraries).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub detail: Vec<String>,
}

impl Coverage {
    /// `attached via X` or `unavailable: reason`, as the coverage table prints it.
    pub fn summary(&self) -> String {
        match self.status {
            Status::Attached => format!("attached via {}", self.via.unwrap_or("?")),
            Status::Unavailable => format!("unavailable: {}", self.reason.as_deref().unwrap_or("unknown")),
        }
    }
}

/// Symbols attached in one library file.
#[derive(Clone, Debug, Serialize)]
pub struct LibAttachment {
    pub lib: Lib,
    pub path: String,
    pub symbols: Vec<String>,
    pub missing: Vec<&'static str>,
    /// Set-up rows (`Row::group` `Setup`) whose link was closed over budget.
    pub dropped: Vec<&'static str>,
    pub errors: Vec<String>,
    /// Rows with a point whose first instruction the kernel single-steps
    /// (`insn.rs`: about ten times an emulated trap on the development
    /// host).
    pub stepped: Vec<&'static str>,
}

/// One library of the table, as seen in one process.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct ProcessLibrary {
    pub lib: Lib,
    pub path: Option<String>,
    pub status: Status,
    pub detail: String,
    /// UCX transport modules the process maps (libuct row only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modules: Vec<String>,
}
