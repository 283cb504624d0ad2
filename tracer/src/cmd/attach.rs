//! `gdrtrace attach`: trace processes that are already running, without
//! restarting or touching them. Targets go into the in-kernel set (with
//! their descendants, followed by the sched tracepoints); uprobes attach per
//! library file each target maps, filtered in BPF by that set.
use std::{
    cell::RefCell,
    collections::BTreeSet,
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    rc::Rc,
    time::Instant,
};

use crate::{
    cli::AttachArgs,
    counters,
    error::{Error, Result},
    loader::{self, LoadOptions},
    session::{Session, SessionOptions},
    trace::{Interval, IntervalRecord, Trace},
};

/// Every process: pid → parent pid.
fn process_table() -> Vec<(u32, u32)> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect()
}

/// `pids` and all their descendants.
pub fn with_descendants(pids: &[u32]) -> BTreeSet<u32> {
    let table = process_table();
    let mut set: BTreeSet<u32> = pids.iter().copied().collect();
    loop {
        let before = set.len();
        for (pid, ppid) in &table {
            if set.contains(ppid) {
                set.insert(*pid);
            }
        }
        if set.len() == before {
            return set;
        }
    }
}

/// Members of a cgroup v2 (path absolute or relative to /sys/fs/cgroup),
/// including its child cgroups.
pub fn cgroup_members(path: &Path) -> Result<Vec<u32>> {
    let dir = if path.is_absolute() {
        path.to_path_buf()
    } else {
        PathBuf::from("/sys/fs/cgroup").join(path)
    };
    if !dir.join("cgroup.procs").is_file() {
        return Err(Error::Usage(format!(
            "{} is not a cgroup v2 directory (no cgroup.procs)",
            dir.display()
        )));
    }
    let mut out = Vec::new();
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        if let Ok(text) = fs::read_to_string(d.join("cgroup.procs")) {
            out.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        }
        if let Ok(entries) = fs::read_dir(&d) {
            stack.extend(
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.join("cgroup.procs").is_file()),
            );
        }
    }
    Ok(out)
}

/// Processes whose command name is `comm`.
pub fn by_comm(comm: &str) -> Vec<u32> {
    process_table()
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| counters::comm(*p).as_deref() == Some(comm))
        .collect()
}

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
    fn read(pid: u32) -> Self {
        let mut p = PreExisting {
            pid,
            vm_pin_kib: counters::vm_pin_kib(pid),
            ..Default::default()
        };
        let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        for line in maps.lines() {
            let mut f = line.split_whitespace();
            let range = f.next().unwrap_or("");
            let path = f.nth(4).unwrap_or("");
            if path.starts_with("/dev/nvidia") {
                if let Some((a, b)) = range.split_once('-')
                    && let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16))
                {
                    p.nvidia_mappings += 1;
                    p.nvidia_mapped_bytes += b.saturating_sub(a);
                }
            } else if path.contains("libnccl") {
                p.nccl_mapped = true;
            }
        }
        p
    }
}

/// A duration in ns, short (`8us`, `1.0ms`).
fn dur(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns}ns"),
        1_000..1_000_000 => format!("{}us", ns / 1_000),
        1_000_000..1_000_000_000 => format!("{:.1}ms", ns as f64 / 1e6),
        _ => format!("{:.1}s", ns as f64 / 1e9),
    }
}

fn interval_line(rec: &IntervalRecord) -> String {
    let mut s = format!("[{:>7.1}s]", rec.elapsed_s);
    if !rec.hot_ops.is_empty() {
        let hot: Vec<String> = rec
            .hot_ops
            .iter()
            .map(|h| format!("{} {:.0}/s p99<={}", h.op, h.calls_per_s, dur(h.p99_ns_at_most)))
            .collect();
        s.push_str(&format!("  hot: {}", hot.join(", ")));
    }
    for p in &rec.processes {
        let mix: Vec<String> = p.transports.iter().map(|(t, n)| format!("{t}:{n}")).collect();
        s.push_str(&format!(
            "\n  pid {:>7} {:<15} {:<12} {:>9.1} calls/s  staged {:>10.0} B/s  reg {:>7.1}/s  VmPin {:>8} kB  transports [{}]{}",
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
            mix.join(" "),
            if p.exited { "  (exited)" } else { "" }
        ));
    }
    s
}

pub fn attach(args: &AttachArgs) -> Result<i32> {
    let started = Instant::now();
    let mut notes = Vec::new();
    let mut roots: Vec<u32> = Vec::new();
    for pid in &args.pid {
        if Path::new(&format!("/proc/{pid}")).is_dir() {
            roots.push(*pid);
        } else {
            notes.push(format!("pid {pid}: no such process (skipped)"));
        }
    }
    if let Some(cg) = &args.cgroup {
        let m = cgroup_members(cg)?;
        if m.is_empty() {
            notes.push(format!("cgroup {}: no processes", cg.display()));
        }
        roots.extend(m);
    }
    if let Some(comm) = &args.comm {
        let m = by_comm(comm);
        if m.is_empty() {
            notes.push(format!("comm {comm}: no running process has this name"));
        }
        roots.extend(m);
    }
    if args.pid.is_empty() && args.cgroup.is_none() && args.comm.is_none() && !args.all {
        return Err(Error::Usage("attach needs --pid, --cgroup, --comm or --all".into()));
    }
    let me = std::process::id();
    let targets: BTreeSet<u32> = with_descendants(&roots).into_iter().filter(|p| *p != me).collect();
    if targets.is_empty() && !args.all {
        return Err(Error::Usage(format!("no process to attach to ({})", notes.join("; "))));
    }
    let opts = SessionOptions {
        load: LoadOptions {
            ringbuf_bytes: loader::check_ringbuf_size(args.trace.ringbuf_bytes)?,
            targets_only: !args.all,
            ..LoadOptions::default()
        },
        families: None,
        installed_libraries: args.all,
    };
    let session = Session::open(&opts)?;
    let mut trace = Trace::new(session);
    trace.outputs(&args.trace)?;
    let mut attached = Vec::new();
    let mut pre_existing = Vec::new();
    for pid in &targets {
        // Record what existed before attach: pinned memory, driver mappings
        // and libraries.
        let before = PreExisting::read(*pid);
        let vm_pin = before.vm_pin_kib;
        pre_existing.push(before);
        if trace.add_target(*pid, None).is_err() {
            notes.push(format!("pid {pid}: could not be added to the target set"));
            continue;
        }
        let libs = trace.session.attach_libraries_of(*pid);
        if let Some(p) = trace.agg.procs.get_mut(pid) {
            p.vm_pin_kib_at_attach = vm_pin;
        }
        if !Path::new(&format!("/proc/{pid}")).exists() {
            notes.push(format!("pid {pid}: exited during attach"));
        }
        attached.push((*pid, libs));
    }
    let latency = started.elapsed();
    // Signal handlers go in before the user (or a script) is told the probes
    // are live: a Ctrl-C right after that must end the trace cleanly.
    let rt = super::runtime()?;
    let stop = {
        let _guard = rt.enter();
        super::stop_signal(args.trace.duration)?
    };
    eprintln!(
        "gdrtrace: attached to {} process(es) in {:.1} ms (all probes live); events before that moment are not seen: state that existed then is reported as pre-existing (VmPin at attach)",
        attached.len(),
        latency.as_secs_f64() * 1e3
    );
    for n in &notes {
        eprintln!("gdrtrace: note: {n}");
    }
    if !args.all && trace.session.planner.libs.is_empty() {
        eprintln!(
            "gdrtrace: note: no target maps libcuda, libibverbs or libnccl (yet); kernel and syscall probes still apply"
        );
    }
    trace.stop_when_targets_exit = !args.all;
    let jsonl = match &args.jsonl {
        Some(p) => Some(Rc::new(RefCell::new(
            fs::File::create(p).map_err(|e| Error::io(format!("creating {}", p.display()), e))?,
        ))),
        None => None,
    };
    if let Some(every) = args.interval {
        let jsonl = jsonl.clone();
        trace.interval = Some(Interval::new(
            every,
            Box::new(move |rec| {
                println!("{}", interval_line(rec));
                if let Some(f) = &jsonl
                    && let Ok(line) = serde_json::to_string(rec)
                {
                    let _ = writeln!(f.borrow_mut(), "{line}");
                }
            }),
        ));
    }
    rt.block_on(async { trace.run_until(stop).await })?;
    // The window is closed in the kernel (the stop switch): the report comes
    // first, the links are closed after it (timed, on stderr).
    let mut report = trace.report(std::env::args().collect())?;
    report.workloads.push(serde_json::json!({
        "attach": {
            "latency_ms": latency.as_secs_f64() * 1e3,
            "uprobe_mode": trace.session.planner.uprobes.mode(),
            "targets": attached.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            "notes": notes,
            "missing_before_attach": "calls made before the probes were live (NCCL set-up, MRs registered earlier); pre_existing lists what /proc showed at attach, and a job past its set-up gets a steady-state verdict (socket syscalls, NVLink counters)",
            "pre_existing": pre_existing,
        }
    }));
    super::run::emit(&args.trace, &report)?;
    super::report_close(&mut trace.session);
    Ok(0)
}
