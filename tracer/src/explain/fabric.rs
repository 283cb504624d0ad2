//! Rules that tell the network from a fallback, over the report's
//! `fabric` section: packets the network lost (TCP retransmissions on a
//! process's sockets, retries on the RDMA port it held), a staged path
//! whose network lost nothing, and a link that went down or retrained.
use super::*;
use crate::{
    report::fabric::{Port, PortClass, TcpProcess, per_gb},
    units::bytes,
};

fn tcp_evidence(r: &Report, t: &TcpProcess) -> Vec<String> {
    let n = t.sockets;
    let mut ev = vec![format!(
        "TCP: {} retransmissions by the kernel on its {n} socket{} while it sent {} ({}; {:.1} a second)",
        t.retransmits,
        if n == 1 { "" } else { "s" },
        bytes(t.bytes_sent),
        per_gb(t.retransmits, t.bytes_sent).map_or("nothing sent".into(), |g| format!("{g:.0} per GB sent")),
        t.retransmits_per_s
    )];
    ev.extend(
        r.fabric
            .tcp
            .sockets
            .iter()
            .filter(|s| s.pid == t.pid && s.retransmits > 0)
            .take(4)
            .map(|s| {
                format!(
                    "socket {} -> {}: {} retransmitted, {} sent",
                    s.local.as_deref().unwrap_or("?"),
                    s.remote.as_deref().unwrap_or("?"),
                    s.retransmits,
                    bytes(s.bytes_sent)
                )
            }),
    );
    ev
}

fn port_evidence(p: &Port, class: PortClass, what: &str) -> String {
    let share = match (p.retry_share, class) {
        (Some(s), PortClass::Retransmissions) => {
            format!(" ({:.2}% of {} packets sent)", s * 100.0, p.packets_sent.unwrap_or(0))
        }
        _ => String::new(),
    };
    format!(
        "{}: {what}{share}: {} (the port's counters, moved by every process on it)",
        p.name(),
        p.moved(class).join(", ")
    )
}

/// The process's path as its verdict names it, where it has one.
fn path_of(r: &Report, pid: u32) -> Option<String> {
    let v = r.verdicts.iter().find(|v| v.pid == pid)?;
    let kind = if v.host_staged {
        "staged through host memory as well (the rules on the staged path say why)"
    } else {
        "not a fallback: nothing was staged through host memory"
    };
    Some(format!("transport verdict {}{}: {kind}", v.transport.name(), net_of(v)))
}

pub(super) fn network_lost_packets(r: &Report) -> Hits {
    let mut pids: Vec<u32> = r.fabric.tcp.processes.iter().map(|t| t.pid).collect();
    pids.extend(r.fabric.ports.iter().flat_map(|p| p.processes.iter().copied()));
    pids.sort_unstable();
    pids.dedup();
    let mut out = Vec::new();
    for pid in pids {
        let mut ev = Vec::new();
        if let Some(t) = r.fabric.tcp_of(pid).filter(|t| t.lossy()) {
            ev.extend(tcp_evidence(r, t));
        }
        ev.extend(
            r.fabric
                .ports_of(pid)
                .filter(|p| p.lossy())
                .map(|p| port_evidence(p, PortClass::Retransmissions, &format!("{} retries", p.retries))),
        );
        if ev.is_empty() {
            continue;
        }
        ev.extend(path_of(r, pid));
        out.push((pid, ev));
    }
    out
}

pub(super) fn staged_not_network(r: &Report) -> Hits {
    let f = &r.fabric;
    let mut out = Vec::new();
    for v in r.verdicts.iter().filter(|v| v.host_staged) {
        let tcp = f.tcp_of(v.pid).filter(|t| f.tcp.available && t.sends > 0);
        let ports: Vec<&Port> = f.ports_of(v.pid).collect();
        if tcp.is_none() && ports.is_empty() {
            continue;
        }
        if tcp.is_some_and(|t| t.retransmits > 0) || ports.iter().any(|p| p.retries > 0) {
            continue;
        }
        let mut ev = vec![format!(
            "transport verdict {}{}: staged through host memory",
            v.transport.name(),
            net_of(v)
        )];
        if let Some(s) = r.staging.processes.iter().find(|s| s.pid == v.pid) {
            ev.push(format!(
                "{} of {} moved went through host memory{}",
                bytes(s.staged_bytes),
                bytes(s.moved_bytes),
                s.cpu_s_per_gb
                    .map_or(String::new(), |c| format!(", {c:.3} CPU seconds per GB moved"))
            ));
        }
        if let Some(t) = tcp {
            ev.push(format!(
                "TCP: no packet retransmitted on its {} socket(s) while it sent {}{}",
                t.sockets,
                bytes(t.bytes_sent),
                t.cpu_s_per_gb
                    .map_or(String::new(), |c| format!(" ({c:.3} CPU seconds per GB)"))
            ));
        }
        for p in ports {
            ev.push(format!(
                "{}: no retry over the trace ({} packets sent)",
                p.name(),
                p.packets_sent.map_or("?".into(), |n| n.to_string())
            ));
        }
        out.push((v.pid, ev));
    }
    out
}

pub(super) fn link_down(r: &Report) -> Hits {
    let mut out: Hits = Vec::new();
    for p in r.fabric.ports.iter().filter(|p| p.link_events > 0) {
        let mut ev = vec![port_evidence(
            p,
            PortClass::Link,
            &format!("{} link events during the trace", p.link_events),
        )];
        if p.errors > 0 {
            ev.push(port_evidence(p, PortClass::Errors, &format!("{} errors", p.errors)));
        }
        if let Some(s) = &p.state {
            ev.push(format!("{}: state {s} at the end of the trace", p.name()));
        }
        let pids = if p.processes.is_empty() {
            vec![0]
        } else {
            p.processes.clone()
        };
        for pid in pids {
            match out.iter_mut().find(|(x, _)| *x == pid) {
                Some((_, e)) => e.extend(ev.iter().cloned()),
                None => out.push((pid, ev.clone())),
            }
        }
    }
    out
}

pub(super) const NETWORK_LOST_PACKETS: Rule = Rule {
    id: "network-lost-packets",
    looks_at: "fabric.tcp.processes[] (retransmits, bytes_sent), fabric.tcp.sockets[], fabric.ports[] the process held open (retries, retry_share, classes.retransmissions), verdicts",
    cause: "The network lost packets and the transport sent them again (TCP retransmissions on the process's sockets, retries on the RDMA port it held): that much of the bandwidth lost is the network's (drops, congestion, a bad link or cable), whatever path the data took. Look at the network (NIC and switch counters, cables, congestion control), not at GPUDirect.",
    check: network_lost_packets,
};

pub(super) const STAGED_NOT_NETWORK: Rule = Rule {
    id: "staged-not-network",
    looks_at: "verdicts (host_staged), staging.processes[] (CPU seconds per GB), fabric.tcp (available, retransmits of the process's sockets), fabric.ports[] it held (retries)",
    cause: "The path fell back to staging through host memory, and the network lost nothing while it did (no TCP retransmission, no RDMA retry): the bandwidth fell and the CPU per GB rose because of the fallback, not the network. The rules on the staged path say why it fell back.",
    check: staged_not_network,
};

pub(super) const LINK_DOWN: Rule = Rule {
    id: "fabric-link-down",
    looks_at: "fabric.ports[] (classes.link: link_downed, link_error_recovery, symbol_error; classes.errors; state)",
    cause: "An RDMA link went down or retrained during the job (link_downed, link_error_recovery, symbol errors): transfers on it stalled or were retried while it recovered. Check the cable, transceiver and switch port (ibstat, the NIC's link tool, the switch's log).",
    check: link_down,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{
        fabric::{Fabric, PortInputs, Tcp, TcpSocket},
        tests_support::empty_report,
    };

    fn tcp(pid: u32, retransmits: u64, bytes_sent: u64) -> Report {
        let mut r = empty_report();
        r.fabric = Fabric {
            tcp: Tcp {
                available: true,
                processes: vec![TcpProcess {
                    pid,
                    sockets: 1,
                    sends: 200,
                    bytes_sent,
                    retransmits,
                    ..Default::default()
                }],
                sockets: vec![TcpSocket {
                    pid,
                    local: Some("127.0.0.1:40000".into()),
                    remote: Some("127.0.0.1:5555".into()),
                    sends: 200,
                    bytes_sent,
                    retransmits,
                }],
                ..Default::default()
            },
            ..Default::default()
        };
        r
    }

    #[test]
    fn retransmissions_name_the_network_above_the_noise() {
        let hits = network_lost_packets(&tcp(7, 96, 200 << 20));
        assert_eq!(hits.len(), 1, "{hits:?}");
        assert!(hits[0].1[0].starts_with("TCP: 96 retransmissions"), "{hits:?}");
        assert!(hits[0].1[1].contains("127.0.0.1:40000 -> 127.0.0.1:5555"), "{hits:?}");
        assert!(network_lost_packets(&tcp(7, 0, 200 << 20)).is_empty(), "a clean run");
        assert!(
            network_lost_packets(&tcp(7, 3, 200 << 20)).is_empty(),
            "a few tail-loss probes"
        );
        assert!(
            network_lost_packets(&tcp(7, 12, 100 << 30)).is_empty(),
            "12 in 100 GiB is the noise of any network"
        );
    }

    fn port(deltas: &[(&str, u64)], pids: Vec<u32>) -> Report {
        let mut r = empty_report();
        let inputs = crate::report::fabric::FabricInputs {
            ports: vec![PortInputs {
                device: "rxe0".into(),
                port: 1,
                state: Some("4: ACTIVE".into()),
                deltas: deltas.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
                ..Default::default()
            }],
            devices: pids.iter().map(|p| (*p, ["rxe0".to_string()].into())).collect(),
            ..Default::default()
        };
        r.fabric = crate::report::fabric::build(&crate::stats::Aggregator::default(), &inputs, &[], 1.0);
        r
    }

    #[test]
    fn port_retries_name_the_network_and_links_their_downs() {
        let lossy = port(
            &[("hw_counters/sent_pkts", 2000), ("hw_counters/out_of_seq_request", 40)],
            vec![9],
        );
        let hits = network_lost_packets(&lossy);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].0, 9);
        assert!(
            hits[0].1[0]
                .contains("rxe0 port 1: 40 retries (2.00% of 2000 packets sent): hw_counters/out_of_seq_request +40"),
            "{hits:?}"
        );
        let clean = port(
            &[("hw_counters/sent_pkts", 2000), ("hw_counters/out_of_seq_request", 0)],
            vec![9],
        );
        assert!(network_lost_packets(&clean).is_empty());
        assert!(link_down(&clean).is_empty());
        let down = port(&[("link_downed", 1), ("symbol_error", 12)], vec![]);
        let hits = link_down(&down);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].0, 0, "no traced process held it: the host's finding");
        assert!(hits[0].1[0].contains("link_downed +1, symbol_error +12"), "{hits:?}");
    }
}
