//! Why a process ended on a host-staged transport: the cause the report
//! states and `serve`'s `cause` label names ([`CauseKind`]).
use std::collections::BTreeMap;

use super::{Net, Network, Plugin, Transport, env_is, env_set};

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

/// Why NCCL's network (`net`) staged through host buffers instead of
/// GPUDirect RDMA: the variables apply to every network, since NCCL
/// decides GPUDirect RDMA per GPU and NIC before any plugin runs.
fn net_staged(env: &BTreeMap<String, String>, net: Net) -> String {
    let name = net.text();
    if let Some(v) = env.get("NCCL_NET_GDR_LEVEL") {
        format!(
            "NCCL_NET_GDR_LEVEL={v} in the process environment limits GPUDirect RDMA by GPU-NIC distance: {name} stages through host buffers"
        )
    } else if env.get("NCCL_NET_GDR_READ").is_some_and(|v| v == "0") {
        format!(
            "NCCL_NET_GDR_READ=0 in the process environment: NCCL sends from host buffers ({name} without GPUDirect RDMA reads)"
        )
    } else {
        match net.plugin {
            Plugin::Ofi => format!(
                "{name} without GPUDirect RDMA: NCCL copies GPU data into host buffers that libfabric sends (the provider has no FI_HMEM support for GPU memory, the instance's EFA has no GPUDirect RDMA, or aws-ofi-nccl turned it off: its `NET/OFI` lines in NCCL's log say which); on EFA instances with GPUDirect RDMA (p4d, p5) use the efa provider with libfabric 1.18 or later and aws-ofi-nccl's RDMA protocol"
            ),
            Plugin::Other => format!(
                "{name} without GPUDirect RDMA: NCCL stages GPU data through host buffers (the plugin does not take GPU memory, NCCL_PTR_CUDA, or NCCL's GPU-NIC distance rule turned it off)"
            ),
            _ => format!(
                "{name} without GPUDirect RDMA: NCCL stages through host buffers (no peer-memory client or dma-buf support, or the GPU and NIC are too far apart; `gdrtrace explain` names which)"
            ),
        }
    }
}

/// Why a process ended on a host-staged transport: the one decision that
/// the report's cause text ([`cause`]) and `serve`'s `cause` label
/// ([`CauseKind::id`]) both name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CauseKind {
    /// `NCCL_NET_GDR_LEVEL` limits GPUDirect RDMA by distance (the network staged).
    IbGdrLevel,
    /// `NCCL_NET_GDR_READ=0` (the network sends from host buffers).
    IbGdrRead,
    /// NET/IB (or another verbs network: IBext, CollNet) without GPUDirect
    /// RDMA, no variable forced it.
    IbNoGdr,
    /// aws-ofi-nccl (libfabric, EFA) without GPUDirect RDMA.
    OfiNoGdr,
    /// Another network plugin without GPUDirect RDMA.
    PluginNoGdr,
    /// `NCCL_NET=Socket` chose NCCL's socket network.
    NetSocketForced,
    /// `NCCL_IB_DISABLE=1` left only sockets.
    IbDisabled,
    /// Ranks on other hosts over TCP: this host has no RDMA device.
    NoRdmaDevice,
    /// Ranks on other hosts over TCP although this host has RDMA devices.
    RdmaUnused,
    /// `NCCL_P2P_DISABLE=1` (shared memory).
    P2pDisabled,
    /// `NCCL_P2P_DISABLE=1` and `NCCL_SHM_DISABLE=1` (sockets).
    P2pShmDisabled,
    /// `NCCL_SHM_DISABLE=1`, P2P not possible (sockets).
    ShmDisabled,
    /// NCCL's network between ranks it sees as other hosts or without a
    /// shared /dev/shm, nothing disabled.
    NetBetweenLocalRanks,
    /// Shared memory with nothing disabled: P2P was not possible.
    P2pNotPossible,
}

impl CauseKind {
    /// The label value (`serve`'s `cause`): short, stable, bounded.
    pub fn id(self) -> &'static str {
        match self {
            CauseKind::IbGdrLevel => "env-nccl-net-gdr-level",
            CauseKind::IbGdrRead => "env-nccl-net-gdr-read",
            CauseKind::IbNoGdr => "ib-without-gdr",
            CauseKind::OfiNoGdr => "ofi-without-gdr",
            CauseKind::PluginNoGdr => "net-plugin-without-gdr",
            CauseKind::NetSocketForced => "env-nccl-net-socket",
            CauseKind::IbDisabled => "env-nccl-ib-disable",
            CauseKind::NoRdmaDevice => "no-rdma-device",
            CauseKind::RdmaUnused => "rdma-device-unused",
            CauseKind::P2pDisabled => "env-nccl-p2p-disable",
            CauseKind::P2pShmDisabled => "env-nccl-p2p-shm-disable",
            CauseKind::ShmDisabled => "env-nccl-shm-disable",
            CauseKind::NetBetweenLocalRanks => "net-between-local-ranks",
            CauseKind::P2pNotPossible => "p2p-not-possible",
        }
    }

    /// Every kind (the label's vocabulary, for docs and tests).
    pub const ALL: [CauseKind; 14] = [
        CauseKind::IbGdrLevel,
        CauseKind::IbGdrRead,
        CauseKind::IbNoGdr,
        CauseKind::OfiNoGdr,
        CauseKind::PluginNoGdr,
        CauseKind::NetSocketForced,
        CauseKind::IbDisabled,
        CauseKind::NoRdmaDevice,
        CauseKind::RdmaUnused,
        CauseKind::P2pDisabled,
        CauseKind::P2pShmDisabled,
        CauseKind::ShmDisabled,
        CauseKind::NetBetweenLocalRanks,
        CauseKind::P2pNotPossible,
    ];

    /// The report's sentence for this cause, with the values it names and
    /// the network (`net`) that carried the traffic.
    fn text(self, env: &BTreeMap<String, String>, network: &Network, net: Net) -> String {
        match self {
            CauseKind::IbGdrLevel
            | CauseKind::IbGdrRead
            | CauseKind::IbNoGdr
            | CauseKind::OfiNoGdr
            | CauseKind::PluginNoGdr => net_staged(env, net),
            CauseKind::NetSocketForced => "NCCL_NET=Socket in the process environment selected NCCL's socket network: traffic between its ranks goes over TCP (NET/Socket), not RDMA".into(),
            CauseKind::IbDisabled => "NCCL_IB_DISABLE=1 in the process environment disabled InfiniBand/RoCE: traffic between its ranks goes over TCP sockets (NET/Socket)".into(),
            CauseKind::NoRdmaDevice | CauseKind::RdmaUnused => {
                format!("inter-node traffic over TCP sockets ({}): {}", net.text(), rdma_text(network))
            }
            CauseKind::P2pDisabled => {
                "NCCL_P2P_DISABLE=1 in the process environment disabled P2P: NCCL fell back to shared memory through the host".into()
            }
            CauseKind::P2pShmDisabled => "NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 in the process environment: NCCL fell back to the socket transport through host memory".into(),
            CauseKind::ShmDisabled => "NCCL_SHM_DISABLE=1 in the process environment, and P2P was not possible".into(),
            CauseKind::NetBetweenLocalRanks => format!(
                "NCCL used its network ({}) with P2P and SHM allowed, which it does only between ranks it places on different hosts (host hash: NCCL_HOSTID, else host name and boot id) or without a shared /dev/shm; over TCP because {}",
                net.text(),
                rdma_text(network)
            ),
            CauseKind::P2pNotPossible => {
                "no NCCL_*_DISABLE variable set: P2P was not possible between these GPUs (check topology, ACS/IOMMU, driver)".into()
            }
        }
    }
}

/// Which variable forced NCCL onto sockets, if one did.
fn socket_forced_kind(env: &BTreeMap<String, String>) -> Option<CauseKind> {
    if env_is(env, "NCCL_NET", "socket") {
        Some(CauseKind::NetSocketForced)
    } else if env_set(env, "NCCL_IB_DISABLE") {
        Some(CauseKind::IbDisabled)
    } else {
        None
    }
}

/// Why a process ended on a host-staged transport, from its environment and
/// where its peers are (None: not host-staged, or no cause known), on the
/// network its evidence names ([`Net::of_evidence`]).
pub fn cause_kind(env: &BTreeMap<String, String>, transport: Transport, network: &Network) -> Option<CauseKind> {
    cause_kind_on(env, transport, network, Net::of_evidence(transport, env))
}

/// As [`cause_kind`], on the network `net` (the one NCCL's log names).
pub fn cause_kind_on(
    env: &BTreeMap<String, String>,
    transport: Transport,
    network: &Network,
    net: Option<Net>,
) -> Option<CauseKind> {
    let p2p_off = env_set(env, "NCCL_P2P_DISABLE");
    let shm_off = env_set(env, "NCCL_SHM_DISABLE");
    let rdma = || match network.rdma_devices.as_deref() {
        Some(d) if !d.is_empty() => CauseKind::RdmaUnused,
        _ => CauseKind::NoRdmaDevice,
    };
    let plugin = net.map(|n| n.plugin);
    Some(match transport {
        Transport::HostStaged if env.contains_key("NCCL_NET_GDR_LEVEL") => CauseKind::IbGdrLevel,
        Transport::HostStaged if env.get("NCCL_NET_GDR_READ").is_some_and(|v| v == "0") => CauseKind::IbGdrRead,
        Transport::HostStaged if plugin == Some(Plugin::Ofi) => CauseKind::OfiNoGdr,
        Transport::HostStaged if plugin == Some(Plugin::Other) => CauseKind::PluginNoGdr,
        Transport::HostStaged => CauseKind::IbNoGdr,
        // Between hosts P2P and SHM are not the question: the network is.
        Transport::Socket if network.other_hosts.is_some() => socket_forced_kind(env).unwrap_or_else(rdma),
        Transport::Shm if p2p_off => CauseKind::P2pDisabled,
        Transport::Socket if shm_off && p2p_off => CauseKind::P2pShmDisabled,
        Transport::Socket if shm_off => CauseKind::ShmDisabled,
        Transport::Socket => socket_forced_kind(env).unwrap_or(CauseKind::NetBetweenLocalRanks),
        Transport::Shm => CauseKind::P2pNotPossible,
        _ => return None,
    })
}

/// The cause's sentence in the report (see [`cause_kind`]).
pub fn cause(env: &BTreeMap<String, String>, transport: Transport, network: &Network) -> Option<String> {
    cause_on(env, transport, network, Net::of_evidence(transport, env))
}

/// As [`cause`], on the network `net` (the one NCCL's log names).
pub fn cause_on(
    env: &BTreeMap<String, String>,
    transport: Transport,
    network: &Network,
    net: Option<Net>,
) -> Option<String> {
    let on = net.or_else(|| Net::of(transport)).unwrap_or(Net::SOCKET);
    cause_kind_on(env, transport, network, net).map(|k| k.text(env, network, on))
}
