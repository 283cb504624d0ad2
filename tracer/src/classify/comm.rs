//! Per-process communication verdicts from evidence, for NCCL jobs (and any
//! process that moves GPU data between processes): which transport carried
//! its collectives, why, and what forced a fallback. NCCL decides its
//! transport once per channel at set-up; the driver calls it makes for that
//! set-up are the evidence (measured with NCCL 2.28 on 2×H200, see
//! docs/validation/):
//! - P2P/CUMEM: `cuDeviceCanAccessPeer` succeeds and peer buffers are
//!   imported (`cuMemImportFromShareableHandle` / `cuIpcOpenMemHandle`);
//! - SHM (NCCL_P2P_DISABLE=1): buffers exported and imported, but no peer
//!   access check: the shared buffers live in host memory;
//! - Socket (+NCCL_SHM_DISABLE=1): no export/import at all, pinned host
//!   staging buffers from `cuMemHostAlloc`.
//!
//! NCCL's own log (`NCCL_DEBUG=INFO`) corroborates when present; it is never
//! the only source of a verdict.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Transport;

/// What the probes saw of one process.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    pub pid: u32,
    pub comm: String,
    pub calls: BTreeMap<String, u64>,
    /// NCCL_* variables of the process environment.
    pub env: BTreeMap<String, String>,
    /// Whether any NVLink joins the local GPUs (from `topo`).
    pub nvlink: Option<bool>,
    /// The rank count of each communicator the process joined.
    pub nccl_ranks: Vec<u32>,
}

const ONE_RANK: &str = "every NCCL communicator it joined has one rank (ncclCommInitRank nranks=1): NCCL moves nothing between GPUs, so there is no transport to judge";

/// Whether a verdict is the one for a process whose communicators all have
/// a single rank.
pub fn is_one_rank(v: &Verdict) -> bool {
    v.transport == Transport::Unknown && v.evidence.iter().any(|e| e == ONE_RANK)
}

/// What kind of evidence decided a verdict.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Basis {
    /// The set-up calls the probes saw (peer checks, buffer exports and
    /// imports, staging allocations around the communicator's creation).
    #[default]
    SetUp,
    /// What the process did while running (socket bytes, GPU link
    /// counters), for a process whose set-up happened before tracing.
    SteadyState,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Verdict {
    pub pid: u32,
    pub comm: String,
    pub transport: Transport,
    pub host_staged: bool,
    /// Reports written before this field existed read as `set-up`.
    #[serde(default)]
    pub basis: Basis,
    pub evidence: Vec<String>,
    /// Why a fallback happened (an environment variable that forced it), if known.
    pub cause: Option<String>,
    /// NCCL's own log: its transport for this process, and whether it agrees.
    pub nccl_log: Option<LogAgreement>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct LogAgreement {
    pub nccl_says: String,
    pub agrees: bool,
}

fn n(e: &Evidence, op: &str) -> u64 {
    e.calls.get(op).copied().unwrap_or(0)
}

pub fn env_set(env: &BTreeMap<String, String>, k: &str) -> bool {
    env.get(k).is_some_and(|v| v != "0" && !v.is_empty())
}

/// Why a process ended on a host-staged transport, from its environment.
pub fn cause(env: &BTreeMap<String, String>, transport: Transport) -> Option<String> {
    match transport {
        Transport::Shm if env_set(env, "NCCL_P2P_DISABLE") => {
            Some("NCCL_P2P_DISABLE=1 in the process environment disabled P2P: NCCL fell back to shared memory through the host".into())
        }
        Transport::Socket if env_set(env, "NCCL_SHM_DISABLE") && env_set(env, "NCCL_P2P_DISABLE") => Some(
            "NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 in the process environment: NCCL fell back to the socket transport through host memory".into(),
        ),
        Transport::Socket if env_set(env, "NCCL_SHM_DISABLE") => {
            Some("NCCL_SHM_DISABLE=1 in the process environment, and P2P was not possible".into())
        }
        Transport::Shm | Transport::Socket => Some("no NCCL_*_DISABLE variable set: P2P was not possible between these GPUs (check topology, ACS/IOMMU, driver)".into()),
        _ => None,
    }
}

/// The verdict for one process, or None when it shows no GPU communication.
pub fn verdict(e: &Evidence) -> Option<Verdict> {
    let nccl = e.calls.keys().any(|k| k.starts_with("nccl"));
    let peer = n(e, "cuDeviceCanAccessPeer");
    let import = n(e, "cuMemImportFromShareableHandle") + n(e, "cuIpcOpenMemHandle");
    let export = n(e, "cuMemExportToShareableHandle") + n(e, "cuIpcGetMemHandle");
    let host_alloc = n(e, "cuMemHostAlloc") + n(e, "cuMemAllocHost");
    if !nccl && import == 0 && export == 0 {
        return None;
    }
    // NCCL decides its transport while it creates a communicator: without
    // that call the set-up was not seen (attach), and the calls that are
    // seen are the application's (torch allocates pinned host memory and
    // checks peer access at any time), not evidence of NCCL's choice.
    if nccl && !e.calls.keys().any(|k| k.starts_with("ncclCommInit")) {
        return None;
    }
    // A communicator of one rank allocates its host buffers like any other
    // but has no peer: whatever its set-up looks like, nothing crosses a link.
    if nccl && !e.nccl_ranks.is_empty() && e.nccl_ranks.iter().all(|n| *n == 1) {
        return Some(Verdict {
            pid: e.pid,
            comm: e.comm.clone(),
            transport: Transport::Unknown,
            host_staged: false,
            basis: Basis::SetUp,
            evidence: vec![ONE_RANK.into()],
            cause: None,
            nccl_log: None,
        });
    }
    let mut evidence = Vec::new();
    let (transport, staged) = if peer > 0 && import > 0 {
        evidence.push(format!(
            "cuDeviceCanAccessPeer x{peer} and {import} peer buffer imports (cuMemImportFromShareableHandle/cuIpcOpenMemHandle): GPU memory of the peer is mapped into this process"
        ));
        match e.nvlink {
            Some(true) => {
                evidence.push("the GPUs are joined by NVLink (topology)".into());
                (Transport::P2pNvlink, false)
            }
            Some(false) => (Transport::P2pPcie, false),
            None => (Transport::P2pNvlink, false),
        }
    } else if import > 0 || export > 0 {
        evidence.push(format!(
            "{export} exports and {import} imports of shareable buffers but no peer-access check: the shared buffers are host memory (NCCL SHM transport)"
        ));
        (Transport::Shm, true)
    } else if nccl && host_alloc > 0 {
        evidence.push(format!(
            "no buffer export/import, {host_alloc} pinned host staging buffers (cuMemHostAlloc/cuMemAllocHost): data goes GPU -> host -> socket (NCCL NET/Socket)"
        ));
        (Transport::Socket, true)
    } else {
        evidence.push("NCCL calls seen, but no buffer set-up evidence (attached after set-up?)".into());
        (Transport::Unknown, false)
    };
    let cause = cause(&e.env, transport);
    Some(Verdict {
        pid: e.pid,
        comm: e.comm.clone(),
        transport,
        host_staged: staged,
        basis: Basis::SetUp,
        evidence,
        cause,
        nccl_log: None,
    })
}

/// NCCL's transport lines in its log, per pid: `host:PID:TID [d] NCCL INFO
/// Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM`.
pub fn parse_nccl_log(text: &str) -> BTreeMap<u32, Vec<String>> {
    let mut out: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        let Some((_, via)) = line.split_once(" via ") else {
            continue;
        };
        if !line.contains("NCCL INFO") {
            continue;
        }
        let pid = line
            .split(':')
            .nth(1)
            .and_then(|p| p.trim().parse::<u32>().ok())
            .unwrap_or(0);
        let via = via.split_whitespace().next().unwrap_or("").to_string();
        let v = out.entry(pid).or_default();
        if !v.contains(&via) {
            v.push(via);
        }
    }
    out
}

/// The verdict NCCL's own `via` string stands for.
pub fn transport_of_via(via: &str) -> Transport {
    if via.starts_with("P2P") {
        Transport::P2pNvlink
    } else if via.starts_with("SHM") {
        Transport::Shm
    } else if via.starts_with("NET/Socket") {
        Transport::Socket
    } else if via.starts_with("NET/IB") && via.contains("GDRDMA") {
        Transport::GdrPeerMem
    } else if via.starts_with("NET/IB") {
        Transport::HostStaged
    } else {
        Transport::Unknown
    }
}

/// Attaches NCCL's log view to each verdict and says whether they agree.
pub fn corroborate(verdicts: &mut [Verdict], log: &BTreeMap<u32, Vec<String>>) {
    for v in verdicts {
        let Some(vias) = log.get(&v.pid) else { continue };
        let agrees = vias.iter().all(|via| {
            let t = transport_of_via(via);
            t == v.transport || (t == Transport::P2pNvlink && v.transport == Transport::P2pPcie)
        });
        v.nccl_log = Some(LogAgreement {
            nccl_says: vias.join(", "),
            agrees,
        });
    }
}

/// NCCL's log, per communicator, against the tracer's verdicts.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq)]
#[serde(default)]
pub struct NcclLog {
    pub communicators: Vec<LogCommunicator>,
    pub processes: Vec<LogProcess>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct LogCommunicator {
    pub pid: u32,
    /// `comm 0x...` of `ncclCommInitRank` (the handle the probes aggregate by).
    pub communicator: String,
    pub rank: Option<u32>,
    pub nranks: Option<u32>,
    /// Distinct `via` strings of its channels.
    pub vias: Vec<String>,
    /// `use ring PXN p GDR g`: NCCL's GPUDirect RDMA decision for the communicator.
    pub gdr: Option<bool>,
    #[serde(deserialize_with = "crate::intern::vec")]
    pub nccl_says: Vec<&'static str>,
    /// The tracer's verdict for this communicator (its collectives' transport, else the process's).
    #[serde(default, deserialize_with = "crate::intern::opt")]
    pub tracer_says: Option<crate::intern::Name>,
    pub agrees: Option<bool>,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq)]
#[serde(default)]
pub struct LogProcess {
    pub pid: u32,
    /// GPU Direct RDMA decision lines (`Disabled for HCA`, `(DMABUF) enabled`, distance).
    pub gdr_lines: Vec<String>,
    /// `NCCL WARN` lines (at most 16).
    pub warnings: Vec<String>,
}

/// `host:PID:TID [dev] NCCL INFO message` -> (pid, tid, message).
fn log_line(line: &str) -> Option<(u32, u32, &str)> {
    let (head, rest) = line.split_once(" NCCL ")?;
    let mut parts = head.split_whitespace().next()?.rsplitn(3, ':');
    let tid = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    Some((pid, tid, rest))
}

fn word_after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let mut it = text.split_whitespace();
    while let Some(w) = it.next() {
        if w == key {
            return it.next();
        }
    }
    None
}

/// As `nccl_log_agreement`, with the tracer's view of a (pid, communicator) given.
pub fn nccl_log_against(text: &str, tracer: &dyn Fn(u32, &str) -> Option<&'static str>) -> NcclLog {
    let mut comms: Vec<LogCommunicator> = Vec::new();
    let mut current: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    let mut last_of_pid: BTreeMap<u32, usize> = BTreeMap::new();
    let mut procs: BTreeMap<u32, LogProcess> = BTreeMap::new();
    for line in text.lines() {
        let Some((pid, tid, msg)) = log_line(line) else {
            continue;
        };
        if let Some(w) = msg.strip_prefix("WARN ") {
            let p = procs.entry(pid).or_insert_with(|| LogProcess {
                pid,
                ..Default::default()
            });
            if p.warnings.len() < 16 {
                p.warnings.push(w.trim().to_string());
            }
            continue;
        }
        let Some(msg) = msg.strip_prefix("INFO ") else { continue };
        if msg.contains("ncclCommInitRank comm ") || msg.starts_with("ncclCommInitRankConfig comm ") {
            let handle = word_after(msg, "comm").unwrap_or("").to_string();
            let i = match comms.iter().position(|c| c.pid == pid && c.communicator == handle) {
                Some(i) => i,
                None => {
                    comms.push(LogCommunicator {
                        pid,
                        communicator: handle,
                        rank: word_after(msg, "rank").and_then(|v| v.parse().ok()),
                        nranks: word_after(msg, "nranks").and_then(|v| v.parse().ok()),
                        vias: Vec::new(),
                        gdr: None,
                        nccl_says: Vec::new(),
                        tracer_says: None,
                        agrees: None,
                    });
                    comms.len() - 1
                }
            };
            if msg.ends_with("Init COMPLETE") {
                current.remove(&(pid, tid));
            } else {
                current.insert((pid, tid), i);
            }
            last_of_pid.insert(pid, i);
            continue;
        }
        let at = current.get(&(pid, tid)).or_else(|| last_of_pid.get(&pid)).copied();
        if let Some((_, via)) = msg.split_once(" via ") {
            let via = via.split_whitespace().next().unwrap_or("").to_string();
            if let Some(i) = at
                && !comms[i].vias.contains(&via)
            {
                comms[i].vias.push(via);
            }
        } else if msg.contains("GPU Direct RDMA") {
            let p = procs.entry(pid).or_insert_with(|| LogProcess {
                pid,
                ..Default::default()
            });
            p.gdr_lines.push(msg.trim().to_string());
        } else if let Some(g) = word_after(msg, "GDR").filter(|_| msg.contains("use ring"))
            && let Some(i) = at
        {
            comms[i].gdr = Some(g == "1");
        }
    }
    for c in &mut comms {
        let mut says: Vec<&'static str> = c.vias.iter().map(|v| transport_of_via(v).name()).collect();
        says.dedup();
        says.sort();
        says.dedup();
        c.nccl_says = says;
        c.tracer_says = tracer(c.pid, &c.communicator);
        // An undecided verdict (unknown, ambiguous) neither agrees nor disagrees.
        let decided = |t: &&str| !matches!(Transport::from_name(t), Transport::Unknown | Transport::Ambiguous);
        c.agrees = c.tracer_says.filter(|t| !c.vias.is_empty() && decided(t)).map(|t| {
            c.vias.iter().all(|via| {
                let n = transport_of_via(via);
                n.name() == t || (n == Transport::P2pNvlink && t == Transport::P2pPcie.name())
            })
        });
    }
    NcclLog {
        communicators: comms,
        processes: procs.into_values().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(calls: &[(&str, u64)], env: &[(&str, &str)]) -> Evidence {
        Evidence {
            pid: 7,
            comm: "rank0".into(),
            calls: calls.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            nvlink: Some(true),
            nccl_ranks: Vec::new(),
        }
    }

    // A one-rank torch job on one H200 (2026-12-01): NCCL allocated its
    // pinned host buffers as for a socket transport, but had no peer.
    #[test]
    fn one_rank_communicator_has_no_transport() {
        let calls = [
            ("ncclCommInitRankConfig", 1),
            ("cuMemHostAlloc", 4),
            ("ncclAllReduce", 106_360),
        ];
        let mut e = ev(&calls, &[]);
        assert_eq!(
            verdict(&e).unwrap().transport,
            Transport::Socket,
            "without the rank count"
        );
        e.nccl_ranks = vec![1];
        let v = verdict(&e).unwrap();
        assert_eq!(v.transport, Transport::Unknown);
        assert!(!v.host_staged);
        assert!(is_one_rank(&v), "{:?}", v.evidence);
        // One communicator of two ranks among them: judged as before.
        e.nccl_ranks = vec![1, 2];
        assert_eq!(verdict(&e).unwrap().transport, Transport::Socket);
    }

    // Counts as measured with NCCL 2.28 on 2xH200 (ENVIRONMENT notes).
    #[test]
    fn nccl_modes() {
        let auto = ev(
            &[
                ("ncclCommInitRank", 1),
                ("cuDeviceCanAccessPeer", 104),
                ("cuMemExportToShareableHandle", 96),
                ("cuMemImportFromShareableHandle", 96),
            ],
            &[],
        );
        let v = verdict(&auto).unwrap();
        assert_eq!(v.transport, Transport::P2pNvlink);
        assert!(!v.host_staged && v.cause.is_none());

        let shm = ev(
            &[
                ("ncclCommInitRank", 1),
                ("cuMemExportToShareableHandle", 16),
                ("cuMemImportFromShareableHandle", 16),
            ],
            &[("NCCL_P2P_DISABLE", "1")],
        );
        let v = verdict(&shm).unwrap();
        assert_eq!(v.transport, Transport::Shm);
        assert!(v.host_staged);
        assert!(v.cause.as_deref().unwrap().contains("NCCL_P2P_DISABLE=1"));

        let sock = ev(
            &[("ncclCommInitRank", 1), ("cuMemHostAlloc", 16)],
            &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
        );
        let v = verdict(&sock).unwrap();
        assert_eq!(v.transport, Transport::Socket);
        assert!(v.cause.as_deref().unwrap().contains("NCCL_SHM_DISABLE=1"));

        assert!(verdict(&ev(&[("cuMemAlloc", 3)], &[])).is_none());
        // Attached after set-up: collectives and the application's own pinned
        // allocations are no evidence of NCCL's choice (no socket verdict).
        assert!(verdict(&ev(&[("ncclAllReduce", 900), ("cuMemHostAlloc", 4)], &[])).is_none());
    }

    #[test]
    fn log_lines_and_agreement() {
        let log = "h:4242:4300 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n\
                   h:4243:4301 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct\n\
                   h:4244:4302 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0\n\
                   h:4245:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/2/GDRDMA\n";
        let m = parse_nccl_log(log);
        assert_eq!(m[&4242], vec!["P2P/CUMEM"]);
        assert_eq!(transport_of_via(&m[&4243][0]), Transport::Shm);
        assert_eq!(transport_of_via(&m[&4244][0]), Transport::Socket);
        assert_eq!(transport_of_via(&m[&4245][0]), Transport::GdrPeerMem);
        let mut v = vec![Verdict {
            pid: 4243,
            comm: String::new(),
            transport: Transport::P2pNvlink,
            host_staged: false,
            basis: Basis::SetUp,
            evidence: vec![],
            cause: None,
            nccl_log: None,
        }];
        corroborate(&mut v, &m);
        assert!(!v[0].nccl_log.as_ref().unwrap().agrees);
    }

    #[test]
    fn log_per_communicator_and_gdr_lines() {
        // Lines as NCCL 2.28 prints them (NVIDIA/nccl issues #778, #1537; 2xH200 runs).
        let log = "vm:639:639 [0] NCCL INFO ncclCommInitRank comm 0x55d9dbb07aa0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0x76 - Init START\n\
                   vm:639:639 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n\
                   vm:639:639 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC\n\
                   vm:639:639 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1\n\
                   vm:639:639 [0] NCCL INFO ncclCommInitRank comm 0x55d9dbb07aa0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0x76 - Init COMPLETE\n\
                   vm:700:700 [0] NCCL INFO ncclCommInitRank comm 0x1000 rank 0 nranks 2 cudaDev 0 - Init START\n\
                   vm:700:700 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'\n\
                   vm:700:700 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0\n\
                   vm:700:700 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0\n\
                   vm:700:700 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 0\n\
                   vm:701:701 [1] NCCL INFO NET/IB : GPU Direct RDMA (DMABUF) enabled for HCA 0 'mlx5_0'\n\
                   vm:701:701 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/IB/0/GDRDMA\n\
                   vm:701:701 [1] misc/ibvwrap.cc:288 NCCL WARN Call to ibv_reg_dmabuf_mr failed with error Operation not supported\n\
                   vm:702:702 [0] NCCL INFO Channel 03 : 0[0] -> 1[1] via SHM/direct/direct\n";
        let mut r = crate::report::tests_support::empty_report();
        r.collectives.push(crate::report::Collective {
            pid: 639,
            op: "ncclAllReduce".into(),
            communicator: "0x55d9dbb07aa0".into(),
            calls: 3,
            bytes: 300,
            transport: "p2p/nvlink",
            counted: None,
        });
        r.verdicts.push(Verdict {
            pid: 700,
            comm: String::new(),
            transport: Transport::Socket,
            host_staged: true,
            basis: Basis::SetUp,
            evidence: vec![],
            cause: None,
            nccl_log: None,
        });
        let l = crate::report::judged::nccl_log_agreement(log, &r);
        let c0 = &l.communicators[0];
        assert_eq!(
            (c0.pid, c0.communicator.as_str(), c0.rank, c0.nranks),
            (639, "0x55d9dbb07aa0", Some(0), Some(2))
        );
        assert_eq!(c0.vias, vec!["P2P/CUMEM", "P2P/IPC"]);
        assert_eq!((c0.gdr, c0.agrees), (Some(true), Some(true)));
        let c1 = &l.communicators[1];
        assert_eq!(c1.gdr, Some(false));
        assert_eq!(c1.nccl_says, vec!["host-staged", "socket"]);
        assert_eq!(
            c1.agrees,
            Some(false),
            "NET/IB without GDRDMA is host-staged, not socket"
        );
        let p700 = l.processes.iter().find(|p| p.pid == 700).unwrap();
        assert!(p700.gdr_lines[0].contains("GPU Direct RDMA Disabled for HCA 0"));
        let p701 = l.processes.iter().find(|p| p.pid == 701).unwrap();
        assert!(p701.gdr_lines[0].contains("(DMABUF) enabled"));
        assert!(p701.warnings[0].contains("ibv_reg_dmabuf_mr failed"));
        assert_eq!(transport_of_via("NET/IB/0/GDRDMA"), Transport::GdrPeerMem);
        assert_eq!(transport_of_via("SHM/direct/direct"), Transport::Shm);
    }
}
