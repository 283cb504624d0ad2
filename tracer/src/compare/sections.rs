//! The one output model of a comparison, after bpftrace's `Output`
//! (src/output/output.h): the comparison is laid out once, as a list of
//! sections in the order they are shown, and each format (text, Markdown,
//! HTML) is a renderer of that list. A renderer decides how a section
//! looks, never which sections there are or in what order; a format that
//! has no form for a kind of section (a plot in text) passes over it.
use super::{Comparison, LostProbe, Row, Status, TransportChange, WorkloadCmp, profile::Difference};

/// One section of a comparison, borrowed from it.
#[derive(Clone, Debug)]
pub enum Section<'a> {
    /// Identity and probe-matrix differences between the two profiles.
    Profile(&'a [Difference]),
    /// Probe points attached in the baseline and not now; `fails` when the
    /// thresholds make that a regression.
    LostProbes { probes: &'a [LostProbe], fails: bool },
    /// Transport changes: always regressions.
    TransportChanges(&'a [TransportChange]),
    /// A note on how the runs were paired.
    Note(&'a str),
    /// Workloads of the baseline missing from the current run.
    Missing { workloads: &'a [String], fails: bool },
    /// Every row over its threshold, with its workload's name.
    OverThreshold(Vec<(&'a str, &'a Row)>),
    /// Host-staged bytes of every workload (a plot).
    Staging(&'a [WorkloadCmp]),
    /// One workload's rows (and plots).
    Workload(&'a WorkloadCmp),
}

impl Section<'_> {
    /// The section's title, as every format heads it.
    pub fn title(&self) -> String {
        match self {
            Section::Profile(_) => "Profile differences".into(),
            Section::LostProbes { .. } => "Probe points no longer available".into(),
            Section::TransportChanges(_) => "Transport changes".into(),
            Section::Note(_) => "note".into(),
            Section::Missing { .. } => "Workloads of the baseline missing from the current run".into(),
            Section::OverThreshold(_) => "Over threshold".into(),
            Section::Staging(_) => "Host staging".into(),
            Section::Workload(w) => format!("Workload {}", w.title()),
        }
    }
}

impl WorkloadCmp {
    /// `name`, or `name vs current-name` when two differently named runs
    /// were paired.
    pub fn title(&self) -> String {
        match &self.current_name {
            Some(cur) => format!("{} vs {cur}", self.name),
            None => self.name.clone(),
        }
    }
}

/// The comparison, laid out: the sections with something to show, in
/// order (profile, lost probes, transport changes, notes, missing
/// workloads, rows over threshold, staging, then each workload).
pub fn sections(c: &Comparison) -> Vec<Section<'_>> {
    let mut s = Vec::new();
    if !c.profile_diffs.is_empty() {
        s.push(Section::Profile(&c.profile_diffs));
    }
    if !c.lost_probes.is_empty() {
        s.push(Section::LostProbes {
            probes: &c.lost_probes,
            fails: c.probe_lost_fails,
        });
    }
    if !c.transport_changes.is_empty() {
        s.push(Section::TransportChanges(&c.transport_changes));
    }
    s.extend(c.notes.iter().map(|n| Section::Note(n)));
    if !c.missing.is_empty() {
        s.push(Section::Missing {
            workloads: &c.missing,
            fails: c.missing_fails,
        });
    }
    let over: Vec<(&str, &Row)> = c
        .workloads
        .iter()
        .flat_map(|w| w.rows.iter().map(move |r| (w.name.as_str(), r)))
        .filter(|(_, r)| r.status == Status::Regression)
        .collect();
    if !over.is_empty() {
        s.push(Section::OverThreshold(over));
    }
    if !c.workloads.is_empty() {
        s.push(Section::Staging(&c.workloads));
    }
    s.extend(c.workloads.iter().map(Section::Workload));
    s
}
