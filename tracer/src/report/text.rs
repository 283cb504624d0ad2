//! Text rendering of a report: tables and bpftrace-style histograms.
use std::fmt::Write as _;

use super::{Bucket, Report};
use crate::{
    probes::{Family, Status},
    units::{bytes, ns, size_label as human},
};

mod coverage;
mod explain;
mod fabric;
mod paths;
mod ucx;

use self::coverage::{coverage_detail, signals};
pub use self::ucx::ucx;
pub use self::{explain::explain, paths::verdict_lines};

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
        let basis = match v.basis {
            crate::classify::comm::Basis::SetUp => "",
            crate::classify::comm::Basis::SteadyState => " [steady state]",
        };
        let _ = writeln!(
            o,
            "{indent}pid {} {}: {}{staged}{basis}",
            v.pid,
            v.comm,
            v.transport.name()
        );
        for e in &v.evidence {
            let _ = writeln!(o, "{indent}  evidence: {e}");
        }
        if let Some(c) = &v.cause {
            let _ = writeln!(o, "{indent}  cause: {c}");
        }
        if let Some(l) = &v.nccl_log {
            let agree = match v.transport {
                crate::classify::Transport::Unknown | crate::classify::Transport::Ambiguous => {
                    "the tracer did not decide"
                }
                _ if l.agrees && l.unseen.is_some() => "agrees where the tracer saw it",
                _ if l.agrees => "agrees",
                _ if l.unseen.is_some() => "not seen by the tracer",
                _ => "DISAGREES",
            };
            let _ = writeln!(o, "{indent}  NCCL log: via {} ({agree})", l.nccl_says);
            if let Some(u) = &l.unseen {
                let _ = writeln!(o, "{indent}  NCCL log: {u}");
            }
        }
    }
    o
}

/// Upper bound of the `q` quantile of log2 buckets (kernel slots hold
/// durations in `[2^i, 2^(i+1))`, so the bound is the slot's top).
fn quantile_at_most(buckets: &[Bucket], q: f64) -> Option<u64> {
    let total: u64 = buckets.iter().map(|b| b.count).sum();
    if total == 0 {
        return None;
    }
    let target = ((total as f64 * q).ceil() as u64).max(1);
    let mut seen = 0;
    buckets.iter().find_map(|b| {
        seen += b.count;
        (seen >= target).then_some(b.max)
    })
}

/// A collective's communicator identity across ranks, as NCCL's own
/// `Init COMPLETE` line names it (`commId 0x... rank R nranks N`).
fn identity(c: &crate::report::Collective) -> String {
    match (&c.comm_id, c.rank, c.nranks) {
        (None, None, None) => String::new(),
        (id, rank, n) => {
            let f = |v: Option<u32>| v.map_or("?".to_string(), |v| v.to_string());
            format!(
                "  commId {} rank {} nranks {}",
                id.as_deref().unwrap_or("?"),
                f(rank),
                f(n)
            )
        }
    }
}

/// Says that a collective row is an estimate: what was counted, in what
/// share of the process's traced time.
fn sampled_note(r: &Report, c: &crate::report::Collective) -> String {
    let Some(counted) = c.counted else {
        return String::new();
    };
    let share = r
        .processes
        .iter()
        .find(|p| p.pid == c.pid)
        .map(|p| p.collectives_sampled.share())
        .unwrap_or(1.0);
    format!(
        " ({}: {} calls counted in {:.1}% of its traced time)",
        if c.lower_bound {
            "at least: estimated"
        } else {
            "estimated"
        },
        counted.calls,
        share * 100.0
    )
}

/// A CALLS cell: `>=N` for a lower bound, `~N` for an estimate.
fn calls_cell(calls: u64, estimated: bool, lower_bound: bool) -> String {
    if lower_bound {
        format!(">={calls}")
    } else if estimated {
        format!("~{calls}")
    } else {
        calls.to_string()
    }
}

/// Operations: the evented calls with their histograms' percentiles, and
/// the calls aggregated in the kernel (collectives), with the log2 slots'
/// upper bounds.
fn operations(o: &mut String, r: &Report) {
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
            calls_cell(op.calls, op.counted.is_some(), op.lower_bound),
            op.errors,
            bytes(op.bytes),
            ns(op.latency.p50),
            ns(op.latency.p90),
            ns(op.latency.p99),
            ns(op.latency.max)
        );
    }
    // Per (op, transport): the kernel counted the calls of every communicator
    // (estimated, `~`, where the duty cycle sampled them).
    let mut agg: Vec<(&str, &str, u64, u64, bool, bool)> = Vec::new();
    for c in &r.collectives {
        let est = c.counted.is_some();
        match agg.iter_mut().find(|(op, t, ..)| *op == c.op && *t == c.transport) {
            Some(x) => {
                x.2 += c.calls;
                x.3 += c.bytes;
                x.4 |= est;
                x.5 |= c.lower_bound;
            }
            None => agg.push((&c.op, c.transport, c.calls, c.bytes, est, c.lower_bound)),
        }
    }
    for (op, transport, calls, b, est, bound) in &agg {
        let buckets = r
            .kernel_histograms
            .iter()
            .find(|h| h.name == *op)
            .map_or(&[][..], |h| h.buckets.as_slice());
        let at_most = |q: f64| quantile_at_most(buckets, q).map_or("-".to_string(), |v| format!("<={}", ns(v)));
        let _ = writeln!(
            o,
            "  {:<40} {:<24} {:>8} {:>6} {:>10} {:>9} {:>9} {:>9} {:>9}",
            format!("{op} (kernel)"),
            transport,
            calls_cell(*calls, *est, *bound),
            "-",
            bytes(*b),
            at_most(0.5),
            at_most(0.9),
            at_most(0.99),
            at_most(1.0)
        );
    }
    if r.operations.is_empty() && agg.is_empty() {
        let _ = writeln!(o, "  (no traced calls)");
    } else if !agg.is_empty() {
        let _ = writeln!(
            o,
            "  (kernel): counted in the kernel per process and communicator; latency as log2-slot upper bounds"
        );
    }
    if agg.iter().any(|a| a.4) || r.operations.iter().any(|o| o.counted.is_some()) {
        let _ = writeln!(
            o,
            "  ~: counted in on phases of the duty cycle, off phases estimated from the rates around them (--collectives)"
        );
    }
    if agg.iter().any(|a| a.5) || r.operations.iter().any(|o| o.lower_bound) {
        let _ = writeln!(
            o,
            "  >=: estimated as ~, but a lower bound: the calls were mostly traps while counted (over half of the process's time), so untraced they run faster than can be told; or they began late in the on phase the estimate carries on (--collectives exact counts every call)"
        );
    }
    let _ = writeln!(o);
}

/// The kernel-aggregated collectives, per process and communicator.
fn collectives(o: &mut String, r: &Report) {
    if r.collectives.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "Collectives (aggregated in the kernel, per process and communicator)"
    );
    if let Some(d) = &r.sampling {
        let _ = writeln!(
            o,
            "  duty-cycled (--collectives): counting {:.1} s, off {:.1} s in {} off phase(s); the calls of each off phase estimated from the rates of the on phases around it",
            d.on_us as f64 / 1e6,
            d.off_us as f64 / 1e6,
            d.off_phases
        );
    }
    for c in &r.collectives {
        let _ = writeln!(
            o,
            "  pid {:>7} {:<18} comm {:<16} {:>9} calls {:>12} {}{}{}",
            c.pid,
            c.op,
            c.communicator,
            c.calls,
            bytes(c.bytes),
            c.transport,
            sampled_note(r, c),
            identity(c)
        );
    }
    let _ = writeln!(o);
}

/// Host staging per process, and the communicators that staged.
fn staging(o: &mut String, r: &Report) {
    if r.staging.processes.is_empty() {
        return;
    }
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

/// One line per traced process.
fn processes(o: &mut String, r: &Report) {
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
}

/// Pinned pages system-wide, and what was lost.
fn pins_and_loss(o: &mut String, r: &Report) {
    match &r.pin_counters.delta {
        Some(d) => {
            let _ = writeln!(
                o,
                "Pinned pages, system-wide (counter /proc/vmstat): acquired +{} released +{}",
                d.acquired, d.released
            );
        }
        None => {
            let _ = writeln!(
                o,
                "Pinned pages, system-wide: unavailable (/proc/vmstat has no nr_foll_pin_*)"
            );
        }
    }
    let l = &r.loss;
    // Only replays skip lines: a live report's line stays as it was.
    let damaged = if l.damaged_lines > 0 {
        format!(", damaged recording lines {}", l.damaged_lines)
    } else {
        String::new()
    };
    let _ = writeln!(
        o,
        "Loss: ring buffer drops {}, in-flight table full {}, returns without entry {}, target set full {}, read errors {}, malformed {}, undecoded {}{damaged} ({})\n",
        l.ringbuf_drops,
        l.inflight_full,
        l.return_without_entry,
        l.targets_full,
        l.read_errors,
        l.malformed_records,
        l.undecoded_events,
        if l.complete { "complete" } else { "INCOMPLETE" }
    );
}

/// The latency histograms: per operation, then the kernel's own.
fn histograms(o: &mut String, r: &Report) {
    for op in &r.operations {
        let mark = if op.incomplete {
            " [incomplete: events were dropped]"
        } else {
            ""
        };
        histogram(
            o,
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
            o,
            &format!("@{} latency (ns), aggregated in kernel:", h.name),
            &h.buckets,
        );
    }
}

/// The report as text, with the detail a person reads first on one screen
/// (signals, operations, verdicts, staging, explain) and the histograms
/// after it. `detail` adds the per-point coverage table (`-v`).
pub fn render_with(r: &Report, detail: bool) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "gdrtrace report ({}) kernel {} lockdown {}",
        r.schema, r.host.kernel, r.host.lockdown
    );
    o.push_str(&verdict_lines(r));
    if !r.command.is_empty() {
        let _ = writeln!(o, "command: {}", r.command.join(" "));
    }
    let _ = writeln!(o, "duration: {:.3} s\n", r.duration_s);

    signals(&mut o, r);
    operations(&mut o, r);

    if !r.verdicts.is_empty() {
        let _ = writeln!(o, "Transport verdicts (per process)");
        o.push_str(&verdicts(&r.verdicts, "  "));
        let _ = writeln!(o);
    }
    paths::paths(&mut o, r);
    collectives(&mut o, r);
    if let Some(u) = &r.ucx {
        o.push_str(&ucx(u));
    }
    staging(&mut o, r);
    registrations(&mut o, r);
    processes(&mut o, r);
    o.push_str(&fabric::fabric(&r.fabric));
    pins_and_loss(&mut o, r);
    o.push_str(&explain(r));
    let _ = writeln!(o);
    if detail {
        coverage_detail(&mut o, r);
    }

    histograms(&mut o, r);
    o
}

/// The report as text; the per-point coverage table with `-v` (log level
/// info or more, which `-v` sets).
pub fn render(r: &Report) -> String {
    render_with(r, log::log_enabled!(log::Level::Info))
}

fn registrations(o: &mut String, r: &Report) {
    let registering: Vec<_> = r
        .registration
        .processes
        .iter()
        .filter(|p| !p.by_backing.is_empty() || !p.failed_registrations.is_empty() || !p.kernel_failures.is_empty())
        .collect();
    if registering.is_empty() {
        return;
    }
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
                crate::model::Backing::HostPreExisting => "host memory mapped before tracing",
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

#[cfg(test)]
mod tests;
