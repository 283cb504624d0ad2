//! The fabric section as text: TCP per process (bytes, retransmissions
//! and CPU per second side by side), the sockets that retransmitted, and
//! each RDMA port's counter classes over the trace.
use super::*;
use crate::report::fabric::{Fabric, PortClass};

/// Sockets listed by name (the most retransmissions first).
const SOCKETS_SHOWN: usize = 8;

/// The section, or nothing when the trace saw no TCP send and no RDMA port.
pub fn fabric(f: &Fabric) -> String {
    let mut o = String::new();
    if f.tcp.processes.is_empty() && f.ports.is_empty() {
        return o;
    }
    let _ = writeln!(o, "Fabric");
    if !f.tcp.processes.is_empty() {
        if !f.tcp.available {
            let _ = writeln!(o, "  TCP retransmissions not counted: {}", f.tcp.how);
        }
        let _ = writeln!(
            o,
            "  {:>8} {:<16} {:>7} {:>10} {:>11} {:>8} {:>9} {:>6} {:>8}",
            "PID", "COMM", "SOCKETS", "TCP-SENT", "SENT/s", "RETRANS", "RETRANS/s", "CPU/s", "CPU-s/GB"
        );
        for p in &f.tcp.processes {
            let _ = writeln!(
                o,
                "  {:>8} {:<16} {:>7} {:>10} {:>11} {:>8} {:>9.1} {:>6} {:>8}",
                p.pid,
                p.comm,
                p.sockets,
                bytes(p.bytes_sent),
                format!("{}/s", bytes(p.bytes_sent_per_s as u64)),
                p.retransmits,
                p.retransmits_per_s,
                p.cpu_per_s.map_or("-".into(), |c| format!("{c:.2}")),
                p.cpu_s_per_gb.map_or("-".into(), |c| format!("{c:.3}"))
            );
        }
        for s in f.tcp.sockets.iter().filter(|s| s.retransmits > 0).take(SOCKETS_SHOWN) {
            let _ = writeln!(
                o,
                "  pid {} socket {} -> {}: {} retransmitted, {} sent",
                s.pid,
                s.local.as_deref().unwrap_or("?"),
                s.remote.as_deref().unwrap_or("?"),
                s.retransmits,
                bytes(s.bytes_sent)
            );
        }
    }
    if f.tcp.unattributed_retransmits > 0 {
        let _ = writeln!(
            o,
            "  {} TCP retransmissions on sockets no traced process sent on (the rest of the machine)",
            f.tcp.unattributed_retransmits
        );
    }
    for p in &f.ports {
        let users = if p.processes.is_empty() {
            "no traced process held it open".to_string()
        } else {
            let pids: Vec<String> = p.processes.iter().map(u32::to_string).collect();
            format!("held open by pid {}", pids.join(", "))
        };
        let share = p
            .retry_share
            .map_or(String::new(), |s| format!(" ({:.2}% of packets sent)", s * 100.0));
        let _ = writeln!(
            o,
            "  {} ({}, {}; counters shared by every process on the port): {} packets sent, retries {}{share}, link events {}, errors {}, congestion {}",
            p.name(),
            p.link_layer.as_deref().unwrap_or("?"),
            users,
            p.packets_sent.map_or("?".into(), |n| n.to_string()),
            p.retries,
            p.link_events,
            p.errors,
            p.congestion
        );
        for class in [
            PortClass::Link,
            PortClass::Errors,
            PortClass::Retransmissions,
            PortClass::Congestion,
        ] {
            let moved = p.moved(class);
            if !moved.is_empty() {
                let _ = writeln!(o, "    {}: {}", class.name(), moved.join(", "));
            }
        }
    }
    let _ = writeln!(o);
    o
}
