//! One job across nodes (`gdrtrace job FILE...`, schema `gdrtrace.job/v1`,
//! docs/job.md): the reports of several nodes (or ranks) joined per NCCL
//! communicator by the identity every rank shares, the hash of the
//! `ncclUniqueId` each passed to `ncclCommInitRank*` (`comm_id`, NCCL's own
//! `commId`). Per communicator: its ranks, the host each ran on (as NCCL
//! tells hosts apart: `NCCL_HOSTID`, else host name and boot id), the
//! transport verdict of each rank's process and why it fell back, and the
//! ranks no report was given for.
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::report::Report;

pub const SCHEMA: &str = "gdrtrace.job/v1";

/// The cross-node view.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Job {
    pub schema: String,
    /// The files read, in the order given.
    pub inputs: Vec<String>,
    pub communicators: Vec<JobComm>,
    /// NCCL processes whose communicators carry no identity (the tracer
    /// attached after `ncclCommInitRank*`, or a report older than
    /// `comm_id`): they cannot be joined.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unjoined: Vec<Unjoined>,
}

/// One communicator of the job.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct JobComm {
    /// NCCL's `commId` (`0x` and 16 hex digits).
    pub comm_id: String,
    /// The rank count the ranks passed (the largest, if they disagree).
    pub nranks: u32,
    /// Distinct hosts among the ranks seen (NCCL's notion of a host).
    pub hosts: usize,
    /// One entry per rank seen, by rank.
    pub ranks: Vec<JobRank>,
    /// Ranks of `0..nranks` that no input holds.
    pub missing: Vec<u32>,
    /// Ranks whose process's traffic went through host memory
    /// (`host_staged` verdicts).
    pub fell_back: Vec<u32>,
    /// The transports of the ranks, each once, in rank order.
    pub transports: Vec<String>,
}

/// One rank of a communicator: where it ran and what its process did.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct JobRank {
    pub rank: u32,
    /// The input file it came from.
    pub source: String,
    /// The host as NCCL names it to itself: `NCCL_HOSTID` when the process
    /// set it, else the host name (with the boot id, its `host_key`).
    pub host: String,
    /// NCCL's host-hash input: `NCCL_HOSTID`, or host name + boot id;
    /// empty when the report has neither.
    pub host_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_hostid: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub boot_id: String,
    pub pid: u32,
    pub comm: String,
    /// The local `ncclComm_t`.
    pub communicator: String,
    /// The GPUs the process could see (`CUDA_VISIBLE_DEVICES`), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<String>,
    /// The verdict of the rank's process (`unknown` when none).
    pub transport: String,
    pub host_staged: bool,
    /// Why it fell back, when the verdict has a cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// Collective calls and bytes on this communicator (kernel counts).
    pub calls: u64,
    pub bytes: u64,
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

/// A process with NCCL communicators but no identity to join them by.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Unjoined {
    pub source: String,
    pub pid: u32,
    pub comm: String,
    pub communicators: Vec<String>,
}

/// Joins the reports (each with the name of its file).
pub fn join(reports: &[(String, Report)]) -> Job {
    let mut by_id: BTreeMap<String, Vec<JobRank>> = BTreeMap::new();
    let mut nranks: BTreeMap<String, u32> = BTreeMap::new();
    let mut unjoined = Vec::new();
    for (source, r) in reports {
        for p in &r.processes {
            let verdict = r.verdicts.iter().find(|v| v.pid == p.pid);
            let mut anonymous = BTreeSet::new();
            for c in &p.communicators {
                let (Some(id), Some(rank)) = (&c.comm_id, c.rank) else {
                    anonymous.insert(c.communicator.clone());
                    continue;
                };
                if let Some(n) = c.nranks {
                    let e = nranks.entry(id.clone()).or_default();
                    *e = (*e).max(n);
                }
                let hostid = crate::classify::comm::host_id(&p.env).map(String::from);
                let (hostname, boot_id) = (r.facts.hostname.clone(), r.facts.boot_id.clone());
                let host_key = match &hostid {
                    Some(h) => h.clone(),
                    None => format!("{hostname}{boot_id}"),
                };
                let host = match (&hostid, hostname.is_empty()) {
                    (Some(h), _) => h.clone(),
                    (None, false) => hostname.clone(),
                    (None, true) => format!("? ({source})"),
                };
                let (calls, bytes) = r
                    .collectives
                    .iter()
                    .filter(|k| k.pid == p.pid && k.communicator == c.communicator)
                    .fold((0, 0), |(c, b), k| (c + k.calls, b + k.bytes));
                by_id.entry(id.clone()).or_default().push(JobRank {
                    rank,
                    source: source.clone(),
                    host,
                    host_key,
                    nccl_hostid: hostid,
                    hostname,
                    boot_id,
                    pid: p.pid,
                    comm: p.comm.clone(),
                    communicator: c.communicator.clone(),
                    devices: p.env.get("CUDA_VISIBLE_DEVICES").cloned(),
                    transport: verdict.map_or("unknown".to_string(), |v| v.transport.name().to_string()),
                    host_staged: verdict.is_some_and(|v| v.host_staged),
                    cause: verdict.and_then(|v| v.cause.clone()),
                    calls,
                    bytes,
                    tcp_retransmits: r.fabric.tcp_of(p.pid).map(|t| t.retransmits),
                    port_retries: r.fabric.ports_of(p.pid).map(|port| port.retries).reduce(|a, b| a + b),
                    network_lost_packets: r.fabric.tcp_of(p.pid).is_some_and(|t| t.lossy())
                        || r.fabric.ports_of(p.pid).any(|port| port.lossy()),
                });
            }
            // Communicators only the collectives name (init not traced).
            for k in r.collectives.iter().filter(|k| k.pid == p.pid && k.comm_id.is_none()) {
                if !p
                    .communicators
                    .iter()
                    .any(|c| c.communicator == k.communicator && c.comm_id.is_some())
                {
                    anonymous.insert(k.communicator.clone());
                }
            }
            if !anonymous.is_empty() {
                unjoined.push(Unjoined {
                    source: source.clone(),
                    pid: p.pid,
                    comm: p.comm.clone(),
                    communicators: anonymous.into_iter().collect(),
                });
            }
        }
    }
    let communicators = by_id
        .into_iter()
        .map(|(comm_id, mut ranks)| {
            ranks.sort_by(|a, b| (a.rank, &a.source, a.pid).cmp(&(b.rank, &b.source, b.pid)));
            let n = nranks.get(&comm_id).copied().unwrap_or(0);
            let seen: BTreeSet<u32> = ranks.iter().map(|r| r.rank).collect();
            let hosts = ranks
                .iter()
                .map(|r| (&r.host_key, &r.host))
                .collect::<BTreeSet<_>>()
                .len();
            let mut transports: Vec<String> = Vec::new();
            for r in &ranks {
                if !transports.contains(&r.transport) {
                    transports.push(r.transport.clone());
                }
            }
            JobComm {
                nranks: n,
                hosts,
                missing: (0..n).filter(|r| !seen.contains(r)).collect(),
                fell_back: ranks
                    .iter()
                    .filter(|r| r.host_staged)
                    .map(|r| r.rank)
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect(),
                transports,
                comm_id,
                ranks,
            }
        })
        .collect();
    Job {
        schema: SCHEMA.into(),
        inputs: reports.iter().map(|(s, _)| s.clone()).collect(),
        communicators,
        unjoined,
    }
}

/// The text view, shaped like nccl-tests' rank lines
/// (`#  Rank  0 Group  0 Pid  1234 on HOST device  0 ...`): a header per
/// communicator, one line per rank, then the ranks that fell back and the
/// ranks missing.
pub fn render(job: &Job) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if job.communicators.is_empty() {
        let _ = writeln!(
            out,
            "# no NCCL communicator with an identity in {} input(s) (comm_id is recorded when the tracer saw ncclCommInitRank*)",
            job.inputs.len()
        );
    }
    for c in &job.communicators {
        let _ = writeln!(
            out,
            "# Communicator commId {}  nranks {}  ranks seen {}  hosts {}  transport {}",
            c.comm_id,
            c.nranks,
            c.ranks.len(),
            c.hosts,
            if c.transports.is_empty() {
                "-".to_string()
            } else {
                c.transports.join(", ")
            }
        );
        for r in &c.ranks {
            let retransmits = r
                .tcp_retransmits
                .map_or(String::new(), |n| format!("  retransmits {n}"));
            let _ = writeln!(
                out,
                "#  Rank {:>2} Pid {:>7} on {:>12} device {:>3}  comm {:<16} {}{}{retransmits}  [{}]",
                r.rank,
                r.pid,
                r.host,
                r.devices.as_deref().unwrap_or("?"),
                r.communicator,
                r.transport,
                if r.host_staged { " (host-staged)" } else { "" },
                r.source
            );
        }
        for r in c.ranks.iter().filter(|r| r.host_staged) {
            let _ = writeln!(
                out,
                "#  rank {} fell back to {}: {}",
                r.rank,
                r.transport,
                r.cause
                    .as_deref()
                    .unwrap_or("no cause recorded (see `gdrtrace explain` of its report)")
            );
        }
        for r in c.ranks.iter().filter(|r| r.network_lost_packets) {
            let mut what = Vec::new();
            if let Some(n) = r.tcp_retransmits {
                what.push(format!("{n} TCP retransmissions"));
            }
            if let Some(n) = r.port_retries {
                what.push(format!("{n} RDMA port retries"));
            }
            let _ = writeln!(
                out,
                "#  rank {}: the network lost packets ({}): see `gdrtrace explain` of its report",
                r.rank,
                what.join(", ")
            );
        }
        for m in &c.missing {
            let _ = writeln!(out, "#  rank {m} of {}: no report given", c.nranks);
        }
        out.push('\n');
    }
    for u in &job.unjoined {
        let _ = writeln!(
            out,
            "# not joined: pid {} ({}) in {}: communicator(s) {} without an identity (set-up not traced)",
            u.pid,
            u.comm,
            u.source,
            u.communicators.join(", ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        report::{
            Process,
            fabric::{Fabric, Tcp, TcpProcess},
            tests_support::empty_report,
        },
        stats::{Communicator, ProcInfo},
    };

    /// One rank's report: a process in communicator `0x..1` with TCP figures.
    fn rank(rank: u32, pid: u32, retransmits: u64) -> (String, Report) {
        let mut r = empty_report();
        let mut info = ProcInfo {
            comm: "rank".into(),
            ..Default::default()
        };
        info.env.insert("NCCL_HOSTID".into(), format!("node{rank}"));
        info.communicators.push(Communicator {
            communicator: format!("{:#x}", 0x5500 + rank),
            init: "ncclCommInitRank".into(),
            comm_id: Some("0x0000000000000001".into()),
            rank: Some(rank),
            nranks: Some(2),
            ..Default::default()
        });
        r.processes.push(Process {
            pid,
            info,
            churn: None,
            libraries: Vec::new(),
        });
        r.fabric = Fabric {
            tcp: Tcp {
                available: true,
                processes: vec![TcpProcess {
                    pid,
                    sockets: 1,
                    bytes_sent: 1 << 30,
                    retransmits,
                    ..Default::default()
                }],
                ..Default::default()
            },
            ..Default::default()
        };
        (format!("node{rank}.json"), r)
    }

    #[test]
    fn ranks_carry_their_retransmissions() {
        let job = join(&[rank(0, 10, 0), rank(1, 20, 300)]);
        let ranks = &job.communicators[0].ranks;
        assert_eq!(
            ranks
                .iter()
                .map(|r| (r.rank, r.tcp_retransmits, r.network_lost_packets))
                .collect::<Vec<_>>(),
            [(0, Some(0), false), (1, Some(300), true)]
        );
        let text = render(&job);
        assert!(text.contains("retransmits 300"), "{text}");
        assert!(
            text.contains("#  rank 1: the network lost packets (300 TCP retransmissions)"),
            "{text}"
        );
        assert!(!text.contains("rank 0: the network"), "{text}");
    }
}
