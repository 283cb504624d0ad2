//! The text view of a job (`gdrtrace job` without `--format json`).
use super::Job;

/// The text view, shaped like nccl-tests' rank lines
/// (`#  Rank  0 Group  0 Pid  1234 on HOST device  0 ...`): a header per
/// communicator, one line per rank and one per path of it, then the ranks
/// that fell back, the ranks missing and the communicators not joined.
pub fn render(job: &Job) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if job.communicators.is_empty() {
        let _ = writeln!(out, "# no NCCL communicator joined in {} input(s)", job.inputs.len());
    }
    let opt = |v: Option<u32>| v.map_or("?".to_string(), |v| v.to_string());
    for c in &job.communicators {
        let head = match &c.comm_id {
            Some(id) => format!("Communicator commId {id}"),
            None => "Job joined by TCP connections (no commId)".into(),
        };
        let _ = writeln!(
            out,
            "# {head}  nranks {}  ranks seen {}  hosts {}  transport {}{}",
            opt(c.nranks),
            c.ranks.len(),
            c.hosts,
            if c.transports.is_empty() {
                "-".to_string()
            } else {
                c.transports.join(", ")
            },
            match c.comm_id_sources.as_slice() {
                [] => String::new(),
                s => format!(
                    "  identity: {}",
                    s.iter().map(|s| s.describe()).collect::<Vec<_>>().join("; ")
                ),
            }
        );
        for r in &c.ranks {
            let _ = writeln!(
                out,
                "#  Rank {:>2} Pid {:>7} on {:>12} device {:>3}  comm {:<16} {}{}  [{}]",
                opt(r.rank),
                r.pid,
                r.host,
                r.devices.as_deref().unwrap_or("?"),
                r.communicator,
                r.transport,
                if r.host_staged { " (host-staged)" } else { "" },
                r.source
            );
            for p in &r.paths {
                let _ = writeln!(
                    out,
                    "#    path {} {}: {}{}{}, {} moved, {} through host memory",
                    p.op,
                    p.memory,
                    p.transport,
                    if p.host_staged { " (host-staged)" } else { "" },
                    if p.via.is_empty() || p.via == "unknown" {
                        String::new()
                    } else {
                        format!(" via {}", p.via)
                    },
                    crate::units::bytes(p.bytes),
                    crate::units::bytes(p.host_bytes)
                );
            }
        }
        for r in c.ranks.iter().filter(|r| r.host_staged) {
            let _ = writeln!(
                out,
                "#  rank {} fell back to {}: {}",
                opt(r.rank),
                r.transport,
                r.cause
                    .as_deref()
                    .or(r.cause_kind.as_deref())
                    .unwrap_or("no cause recorded (see `gdrtrace explain` of its report)")
            );
        }
        for m in &c.missing {
            let at = c
                .missing_placed
                .iter()
                .find(|p| p.rank == *m)
                .map(|p| format!(" (NCCL's RAS: pid {} on {})", p.pid, p.host))
                .unwrap_or_default();
            let _ = writeln!(out, "#  rank {m} of {}: no report given{at}", opt(c.nranks));
        }
        out.push('\n');
    }
    for u in &job.unjoined {
        let what = match (u.rank, u.nranks) {
            (Some(r), Some(n)) => format!(" (rank {r} of {n})"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "# not joined: pid {} ({}) in {}: communicator {}{what}: {}",
            u.pid,
            u.comm,
            u.source,
            u.communicator,
            u.why.describe(u.init.as_deref().unwrap_or("its init"))
        );
        for t in &u.tried {
            let _ = writeln!(out, "#   {t}");
        }
    }
    out
}
