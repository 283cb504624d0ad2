//! Uprobe links for the library table: one link per (library file,
//! program, group), so attaching and closing cost one syscall each rather
//! than one per offset.
//!
//! Where the kernel has `BPF_TRACE_UPROBE_MULTI` (6.6+) a link holds every
//! offset of the group, with the op code as each offset's cookie; it attaches
//! in milliseconds and closes in tens of milliseconds. Elsewhere (Debian's
//! 6.1) each offset is its own perf-event uprobe, which the kernel
//! unregisters one at a time behind a grace period (~45 ms each on these
//! machines, docs/perf.md): the same groups, only slower to close.
//!
//! Groups: `Steady` rows (allocations, copies, registrations, collectives)
//! stay for the whole window; `Setup` rows (`Row::hot_setup` context
//! switches and `Row::budgeted` registration-cache lookups, which running
//! jobs may repeat on every API call or send) are one droppable link per
//! file, closed by `Planner::drop_setup` when their hit rate goes over
//! budget.
use std::{collections::BTreeSet, path::Path};

use aya::{
    Ebpf,
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLink, UProbeLinkId, UProbeScope},
    },
    sys::{UProbeMultiFeature, is_uprobe_multi_supported},
};
use serde::Serialize;

use super::catalog::Strategy;
use crate::error::describe;

/// How this kernel attaches uprobes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// One `uprobe_multi` link per (file, program, group).
    Multi,
    /// One perf-event link per offset; `why` multi links were not used.
    PerPoint { why: String },
}

impl Mode {
    /// The strategy the coverage table names.
    pub fn strategy(&self) -> Strategy {
        match self {
            Mode::Multi => Strategy::UprobeMulti,
            Mode::PerPoint { .. } => Strategy::Uprobe,
        }
    }

    fn programs(&self) -> (&'static str, &'static str) {
        match self {
            Mode::Multi => ("uapi_entry_multi", "uapi_return_multi"),
            Mode::PerPoint { .. } => ("uapi_entry", "uapi_return"),
        }
    }
}

/// Which link of a file an offset joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Group {
    Steady,
    Setup,
}

/// One offset to probe.
#[derive(Clone, Debug)]
pub struct Point {
    pub offset: u64,
    pub op: u32,
    /// `name@VERSION`, for errors and the coverage detail.
    pub symbol: String,
    /// Whether a return probe is needed (not `ENTRY_ONLY`).
    pub needs_return: bool,
    pub group: Group,
}

/// A live link and what it holds.
struct Held {
    program: &'static str,
    id: UProbeLinkId,
    group: Group,
    points: usize,
}

/// What closing links took.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Closed {
    pub links: usize,
    pub points: usize,
    /// Milliseconds the close took (set by whoever timed it).
    pub ms: f64,
}

/// The uprobe programs, their attach mode and every link they hold.
pub struct UprobeLinks {
    mode: Option<Result<Mode, String>>,
    /// Per-point links asked for (why), whatever the kernel supports.
    forced: Option<String>,
    held: Vec<Held>,
}

impl Default for UprobeLinks {
    fn default() -> Self {
        Self::new()
    }
}

impl UprobeLinks {
    pub fn new() -> Self {
        Self {
            mode: None,
            forced: None,
            held: Vec::new(),
        }
    }

    /// Uses per-point links even where multi links exist (the detach
    /// benchmark compares both); must come before the first attach.
    pub fn force_per_point(&mut self, why: &str) {
        if self.mode.is_none() {
            self.forced = Some(why.to_string());
        }
    }

    /// The attach mode, once the programs are loaded.
    pub fn mode(&self) -> Option<&Mode> {
        self.mode.as_ref()?.as_ref().ok()
    }

    /// Loads the entry/return pair of the mode this kernel supports (once).
    pub fn load(&mut self, ebpf: &mut Ebpf) -> Result<Mode, String> {
        if let Some(r) = &self.mode {
            return r.clone();
        }
        let mode = match is_uprobe_multi_supported(UProbeMultiFeature::LinkCreation) {
            _ if self.forced.is_some() => Mode::PerPoint {
                why: self.forced.clone().unwrap_or_default(),
            },
            Ok(true) => Mode::Multi,
            Ok(false) => Mode::PerPoint {
                why: "this kernel has no uprobe_multi links (BPF_TRACE_UPROBE_MULTI, 6.6+)".into(),
            },
            Err(e) => Mode::PerPoint {
                why: format!("probing for uprobe_multi links failed: {e}"),
            },
        };
        let (entry, ret) = mode.programs();
        let r = [entry, ret]
            .into_iter()
            .try_for_each(|name| {
                let p: &mut UProbe = super::planner::program(ebpf, name)?;
                p.load().map_err(|e| describe(&e))
            })
            .map(|()| mode);
        self.mode = Some(r.clone());
        r
    }

    /// Attaches `points` of one file: per group, one link for the entry
    /// program and one for the return program (the offsets that need it).
    /// A group whose link is refused is retried point by point, so one bad
    /// offset costs only its own symbol. Returns the symbols attached and
    /// the errors of those that were not.
    pub fn attach(&mut self, ebpf: &mut Ebpf, path: &Path, points: &[Point]) -> (Vec<String>, Vec<String>) {
        let mode = match self.load(ebpf) {
            Ok(m) => m,
            Err(e) => return (Vec::new(), vec![e]),
        };
        let (entry, ret) = mode.programs();
        let mut failed: BTreeSet<String> = BTreeSet::new();
        let mut errors = Vec::new();
        for group in [Group::Steady, Group::Setup] {
            let in_group: Vec<&Point> = points.iter().filter(|p| p.group == group).collect();
            for (program, wanted) in [
                (entry, in_group.clone()),
                (ret, in_group.iter().copied().filter(|p| p.needs_return).collect()),
            ] {
                if wanted.is_empty() {
                    continue;
                }
                if self.attach_one(ebpf, program, path, group, &wanted).is_ok() {
                    continue;
                }
                // Find the offsets the kernel refuses, keep the rest.
                for p in wanted {
                    if let Err(e) = self.attach_one(ebpf, program, path, group, &[p]) {
                        failed.insert(p.symbol.clone());
                        errors.push(format!("{} in {}: {e}", p.symbol, path.display()));
                    }
                }
            }
        }
        let mut attached: Vec<String> = points
            .iter()
            .filter(|p| !failed.contains(&p.symbol))
            .map(|p| p.symbol.clone())
            .collect();
        attached.dedup();
        (attached, errors)
    }

    fn attach_one(
        &mut self,
        ebpf: &mut Ebpf,
        program: &'static str,
        path: &Path,
        group: Group,
        points: &[&Point],
    ) -> Result<(), String> {
        let p: &mut UProbe = super::planner::program(ebpf, program)?;
        let at = points.iter().map(|pt| UProbeAttachPoint {
            location: UProbeAttachLocation::AbsoluteOffset(pt.offset),
            cookie: Some(pt.op as u64),
        });
        let id = p
            .attach(at, path, UProbeScope::AllProcesses)
            .map_err(|e| describe(&e))?;
        self.held.push(Held {
            program,
            id,
            group,
            points: points.len(),
        });
        Ok(())
    }

    /// Whether any `Setup` link is attached.
    pub fn has_setup(&self) -> bool {
        self.held.iter().any(|h| h.group == Group::Setup)
    }

    /// Takes the links of `group` (all groups with `None`) out of their
    /// programs. Dropping what is returned closes them: the caller decides
    /// where that time is spent.
    pub fn take(&mut self, ebpf: &mut Ebpf, group: Option<Group>) -> (Vec<UProbeLink>, Closed) {
        let mut links = Vec::new();
        let mut closed = Closed::default();
        let (keep, take): (Vec<Held>, Vec<Held>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| group.is_some_and(|g| g != h.group));
        self.held = keep;
        for h in take {
            if let Ok(p) = super::planner::program::<UProbe>(ebpf, h.program)
                && let Ok(link) = p.take_link(h.id)
            {
                closed.links += 1;
                closed.points += h.points;
                links.push(link);
            }
        }
        (links, closed)
    }
}
