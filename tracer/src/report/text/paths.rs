//! The verdict lines that open a report, and the paths section.
use super::*;
use crate::classify::{Transport, comm::Verdict, path::Path};

/// The share of a process's path bytes that went through host memory, or
/// of its moved bytes where it has no path.
fn staged_share(r: &Report, v: &Verdict) -> Option<f64> {
    let mine: Vec<&Path> = r.paths.iter().filter(|p| p.pid == v.pid).collect();
    let total: u64 = mine.iter().map(|p| p.bytes).sum();
    if total > 0 {
        let staged: u64 = mine.iter().filter(|p| p.host_staged).map(|p| p.bytes).sum();
        return Some(staged as f64 / total as f64);
    }
    let p = r.processes.iter().find(|p| p.pid == v.pid)?;
    let moved = p.moved_bytes
        + r.collectives
            .iter()
            .filter(|c| c.pid == v.pid)
            .map(|c| c.bytes)
            .sum::<u64>();
    (moved > 0).then(|| (p.staged_bytes as f64 / moved as f64).min(1.0))
}

/// One line per process that has a verdict: what a reader looks for first.
pub fn verdict_lines(r: &Report) -> String {
    let mut o = String::new();
    if r.verdicts.is_empty() {
        let _ = writeln!(
            o,
            "verdict: no GPU communication judged ({} processes traced)",
            r.processes.len()
        );
        return o;
    }
    for v in &r.verdicts {
        let what = if v.transport == Transport::Mixed {
            let parts: Vec<String> = v
                .paths
                .iter()
                .map(|s| format!("{} {} {:.0}%", s.op.name(), s.transport.name(), s.share * 100.0))
                .collect();
            format!("mixed ({})", parts.join(", "))
        } else {
            let via = r
                .paths
                .iter()
                .filter(|p| p.pid == v.pid)
                .max_by_key(|p| p.bytes)
                .filter(|p| p.via != v.transport.name())
                .map(|p| format!(" via {}", p.via))
                .or_else(|| v.net.map(|n| format!(" via {}", n.name())))
                .unwrap_or_default();
            format!("{}{via}", v.transport.name())
        };
        let staged = staged_share(r, v).map_or(String::new(), |s| format!("; host-staged {:.1}%", s * 100.0));
        let basis = match v.basis {
            crate::classify::comm::Basis::SetUp => "",
            crate::classify::comm::Basis::SteadyState => " [steady state]",
        };
        let _ = writeln!(o, "verdict: pid {} {}: {what}{staged}{basis}", v.pid, v.comm);
    }
    o
}

/// Every path with its transport, bytes, evidence and cause.
pub fn paths(o: &mut String, r: &Report) {
    if r.paths.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "Paths (process, peer, operation, memory: judged from where the bytes went)"
    );
    for p in &r.paths {
        let staged = if p.host_staged {
            format!(", {} through host memory", bytes(p.staged_bytes.max(p.host_bytes)))
        } else {
            String::new()
        };
        let basis = match p.basis {
            crate::classify::comm::Basis::SetUp => "",
            crate::classify::comm::Basis::SteadyState => " [steady state]",
        };
        let _ = writeln!(
            o,
            "  {} {}: {} via {}; {} calls, {}{staged}{basis}",
            p.label(),
            p.comm,
            p.transport.name(),
            p.via,
            p.calls,
            bytes(p.bytes)
        );
        if let Some(t) = &p.tcp {
            let _ = writeln!(
                o,
                "    TCP (the process's): {} sent, {} retransmitted ({:.1}/s){}{}",
                bytes(t.bytes_sent),
                t.retransmits,
                t.retransmits_per_s,
                t.cpu_s_per_gb.map_or(String::new(), |c| format!(", {c:.3} CPU-s/GB")),
                if t.lossy { ": the network lost packets" } else { "" }
            );
        }
        evidence_block(
            o,
            "    ",
            &p.evidence,
            p.cause.as_deref(),
            p.log.as_ref().map(|l| ("UCX log", l.ucx_says.as_str(), l.agrees)),
        );
    }
    let _ = writeln!(o);
}
