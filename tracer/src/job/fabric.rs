//! What the network did to each rank (`fabric` of its report, issue 46):
//! its TCP retransmissions, the retries of the RDMA ports it held open, and
//! whether they are more than the network's noise.
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::JobRank;
use crate::report::Report;

/// A rank's network figures (flattened into [`JobRank`]).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RankFabric {
    /// TCP retransmissions on the process's sockets (its report's
    /// `fabric.tcp`; absent where the report has no TCP row for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_retransmits: Option<u64>,
    /// Retries of the RDMA ports the process held open (`fabric.ports`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_retries: Option<u64>,
    /// Whether those are more than the network's noise (`network-lost-packets`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network_lost_packets: bool,
}

impl RankFabric {
    /// The figures of process `pid` in report `r`.
    pub fn of(r: &Report, pid: u32) -> Self {
        let tcp = r.fabric.tcp_of(pid);
        RankFabric {
            tcp_retransmits: tcp.map(|t| t.retransmits),
            port_retries: r.fabric.ports_of(pid).map(|port| port.retries).reduce(|a, b| a + b),
            network_lost_packets: tcp.is_some_and(|t| t.lossy()) || r.fabric.ports_of(pid).any(|port| port.lossy()),
        }
    }

    /// The rank line's tail: `  retransmits N` where the report counted them.
    pub fn suffix(&self) -> String {
        self.tcp_retransmits
            .map_or(String::new(), |n| format!("  retransmits {n}"))
    }
}

/// One line per rank whose network lost packets.
pub fn render_lost(out: &mut String, ranks: &[JobRank]) {
    for r in ranks.iter().filter(|r| r.fabric.network_lost_packets) {
        let mut what = Vec::new();
        if let Some(n) = r.fabric.tcp_retransmits {
            what.push(format!("{n} TCP retransmissions"));
        }
        if let Some(n) = r.fabric.port_retries {
            what.push(format!("{n} RDMA port retries"));
        }
        let _ = writeln!(
            out,
            "#  rank {}: the network lost packets ({}): see `gdrtrace explain` of its report",
            r.rank.map_or("?".to_string(), |v| v.to_string()),
            what.join(", ")
        );
    }
}
