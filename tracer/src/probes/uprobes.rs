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
//! Groups: `Steady` rows (allocations, copies, registrations) stay for the
//! whole window; `Setup` rows (`Row::hot_setup` context switches and
//! `Row::budgeted` registration-cache lookups, which running jobs may
//! repeat on every API call or send) are one droppable link per file,
//! closed by `Planner::drop_setup` when their hit rate goes over budget;
//! `Exact` rows (UCX's data calls and CUDA copies) are one link per (file,
//! op), counted until the op is hot, when `UprobeLinks::promote` moves its
//! points to the sampled ones; `Sampled` rows (collectives, group calls,
//! cuFile I/O and the exact ops that joined them: a trap per transfer) are
//! one link per file that the duty cycle (`sampling/controller.rs`)
//! closes and opens again. Their files are kept open, so a link re-opened
//! later goes to the same inode even when the path has since been replaced
//! or the process whose `/proc/PID/root` named it has exited.
use std::{
    collections::BTreeSet,
    fs::File,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
};

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

pub use super::kinds::Group;

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
    /// The op of an `Exact` link (each holds one op's points).
    op: Option<u32>,
}

/// A path the kernel resolves to the inode `file` holds.
fn fd_path(file: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// What closing links took.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Closed {
    pub links: usize,
    pub points: usize,
    /// Milliseconds the close took (set by whoever timed it).
    pub ms: f64,
}

/// A file's `Sampled` points, kept to open their link again (or its
/// `Exact` points, kept to move them to the sampled ones).
struct SampledFile {
    /// Held open: the link is opened through `/proc/self/fd/N`, the inode
    /// the points were resolved in.
    file: File,
    shown: PathBuf,
    points: Vec<Point>,
}

/// The uprobe programs, their attach mode and every link they hold.
pub struct UprobeLinks {
    mode: Option<Result<Mode, String>>,
    /// Per-point links asked for (why), whatever the kernel supports.
    forced: Option<String>,
    held: Vec<Held>,
    /// Every file's sampled points, attached or not.
    sampled: Vec<SampledFile>,
    /// Every file's points of the ops still counted exactly.
    exact: Vec<SampledFile>,
    /// The `Exact` ops that joined the sampled rows: a file attached later
    /// puts their points with the sampled ones.
    promoted: BTreeSet<u32>,
    /// Whether the sampled links are open (an on phase); false from the
    /// first off phase until the next on phase.
    sampled_open: bool,
    /// The sampled links' on phase: 0 for those attached with the session,
    /// one more at each `open_sampled` (their cookies carry it:
    /// `control::SAMPLE_GEN`).
    generation: u32,
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
            sampled: Vec::new(),
            exact: Vec::new(),
            promoted: BTreeSet::new(),
            sampled_open: true,
            generation: 0,
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
                let p: &mut UProbe = crate::loader::program(ebpf, name)?;
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
        let mut failed: BTreeSet<String> = BTreeSet::new();
        let mut errors = Vec::new();
        // The points of an op that joined the cycle go with the sampled ones.
        let points: Vec<Point> = points
            .iter()
            .cloned()
            .map(|mut p| {
                if p.group == Group::Exact && self.promoted.contains(&p.op) {
                    p.group = Group::Sampled;
                }
                p
            })
            .collect();
        for group in Group::ALL {
            let mut in_group: Vec<Point> = points.iter().filter(|p| p.group == group).cloned().collect();
            if in_group.is_empty() {
                continue;
            }
            if !matches!(group, Group::Sampled | Group::Exact) {
                failed.extend(self.attach_group(ebpf, &mode, path, path, group, &in_group, &mut errors));
                continue;
            }
            match File::open(path) {
                Ok(file) => {
                    let at = fd_path(&file);
                    if group == Group::Exact {
                        // One link per op, so that one op can leave.
                        let ops: BTreeSet<u32> = in_group.iter().map(|p| p.op).collect();
                        for op in ops {
                            let of_op: Vec<Point> = in_group.iter().filter(|p| p.op == op).cloned().collect();
                            failed.extend(self.attach_group(ebpf, &mode, &at, path, group, &of_op, &mut errors));
                        }
                        in_group.retain(|p| !failed.contains(&p.symbol));
                        self.exact.push(SampledFile {
                            file,
                            shown: path.to_path_buf(),
                            points: in_group,
                        });
                        continue;
                    }
                    // Attached only in an on phase; the next one opens them.
                    if self.sampled_open {
                        let bad = self.attach_group(ebpf, &mode, &at, path, group, &in_group, &mut errors);
                        in_group.retain(|p| !bad.contains(&p.symbol));
                        failed.extend(bad);
                    }
                    self.sampled.push(SampledFile {
                        file,
                        shown: path.to_path_buf(),
                        points: in_group,
                    });
                }
                Err(e) => {
                    for p in &in_group {
                        failed.insert(p.symbol.clone());
                        errors.push(format!("{} in {}: opening the file: {e}", p.symbol, path.display()));
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

    /// Attaches `points` of one group, found in the file at `at` (shown as
    /// `shown`): per program one link for the entry probes and one for the
    /// return probes (the points that need them). A link the kernel refuses
    /// is retried point by point, so one bad offset costs only its own
    /// symbol. Returns the symbols that did not attach; their errors go to
    /// `errors`.
    #[expect(clippy::too_many_arguments, reason = "the group's file, as opened and as shown")]
    fn attach_group(
        &mut self,
        ebpf: &mut Ebpf,
        mode: &Mode,
        at: &Path,
        shown: &Path,
        group: Group,
        points: &[Point],
        errors: &mut Vec<String>,
    ) -> BTreeSet<String> {
        let (entry, ret) = mode.programs();
        let mut failed = BTreeSet::new();
        for (program, wanted) in [
            (entry, points.iter().collect::<Vec<_>>()),
            (ret, points.iter().filter(|p| p.needs_return).collect()),
        ] {
            if wanted.is_empty() || self.attach_one(ebpf, program, at, group, &wanted).is_ok() {
                continue;
            }
            for p in wanted {
                if let Err(e) = self.attach_one(ebpf, program, at, group, &[p]) {
                    failed.insert(p.symbol.clone());
                    errors.push(format!("{} in {}: {e}", p.symbol, shown.display()));
                }
            }
        }
        failed
    }

    /// Whether any file has sampled points (attached or not), or exact
    /// ones, which may join them.
    pub fn has_sampled(&self) -> bool {
        !self.sampled.is_empty() || !self.exact.is_empty()
    }

    /// Moves the `Exact` ops `ops` to the sampled rows, for good: their
    /// links are taken out of their programs (dropping them closes them)
    /// and their points join the sampled ones, attached from the next on
    /// phase. Call it while the sampled links are closed (an off phase).
    pub fn promote(&mut self, ebpf: &mut Ebpf, ops: &BTreeSet<u32>) -> (Vec<UProbeLink>, Closed) {
        self.promoted.extend(ops.iter().copied());
        let taken = self.take_where(ebpf, |h| {
            h.group == Group::Exact && h.op.is_some_and(|op| ops.contains(&op))
        });
        for f in &mut self.exact {
            let (moved, kept): (Vec<Point>, Vec<Point>) = std::mem::take(&mut f.points)
                .into_iter()
                .partition(|p| ops.contains(&p.op));
            f.points = kept;
            if moved.is_empty() {
                continue;
            }
            match f.file.try_clone() {
                Ok(file) => self.sampled.push(SampledFile {
                    file,
                    shown: f.shown.clone(),
                    points: moved
                        .into_iter()
                        .map(|mut p| {
                            p.group = Group::Sampled;
                            p
                        })
                        .collect(),
                }),
                Err(e) => log::warn!("{}: cannot keep its sampled points: {e}", f.shown.display()),
            }
        }
        self.exact.retain(|f| !f.points.is_empty());
        taken
    }

    /// Ends an on phase: takes the sampled links out of their programs
    /// (dropping them closes them; the caller decides where that time is
    /// spent). The points are kept for the next on phase.
    pub fn close_sampled(&mut self, ebpf: &mut Ebpf) -> (Vec<UProbeLink>, Closed) {
        self.sampled_open = false;
        let (mut links, closed) = self.take(ebpf, Some(Group::Sampled));
        // The hottest were attached last: they close first (the closer's
        // first thread gets the first link).
        links.reverse();
        (links, closed)
    }

    /// Starts an on phase: per file, through the file held open, a link of
    /// the points not hit yet and then one of those hit (`heat`: hits per
    /// op so far), the files whose points were hit least first. A point traps from its link's attach on, uncounted until
    /// the caller ends the off phase: the hottest file goes last (a copy
    /// loop traps 500,000 times a second while the others attach). Returns
    /// the errors of points that did not attach; they leave the cycle.
    pub fn open_sampled(&mut self, ebpf: &mut Ebpf, heat: impl Fn(u32) -> u64) -> Vec<String> {
        self.sampled_open = true;
        self.generation = self.generation.wrapping_add(1);
        let Some(Ok(mode)) = self.mode.clone() else {
            return Vec::new();
        };
        let mut errors = Vec::new();
        let mut files = std::mem::take(&mut self.sampled);
        files.sort_by_key(|f| f.points.iter().map(|p| heat(p.op)).sum::<u64>());
        for f in &mut files {
            // The points that were hit get links of their own, after the
            // others: a link registers and unregisters its points one by
            // one in order, and a copy loop's copies trap, uncounted,
            // while the others are registered or removed. (The closes of
            // 3 s copy jobs on one H200 trapped 3,400-16,200 times either
            // way, 2026-12-03: most in the first closing, whose links are
            // the session's own, not these.)
            let (hot, cold): (Vec<Point>, Vec<Point>) = f.points.iter().cloned().partition(|p| heat(p.op) > 0);
            let mut bad = BTreeSet::new();
            for part in [cold, hot].iter().filter(|p| !p.is_empty()) {
                bad.extend(self.attach_group(
                    ebpf,
                    &mode,
                    &fd_path(&f.file),
                    &f.shown,
                    Group::Sampled,
                    part,
                    &mut errors,
                ));
            }
            f.points.retain(|p| !bad.contains(&p.symbol));
        }
        self.sampled = files;
        errors
    }

    fn attach_one(
        &mut self,
        ebpf: &mut Ebpf,
        program: &'static str,
        path: &Path,
        group: Group,
        points: &[&Point],
    ) -> Result<(), String> {
        let p: &mut UProbe = crate::loader::program(ebpf, program)?;
        let at = points.iter().map(|pt| UProbeAttachPoint {
            location: UProbeAttachLocation::AbsoluteOffset(pt.offset),
            cookie: Some(tracer_common::sample_cookie(
                pt.op,
                if group == Group::Sampled { self.generation } else { 0 },
            )),
        });
        let id = p.attach(at, path, UProbeScope::AllProcesses).map_err(|e| {
            let d = describe(&e);
            // Since Linux ba677dbe77af (2025, in the stable kernels too) a
            // perf-event uprobe needs CAP_SYS_ADMIN; uprobe_multi links
            // (6.6+) need only CAP_BPF and CAP_PERFMON (docs/fleet.md).
            if d.contains("EACCES") && d.contains("perf_event_open") {
                format!(
                    "{d} (per-point uprobes need CAP_SYS_ADMIN on this kernel; uprobe_multi links, Linux 6.6+, do not)"
                )
            } else {
                d
            }
        })?;
        self.held.push(Held {
            program,
            id,
            group,
            points: points.len(),
            op: (group == Group::Exact).then(|| points.first().map(|p| p.op)).flatten(),
        });
        Ok(())
    }

    /// Uprobe points attached now (every link's).
    pub fn points(&self) -> usize {
        self.held.iter().map(|h| h.points).sum()
    }

    /// The on phase the sampled links attached last belong to (the one
    /// whose traps count: `control::SAMPLE_GEN`).
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Whether any `Setup` link is attached.
    pub fn has_setup(&self) -> bool {
        self.held.iter().any(|h| h.group == Group::Setup)
    }

    /// Takes the links of `group` (all groups with `None`) out of their
    /// programs. Dropping what is returned closes them: the caller decides
    /// where that time is spent.
    pub fn take(&mut self, ebpf: &mut Ebpf, group: Option<Group>) -> (Vec<UProbeLink>, Closed) {
        self.take_where(ebpf, |h| group.is_none_or(|g| g == h.group))
    }

    /// Takes the links `which` picks out of their programs.
    fn take_where(&mut self, ebpf: &mut Ebpf, which: impl Fn(&Held) -> bool) -> (Vec<UProbeLink>, Closed) {
        let mut links = Vec::new();
        let mut closed = Closed::default();
        let (take, keep): (Vec<Held>, Vec<Held>) = std::mem::take(&mut self.held).into_iter().partition(|h| which(h));
        self.held = keep;
        for h in take {
            if let Ok(p) = crate::loader::program::<UProbe>(ebpf, h.program)
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
