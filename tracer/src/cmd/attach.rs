//! `gdrtrace attach`: trace processes that are already running, without
//! restarting or touching them. Targets go into the in-kernel set (with
//! their descendants, followed by the sched tracepoints); uprobes attach per
//! library file each target maps, filtered in BPF by that set.
mod procs;

use self::procs::{COMM_MAX, process_table};
pub use self::procs::{by_comm, cgroup_members, with_descendants};
use std::{cell::RefCell, collections::BTreeSet, fs, io::Write as _, path::Path, rc::Rc, time::Instant};

use crate::{
    cli::{AttachArgs, TargetArgs, TraceArgs},
    counters,
    error::{Error, Result},
    loader::{self, LoadOptions},
    output::{Named, OutputFile, StreamFile},
    report::Report,
    session::{Session, SessionOptions},
    trace::{Interval, IntervalRecord, Trace},
};

/// What a process had before the probes were live, reconstructed from
/// /proc: pinned memory (VmPin) and NVIDIA driver mappings (pinned host
/// buffers and device memory mapped into the process, `/dev/nvidia*`).
#[derive(Clone, Debug, Default, serde::Serialize)]
struct PreExisting {
    pid: u32,
    vm_pin_kib: Option<u64>,
    nvidia_mappings: u64,
    nvidia_mapped_bytes: u64,
    /// Whether libnccl was already mapped (a job past its set-up).
    nccl_mapped: bool,
}

impl PreExisting {
    /// From the same `/proc/PID/maps` reading the aggregator keeps (the
    /// address space that classifies copies of these buffers).
    fn read(pid: u32) -> Self {
        let mut p = PreExisting {
            pid,
            vm_pin_kib: counters::vm_pin_kib(pid),
            ..Default::default()
        };
        let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        p.nccl_mapped = maps.lines().any(|l| l.contains("libnccl"));
        if let Some(space) = crate::model::AddressSpace::parse(&maps, p.vm_pin_kib) {
            for m in space.mappings.iter().filter(|m| !m.path.is_empty()) {
                p.nvidia_mappings += 1;
                p.nvidia_mapped_bytes += m.end - m.start;
            }
        }
        p
    }
}

fn interval_line(rec: &IntervalRecord) -> String {
    let mut s = format!("[{:>7.1}s]", rec.elapsed_s);
    if !rec.hot_ops.is_empty() {
        let hot: Vec<String> = rec
            .hot_ops
            .iter()
            .map(|h| {
                format!(
                    "{} {:.0}/s p99<={}",
                    h.op,
                    h.calls_per_s,
                    crate::units::ns_short(h.p99_ns_at_most)
                )
            })
            .collect();
        s.push_str(&format!("  hot: {}", hot.join(", ")));
    }
    // The verdict column is the transport; the per-call mix of evented
    // calls (empty for aggregated collectives) stays in --jsonl.
    for p in &rec.processes {
        s.push_str(&format!(
            "\n  pid {:>7} {:<15} {:<12} {:>9.1} calls/s  staged {:>10.0} B/s  reg {:>7.1}/s  VmPin {:>8} kB{}",
            p.pid,
            p.comm,
            match (&p.why, p.verdict) {
                (Some(why), Some(v)) => format!("{v} ({why})"),
                (_, v) => v.unwrap_or("-").to_string(),
            },
            p.calls_per_s,
            p.staged_bytes_per_s,
            p.registrations_per_s,
            p.vm_pin_kib,
            if p.exited { "  (exited)" } else { "" }
        ));
    }
    s
}

/// Why `pid` cannot be a target, if it cannot.
fn refused(pid: u32) -> Option<String> {
    let name = || counters::comm(pid).map_or_else(String::new, |c| format!(" ({c})"));
    if pid == std::process::id() {
        Some(format!("pid {pid} is this gdrtrace itself: not traced"))
    } else if !Path::new(&format!("/proc/{pid}")).is_dir() {
        Some(format!("pid {pid}: no such process"))
    } else if counters::kernel_thread(pid) {
        Some(format!(
            "pid {pid}{} is a kernel thread: kernel threads make no library or registration calls of their own; attach to the process that does",
            name()
        ))
    } else if !counters::running(pid) {
        Some(format!(
            "pid {pid}{} has exited (a zombie its parent has not reaped): nothing to trace",
            name()
        ))
    } else {
        None
    }
}

/// The targets: the roots and their descendants, less what cannot be
/// traced (each with its reason in `notes`, kernel threads counted).
fn targets(roots: &[u32], notes: &mut Vec<String>) -> BTreeSet<u32> {
    // A refused root brings no descendants: `--pid 0` (no such process)
    // must not become "every child of the kernel", i.e. the whole machine.
    let roots: Vec<u32> = roots
        .iter()
        .copied()
        .filter(|pid| match refused(*pid) {
            None => true,
            Some(why) => {
                notes.push(why);
                false
            }
        })
        .collect();
    let mut kthreads = 0;
    let out = with_descendants(&roots)
        .into_iter()
        .filter(|pid| match refused(*pid) {
            None => true,
            Some(_) => {
                if counters::kernel_thread(*pid) {
                    kthreads += 1;
                }
                false
            }
        })
        .collect();
    if kthreads > 0 {
        notes.push(format!("{kthreads} kernel threads among the descendants left out"));
    }
    out
}

/// Where `--jsonl` records go: a stream whose write error moves the
/// records to a fallback file (`output::StreamFile`), reported at the end
/// with a non-zero exit.
struct Jsonl {
    file: StreamFile,
    /// Records that could not be serialized.
    lost: u64,
}

impl Jsonl {
    fn write(&mut self, rec: &IntervalRecord) {
        match serde_json::to_string(rec) {
            // A StreamFile takes every byte (or moves to its fallback).
            Ok(line) => {
                let _ = writeln!(self.file, "{line}");
            }
            Err(_) => self.lost += 1,
        }
    }

    fn finish(self) -> Option<Error> {
        let lost = self.lost;
        let flag = self.file.flag;
        let path = self.file.path.clone();
        match self.file.finish() {
            Err(e) => Some(e),
            Ok(()) if lost > 0 => Some(Error::Workload(format!(
                "{flag} {}: {lost} interval records could not be serialized",
                path.display()
            ))),
            Ok(()) => None,
        }
    }
}

/// A trace attached to running processes, its probes live: what `attach`
/// and `top` share (the targets, the session, the outputs, the stop).
pub struct Attached {
    pub trace: Trace,
    pub rt: tokio::runtime::Runtime,
    /// Completes on SIGINT, SIGTERM or `--duration`.
    pub signals: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>,
    /// The targets traced (alive when the probes went live).
    pub live: Vec<u32>,
    /// What the user is told about the targets (on stderr, and in the report).
    pub notes: Vec<String>,
    /// The files named by flags, opened before anything was loaded.
    pub files: super::run::Outputs,
    latency: std::time::Duration,
    pre_existing: Vec<PreExisting>,
    scope: Scope,
}

/// The processes the flags name (`--pid`, `--cgroup`, `--comm`), before
/// their descendants are added; a flag that names none leaves a note.
fn roots(targets_args: &TargetArgs, notes: &mut Vec<String>) -> Result<Vec<u32>> {
    let mut roots: Vec<u32> = targets_args.pid.clone();
    if let Some(cg) = &targets_args.cgroup {
        let m = cgroup_members(cg)?;
        if m.is_empty() {
            notes.push(format!("cgroup {}: no processes", cg.display()));
        }
        roots.extend(m);
    }
    if let Some(comm) = &targets_args.comm {
        let m = by_comm(comm);
        if m.is_empty() {
            let cut = if comm.len() > COMM_MAX {
                let mut end = COMM_MAX;
                while !comm.is_char_boundary(end) {
                    end -= 1;
                }
                format!(
                    " (a process's comm is at most {COMM_MAX} bytes: the kernel cuts longer names; try --comm {})",
                    &comm[..end]
                )
            } else {
                String::new()
            };
            notes.push(format!("comm {comm}: no running process has this name{cut}"));
        }
        roots.extend(m);
    }
    Ok(roots)
}

/// The session `attach` and `top` open: only the targets' calls (every
/// process's with `--all`, and the installed libraries then).
fn session_options(all: bool, t: &TraceArgs) -> Result<SessionOptions> {
    Ok(SessionOptions {
        load: LoadOptions {
            ringbuf_bytes: loader::check_ringbuf_size(t.ringbuf_bytes)?,
            targets_only: !all,
            ..LoadOptions::default()
        },
        families: None,
        installed_libraries: all,
        collectives: t.collectives.unwrap_or_default(),
    })
}

/// Adds each target to the trace, its libraries attached, after reading
/// what existed before: returns the attached targets (with their
/// libraries) and what each had before.
fn add_targets(
    trace: &mut Trace,
    targets: &BTreeSet<u32>,
    parents: &std::collections::BTreeMap<u32, u32>,
    notes: &mut Vec<String>,
) -> (Vec<(u32, usize)>, Vec<PreExisting>) {
    let mut attached = Vec::new();
    let mut pre_existing = Vec::new();
    for pid in targets {
        // Record what existed before attach: pinned memory, driver mappings
        // and libraries.
        let before = PreExisting::read(*pid);
        let vm_pin = before.vm_pin_kib;
        pre_existing.push(before);
        if trace.add_target(*pid, parents.get(pid).copied()).is_err() {
            notes.push(format!("pid {pid}: could not be added to the target set"));
            continue;
        }
        let libs = trace.session.attach_libraries_of(*pid);
        trace.agg.set_vm_pin_at_attach(*pid, vm_pin);
        attached.push((*pid, libs));
    }
    (attached, pre_existing)
}

/// What `attach` attached to, as the user is told and the report says.
enum Scope {
    /// The targets named by the flags (and their descendants) alive when
    /// the probes went live.
    Targets(Vec<u32>),
    /// Every process (`--all`): how many were running, and those that
    /// map a library of the probe table.
    All { running: usize, with_libraries: Vec<u32> },
}

/// At most this many processes are named in the line that says the probes
/// are live.
const NAMED: usize = 8;

impl Scope {
    /// `--all`: every process running now but this one, and those whose
    /// libraries the planner attached.
    fn all(trace: &Trace) -> Self {
        let me = std::process::id();
        Scope::All {
            running: process_table().iter().filter(|(p, _)| *p != me).count(),
            with_libraries: trace
                .session
                .planner
                .proc_libs
                .iter()
                .filter(|(p, ids)| !ids.is_empty() && **p != me && counters::running(**p))
                .map(|(p, _)| *p)
                .collect(),
        }
    }

    /// "2 process(es): 1079 python3, 1080 python3", or for `--all` "every
    /// process (312 running; 2 map a traced library: ...)".
    fn describe(&self) -> String {
        let named = |pids: &[u32]| {
            let mut names: Vec<String> = pids
                .iter()
                .take(NAMED)
                .map(|p| {
                    format!("{p} {}", counters::comm(*p).unwrap_or_default())
                        .trim_end()
                        .to_string()
                })
                .collect();
            if pids.len() > NAMED {
                names.push(format!("and {} more", pids.len() - NAMED));
            }
            names.join(", ")
        };
        match self {
            Scope::Targets(pids) if pids.is_empty() => "0 process(es)".into(),
            Scope::Targets(pids) => format!("{} process(es): {}", pids.len(), named(pids)),
            Scope::All {
                running,
                with_libraries,
            } if with_libraries.is_empty() => {
                format!("every process ({running} running; none maps libcuda, libibverbs, libnccl or UCX yet)")
            }
            Scope::All {
                running,
                with_libraries,
            } => format!(
                "every process ({running} running; {} map a traced library: {})",
                with_libraries.len(),
                named(with_libraries)
            ),
        }
    }
}

/// Tells the user the probes are live, and what was noted on the way.
fn announce(trace: &Trace, scope: &Scope, latency: std::time::Duration, notes: &[String]) {
    errln!(
        "gdrtrace: attached to {} in {:.1} ms (all probes live); events before that moment are not seen: state that existed then is reported as pre-existing (VmPin at attach)",
        scope.describe(),
        latency.as_secs_f64() * 1e3
    );
    for n in notes {
        errln!("gdrtrace: note: {n}");
    }
    if matches!(scope, Scope::Targets(_)) && trace.session.planner.libs.is_empty() {
        errln!(
            "gdrtrace: note: no target maps libcuda, libibverbs or libnccl (yet); kernel and syscall probes still apply"
        );
    }
}

/// Finds the targets, checks every file (`extra`: the command's own, such
/// as attach's `--jsonl`), loads and attaches, adds the targets to the
/// in-kernel set and installs the signal handlers: the probes are live when
/// this returns, and the user has been told so (with the notes) on stderr.
pub fn open(cmd: &str, targets_args: &TargetArgs, t: &TraceArgs, extra: &[Option<Named<'_>>]) -> Result<Attached> {
    let started = Instant::now();
    let mut notes = Vec::new();
    let all = targets_args.all;
    if !targets_args.any() {
        return Err(Error::Usage(format!("{cmd} needs --pid, --cgroup, --comm or --all")));
    }
    let roots = roots(targets_args, &mut notes)?;
    let targets = targets(&roots, &mut notes);
    // Parents tell the ranks of one job (a launcher's children) from
    // another job's, which the GPU link counters cannot.
    let parents: std::collections::BTreeMap<u32, u32> = process_table().into_iter().collect();
    if targets.is_empty() && !all {
        return Err(Error::Usage(format!("no process to attach to: {}", notes.join("; "))));
    }
    // Every file is checked before any BPF is loaded.
    let files = super::run::Outputs::open(t, extra)?;
    let session = Session::open(&session_options(all, t)?)?;
    let mut trace = Trace::new(session);
    trace.outputs(t.record.as_deref(), t.transfers.as_deref(), t.trace_event.is_some())?;
    trace.nccl_ras = t.nccl_ras.as_deref().map(|a| crate::identity::ras::Asker::new(a, None));
    let (attached, pre_existing) = add_targets(&mut trace, &targets, &parents, &mut notes);
    if all {
        // Copies of the libraries that running processes map outside the
        // installed paths (a torch job's own libnccl) are attached now, so
        // their collectives are counted from the start; a process shows up
        // in the report once it calls them.
        // Each is attached to while it runs: its set-up was not seen.
        for (pid, _) in process_table() {
            if pid == std::process::id() {
                continue;
            }
            trace.session.attach_libraries_of(pid);
            if trace
                .session
                .planner
                .proc_libs
                .get(&pid)
                .is_some_and(|ids| !ids.is_empty())
            {
                trace.agg.set_vm_pin_at_attach(pid, PreExisting::read(pid).vm_pin_kib);
            }
        }
    }
    let latency = started.elapsed();
    // A target that exited while the probes went live was never traced.
    let live: Vec<u32> = attached
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| counters::running(*p))
        .collect();
    for (pid, _) in attached.iter().filter(|(p, _)| !live.contains(p)) {
        notes.push(format!("pid {pid}: exited during attach, before the probes were live"));
    }
    if live.is_empty() && !all {
        return Err(Error::Workload(format!(
            "nothing traced: every target exited during attach ({})",
            notes.join("; ")
        )));
    }
    // Signal handlers go in before the user (or a script) is told the probes
    // are live: a Ctrl-C right after that must end the trace cleanly.
    let rt = super::runtime()?;
    let signals = {
        let _guard = rt.enter();
        Box::pin(super::stop_signal(t.duration)?)
    };
    let scope = if all {
        Scope::all(&trace)
    } else {
        Scope::Targets(live.clone())
    };
    announce(&trace, &scope, latency, &notes);
    trace.stop_when_targets_exit = !all;
    Ok(Attached {
        trace,
        rt,
        signals,
        live,
        notes,
        files,
        latency,
        pre_existing,
        scope,
    })
}

impl Attached {
    /// The report of the trace (after `Trace::run_until`), judged, with the
    /// attach section; files that failed on the way are in `late_errors`.
    pub fn report(&mut self, t: &TraceArgs) -> Result<Report> {
        // The window is closed in the kernel (the stop switch): the report
        // comes first, the links are closed after it (`report_close`).
        let log = super::run::nccl_log(t)
            .map_err(|e| self.trace.late_errors.push(e))
            .ok()
            .flatten();
        let mut report = self.trace.report(std::env::args().collect(), log.as_deref())?;
        report.workloads.push(serde_json::json!({
            "attach": {
                "latency_ms": self.latency.as_secs_f64() * 1e3,
                "uprobe_mode": self.trace.session.planner.uprobes.mode(),
                "all": matches!(self.scope, Scope::All { .. }),
                "targets": self.live,
                "running": match &self.scope {
                    Scope::All { running, .. } => Some(*running),
                    Scope::Targets(_) => None,
                },
                "with_libraries": match &self.scope {
                    Scope::All { with_libraries, .. } => Some(with_libraries),
                    Scope::Targets(_) => None,
                },
                "notes": self.notes,
                "missing_before_attach": "calls made before the probes were live (NCCL set-up, MRs registered earlier); pre_existing lists what /proc showed at attach, and a job past its set-up gets a steady-state verdict (socket syscalls, NVLink counters)",
                "pre_existing": self.pre_existing,
            }
        }));
        Ok(report)
    }

    /// Writes the files named by flags (`--json`, `--record`'s workloads
    /// line, `--trace-event`), printing the report on stdout when `print`
    /// says how; the errors of every file, the late ones first.
    pub fn write(&mut self, t: &TraceArgs, report: &Report, print: Option<crate::cli::Format>) -> Vec<Error> {
        let mut errors = std::mem::take(&mut self.trace.late_errors);
        let mut files = std::mem::replace(&mut self.files, super::run::Outputs::none());
        files.recording = self.trace.recording.take();
        if let Err(e) = super::run::write_outputs(t, files, report, self.trace.timeline.take(), print) {
            errors.push(e);
        }
        errors
    }
}

/// An `--interval` (`attach`, live `top`): at least the sampling tick, the
/// smallest interval records come at (said once on stderr when raised).
pub fn interval_of(every: std::time::Duration) -> std::time::Duration {
    crate::clamp::at_least(
        "--interval",
        every,
        crate::trace::TICK,
        crate::units::fmt_duration,
        "the smallest interval",
    )
}

pub fn attach(args: &AttachArgs) -> Result<i32> {
    let jsonl_flag = [Named::output("--jsonl", args.jsonl.as_deref())];
    let t = &args.trace;
    if !args.targets.any() {
        return Err(Error::Usage("attach needs --pid, --cgroup, --comm or --all".into()));
    }
    // `--jsonl` is checked with the other files, before any BPF is loaded.
    crate::output::check_writable("--jsonl", args.jsonl.as_deref())?;
    // Records come on the sampling tick: said before anything is loaded.
    let interval = args.interval.map(interval_of);
    let mut a = open("attach", &args.targets, t, &jsonl_flag)?;
    let jsonl = OutputFile::open_opt("--jsonl", args.jsonl.as_deref())?.map(|file| {
        Rc::new(RefCell::new(Jsonl {
            file: file.stream(),
            lost: 0,
        }))
    });
    // A closed standard output (`attach --interval 1s | head -1`) ends the
    // trace as SIGPIPE would have, but the files are still written.
    let stdout_gone = Rc::new(tokio::sync::Notify::new());
    if let Some(every) = interval {
        let jsonl = jsonl.clone();
        let gone = stdout_gone.clone();
        a.trace.interval = Some(Interval::new(
            every,
            Box::new(move |rec| {
                if !outln!("{}", interval_line(rec)) && crate::output::stdout_closed() {
                    gone.notify_one();
                }
                if let Some(j) = &jsonl {
                    j.borrow_mut().write(rec);
                }
            }),
        ));
    } else if jsonl.is_some() {
        a.notes.push("--jsonl without --interval: no interval records".into());
    }
    let signals = std::mem::replace(&mut a.signals, Box::pin(std::future::pending()));
    let stop = async {
        tokio::select! {
            () = signals => {}
            () = stdout_gone.notified() => {}
        }
    };
    let Attached { rt, trace, .. } = &mut a;
    rt.block_on(async { trace.run_until(stop).await })?;
    let report = a.report(t)?;
    // The interval sink (holding a clone) is gone with the trace's interval.
    a.trace.interval = None;
    let mut errors = Vec::new();
    if let Some(e) = jsonl.and_then(Rc::into_inner).and_then(|j| j.into_inner().finish()) {
        errors.push(e);
    }
    errors.extend(a.write(t, &report, Some(t.format)));
    super::report_close(&mut a.trace.session);
    super::finish(0, errors)
}
