//! Text rendering of a report: tables and bpftrace-style histograms.
use std::fmt::Write as _;

use super::{Bucket, Report};
use crate::probes::Status;

/// bpftrace's power-of-two labels: 512, 1K, 2M, 4G.
pub fn human(v: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(1 << 40, "T"), (1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (size, unit) in UNITS {
        if v >= size && v.is_multiple_of(size) {
            return format!("{}{unit}", v / size);
        }
    }
    v.to_string()
}

/// Renders buckets as bpftrace prints `hist()`: `[lo, hi)  count |@@@@|`.
pub fn histogram(out: &mut String, title: &str, buckets: &[Bucket]) {
    const WIDTH: u64 = 52;
    let _ = writeln!(out, "{title}");
    let max = buckets.iter().map(|b| b.count).max().unwrap_or(0).max(1);
    for b in buckets {
        let hi = if b.max == u64::MAX {
            "...".to_string()
        } else {
            human(b.max)
        };
        let label = format!("[{}, {})", human(b.min), hi);
        let bar = "@".repeat(((b.count * WIDTH) / max) as usize);
        let _ = writeln!(out, "{label:<16}{:>8} |{bar:<52}|", b.count);
    }
    let _ = writeln!(out);
}

fn ns(v: u64) -> String {
    match v {
        0..1_000 => format!("{v}ns"),
        1_000..1_000_000 => format!("{:.1}us", v as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1}ms", v as f64 / 1e6),
        _ => format!("{:.2}s", v as f64 / 1e9),
    }
}

fn bytes(v: u64) -> String {
    match v {
        0 => "-".into(),
        1..1024 => format!("{v}B"),
        1024..1_048_576 => format!("{:.1}KiB", v as f64 / 1024.0),
        1_048_576..1_073_741_824 => format!("{:.1}MiB", v as f64 / 1_048_576.0),
        _ => format!("{:.2}GiB", v as f64 / 1_073_741_824.0),
    }
}

/// A verdict's evidence lines, its cause, and what the library's own log
/// said of it: (log name, what it says, whether it agrees).
fn evidence_block(
    o: &mut String,
    indent: &str,
    evidence: &[String],
    cause: Option<&str>,
    log: Option<(&str, &str, bool)>,
) {
    for e in evidence {
        let _ = writeln!(o, "{indent}evidence: {e}");
    }
    if let Some(c) = cause {
        let _ = writeln!(o, "{indent}cause: {c}");
    }
    if let Some((name, says, agrees)) = log {
        let agree = if agrees { "agrees" } else { "DISAGREES" };
        let _ = writeln!(o, "{indent}{name}: {says} ({agree})");
    }
}

/// Verdicts with their evidence, cause and NCCL-log agreement (shared by
/// the report and `explain`).
pub fn verdicts(vs: &[crate::classify::comm::Verdict], indent: &str) -> String {
    let mut o = String::new();
    for v in vs {
        let staged = if v.host_staged { " (host-staged)" } else { "" };
        let _ = writeln!(o, "{indent}pid {} {}: {}{staged}", v.pid, v.comm, v.transport.name());
        let via = v.nccl_log.as_ref().map(|l| (format!("via {}", l.nccl_says), l.agrees));
        evidence_block(
            &mut o,
            &format!("{indent}  "),
            &v.evidence,
            v.cause.as_deref(),
            via.as_ref().map(|(says, agrees)| ("NCCL log", says.as_str(), *agrees)),
        );
    }
    o
}

/// The UCX section: per process its activity and the path of each memory
/// type, then the endpoints' data calls.
pub fn ucx(u: &crate::classify::ucx::UcxReport) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "UCX (paths per process and memory type)");
    for p in &u.processes {
        let per_call = p
            .registrations_per_data_call
            .map_or(String::new(), |x| format!(", {x:.2} per data call"));
        let _ = writeln!(
            o,
            "  pid {} {}: {} workers, {} endpoints, {} data calls {}, {} receives posted; UCT registrations {}/{} {}{per_call}; rcache {} lookups, {} misses ({} repeated){}",
            p.pid,
            p.comm,
            p.workers,
            p.endpoints,
            p.data_calls,
            bytes(p.data_bytes),
            p.receives,
            p.registrations,
            p.deregistrations,
            bytes(p.registered_bytes),
            p.rcache.gets,
            p.rcache.misses,
            p.rcache.repeat_misses,
            if p.rcache.partial {
                " (lookups probed until their link closed over budget)"
            } else {
                ""
            }
        );
        if !p.modules.is_empty() {
            let _ = writeln!(o, "    transport modules: {}", p.modules.join(", "));
        }
        for path in &p.paths {
            let staged = if path.host_staged {
                format!(", {} staged through host memory", bytes(path.staged_bytes))
            } else {
                String::new()
            };
            let _ = writeln!(
                o,
                "    {} memory: {} via {}{staged}{}",
                path.memory,
                path.transport.name(),
                path.path,
                if path.inferred {
                    " (inferred from the steady state)"
                } else {
                    ""
                }
            );
            evidence_block(
                &mut o,
                "      ",
                &path.evidence,
                path.cause.as_deref(),
                path.log.as_ref().map(|l| ("UCX log", l.ucx_says.as_str(), l.agrees)),
            );
        }
    }
    for e in &u.endpoints {
        let _ = writeln!(
            o,
            "  pid {:>7} {:<20} ep {:<16} {:>9} calls {:>10} {:<7} {} ({})",
            e.pid,
            e.op,
            e.endpoint,
            e.calls,
            bytes(e.bytes),
            e.memory,
            e.transport.name(),
            e.path
        );
    }
    for n in &u.not_measured {
        let _ = writeln!(o, "  not measured: {n}");
    }
    if let Some(log) = &u.log {
        for p in &log.processes {
            let says: Vec<String> = p.says.iter().map(|(m, c)| format!("{m}: {}", c.join("/"))).collect();
            let _ = writeln!(
                o,
                "  UCX log pid {}: version {}; says {}{}",
                p.pid,
                p.version.as_deref().unwrap_or("?"),
                if says.is_empty() {
                    "nothing about transports".into()
                } else {
                    says.join(", ")
                },
                if p.warnings.is_empty() {
                    String::new()
                } else {
                    format!("; {} warnings, first: {}", p.warnings.len(), p.warnings[0])
                }
            );
        }
    }
    let _ = writeln!(o);
    o
}

pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "gdrtrace report ({}) kernel {} lockdown {}",
        r.schema, r.host.kernel, r.host.lockdown
    );
    if !r.command.is_empty() {
        let _ = writeln!(o, "command: {}", r.command.join(" "));
    }
    let _ = writeln!(o, "duration: {:.3} s\n", r.duration_s);

    let _ = writeln!(o, "Signals");
    for s in &r.signals {
        let state = if s.available { "measured" } else { "unavailable" };
        let _ = writeln!(o, "  {:<46} {:<8} {:<12} {}", s.signal, s.source, state, s.how);
    }
    let _ = writeln!(o);

    let _ = writeln!(o, "Operations");
    let _ = writeln!(
        o,
        "  {:<40} {:<24} {:>8} {:>6} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "OPERATION", "TRANSPORT", "CALLS", "ERRORS", "BYTES", "p50", "p90", "p99", "max"
    );
    for op in &r.operations {
        let _ = writeln!(
            o,
            "  {:<40} {:<24} {:>8} {:>6} {:>10} {:>9} {:>9} {:>9} {:>9}",
            op.name,
            op.transport,
            op.calls,
            op.errors,
            bytes(op.bytes),
            ns(op.latency.p50),
            ns(op.latency.p90),
            ns(op.latency.p99),
            ns(op.latency.max)
        );
    }
    if r.operations.is_empty() {
        let _ = writeln!(o, "  (no traced calls)");
    }
    let _ = writeln!(o);
    for op in &r.operations {
        let mark = if op.incomplete {
            " [incomplete: events were dropped]"
        } else {
            ""
        };
        histogram(
            &mut o,
            &format!("@{}[{}] latency (ns){mark}:", op.name, op.transport),
            &op.latency.buckets,
        );
    }
    for h in r
        .kernel_histograms
        .iter()
        .filter(|h| !r.operations.iter().any(|o| o.name.starts_with(&h.name)))
    {
        histogram(
            &mut o,
            &format!("@{} latency (ns), aggregated in kernel:", h.name),
            &h.buckets,
        );
    }

    if !r.verdicts.is_empty() {
        let _ = writeln!(o, "Transport verdicts (per process)");
        o.push_str(&verdicts(&r.verdicts, "  "));
        let _ = writeln!(o);
    }
    if !r.collectives.is_empty() {
        let _ = writeln!(
            o,
            "Collectives (aggregated in the kernel, per process and communicator)"
        );
        for c in &r.collectives {
            let _ = writeln!(
                o,
                "  pid {:>7} {:<18} comm {:<16} {:>9} calls {:>12} {}",
                c.pid,
                c.op,
                c.communicator,
                c.calls,
                bytes(c.bytes),
                c.transport
            );
        }
        let _ = writeln!(o);
    }
    if let Some(u) = &r.ucx {
        o.push_str(&ucx(u));
    }
    if !r.staging.processes.is_empty() {
        let _ = writeln!(o, "Host staging");
        let _ = writeln!(
            o,
            "  {:>8} {:<16} {:>10} {:>10} {:>7} {:>9} {:>10} {:>9}",
            "PID", "COMM", "MOVED", "STAGED", "RATIO", "COPIES", "COPIES/s", "CPU-s/GB"
        );
        for p in &r.staging.processes {
            let _ = writeln!(
                o,
                "  {:>8} {:<16} {:>10} {:>10} {:>6.1}% {:>9} {:>10.1} {:>9}",
                p.pid,
                p.comm,
                bytes(p.moved_bytes),
                bytes(p.staged_bytes),
                p.staged_ratio * 100.0,
                p.staging_copies,
                p.staging_copies_per_s,
                p.cpu_s_per_gb.map_or("-".into(), |c| format!("{c:.3}"))
            );
        }
        for c in r.staging.communicators.iter().filter(|c| c.staged_bytes > 0) {
            let _ = writeln!(
                o,
                "  pid {} communicator {}: {} of {} staged ({})",
                c.pid,
                c.communicator,
                bytes(c.staged_bytes),
                bytes(c.bytes),
                c.transport
            );
        }
        let _ = writeln!(o);
    }
    let registering: Vec<_> = r
        .registration
        .processes
        .iter()
        .filter(|p| !p.by_backing.is_empty() || !p.failed_registrations.is_empty() || !p.kernel_failures.is_empty())
        .collect();
    if !registering.is_empty() {
        let _ = writeln!(o, "Registrations");
        for p in registering {
            let per: Vec<String> = p
                .by_backing
                .iter()
                .map(|(k, b)| {
                    format!(
                        "{k} {}/{} ({:.1}/s)",
                        b.registrations, b.deregistrations, b.registrations_per_s
                    )
                })
                .collect();
            let _ = writeln!(
                o,
                "  pid {} {}: reg/dereg {}; re-registered ranges {}; pinned high-water {}{}",
                p.pid,
                p.comm,
                if per.is_empty() { "-".into() } else { per.join(", ") },
                p.reregistrations_of_seen_range,
                bytes(p.pinned_bytes_high_water),
                p.lifetime
                    .as_ref()
                    .map_or(String::new(), |l| format!("; lifetime p50 {}", ns(l.p50)))
            );
            for f in &p.failed_registrations {
                let backing = match f.backing {
                    crate::model::Backing::Gpu { .. } => "GPU memory",
                    crate::model::Backing::HostPinned => "pinned host memory",
                    crate::model::Backing::Host => "host memory",
                    crate::model::Backing::Unknown => "memory not seen allocated",
                };
                let _ = writeln!(
                    o,
                    "    failed: {} {:#x}+{} ({backing}{})",
                    f.op,
                    f.addr,
                    f.length,
                    f.source.map_or(String::new(), |s| format!(", {s}"))
                );
            }
            for (k, n) in &p.kernel_failures {
                let _ = writeln!(o, "    kernel: {k} x{n}");
            }
        }
        for (k, l) in &r.registration.latency_by_backing {
            let _ = writeln!(
                o,
                "  latency {k}: p50 {} p99 {} ({} calls)",
                ns(l.p50),
                ns(l.p99),
                l.count
            );
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(o, "Processes");
    let _ = writeln!(
        o,
        "  {:>8} {:<16} {:>8} {:>8} {:>12} {:>12} {:>10} {:>8} {:>12} {:>12}",
        "PID", "COMM", "PARENT", "CALLS", "PAGES-PIN", "PAGES-UNPIN", "VmPin-max", "CPU-s", "SOCK-SENT", "SOCK-RECV"
    );
    for p in &r.processes {
        let calls: u64 = p.calls.values().sum();
        let _ = writeln!(
            o,
            "  {:>8} {:<16} {:>8} {:>8} {:>12} {:>12} {:>8}kB {:>8} {:>12} {:>12}",
            p.pid,
            p.comm,
            p.parent.map_or("-".into(), |v| v.to_string()),
            calls,
            p.pages_pinned,
            p.pages_unpinned,
            p.vm_pin_kib_max,
            p.cpu_seconds.map_or("-".into(), |c| format!("{c:.2}")),
            p.socket.bytes_sent,
            p.socket.bytes_received
        );
    }
    let _ = writeln!(o);

    match &r.pin_counters.delta {
        Some(d) => {
            let _ = writeln!(
                o,
                "Pinned pages, system-wide (counter /proc/vmstat): acquired +{} released +{}\n",
                d.acquired, d.released
            );
        }
        None => {
            let _ = writeln!(
                o,
                "Pinned pages, system-wide: unavailable (/proc/vmstat has no nr_foll_pin_*)\n"
            );
        }
    }

    let _ = writeln!(o, "Probe coverage");
    for c in &r.coverage {
        let _ = writeln!(o, "  {:<36} {:<10} {}", c.point, c.family.name(), c.summary());
        if c.status == Status::Attached {
            for d in &c.detail {
                let _ = writeln!(o, "  {:<36} {:<10}   {d}", "", "");
            }
        }
    }
    let _ = writeln!(o);
    let l = &r.loss;
    let _ = writeln!(
        o,
        "Loss: ring buffer drops {}, in-flight table full {}, returns without entry {}, target set full {}, read errors {}, malformed {}, undecoded {} ({})",
        l.ringbuf_drops,
        l.inflight_full,
        l.return_without_entry,
        l.targets_full,
        l.read_errors,
        l.malformed_records,
        l.undecoded_events,
        if l.complete { "complete" } else { "INCOMPLETE" }
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_like_bpftrace() {
        assert_eq!(human(512), "512");
        assert_eq!(human(1024), "1K");
        assert_eq!(human(2 << 20), "2M");
        let mut s = String::new();
        histogram(
            &mut s,
            "@x (ns):",
            &[
                Bucket {
                    min: 1024,
                    max: 2048,
                    count: 4,
                },
                Bucket {
                    min: 2048,
                    max: 4096,
                    count: 2,
                },
            ],
        );
        assert!(s.contains("[1K, 2K)"), "{s}");
        assert!(s.contains(&format!("|{}|", "@".repeat(52))), "{s}");
        assert!(s.contains(&format!("|{}{}|", "@".repeat(26), " ".repeat(26))), "{s}");
    }
}
