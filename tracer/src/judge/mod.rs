//! The one judging function: every process's communication verdict from
//! what the report holds (per process: calls, environment, parent, socket
//! totals; the kernel-aggregated collectives; the GPU link counters of the
//! window; the host facts). A live trace, an `--interval` line, a replay and
//! `explain` of a saved report all call it on the same inputs, so they
//! reach the same verdicts.
//!
//! A process whose communicator set-up the probes saw is judged from it
//! (`comm::verdict`); any other process that ran collectives is judged from
//! its steady state (`steady::verdict`), against the other processes of the
//! same window (the GPU link counters are shared by everything on the GPUs).
use std::collections::BTreeMap;

use serde::Deserialize;

mod files;
pub mod paths;
mod peers;

use crate::classify::{
    Transport,
    comm::{self, Evidence, Verdict},
    steady::{self, GpuLinks, Steady},
};
use crate::{host::HostFacts, stats::SocketTotals};

/// What a verdict is judged from. Deserializes from a report's JSON (the
/// field names are the report's), so a saved report is judged again by the
/// same code; unknown fields are ignored.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Inputs {
    #[serde(default)]
    pub processes: Vec<ProcessIn>,
    #[serde(default)]
    pub collectives: Vec<CollectiveIn>,
    #[serde(default)]
    pub gpu_links: Option<GpuLinks>,
    /// None when the report has no host facts (trimmed reports).
    #[serde(default)]
    pub facts: Option<HostFacts>,
    /// UCX processes' evidence (the report's `ucx` section).
    #[serde(default)]
    pub ucx: Option<crate::classify::ucx::UcxReport>,
    /// Where each process's bytes went while which of its paths ran.
    #[serde(default)]
    pub windows: Vec<crate::stats::windows::Window>,
    /// cuFile processes' evidence (the report's `gds` section).
    #[serde(default)]
    pub gds: Option<crate::classify::gds::GdsReport>,
    /// Each rank's connections per peer, from NCCL's log when one is given.
    #[serde(skip)]
    pub nccl_peers: comm::LogPeers,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ProcessIn {
    pub pid: u32,
    #[serde(default)]
    pub comm: String,
    #[serde(default)]
    pub parent: Option<u32>,
    #[serde(default)]
    pub calls: BTreeMap<String, u64>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub socket: SocketTotals,
    #[serde(default)]
    pub nccl_ranks: Vec<u32>,
    /// Registrations by backing (MRs on GPU or host memory), for UCX paths.
    #[serde(default)]
    pub churn: Option<ChurnIn>,
    /// Its traced and sampled time where the duty cycle sampled its
    /// collectives (their counts are then estimates).
    #[serde(default)]
    pub collectives_sampled: crate::stats::SampledTime,
}

/// A process's registrations by backing (`host`, `gpu/peer-mem`, `gpu/dma-buf`).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ChurnIn {
    #[serde(default)]
    pub by_backing: BTreeMap<String, RegistrationsIn>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct RegistrationsIn {
    #[serde(default)]
    pub registrations: u64,
}

pub(crate) fn churn_of(c: &crate::model::Churn) -> ChurnIn {
    ChurnIn {
        by_backing: c
            .by_backing
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    RegistrationsIn {
                        registrations: v.registrations,
                    },
                )
            })
            .collect(),
    }
}

/// One (process, op, communicator) row of kernel-aggregated calls.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CollectiveIn {
    pub pid: u32,
    pub op: String,
    #[serde(default)]
    pub communicator: String,
    #[serde(default)]
    pub calls: u64,
    #[serde(default)]
    pub bytes: u64,
}

impl ProcessIn {
    /// What a process's figures give the judge (live or from a report).
    pub fn of(pid: u32, p: &crate::stats::ProcInfo, churn: Option<&crate::model::Churn>) -> Self {
        ProcessIn {
            pid,
            comm: p.comm.clone(),
            parent: p.parent,
            calls: p.calls.clone(),
            env: p.env.clone(),
            socket: p.socket.clone(),
            nccl_ranks: p.nccl_ranks.clone(),
            churn: churn.map(churn_of),
            collectives_sampled: p.collectives_sampled,
        }
    }
}

impl Inputs {
    /// The inputs so far, from the live aggregator (`--interval`).
    pub fn of_aggregator(agg: &crate::stats::Aggregator, links: Option<GpuLinks>, facts: Option<HostFacts>) -> Self {
        Inputs {
            processes: agg
                .procs()
                .iter()
                .map(|(pid, p)| ProcessIn::of(*pid, p, agg.registry().procs.get(pid).map(|r| &r.churn)))
                .collect(),
            collectives: agg
                .collectives()
                .iter()
                .map(|((pid, op, handle), (calls, bytes))| CollectiveIn {
                    pid: *pid,
                    op: op.clone(),
                    communicator: format!("{handle:#x}"),
                    calls: *calls,
                    bytes: *bytes,
                })
                .collect(),
            gpu_links: links,
            facts,
            ucx: crate::stats::ucx::report(agg, &BTreeMap::new()),
            windows: agg.windows(),
            gds: crate::stats::gds::report(agg),
            nccl_peers: Default::default(),
        }
    }

    /// The collective calls and bytes of one process.
    pub fn collectives_of(&self, pid: u32) -> (u64, u64) {
        steady::collectives(
            self.collectives
                .iter()
                .map(|c| (c.pid, c.op.as_str(), c.calls, c.bytes)),
            pid,
        )
    }

    fn steady(&self, p: &ProcessIn, network: comm::Network) -> Steady {
        let (calls, bytes) = self.collectives_of(p.pid);
        Steady {
            pid: p.pid,
            comm: p.comm.clone(),
            parent: p.parent,
            collective_calls: calls,
            collective_bytes: bytes,
            socket_bytes: p.socket.bytes_sent + p.socket.bytes_received,
            env: p.env.clone(),
            sampled_share: (!p.collectives_sampled.is_exact()).then(|| p.collectives_sampled.share()),
            network,
        }
    }

    /// What the probes saw of one process's set-up, for `comm::verdict`.
    fn evidence(&self, p: &ProcessIn, network: comm::Network) -> Evidence {
        Evidence {
            pid: p.pid,
            comm: p.comm.clone(),
            calls: p.calls.clone(),
            env: p.env.clone(),
            nvlink: self.facts.as_ref().and_then(|f| f.nvlink),
            nccl_ranks: p.nccl_ranks.clone(),
            registrations: p
                .churn
                .as_ref()
                .map(|c| c.by_backing.iter().map(|(k, v)| (k.clone(), v.registrations)).collect())
                .unwrap_or_default(),
            network,
        }
    }

    /// Where each process's NCCL peers are (the other NCCL processes of its
    /// job on this machine: the same launcher, where parents are known) and
    /// the host's RDMA devices, per pid.
    pub fn networks(&self) -> BTreeMap<u32, comm::Network> {
        let active: std::collections::BTreeSet<u32> = self.collectives.iter().map(|c| c.pid).collect();
        // Processes that take part in NCCL (set-up calls, ranks, collectives).
        let nccl: Vec<&ProcessIn> = self
            .processes
            .iter()
            .filter(|p| {
                p.calls.keys().any(|k| k.starts_with("nccl"))
                    || !p.nccl_ranks.is_empty()
                    || (active.contains(&p.pid) && self.collectives_of(p.pid).0 > 0)
            })
            .collect();
        let rdma_devices = self.facts.as_ref().map(|f| f.rdma_devices.clone());
        self.processes
            .iter()
            .map(|p| {
                let peers = nccl.iter().filter(|q| match (p.parent, q.parent) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                });
                let other_hosts = nccl
                    .iter()
                    .any(|q| q.pid == p.pid)
                    .then(|| comm::other_hosts(p.pid, &p.env, peers.map(|q| (q.pid, &q.env))))
                    .flatten();
                (
                    p.pid,
                    comm::Network {
                        other_hosts,
                        rdma_devices: rdma_devices.clone(),
                    },
                )
            })
            .collect()
    }
}

/// Every process's verdict, in process order (processes that show no GPU
/// communication have none): the summary of its paths ([`judge`]).
pub fn verdicts(i: &Inputs) -> Vec<Verdict> {
    judge(i).0
}

/// Every process's verdict and paths.
pub fn judge(i: &Inputs) -> (Vec<Verdict>, Vec<crate::classify::path::Path>) {
    let mut out = setup_or_steady(i);
    let paths = paths::judge(i, &mut out);
    (out, paths)
}

/// The verdicts of NCCL processes: set-up calls first, else the steady state.
fn setup_or_steady(i: &Inputs) -> Vec<Verdict> {
    let networks = i.networks();
    let network = |pid: u32| networks.get(&pid).cloned().unwrap_or_default();
    let setup: BTreeMap<u32, Verdict> = i
        .processes
        .iter()
        .filter_map(|p| comm::verdict(&i.evidence(p, network(p.pid))))
        .map(|v| (v.pid, v))
        .collect();
    let decided: BTreeMap<u32, Transport> = setup
        .values()
        .filter(|v| v.transport != Transport::Unknown)
        .map(|v| (v.pid, v.transport))
        .collect();
    let all: Vec<Steady> = i.processes.iter().map(|p| i.steady(p, network(p.pid))).collect();
    let cx = steady::Context {
        all: &all,
        decided: &decided,
        links: i.gpu_links.as_ref(),
        rdma_nics: i.facts.as_ref().map(|f| f.rdma_devices.len()),
    };
    let mut out = Vec::new();
    for s in &all {
        let set_up = setup.get(&s.pid);
        // A set-up verdict stands unless it is `unknown` for want of
        // evidence; one-rank communicators are decided (nothing to judge).
        if let Some(v) = set_up.filter(|v| v.transport != Transport::Unknown || comm::is_one_rank(v)) {
            out.push(v.clone());
        } else if let Some(v) = steady::verdict(s, &cx) {
            out.push(v);
        } else if let Some(v) = set_up {
            out.push(v.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-rank job's set-up verdict stands: the steady state (socket
    /// bytes of torch's store, collectives) must not turn it into a transport.
    #[test]
    fn one_rank_job_is_not_judged_from_its_steady_state() {
        let report = |ranks: &str| {
            serde_json::from_str::<Inputs>(&format!(
                r#"{{"processes": [{{"pid": 658, "comm": "python3",
                    "calls": {{"ncclCommInitRankConfig": 1, "cuMemHostAlloc": 4}},
                    "socket": {{"calls": 96, "bytes_sent": 851, "bytes_received": 38706, "sockets": 6}}
                    {ranks}}}],
                   "collectives": [{{"pid": 658, "op": "ncclAllReduce", "communicator": "0x28265320",
                    "calls": 106360, "bytes": 15191170170880}}]}}"#
            ))
            .unwrap()
        };
        let v = verdicts(&report(r#", "nccl_ranks": [1]"#));
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].transport, Transport::Unknown);
        assert!(comm::is_one_rank(&v[0]), "{:?}", v[0].evidence);
        // The same report from before the rank count was recorded.
        assert_eq!(verdicts(&report(""))[0].transport, Transport::Socket);
    }

    /// The emulated two-node job (two ranks on one GPU, each with its own
    /// NCCL_HOSTID; 2026-12-01 on one H200): from the set-up (run) and from
    /// the steady state (attach), NET/Socket with the inter-node cause.
    fn emulated(setup: bool, extra: &str) -> Inputs {
        let rank = |pid: u32, host: u32| {
            let calls = if setup {
                r#""ncclCommInitRankConfig": 1, "cuMemHostAlloc": 8"#
            } else {
                r#""ncclAllReduce": 2710"#
            };
            format!(
                r#"{{"pid": {pid}, "comm": "python3", "parent": 900, "calls": {{{calls}}},
                    "env": {{"NCCL_HOSTID": "gdrtrace-emu-{host}", "NCCL_DEBUG": "INFO"{extra}}},
                    "socket": {{"calls": 90000, "bytes_sent": 2841640960, "bytes_received": 2841640960, "sockets": 8}}}}"#
            )
        };
        serde_json::from_str(&format!(
            r#"{{"processes": [{}, {}, {{"pid": 900, "comm": "bash", "calls": {{}}}}],
               "collectives": [
                 {{"pid": 101, "op": "ncclAllReduce", "communicator": "0x1b7feae0", "calls": 2710, "bytes": 2841640960}},
                 {{"pid": 102, "op": "ncclAllReduce", "communicator": "0x394334c0", "calls": 2710, "bytes": 2841640960}}],
               "facts": {{"rdma_devices": [], "gpus": 1}}}}"#,
            rank(101, 0),
            rank(102, 1)
        ))
        .unwrap()
    }

    #[test]
    fn emulated_nodes_get_the_inter_node_cause() {
        for setup in [true, false] {
            let v = verdicts(&emulated(setup, ""));
            assert_eq!(v.len(), 2, "{v:?}");
            for x in &v {
                assert_eq!(
                    (x.transport, x.host_staged, x.net),
                    (Transport::Socket, true, Some(comm::Net::SOCKET)),
                    "{x:?}"
                );
                assert_eq!(x.basis == comm::Basis::SetUp, setup);
                let c = x.cause.as_deref().unwrap();
                assert!(
                    c.starts_with("inter-node traffic over TCP sockets (NET/Socket): NCCL found no usable RDMA device"),
                    "{c}"
                );
                let other = if x.pid == 101 {
                    "gdrtrace-emu-1"
                } else {
                    "gdrtrace-emu-0"
                };
                assert!(x.other_hosts.as_deref().unwrap().contains(other), "{x:?}");
            }
            let v = verdicts(&emulated(setup, r#", "NCCL_IB_DISABLE": "1""#));
            assert!(
                v.iter()
                    .all(|x| x.cause.as_deref().unwrap().starts_with("NCCL_IB_DISABLE=1")),
                "{v:?}"
            );
            let v = verdicts(&emulated(setup, r#", "NCCL_NET": "Socket""#));
            assert!(
                v.iter()
                    .all(|x| x.cause.as_deref().unwrap().starts_with("NCCL_NET=Socket")),
                "{v:?}"
            );
        }
    }
}
