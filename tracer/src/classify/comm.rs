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

/// The networks NCCL names: its own two, the plugins whose paths the
/// tracer knows, and any other plugin by the name it gives itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Plugin {
    /// NCCL's TCP socket network (`Socket`).
    Socket,
    /// NCCL's InfiniBand/RoCE verbs network (`IB`).
    Ib,
    /// aws-ofi-nccl on libfabric (EFA): `Libfabric`, `AWS Libfabric` or `OFI`.
    Ofi,
    /// The verbs network of nccl-rdma-sharp-plugins (`IBext`, `IBext_v8`).
    IbExt,
    /// A collective network (`COLLNET/<name>`, the SHARP plugin's `SHARP`):
    /// the switches reduce the collective's data in the network.
    CollNet,
    /// NVLink SHARP: NVSwitch multicast between the GPUs of an NVLink domain.
    Nvls,
    /// Any other network plugin, by its name.
    Other,
}

impl Plugin {
    /// The plugin a network's name (`ncclNet_t::name`, as NCCL prints it
    /// after `NET/`) stands for, without case as `NCCL_NET` matches it.
    pub fn of_name(name: &str) -> Plugin {
        match name {
            n if n.eq_ignore_ascii_case("Socket") => Plugin::Socket,
            n if n.eq_ignore_ascii_case("IB") => Plugin::Ib,
            // aws-ofi-nccl names itself `Libfabric` (1.12 on), `AWS Libfabric`
            // (before, or NCCL_NET="AWS Libfabric"), `OFI` (NCCL_NET=OFI).
            n if OFI_NAMES.iter().any(|o| o.eq_ignore_ascii_case(n)) => Plugin::Ofi,
            n if n.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("IBext")) => Plugin::IbExt,
            _ => Plugin::Other,
        }
    }
}

/// aws-ofi-nccl's names for its network (src/nccl_ofi_interface_nvidia.cpp).
const OFI_NAMES: [&str; 3] = ["Libfabric", "AWS Libfabric", "OFI"];

/// One of NCCL's network paths, as NCCL names it in its channel lines:
/// `via NET/<name>/<dev>[/GDRDMA]` (src/transport/net.cc), `via
/// COLLNET/<name>/<dev>[/GDRDMA]` (src/transport/coll_net.cc), and `NVLS`
/// for a communicator with NVLS channels (src/init.cc). Serialized without
/// the device (`NET/IB/GDRDMA`, `NET/Libfabric`, `COLLNET/SHARP/GDRDMA`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Net {
    pub plugin: Plugin,
    /// The network's name as NCCL printed it (`IB`, `AWS Libfabric`, `IBext_v8`).
    pub name: crate::intern::Name,
    /// `/GDRDMA`: the NIC reads and writes GPU memory (GPUDirect RDMA).
    pub gdr: bool,
}

impl Net {
    /// TCP sockets through host memory.
    pub const SOCKET: Net = Net::new(Plugin::Socket, "Socket", false);
    /// InfiniBand/RoCE verbs staged through host buffers.
    pub const IB: Net = Net::new(Plugin::Ib, "IB", false);
    /// InfiniBand/RoCE with GPUDirect RDMA (peer memory or dma-buf).
    pub const IB_GDR: Net = Net::new(Plugin::Ib, "IB", true);
    /// NVLink SHARP.
    pub const NVLS: Net = Net::new(Plugin::Nvls, "NVLS", false);

    const fn new(plugin: Plugin, name: crate::intern::Name, gdr: bool) -> Net {
        Net { plugin, name, gdr }
    }

    /// NCCL's name without the device: `NET/IB/GDRDMA`, `COLLNET/SHARP`, `NVLS`.
    pub fn name(self) -> &'static str {
        let gdr = if self.gdr { "/GDRDMA" } else { "" };
        match (self.plugin, self.name, self.gdr) {
            (Plugin::Nvls, ..) => "NVLS",
            (Plugin::Socket, "Socket", false) => "NET/Socket",
            (Plugin::Ib, "IB", false) => "NET/IB",
            (Plugin::Ib, "IB", true) => "NET/IB/GDRDMA",
            (Plugin::CollNet, name, _) => crate::intern::intern(&format!("COLLNET/{name}{gdr}")),
            (_, name, _) => crate::intern::intern(&format!("NET/{name}{gdr}")),
        }
    }

    /// The network of one of NCCL's `via` strings (`NET/IB/2/GDRDMA`,
    /// `NET/AWS Libfabric/0(1)/GDRDMA(PCI)`, `COLLNET/SHARP/0`, `NVLS`), or
    /// of a report's `net`; None for P2P and SHM.
    pub fn of_via(via: &str) -> Option<Net> {
        if via == "NVLS" {
            return Some(Net::NVLS);
        }
        let (collnet, rest) = match via.strip_prefix("NET/") {
            Some(rest) => (false, rest),
            None => (true, via.strip_prefix("COLLNET/")?),
        };
        let mut parts = rest.split('/');
        let name = parts.next().filter(|n| !n.is_empty())?;
        let gdr = parts.any(|p| p.starts_with("GDRDMA"));
        let plugin = if collnet {
            Plugin::CollNet
        } else {
            Plugin::of_name(name)
        };
        Some(Net::new(plugin, crate::intern::intern(name), gdr))
    }

    /// The transport this network stands for in the report's vocabulary:
    /// GPUDirect RDMA with `GDRDMA` (NCCL does not say how GPU memory was
    /// registered), else host buffers: sockets, or a NIC on host memory.
    pub fn transport(self) -> Transport {
        match self.plugin {
            Plugin::Nvls => Transport::P2pNvlink,
            _ if self.gdr => Transport::GdrPeerMem,
            Plugin::Socket => Transport::Socket,
            _ => Transport::HostStaged,
        }
    }

    /// The NET path an NCCL verdict's transport stands for, with NCCL's own
    /// networks' names.
    pub fn of(transport: Transport) -> Option<Net> {
        match transport {
            Transport::Socket => Some(Net::SOCKET),
            Transport::HostStaged => Some(Net::IB),
            Transport::GdrPeerMem | Transport::GdrDmabuf => Some(Net::IB_GDR),
            _ => None,
        }
    }

    /// As [`Net::of`], named by `NCCL_NET` where the process's environment
    /// selects an RDMA network by name (NCCL uses that network or none).
    pub fn of_evidence(transport: Transport, env: &BTreeMap<String, String>) -> Option<Net> {
        let net = Net::of(transport)?;
        let Some(name) = env.get("NCCL_NET").map(|n| n.trim()).filter(|n| !n.is_empty()) else {
            return Some(net);
        };
        let plugin = Plugin::of_name(name);
        if net.plugin == Plugin::Socket || matches!(plugin, Plugin::Socket) {
            return Some(net);
        }
        // NCCL matches the name without case; a plugin prints its own spelling.
        let name = match plugin {
            Plugin::Ib => "IB",
            Plugin::Ofi => OFI_NAMES
                .into_iter()
                .find(|o| o.eq_ignore_ascii_case(name))
                .unwrap_or(name),
            _ => name,
        };
        Some(Net::new(plugin, crate::intern::intern(name), net.gdr))
    }

    /// What a cause calls this network: its name, and who provides it.
    fn text(self) -> String {
        match self.plugin {
            Plugin::Ofi => format!("{} (aws-ofi-nccl)", self.name()),
            Plugin::IbExt => format!("{} (nccl-rdma-sharp-plugins)", self.name()),
            Plugin::CollNet => format!("{} (CollNet, in-network reduction)", self.name()),
            Plugin::Other => format!("{} (a network plugin)", self.name()),
            _ => self.name().to_string(),
        }
    }
}

impl Serialize for Net {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// Reports name the path; a name that is no network reads as none, never
/// as an error.
fn net_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Net>, D::Error> {
    let name = Option::<String>::deserialize(d)?;
    Ok(name.and_then(|n| Net::of_via(&n)))
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

pub use super::path::Basis;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
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
    /// The kind of `cause` (`serve`'s `cause` label); not in reports, whose
    /// readers have the sentence.
    #[serde(skip)]
    pub cause_kind: Option<CauseKind>,
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
    /// A `mixed` verdict's paths: each one's transport and share of the bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<super::path::Share>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct LogAgreement {
    pub nccl_says: String,
    pub agrees: bool,
    /// NCCL's network where the tracer's verdict names none: what NCCL
    /// says and what the tracer saw (neither confirmed nor contradicted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unseen: Option<String>,
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

/// Whether a call label is a libnccl row's.
pub fn is_nccl(label: &str) -> bool {
    uapi::row_named(label).is_some_and(|r| r.lib == uapi::Lib::Nccl)
}

/// What the set-up evidence says of one kind of a process's connections:
/// those to ranks of its own host ([`local_part`]) or NCCL's network
/// ([`network_part`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    pub transport: Transport,
    pub host_staged: bool,
    pub evidence: Vec<String>,
}

impl Part {
    fn new(transport: Transport, host_staged: bool, evidence: String) -> Part {
        Part {
            transport,
            host_staged,
            evidence: vec![evidence],
        }
    }
}

/// Buffer exports and imports: (peer checks, imports, exports).
fn sharing(e: &Evidence) -> (u64, u64, u64) {
    (
        n(e, "cuDeviceCanAccessPeer"),
        n(e, "cuMemImportFromShareableHandle") + n(e, "cuIpcOpenMemHandle"),
        n(e, "cuMemExportToShareableHandle") + n(e, "cuIpcGetMemHandle"),
    )
}

/// Connections to ranks of its own host: peer access and imported peer
/// buffers (P2P), or shared buffers without a peer check (SHM).
pub fn local_part(e: &Evidence) -> Option<Part> {
    let (peer, import, export) = sharing(e);
    if peer > 0 && import > 0 {
        let mut p = Part::new(
            Transport::P2pPcie,
            false,
            format!(
                "cuDeviceCanAccessPeer x{peer} and {import} peer buffer imports (cuMemImportFromShareableHandle/cuIpcOpenMemHandle): GPU memory of the peer is mapped into this process"
            ),
        );
        if e.nvlink != Some(false) {
            p.transport = Transport::P2pNvlink;
        }
        if e.nvlink == Some(true) {
            p.evidence.push("the GPUs are joined by NVLink (topology)".into());
        }
        Some(p)
    } else if import > 0 || export > 0 {
        Some(Part::new(
            Transport::Shm,
            true,
            format!(
                "{export} exports and {import} imports of shareable buffers but no peer-access check: the shared buffers are host memory (NCCL SHM transport)"
            ),
        ))
    } else {
        None
    }
}

/// Connections through NCCL's network: memory registered with an RDMA NIC
/// (GPU memory with GPUDirect RDMA, host staging buffers without), else
/// pinned host staging buffers alone (sockets).
pub fn network_part(e: &Evidence) -> Option<Part> {
    if !e.calls.keys().any(|k| is_nccl(k)) {
        return None;
    }
    let host_alloc = n(e, "cuMemHostAlloc") + n(e, "cuMemAllocHost");
    let reg = |k: &str| e.registrations.get(k).copied().unwrap_or(0);
    let (host_mr, gpu_mr, dmabuf_mr) = (reg("host"), reg("gpu/peer-mem"), reg("gpu/dma-buf"));
    if host_mr + gpu_mr + dmabuf_mr > 0 {
        // NCCL's RDMA networks register their buffers with the NIC: GPU
        // memory when GPUDirect RDMA is on, host staging buffers when not.
        let mrs = format!(
            "memory registered with an RDMA NIC: {gpu_mr} MRs on GPU memory through peer memory, {dmabuf_mr} through dma-buf, {host_mr} on host memory"
        );
        Some(if dmabuf_mr > 0 {
            Part::new(
                Transport::GdrDmabuf,
                false,
                format!("{mrs}: the NIC reads and writes GPU memory (NCCL NET/IB/GDRDMA, dma-buf)"),
            )
        } else if gpu_mr > 0 {
            Part::new(
                Transport::GdrPeerMem,
                false,
                format!("{mrs}: the NIC reads and writes GPU memory (NCCL NET/IB/GDRDMA, peer memory)"),
            )
        } else {
            Part::new(
                Transport::HostStaged,
                true,
                format!(
                    "{mrs} only, {host_alloc} pinned host staging buffers: data goes GPU -> host -> NIC (NCCL NET/IB without GPUDirect RDMA)"
                ),
            )
        })
    } else if host_alloc > 0 {
        Some(Part::new(
            Transport::Socket,
            true,
            format!(
                "no buffer export/import, {host_alloc} pinned host staging buffers (cuMemHostAlloc/cuMemAllocHost): data goes GPU -> host -> socket (NCCL NET/Socket)"
            ),
        ))
    } else {
        None
    }
}

/// The verdict for one process, or None when it shows no GPU communication.
pub fn verdict(e: &Evidence) -> Option<Verdict> {
    let nccl = e.calls.keys().any(|k| is_nccl(k));
    let (_, import, export) = sharing(e);
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
            cause_kind: None,
            nccl_log: None,
            net: None,
            other_hosts: None,
            paths: Vec::new(),
        });
    }
    let mut evidence = Vec::new();
    // Ranks on other hosts reach each other only through NCCL's network: its
    // path decides, whatever P2P or SHM joins this rank to ranks of its own host.
    let network = network_part(e);
    let net_first = e.network.other_hosts.is_some() && network.is_some();
    if net_first && (import > 0 || export > 0) {
        evidence.push(format!(
            "{export} exports and {import} imports of shareable buffers: P2P or SHM to ranks of its own host; between hosts NCCL's network carries the traffic"
        ));
    }
    let part = if net_first { network } else { local_part(e).or(network) };
    let (transport, staged) = match part {
        Some(p) => {
            evidence.extend(p.evidence);
            (p.transport, p.host_staged)
        }
        None => {
            evidence.push("NCCL calls seen, but no buffer set-up evidence (attached after set-up?)".into());
            (Transport::Unknown, false)
        }
    };
    let net = if nccl {
        Net::of_evidence(transport, &e.env)
    } else {
        None
    };
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
        cause_kind: cause_kind(&e.env, transport, &e.network),
        nccl_log: None,
        net,
        other_hosts: e.network.other_hosts.clone().filter(|_| nccl),
        paths: Vec::new(),
    })
}

mod cause;
mod log;
pub use self::{cause::*, log::*};

#[cfg(test)]
mod network_tests;
#[cfg(test)]
mod tests;
