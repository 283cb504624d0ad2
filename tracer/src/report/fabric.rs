//! The report's `fabric` section: what the network did while the job ran,
//! so that a slow network is told from a fallback. TCP retransmissions per
//! process and socket (the `network` probe family, counted in the kernel
//! per (owner, socket): `stats/net.rs`), each process's bytes and CPU time
//! per second beside them, and the RDMA ports' counters over the trace,
//! grouped into classes with the driver's names kept. Port counters are
//! the port's: every process on it, traced or not, moves them.
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::{
    probes::{Coverage, Family, Status},
    stats::Aggregator,
    topo::rdma,
};

/// What a trace reads for this section besides the aggregator; a
/// recording's footer keeps it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FabricInputs {
    /// RDMA ports with their counters' deltas over the trace.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PortInputs>,
    /// Why there are no port counters (no RDMA core, no device).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ports_unavailable: Option<String>,
    /// RDMA devices each traced process held open (`rdma::devices_opened`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub devices: BTreeMap<u32, BTreeSet<String>>,
    /// TCP retransmissions on sockets no traced process sent on
    /// (`counter::TCP_RETRANSMIT_UNOWNED`).
    pub unattributed_retransmits: u64,
}

/// One RDMA port as the trace saw it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PortInputs {
    pub device: String,
    pub port: u32,
    pub state: Option<String>,
    pub rate: Option<String>,
    pub link_layer: Option<String>,
    pub netdevs: Vec<String>,
    /// `counters/X` as `X`, `hw_counters/X` as `hw_counters/X`: after - before.
    pub deltas: BTreeMap<String, u64>,
}

/// The RDMA ports and their counters when a trace begins; at its end,
/// [`PortBase::inputs`] turns a second read into deltas.
#[derive(Clone, Debug)]
pub struct PortBase {
    nics: Result<Vec<rdma::Nic>, String>,
    counters: BTreeMap<String, u64>,
}

impl PortBase {
    pub fn sample() -> Self {
        let root = std::path::Path::new("/");
        Self {
            nics: rdma::nics(root),
            counters: rdma::counters_at(root),
        }
    }

    /// Whether the host has an RDMA device (then processes' devices are looked up).
    pub fn any(&self) -> bool {
        self.nics.as_ref().is_ok_and(|n| !n.is_empty())
    }

    /// The ports with their counters' deltas since the base was read, into `into`.
    pub fn deltas(&self, into: &mut FabricInputs) {
        let nics = match &self.nics {
            Ok(n) if n.is_empty() => Err("no RDMA device in /sys/class/infiniband".to_string()),
            Ok(n) => Ok(n),
            Err(e) => Err(e.clone()),
        };
        let nics = match nics {
            Ok(n) => n,
            Err(e) => {
                into.ports_unavailable = Some(e);
                return;
            }
        };
        let delta = rdma::counter_delta(&self.counters, &rdma::rdma_counters());
        into.ports = nics
            .iter()
            .flat_map(|n| {
                n.ports.iter().map(|p| {
                    let prefix = format!("{}/{}/", n.name, p.port);
                    PortInputs {
                        device: n.name.clone(),
                        port: p.port,
                        state: p.state.clone(),
                        rate: p.rate.clone(),
                        link_layer: p.link_layer.clone(),
                        netdevs: n.netdevs.clone(),
                        deltas: delta
                            .iter()
                            .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_string(), *v)))
                            .collect(),
                    }
                })
            })
            .collect();
    }
}

/// The class of a port counter: what its moving says about the fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PortClass {
    /// Data and packets through the port (`port_xmit_data` counts 4-byte words).
    BytesPackets,
    /// The link itself: it went down, retrained, or saw symbol errors.
    Link,
    /// Packets received in error or discarded, failed work requests.
    Errors,
    /// Retries: timeouts, sequence errors (NAKs), duplicates, RNR retries.
    Retransmissions,
    /// Congestion: time waiting to send, ECN marks, CNPs.
    Congestion,
    /// Every other counter of the driver.
    Other,
}

impl PortClass {
    /// The class's name in the report (`classes` keys).
    pub fn name(self) -> &'static str {
        match self {
            PortClass::BytesPackets => "bytes_packets",
            PortClass::Link => "link",
            PortClass::Errors => "errors",
            PortClass::Retransmissions => "retransmissions",
            PortClass::Congestion => "congestion",
            PortClass::Other => "other",
        }
    }

    /// The class of a counter by its file name (`counters/` or
    /// `hw_counters/`: IBA PortCounters, mlx5, rxe, irdma names).
    pub fn of(name: &str) -> Self {
        let n = name.rsplit('/').next().unwrap_or(name);
        match n {
            "port_xmit_data"
            | "port_rcv_data"
            | "port_xmit_packets"
            | "port_rcv_packets"
            | "unicast_xmit_packets"
            | "unicast_rcv_packets"
            | "multicast_xmit_packets"
            | "multicast_rcv_packets"
            | "sent_pkts"
            | "rcvd_pkts"
            | "rdma_sends"
            | "rdma_recvs"
            | "rx_write_requests"
            | "rx_read_requests"
            | "rx_atomic_requests" => PortClass::BytesPackets,
            "link_downed" | "link_error_recovery" | "symbol_error" | "local_link_integrity_errors" => PortClass::Link,
            "port_rcv_errors"
            | "port_xmit_discards"
            | "port_rcv_constraint_errors"
            | "port_xmit_constraint_errors"
            | "port_rcv_switch_relay_errors"
            | "port_rcv_remote_physical_errors"
            | "excessive_buffer_overrun_errors"
            | "VL15_dropped"
            | "out_of_buffer"
            | "rx_icrc_encapsulated"
            | "req_cqe_error"
            | "resp_cqe_error"
            | "req_cqe_flush_error"
            | "resp_cqe_flush_error"
            | "resp_local_length_error"
            | "req_remote_access_errors"
            | "req_remote_invalid_request"
            | "resp_remote_access_errors"
            | "send_err" => PortClass::Errors,
            "local_ack_timeout_err"
            | "packet_seq_err"
            | "out_of_sequence"
            | "rnr_nak_retry_err"
            | "implied_nak_seq_err"
            | "duplicate_request"
            | "out_of_seq_request"
            | "rcvd_seq_err"
            | "completer_retry_err"
            | "retry_exceeded_err"
            | "retry_rnr_exceeded_err"
            | "rcvd_rnr_err"
            | "send_rnr_err"
            | "roce_adp_retrans"
            | "roce_adp_retrans_to"
            | "roce_slow_restart"
            | "roce_slow_restart_trans" => PortClass::Retransmissions,
            "port_xmit_wait"
            | "np_ecn_marked_roce_packets"
            | "np_cnp_sent"
            | "rp_cnp_handled"
            | "rp_cnp_ignored"
            | "roce_slow_restart_cnps" => PortClass::Congestion,
            _ => PortClass::Other,
        }
    }
}

/// Retransmissions below which TCP is not blamed: tail loss probes and the
/// odd drop come with every network (and a loaded host's spurious timeouts).
pub const MIN_RETRANSMITS: u64 = 10;
/// A port's retries per packet sent from which it is blamed (1 in 10,000);
/// where the driver counts no packets, `MIN_RETRANSMITS` retries.
pub const MIN_RETRY_SHARE: f64 = 1e-4;
/// The most payload one TCP segment carries at an Ethernet MTU of 1500.
const ETHERNET_MSS: f64 = 1448.0;
/// Retransmissions per GB sent below which TCP is not blamed either: the
/// share a port is blamed at, of the segments a GB takes at MTU 1500 (69;
/// fewer, larger segments only lower the share it stands for).
pub const MIN_RETRANSMITS_PER_GB: f64 = MIN_RETRY_SHARE * 1e9 / ETHERNET_MSS;

/// `n` per GB (10^9 bytes) of `bytes`, when any was moved.
pub fn per_gb(n: u64, bytes: u64) -> Option<f64> {
    (bytes > 0).then(|| n as f64 / (bytes as f64 / 1e9))
}

/// Whether `retransmits` while sending `bytes` are more than the noise of
/// any network: the network lost packets.
pub fn tcp_lossy(retransmits: u64, bytes: u64) -> bool {
    retransmits >= MIN_RETRANSMITS && per_gb(retransmits, bytes).is_none_or(|r| r >= MIN_RETRANSMITS_PER_GB)
}

/// Whether `retries` of a port that sent `packets` (where counted) name the network.
pub fn port_lossy(retries: u64, packets: Option<u64>) -> bool {
    match packets.filter(|n| *n > 0) {
        Some(n) => retries > 0 && retries as f64 / n as f64 >= MIN_RETRY_SHARE,
        None => retries >= MIN_RETRANSMITS,
    }
}

/// Packets the port sent: the IBA counter, else the driver's.
const SENT_PACKETS: &[&str] = &["port_xmit_packets", "hw_counters/sent_pkts"];

/// One RDMA port over the trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Port {
    pub device: String,
    pub port: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_layer: Option<String>,
    pub netdevs: Vec<String>,
    /// Traced processes that held the device open: the port's counters
    /// are shared by every process on it, these among them.
    pub processes: Vec<u32>,
    /// Packets the port sent over the trace, where the driver counts them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packets_sent: Option<u64>,
    /// Sum of the retransmissions class: retries and the sight of them.
    pub retries: u64,
    /// `retries` per packet sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_share: Option<f64>,
    /// Sum of the link class (downs, retrainings, symbol errors).
    pub link_events: u64,
    /// Sum of the errors class.
    pub errors: u64,
    /// Sum of the congestion class.
    pub congestion: u64,
    /// Every counter's delta by class, with the driver's names (`hw_counters/`
    /// for the driver's own); of `other`, only those that moved.
    pub classes: BTreeMap<PortClass, BTreeMap<String, u64>>,
}

impl Port {
    fn of(p: &PortInputs, processes: Vec<u32>) -> Self {
        let mut classes: BTreeMap<PortClass, BTreeMap<String, u64>> = BTreeMap::new();
        for (name, v) in &p.deltas {
            let class = PortClass::of(name);
            if class != PortClass::Other || *v > 0 {
                classes.entry(class).or_default().insert(name.clone(), *v);
            }
        }
        let sum = |c: PortClass| classes.get(&c).map_or(0, |m| m.values().sum());
        let packets_sent = SENT_PACKETS.iter().find_map(|n| p.deltas.get(*n).copied());
        let retries = sum(PortClass::Retransmissions);
        Port {
            device: p.device.clone(),
            port: p.port,
            state: p.state.clone(),
            rate: p.rate.clone(),
            link_layer: p.link_layer.clone(),
            netdevs: p.netdevs.clone(),
            processes,
            packets_sent,
            retries,
            retry_share: packets_sent.filter(|n| *n > 0).map(|n| retries as f64 / n as f64),
            link_events: sum(PortClass::Link),
            errors: sum(PortClass::Errors),
            congestion: sum(PortClass::Congestion),
            classes,
        }
    }

    /// Whether it retried enough to name the network ([`port_lossy`]).
    pub fn lossy(&self) -> bool {
        port_lossy(self.retries, self.packets_sent)
    }

    /// `mlx5_0 port 1`.
    pub fn name(&self) -> String {
        format!("{} port {}", self.device, self.port)
    }

    /// The counters of one class that moved, as `name +N` (the evidence).
    pub fn moved(&self, class: PortClass) -> Vec<String> {
        self.classes.get(&class).map_or(Vec::new(), |m| {
            m.iter()
                .filter(|(_, v)| **v > 0)
                .map(|(k, v)| format!("{k} +{v}"))
                .collect()
        })
    }
}

/// TCP, per process and per socket.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tcp {
    /// Whether retransmissions were counted and attributed: the
    /// retransmission point and the send point that names each socket's
    /// process both attached.
    pub available: bool,
    /// The points and how they attached, or why not.
    pub how: String,
    pub processes: Vec<TcpProcess>,
    pub sockets: Vec<TcpSocket>,
    /// Retransmissions on sockets no traced process sent on while the
    /// probes were live (the rest of the machine).
    pub unattributed_retransmits: u64,
}

/// One process's TCP beside its CPU time: "CPU up, throughput the same"
/// and "throughput down, retransmissions up" side by side.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TcpProcess {
    pub pid: u32,
    pub comm: String,
    /// TCP sockets it sent on.
    pub sockets: u64,
    pub sends: u64,
    pub bytes_sent: u64,
    /// Packets the kernel retransmitted on its sockets.
    pub retransmits: u64,
    /// Over the trace's duration.
    pub bytes_sent_per_s: f64,
    pub retransmits_per_s: f64,
    /// CPU time (user + system) over the trace, per second of it (cores).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_per_s: Option<f64>,
    /// CPU seconds per GB (10^9 bytes) it sent over TCP, as staging's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_s_per_gb: Option<f64>,
}

impl TcpProcess {
    /// Whether its TCP lost enough to name the network ([`tcp_lossy`]).
    pub fn lossy(&self) -> bool {
        tcp_lossy(self.retransmits, self.bytes_sent)
    }
}

/// One TCP socket of one process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TcpSocket {
    pub pid: u32,
    /// `addr:port`, once the socket retransmitted (its first retransmission
    /// names its connection).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    pub sends: u64,
    pub bytes_sent: u64,
    pub retransmits: u64,
}

/// The section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Fabric {
    pub tcp: Tcp,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<Port>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ports_unavailable: Option<String>,
}

/// `addr:port` of one end (IPv4 from its v4-mapped form, IPv6 in brackets).
fn endpoint(addr: [u8; 16], port: u16) -> String {
    let v6 = std::net::Ipv6Addr::from(addr);
    match v6.to_ipv4_mapped() {
        Some(v4) => format!("{v4}:{port}"),
        None => format!("[{v6}]:{port}"),
    }
}

/// The points the TCP figures rest on: whether both attached, and how
/// (nothing for a recording made before they existed).
fn tcp_coverage(coverage: &[Coverage]) -> (bool, String) {
    let rows: Vec<&Coverage> = coverage.iter().filter(|c| c.family == Family::Network).collect();
    let attached = |name: &str| rows.iter().any(|c| c.point == name && c.status == Status::Attached);
    let how = rows
        .iter()
        .map(|c| format!("{} {}", c.point, c.summary()))
        .collect::<Vec<_>>()
        .join("; ");
    (attached("tcp_retransmit_skb") && attached("tcp_send"), how)
}

/// The section of an aggregator and its inputs.
pub fn build(agg: &Aggregator, inputs: &FabricInputs, coverage: &[Coverage], duration_s: f64) -> Fabric {
    let (available, how) = tcp_coverage(coverage);
    let secs = duration_s.max(1e-9);
    let mut per: BTreeMap<u32, TcpProcess> = BTreeMap::new();
    let mut sockets = Vec::new();
    for ((pid, _), s) in agg.tcp() {
        let p = per.entry(*pid).or_insert_with(|| TcpProcess {
            pid: *pid,
            ..Default::default()
        });
        p.sockets += u64::from(s.sends > 0);
        p.sends += s.sends;
        p.bytes_sent += s.bytes_sent;
        p.retransmits += s.retransmits;
        sockets.push(TcpSocket {
            pid: *pid,
            local: s.conn.map(|c| endpoint(c.saddr, c.sport)),
            remote: s.conn.map(|c| endpoint(c.daddr, c.dport)),
            sends: s.sends,
            bytes_sent: s.bytes_sent,
            retransmits: s.retransmits,
        });
    }
    for p in per.values_mut() {
        let info = agg.procs().get(&p.pid);
        p.comm = info.map(|i| i.comm.clone()).unwrap_or_default();
        p.bytes_sent_per_s = p.bytes_sent as f64 / secs;
        p.retransmits_per_s = p.retransmits as f64 / secs;
        let cpu = info.and_then(|i| i.cpu_seconds);
        p.cpu_per_s = cpu.map(|c| c / secs);
        p.cpu_s_per_gb = super::accounting::cpu_s_per_gb(cpu, p.bytes_sent);
    }
    sockets.sort_by_key(|s| std::cmp::Reverse((s.retransmits, s.bytes_sent)));
    let users = |device: &str| -> Vec<u32> {
        inputs
            .devices
            .iter()
            .filter(|(_, d)| d.contains(device))
            .map(|(pid, _)| *pid)
            .collect()
    };
    Fabric {
        tcp: Tcp {
            available,
            how,
            processes: per.into_values().collect(),
            sockets,
            unattributed_retransmits: inputs.unattributed_retransmits,
        },
        ports: inputs.ports.iter().map(|p| Port::of(p, users(&p.device))).collect(),
        ports_unavailable: inputs.ports_unavailable.clone(),
    }
}

impl Fabric {
    /// Nothing in it: a report older than the section read it so.
    pub fn is_empty(&self) -> bool {
        *self == Fabric::default()
    }

    /// A process's TCP figures.
    pub fn tcp_of(&self, pid: u32) -> Option<&TcpProcess> {
        self.tcp.processes.iter().find(|p| p.pid == pid)
    }

    /// Gives each path over TCP ([`crate::classify::path::Path::over_tcp`]) its process's TCP figures.
    pub fn onto_paths(&self, paths: &mut [crate::classify::path::Path]) {
        for p in paths.iter_mut().filter(|p| p.over_tcp()) {
            p.tcp = self.tcp_of(p.pid).map(|t| crate::classify::path::PathTcp {
                bytes_sent: t.bytes_sent,
                retransmits: t.retransmits,
                retransmits_per_s: t.retransmits_per_s,
                cpu_s_per_gb: t.cpu_s_per_gb,
                lossy: t.lossy(),
            });
        }
    }

    /// The ports a process held open.
    pub fn ports_of(&self, pid: u32) -> impl Iterator<Item = &Port> {
        self.ports.iter().filter(move |p| p.processes.contains(&pid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_fall_into_their_classes() {
        for (name, class) in [
            ("port_xmit_data", PortClass::BytesPackets),
            ("hw_counters/sent_pkts", PortClass::BytesPackets),
            ("link_downed", PortClass::Link),
            ("hw_counters/link_downed", PortClass::Link),
            ("symbol_error", PortClass::Link),
            ("port_rcv_errors", PortClass::Errors),
            ("hw_counters/local_ack_timeout_err", PortClass::Retransmissions),
            ("hw_counters/duplicate_request", PortClass::Retransmissions),
            ("hw_counters/out_of_seq_request", PortClass::Retransmissions),
            ("port_xmit_wait", PortClass::Congestion),
            ("hw_counters/np_cnp_sent", PortClass::Congestion),
            ("hw_counters/ack_deferred", PortClass::Other),
        ] {
            assert_eq!(PortClass::of(name), class, "{name}");
        }
    }

    fn rxe(deltas: &[(&str, u64)]) -> PortInputs {
        PortInputs {
            device: "rxe0".into(),
            port: 1,
            link_layer: Some("Ethernet".into()),
            netdevs: vec!["lo".into()],
            deltas: deltas.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_port_sums_its_classes_and_keeps_the_names() {
        let p = Port::of(
            &rxe(&[
                ("hw_counters/sent_pkts", 2000),
                ("hw_counters/rcvd_pkts", 2000),
                ("hw_counters/duplicate_request", 6),
                ("hw_counters/out_of_seq_request", 14),
                ("hw_counters/link_downed", 0),
                ("hw_counters/ack_deferred", 0),
                ("hw_counters/rdma_sends", 0),
            ]),
            vec![42],
        );
        assert_eq!((p.packets_sent, p.retries, p.link_events), (Some(2000), 20, 0));
        assert_eq!(p.retry_share, Some(0.01));
        assert_eq!(
            p.moved(PortClass::Retransmissions),
            ["hw_counters/duplicate_request +6", "hw_counters/out_of_seq_request +14"]
        );
        assert!(
            p.classes[&PortClass::Link].contains_key("hw_counters/link_downed"),
            "a named class keeps its counters that did not move"
        );
        assert!(
            !p.classes.contains_key(&PortClass::Other),
            "other keeps only what moved"
        );
        let clean = Port::of(&rxe(&[("hw_counters/sent_pkts", 2000)]), vec![]);
        assert_eq!((clean.retries, clean.retry_share), (0, Some(0.0)));
    }

    #[test]
    fn endpoints_read_as_addresses() {
        let mut v4 = [0u8; 16];
        v4[10] = 0xff;
        v4[11] = 0xff;
        v4[12..].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(endpoint(v4, 5555), "127.0.0.1:5555");
        let v6 = std::net::Ipv6Addr::LOCALHOST.octets();
        assert_eq!(endpoint(v6, 80), "[::1]:80");
    }
}
