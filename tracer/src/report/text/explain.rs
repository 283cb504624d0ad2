//! The explain section as text: staged paths, root causes, the variables
//! in effect, NCCL's log per communicator, UCX's paths and the host-staged
//! share (`explain`, and the end of the report's text).
use super::*;

/// The text form of `r.explain` with the report sections it refers to.
pub fn explain(r: &Report) -> String {
    let e = &r.explain;
    let mut o = String::new();
    let _ = writeln!(o, "Explain");
    if e.paths.is_empty() {
        let _ = writeln!(o, "  no staged or unexpected path in this trace");
    }
    for p in &e.paths {
        let by = if p.explained_by.is_empty() {
            "no rule recognised a cause".to_string()
        } else {
            format!("cause: {}", p.explained_by.join(", "))
        };
        let who = if p.pid == 0 {
            "all processes".to_string()
        } else {
            format!("pid {} {}", p.pid, p.comm)
        };
        let _ = writeln!(o, "  {who}: {} ({by})", p.what);
    }
    if !e.findings.is_empty() {
        let _ = writeln!(o, "\nRoot causes");
    }
    for f in &e.findings {
        let who = match (f.pid, &f.comm) {
            (Some(pid), Some(c)) => format!("pid {pid} {c}"),
            (Some(pid), None) => format!("pid {pid}"),
            _ => "host".into(),
        };
        let _ = writeln!(o, "  [{}] {who}", f.rule);
        let _ = writeln!(o, "    {}", f.cause);
        for ev in &f.evidence {
            let _ = writeln!(o, "    evidence: {ev}");
        }
    }
    if !r.overrides.is_empty() {
        let _ = writeln!(o, "\nNCCL/UCX variables in effect");
        for x in &r.overrides {
            let _ = writeln!(o, "  pid {} {}={}", x.pid, x.var, x.value);
        }
    }
    nccl_log(&mut o, r);
    ucx_paths(&mut o, r);
    let staged: u64 = r.staging.processes.iter().map(|p| p.staged_bytes).sum();
    let moved: u64 = r.staging.processes.iter().map(|p| p.moved_bytes).sum();
    if moved > 0 {
        let _ = writeln!(
            o,
            "\nhost-staged bytes: {staged} of {moved} moved ({:.1}%)",
            staged as f64 * 100.0 / moved as f64
        );
    }
    o
}

/// NCCL's log per communicator against the tracer's verdict.
fn nccl_log(o: &mut String, r: &Report) {
    let comms = r.nccl_log.as_ref().map_or(&[][..], |l| &l.communicators);
    if comms.is_empty() {
        return;
    }
    let _ = writeln!(o, "\nNCCL log, per communicator");
    for c in comms {
        let mut agree = match c.agrees {
            Some(true) => "agrees",
            Some(false) => "DISAGREES",
            None => "not compared",
        }
        .to_string();
        if !c.unseen.is_empty() {
            agree += &format!("; not seen by the tracer: {}", c.unseen.join(", "));
        }
        let gdr = match c.gdr {
            Some(true) => " GDR 1",
            Some(false) => " GDR 0",
            None => "",
        };
        let _ = writeln!(
            o,
            "  pid {} comm {} rank {}: via {}{gdr}; tracer {} ({agree})",
            c.pid,
            c.communicator,
            c.rank.map_or("?".into(), |v| v.to_string()),
            if c.vias.is_empty() {
                "-".into()
            } else {
                c.vias.join(", ")
            },
            c.tracer_says.unwrap_or("-")
        );
    }
}

/// The UCX paths and what UCX's log said of them.
fn ucx_paths(o: &mut String, r: &Report) {
    use crate::classify::path::PeerKind;
    let ucx: Vec<_> = r
        .paths
        .iter()
        .filter(|p| matches!(p.peer_kind, PeerKind::UcxEndpoint | PeerKind::Remote))
        .collect();
    if ucx.is_empty() {
        return;
    }
    let _ = writeln!(o, "\nUCX paths");
    for p in ucx {
        let log = match &p.log {
            Some(l) => format!(
                "; UCX log: {} ({})",
                l.ucx_says,
                if l.agrees { "agrees" } else { "DISAGREES" }
            ),
            None => String::new(),
        };
        let _ = writeln!(
            o,
            "  {} {}: {} via {}{log}",
            p.label(),
            p.comm,
            p.transport.name(),
            p.via
        );
    }
}
