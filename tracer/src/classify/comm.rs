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
use crate::probes::uapi;

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
    /// Its memory registrations with an RDMA NIC, by backing (`host`,
    /// `gpu/peer-mem`, `gpu/dma-buf`): NCCL's NET/IB registers its buffers.
    pub registrations: BTreeMap<String, u64>,
    /// Where its peers are and which networks this host offers.
    pub network: Network,
}

/// NCCL's network paths, named as NCCL names them in its channel lines
/// (`via NET/Socket/0`, `via NET/IB/0`, `via NET/IB/0/GDRDMA`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Net {
    /// TCP sockets through host memory.
    #[serde(rename = "NET/Socket")]
    Socket,
    /// InfiniBand/RoCE verbs staged through host buffers (no GPUDirect RDMA).
    #[serde(rename = "NET/IB")]
    Ib,
    /// InfiniBand/RoCE with GPUDirect RDMA (peer memory or dma-buf): the NIC
    /// reads and writes GPU memory.
    #[serde(rename = "NET/IB/GDRDMA")]
    IbGdr,
}

impl Net {
    pub const ALL: [Net; 3] = [Net::Socket, Net::Ib, Net::IbGdr];

    pub fn name(self) -> &'static str {
        match self {
            Net::Socket => "NET/Socket",
            Net::Ib => "NET/IB",
            Net::IbGdr => "NET/IB/GDRDMA",
        }
    }

    /// The path of one of NCCL's `via` strings (`NET/IB/2/GDRDMA`), None for
    /// other transports and network plugins.
    pub fn of_via(via: &str) -> Option<Net> {
        if via.starts_with("NET/Socket") {
            Some(Net::Socket)
        } else if via.starts_with("NET/IB") && via.contains("GDRDMA") {
            Some(Net::IbGdr)
        } else if via.starts_with("NET/IB") {
            Some(Net::Ib)
        } else {
            None
        }
    }

    /// The NET path an NCCL verdict's transport stands for.
    pub fn of(transport: Transport) -> Option<Net> {
        match transport {
            Transport::Socket => Some(Net::Socket),
            Transport::HostStaged => Some(Net::Ib),
            Transport::GdrPeerMem | Transport::GdrDmabuf => Some(Net::IbGdr),
            _ => None,
        }
    }
}

/// Reports name the path; an unknown name reads as none, never as an error.
fn net_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Net>, D::Error> {
    let name = Option::<String>::deserialize(d)?;
    Ok(name.and_then(|n| Net::ALL.into_iter().find(|x| x.name() == n)))
}

/// Where a process's NCCL peers are and which networks this host offers:
/// what an inter-node cause is judged from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Network {
    /// Why NCCL places peers of this process on other hosts (one evidence
    /// line), when something says so.
    pub other_hosts: Option<String>,
    /// This host's RDMA devices (host facts), None when not known.
    pub rdma_devices: Option<Vec<String>>,
}

/// NCCL's host identity of a process, as its `getHostHash` builds it
/// (src/misc/utils.cc): `NCCL_HOSTID` when set, else the host name followed
/// by `/proc/sys/kernel/random/boot_id`, the same for every process of one
/// machine (None here). Ranks whose identities differ are different hosts to
/// NCCL: it connects them with neither P2P nor SHM, only its network.
pub fn host_id(env: &BTreeMap<String, String>) -> Option<&str> {
    // NCCL hashes whatever getenv returns, an empty value included.
    env.get("NCCL_HOSTID").map(String::as_str)
}

fn host_id_text(id: Option<&str>) -> String {
    match id {
        Some(id) => format!("NCCL_HOSTID={id}"),
        None => "no NCCL_HOSTID (this machine's host name and boot id)".into(),
    }
}

/// Why NCCL places `pid`'s peers on other hosts: another rank of its job on
/// this machine (`peers`: pid and environment) has another host identity.
pub fn other_hosts<'a>(
    pid: u32,
    env: &BTreeMap<String, String>,
    peers: impl IntoIterator<Item = (u32, &'a BTreeMap<String, String>)>,
) -> Option<String> {
    let me = host_id(env);
    let (peer, theirs) = peers
        .into_iter()
        .filter(|(p, _)| *p != pid)
        .map(|(p, e)| (p, host_id(e)))
        .find(|(_, id)| *id != me)?;
    Some(format!(
        "{} here, {} for pid {peer} of the same job: NCCL's host hash (NCCL_HOSTID, else host name and boot id) differs, so NCCL counts them as different hosts and connects them only through its network",
        host_id_text(me),
        host_id_text(theirs)
    ))
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
    /// NCCL's network path when its network transport carried the traffic
    /// (`NET/Socket`, `NET/IB`, `NET/IB/GDRDMA`); `transport` and
    /// `host_staged` say the same in the report's common vocabulary.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "net_opt")]
    pub net: Option<Net>,
    /// Why NCCL places this process's peers on other hosts, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_hosts: Option<String>,
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

fn env_is(env: &BTreeMap<String, String>, k: &str, value: &str) -> bool {
    env.get(k).is_some_and(|v| v.eq_ignore_ascii_case(value))
}

/// What this host offers NCCL's network, for a cause: its RDMA devices.
fn rdma_text(net: &Network) -> String {
    match net.rdma_devices.as_deref() {
        Some([]) => "NCCL found no usable RDMA device (this host has none in /sys/class/infiniband)".into(),
        Some(devs) => format!(
            "this host has RDMA device(s) {} but NCCL did not use them (NCCL_IB_HCA, port state, libibverbs in the process)",
            devs.join(", ")
        ),
        None => "NCCL found no usable RDMA device".into(),
    }
}

/// Why NCCL's network went over TCP sockets, when a variable chose it.
fn socket_forced(env: &BTreeMap<String, String>) -> Option<&'static str> {
    if env_is(env, "NCCL_NET", "socket") {
        Some(
            "NCCL_NET=Socket in the process environment selected NCCL's socket network: traffic between its ranks goes over TCP (NET/Socket), not RDMA",
        )
    } else if env_set(env, "NCCL_IB_DISABLE") {
        Some(
            "NCCL_IB_DISABLE=1 in the process environment disabled InfiniBand/RoCE: traffic between its ranks goes over TCP sockets (NET/Socket)",
        )
    } else {
        None
    }
}

/// Why NET/IB staged through host buffers instead of GPUDirect RDMA.
fn ib_staged(env: &BTreeMap<String, String>) -> String {
    if let Some(v) = env.get("NCCL_NET_GDR_LEVEL") {
        format!(
            "NCCL_NET_GDR_LEVEL={v} in the process environment limits GPUDirect RDMA by GPU-NIC distance: NET/IB stages through host buffers"
        )
    } else if env.get("NCCL_NET_GDR_READ").is_some_and(|v| v == "0") {
        "NCCL_NET_GDR_READ=0 in the process environment: NCCL sends from host buffers (NET/IB without GPUDirect RDMA reads)".into()
    } else {
        "NET/IB without GPUDirect RDMA: NCCL stages through host buffers (no peer-memory client or dma-buf support, or the GPU and NIC are too far apart; `gdrtrace explain` names which)".into()
    }
}

/// Why a process ended on a host-staged transport, from its environment and
/// where its peers are.
pub fn cause(env: &BTreeMap<String, String>, transport: Transport, net: &Network) -> Option<String> {
    let p2p_off = env_set(env, "NCCL_P2P_DISABLE");
    let shm_off = env_set(env, "NCCL_SHM_DISABLE");
    match transport {
        Transport::HostStaged => Some(ib_staged(env)),
        // Between hosts P2P and SHM are not the question: the network is.
        Transport::Socket if net.other_hosts.is_some() => Some(match socket_forced(env) {
            Some(forced) => forced.to_string(),
            None => format!("inter-node traffic over TCP sockets (NET/Socket): {}", rdma_text(net)),
        }),
        Transport::Shm if p2p_off => {
            Some("NCCL_P2P_DISABLE=1 in the process environment disabled P2P: NCCL fell back to shared memory through the host".into())
        }
        Transport::Socket if shm_off && p2p_off => Some(
            "NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 in the process environment: NCCL fell back to the socket transport through host memory".into(),
        ),
        Transport::Socket if shm_off => {
            Some("NCCL_SHM_DISABLE=1 in the process environment, and P2P was not possible".into())
        }
        Transport::Socket => Some(match socket_forced(env) {
            Some(forced) => forced.to_string(),
            None => format!(
                "NCCL used its network (NET/Socket) with P2P and SHM allowed, which it does only between ranks it places on different hosts (host hash: NCCL_HOSTID, else host name and boot id) or without a shared /dev/shm; over TCP because {}",
                rdma_text(net)
            ),
        }),
        Transport::Shm => Some("no NCCL_*_DISABLE variable set: P2P was not possible between these GPUs (check topology, ACS/IOMMU, driver)".into()),
        _ => None,
    }
}

/// Whether a call label is a libnccl row's.
pub fn is_nccl(label: &str) -> bool {
    uapi::row_named(label).is_some_and(|r| r.lib == uapi::Lib::Nccl)
}

/// The verdict for one process, or None when it shows no GPU communication.
pub fn verdict(e: &Evidence) -> Option<Verdict> {
    let nccl = e.calls.keys().any(|k| is_nccl(k));
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
    if nccl
        && !e
            .calls
            .keys()
            .any(|k| uapi::row_named(k).is_some_and(|r| r.kind == uapi::Kind::CommInit))
    {
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
            net: None,
            other_hosts: None,
        });
    }
    let reg = |k: &str| e.registrations.get(k).copied().unwrap_or(0);
    let (host_mr, gpu_mr, dmabuf_mr) = (reg("host"), reg("gpu/peer-mem"), reg("gpu/dma-buf"));
    let mut evidence = Vec::new();
    // Ranks on other hosts reach each other only through NCCL's network: its
    // path decides, whatever P2P or SHM joins this rank to ranks of its own host.
    let mrs = host_mr + gpu_mr + dmabuf_mr;
    let net_first = nccl && e.network.other_hosts.is_some() && (mrs > 0 || host_alloc > 0);
    if net_first && (import > 0 || export > 0) {
        evidence.push(format!(
            "{export} exports and {import} imports of shareable buffers: P2P or SHM to ranks of its own host; between hosts NCCL's network carries the traffic"
        ));
    }
    let (transport, staged) = if peer > 0 && import > 0 && !net_first {
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
    } else if (import > 0 || export > 0) && !net_first {
        evidence.push(format!(
            "{export} exports and {import} imports of shareable buffers but no peer-access check: the shared buffers are host memory (NCCL SHM transport)"
        ));
        (Transport::Shm, true)
    } else if nccl && mrs > 0 {
        // NET/IB registers its buffers with the NIC: GPU memory when
        // GPUDirect RDMA is on, host staging buffers when it is not.
        let mrs = format!(
            "memory registered with an RDMA NIC: {gpu_mr} MRs on GPU memory through peer memory, {dmabuf_mr} through dma-buf, {host_mr} on host memory"
        );
        if dmabuf_mr > 0 {
            evidence.push(format!(
                "{mrs}: the NIC reads and writes GPU memory (NCCL NET/IB/GDRDMA, dma-buf)"
            ));
            (Transport::GdrDmabuf, false)
        } else if gpu_mr > 0 {
            evidence.push(format!(
                "{mrs}: the NIC reads and writes GPU memory (NCCL NET/IB/GDRDMA, peer memory)"
            ));
            (Transport::GdrPeerMem, false)
        } else {
            evidence.push(format!("{mrs} only, {host_alloc} pinned host staging buffers: data goes GPU -> host -> NIC (NCCL NET/IB without GPUDirect RDMA)"));
            (Transport::HostStaged, true)
        }
    } else if nccl && host_alloc > 0 {
        evidence.push(format!(
            "no buffer export/import, {host_alloc} pinned host staging buffers (cuMemHostAlloc/cuMemAllocHost): data goes GPU -> host -> socket (NCCL NET/Socket)"
        ));
        (Transport::Socket, true)
    } else {
        evidence.push("NCCL calls seen, but no buffer set-up evidence (attached after set-up?)".into());
        (Transport::Unknown, false)
    };
    let net = if nccl { Net::of(transport) } else { None };
    if net.is_some()
        && let Some(why) = &e.network.other_hosts
    {
        evidence.push(why.clone());
    }
    Some(Verdict {
        pid: e.pid,
        comm: e.comm.clone(),
        transport,
        host_staged: staged,
        basis: Basis::SetUp,
        evidence,
        cause: cause(&e.env, transport, &e.network),
        nccl_log: None,
        net,
        other_hosts: e.network.other_hosts.clone().filter(|_| nccl),
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
    } else {
        match Net::of_via(via) {
            Some(Net::Socket) => Transport::Socket,
            Some(Net::IbGdr) => Transport::GdrPeerMem,
            Some(Net::Ib) => Transport::HostStaged,
            None => Transport::Unknown,
        }
    }
}

/// Whether NCCL's `via` and the tracer's transport say the same: NCCL's
/// `P2P` does not name the link, nor its `GDRDMA` how GPU memory was
/// registered (peer memory or dma-buf).
pub fn via_agrees(via: &str, t: Transport) -> bool {
    let n = transport_of_via(via);
    n == t
        || (n == Transport::P2pNvlink && t == Transport::P2pPcie)
        || (n == Transport::GdrPeerMem && t == Transport::GdrDmabuf)
}

/// The `via`s a verdict answers for: a rank whose channels include NCCL's
/// network answers for its network path (the traffic between hosts), its
/// P2P/SHM channels to ranks of its own host aside.
pub fn judged_vias(vias: &[String]) -> impl Iterator<Item = &String> {
    let net = vias.iter().any(|v| Net::of_via(v).is_some());
    vias.iter().filter(move |v| !net || Net::of_via(v).is_some())
}

/// Attaches NCCL's log view to each verdict and says whether they agree.
pub fn corroborate(verdicts: &mut [Verdict], log: &BTreeMap<u32, Vec<String>>) {
    for v in verdicts {
        let Some(vias) = log.get(&v.pid) else { continue };
        let agrees = judged_vias(vias).all(|via| via_agrees(via, v.transport));
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
    /// `NCCL_HOSTID set by environment to ID`: the host identity NCCL hashed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
    /// `Using network NAME`: the network NCCL chose (`Socket`, `IB`, a plugin).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// NCCL's network lines (`NET/IB : No device found.`, `NET/Socket : Using
    /// [0]eth0:...`), at most 16.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub net_lines: Vec<String>,
}

impl LogProcess {
    /// NCCL's own line saying its IB network found no device.
    pub fn no_ib_device(&self) -> Option<&str> {
        self.net_lines
            .iter()
            .find(|l| l.starts_with("NET/IB") && l.contains("No device found"))
            .map(String::as_str)
    }
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
        } else if let Some(id) = msg.trim().strip_prefix("NCCL_HOSTID set by environment to ") {
            let p = procs.entry(pid).or_insert_with(|| LogProcess {
                pid,
                ..Default::default()
            });
            p.host_id = Some(id.trim().to_string());
        } else if let Some(name) = msg.trim().strip_prefix("Using network ") {
            let p = procs.entry(pid).or_insert_with(|| LogProcess {
                pid,
                ..Default::default()
            });
            p.network = Some(name.trim().to_string());
        } else if msg.starts_with("NET/") {
            let p = procs.entry(pid).or_insert_with(|| LogProcess {
                pid,
                ..Default::default()
            });
            let line = msg.trim().to_string();
            if p.net_lines.len() < 16 && !p.net_lines.contains(&line) {
                p.net_lines.push(line);
            }
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
        c.agrees = c
            .tracer_says
            .filter(|t| !c.vias.is_empty() && decided(t))
            .map(|t| judged_vias(&c.vias).all(|via| via_agrees(via, Transport::from_name(t))));
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
            registrations: BTreeMap::new(),
            network: Network::default(),
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
            net: None,
            other_hosts: None,
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
            comm_id: None,
            rank: None,
            nranks: None,
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
            net: None,
            other_hosts: None,
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

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// NCCL's host identity: NCCL_HOSTID, else this machine (src/misc/utils.cc).
    #[test]
    fn other_hosts_compare_nccl_host_identities() {
        let a = env(&[("NCCL_HOSTID", "gdrtrace-emu-0")]);
        let b = env(&[("NCCL_HOSTID", "gdrtrace-emu-1")]);
        let none = env(&[("NCCL_DEBUG", "INFO")]);
        let why = other_hosts(1, &a, [(1, &a), (2, &b)]).unwrap();
        assert!(
            why.contains("NCCL_HOSTID=gdrtrace-emu-0 here, NCCL_HOSTID=gdrtrace-emu-1 for pid 2"),
            "{why}"
        );
        assert!(
            other_hosts(1, &a, [(1, &a), (2, &a.clone())]).is_none(),
            "same identity"
        );
        assert!(other_hosts(1, &none, [(2, &none.clone())]).is_none(), "one machine");
        // One rank with NCCL_HOSTID, one without: two hosts to NCCL.
        let why = other_hosts(2, &none, [(1, &a), (2, &none)]).unwrap();
        assert!(why.starts_with("no NCCL_HOSTID (this machine"), "{why}");
        // Alone: nothing to compare with.
        assert!(other_hosts(1, &a, [(1, &a)]).is_none());
        // NCCL hashes an empty NCCL_HOSTID as it is: another identity.
        assert_eq!(host_id(&env(&[("NCCL_HOSTID", "")])), Some(""));
        assert_eq!(host_id(&none), None);
    }

    /// The emulated two-node job on one H200 (2026-12-01): two ranks on
    /// GPU 0 with their own NCCL_HOSTID, NET/Socket, no RDMA device.
    #[test]
    fn inter_node_socket_cause() {
        let calls = [("ncclCommInitRankConfig", 1), ("cuMemHostAlloc", 8)];
        let two_hosts = |vars: &[(&str, &str)]| {
            let mut e = ev(&calls, vars);
            e.nccl_ranks = vec![2];
            let peer = env(&[("NCCL_HOSTID", "gdrtrace-emu-1")]);
            e.network = Network {
                other_hosts: other_hosts(e.pid, &e.env, [(e.pid, &e.env), (8, &peer)]),
                rdma_devices: Some(Vec::new()),
            };
            verdict(&e).unwrap()
        };
        let v = two_hosts(&[("NCCL_HOSTID", "gdrtrace-emu-0")]);
        assert_eq!(
            (v.transport, v.host_staged, v.net),
            (Transport::Socket, true, Some(Net::Socket))
        );
        let c = v.cause.as_deref().unwrap();
        assert!(
            c.starts_with("inter-node traffic over TCP sockets (NET/Socket): NCCL found no usable RDMA device"),
            "{c}"
        );
        assert!(!c.contains("P2P was not possible"), "{c}");
        assert!(v.other_hosts.as_deref().unwrap().contains("gdrtrace-emu-1"));
        assert!(
            v.evidence.iter().any(|l| l.contains("different hosts")),
            "{:?}",
            v.evidence
        );
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["net"], "NET/Socket");
        assert_eq!(json["transport"], "socket");
        let back: Verdict = serde_json::from_value(json).unwrap();
        assert_eq!(back, v);

        let v = two_hosts(&[("NCCL_HOSTID", "gdrtrace-emu-0"), ("NCCL_IB_DISABLE", "1")]);
        assert!(
            v.cause.as_deref().unwrap().starts_with("NCCL_IB_DISABLE=1"),
            "{:?}",
            v.cause
        );
        let v = two_hosts(&[("NCCL_HOSTID", "gdrtrace-emu-0"), ("NCCL_NET", "Socket")]);
        assert!(
            v.cause.as_deref().unwrap().starts_with("NCCL_NET=Socket"),
            "{:?}",
            v.cause
        );
        // RDMA devices present but unused.
        let mut e = ev(&calls, &[("NCCL_HOSTID", "a")]);
        e.network = Network {
            other_hosts: Some("differs".into()),
            rdma_devices: Some(vec!["mlx5_0".into()]),
        };
        let c = verdict(&e).unwrap().cause.unwrap();
        assert!(c.contains("mlx5_0") && c.contains("did not use"), "{c}");

        // One host, nothing disabled: NCCL's network without a known second
        // host; the cause says when NCCL does that, not "P2P was not possible".
        let v = verdict(&ev(&calls, &[])).unwrap();
        let c = v.cause.unwrap();
        assert!(
            c.contains("different hosts") && !c.contains("P2P was not possible"),
            "{c}"
        );
        assert!(v.other_hosts.is_none());
        // One host, P2P and SHM disabled: the variables, as before.
        let v = verdict(&ev(&calls, &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")])).unwrap();
        assert!(
            v.cause
                .unwrap()
                .starts_with("NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1")
        );
    }

    /// NET/IB: NCCL registers its buffers with the NIC; GPU memory when
    /// GPUDirect RDMA is on, host staging buffers when not (stand-in counts).
    #[test]
    fn net_ib_paths_from_registrations() {
        let calls = [("ncclCommInitRank", 1), ("cuMemHostAlloc", 2), ("ibv_reg_mr", 2)];
        let with = |backing: &[(&str, u64)], vars: &[(&str, &str)]| {
            let mut e = ev(&calls, vars);
            e.registrations = backing.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            verdict(&e).unwrap()
        };
        let v = with(&[("host", 2)], &[]);
        assert_eq!(
            (v.transport, v.host_staged, v.net),
            (Transport::HostStaged, true, Some(Net::Ib))
        );
        assert!(v.cause.as_deref().unwrap().starts_with("NET/IB without GPUDirect RDMA"));
        let v = with(&[("host", 2)], &[("NCCL_NET_GDR_LEVEL", "LOC")]);
        assert!(
            v.cause.as_deref().unwrap().starts_with("NCCL_NET_GDR_LEVEL=LOC"),
            "{:?}",
            v.cause
        );
        let v = with(&[("host", 2)], &[("NCCL_NET_GDR_READ", "0")]);
        assert!(
            v.cause.as_deref().unwrap().starts_with("NCCL_NET_GDR_READ=0"),
            "{:?}",
            v.cause
        );
        let v = with(&[("host", 1), ("gpu/peer-mem", 4)], &[]);
        assert_eq!(
            (v.transport, v.host_staged, v.net),
            (Transport::GdrPeerMem, false, Some(Net::IbGdr))
        );
        assert!(v.cause.is_none());
        let v = with(&[("gpu/dma-buf", 4)], &[]);
        assert_eq!((v.transport, v.net), (Transport::GdrDmabuf, Some(Net::IbGdr)));
        // NCCL's GDRDMA does not say how the memory was registered: both agree.
        assert!(via_agrees("NET/IB/0/GDRDMA", Transport::GdrDmabuf));
        assert!(via_agrees("NET/IB/0/GDRDMA", Transport::GdrPeerMem));
        assert!(!via_agrees("NET/IB/0", Transport::GdrPeerMem));
        assert_eq!(Net::of_via("NET/IB/0/GDRDMA"), Some(Net::IbGdr));
        assert_eq!(Net::of_via("NET/Socket/0"), Some(Net::Socket));
        assert_eq!(Net::of_via("P2P/CUMEM"), None);
    }

    /// NCCL's network lines, shaped exactly as NCCL 2.28 printed them for
    /// the emulated two-node job on one H200 (2026-12-01) and as its
    /// sources format them (net_socket.cc, init.cc, net_ib/init.cc,
    /// topo.cc, transport/generic.cc).
    #[test]
    fn log_network_lines() {
        let log = "h200:2001:2001 [0] NCCL INFO NCCL_HOSTID set by environment to gdrtrace-emu-0\n\
                   h200:2001:2001 [0] NCCL INFO NET/IB : No device found.\n\
                   h200:2001:2001 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>\n\
                   h200:2001:2001 [0] NCCL INFO Using network Socket\n\
                   h200:2001:2001 [0] NCCL INFO ncclCommInitRankConfig comm 0x1b7feae0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x5e3c1d2a9b8f7a61 - Init START\n\
                   h200:2001:2001 [0] NCCL INFO NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'\n\
                   h200:2001:2044 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n\
                   h200:2001:2044 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0\n\
                   h200:2001:2001 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 0\n\
                   h200:2001:2001 [0] NCCL INFO ncclCommInitRankConfig comm 0x1b7feae0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x5e3c1d2a9b8f7a61 - Init COMPLETE\n\
                   h200:2002:2002 [0] NCCL INFO NCCL_HOSTID set by environment to gdrtrace-emu-1\n\
                   h200:2002:2002 [0] NCCL INFO NET/IB : No device found.\n\
                   h200:2002:2002 [0] NCCL INFO Using network Socket\n\
                   h200:2003:2003 [0] NCCL INFO NET/IB : GPU Direct RDMA (DMABUF) enabled for HCA 0 'mlx5_0'\n\
                   h200:2003:2003 [0] NCCL INFO Using network IB\n\
                   h200:2003:2050 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n";
        let l = nccl_log_against(log, &|pid, _| match pid {
            2001 => Some("socket"),
            2003 => Some("gpudirect-rdma/dma-buf"),
            _ => None,
        });
        let p = |pid: u32| l.processes.iter().find(|p| p.pid == pid).unwrap();
        assert_eq!(p(2001).host_id.as_deref(), Some("gdrtrace-emu-0"));
        assert_eq!(p(2002).host_id.as_deref(), Some("gdrtrace-emu-1"));
        assert_eq!(p(2001).network.as_deref(), Some("Socket"));
        assert_eq!(p(2001).no_ib_device(), Some("NET/IB : No device found."));
        assert_eq!(
            p(2001).net_lines,
            vec!["NET/IB : No device found.", "NET/Socket : Using [0]eth0:10.0.0.2<0>"]
        );
        assert_eq!(
            p(2001).gdr_lines,
            vec!["NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'"]
        );
        assert_eq!(p(2003).network.as_deref(), Some("IB"));
        assert_eq!(p(2003).no_ib_device(), None);
        let c = &l.communicators[0];
        assert_eq!(c.vias, vec!["NET/Socket/0"]);
        assert_eq!((c.gdr, c.agrees), (Some(false), Some(true)));
        assert_eq!(c.nccl_says, vec!["socket"]);
        // The per-pid view corroborate() uses.
        let m = parse_nccl_log(log);
        assert_eq!(m[&2001], vec!["NET/Socket/0"]);
        assert_eq!(m[&2003], vec!["NET/IB/0/GDRDMA"]);
    }

    /// 2 emulated nodes x 2 GPUs: within a host P2P, between hosts the
    /// network; the rank answers for the network path, and so does the log.
    #[test]
    fn ranks_spanning_hosts_answer_for_the_network() {
        let calls = [
            ("ncclCommInitRankConfig", 1),
            ("cuDeviceCanAccessPeer", 8),
            ("cuMemExportToShareableHandle", 16),
            ("cuMemImportFromShareableHandle", 16),
            ("cuMemHostAlloc", 8),
        ];
        let mut e = ev(&calls, &[("NCCL_HOSTID", "gdrtrace-emu-0")]);
        assert_eq!(verdict(&e).unwrap().transport, Transport::P2pNvlink, "one host known");
        e.network.other_hosts = Some("NCCL_HOSTID differs".into());
        let v = verdict(&e).unwrap();
        assert_eq!((v.transport, v.net), (Transport::Socket, Some(Net::Socket)));
        assert!(
            v.evidence
                .iter()
                .any(|l| l.contains("P2P or SHM to ranks of its own host")),
            "{:?}",
            v.evidence
        );
        let vias = vec!["P2P/CUMEM".to_string(), "NET/Socket/0".to_string()];
        assert_eq!(judged_vias(&vias).collect::<Vec<_>>(), vec!["NET/Socket/0"]);
        let only_p2p = vec!["P2P/CUMEM".to_string(), "P2P/IPC".to_string()];
        assert_eq!(judged_vias(&only_p2p).count(), 2);
    }
}
