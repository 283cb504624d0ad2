//! The UCX section as text.
use super::*;

/// The UCX section: per process its activity, then the endpoints' data calls.
pub fn ucx(u: &crate::classify::ucx::UcxReport) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "UCX (activity per process; its paths are under Paths)");
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
            e.via
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
