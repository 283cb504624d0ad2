//! Paths: the unit of judgment. A path is one process's traffic with one
//! peer, of one operation class, on one kind of memory: a UCX endpoint's
//! GETs of GPU memory, an NCCL communicator's collectives, the requests a
//! process serves for its peers, a file's reads. Each path carries its
//! transport, judged from where its bytes went (docs/paths.md): a path is
//! never called direct while host-memory traffic of its process ran in its
//! time and nothing else explains it. A process's verdict is the summary
//! of its paths: its one path's transport, or `mixed`.
use serde::{Deserialize, Serialize};

use super::Transport;

/// How the evidence of a path undecided beside a larger one ends.
const BESIDE: &str = "always ran beside a larger path of the process: too small to judge apart";

/// What a path's calls do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpClass {
    /// One-sided write into a peer's memory (`ucp_put*`, NIXL WRITE).
    Put,
    /// One-sided read of a peer's memory (`ucp_get*`, NIXL READ).
    Get,
    /// Two-sided sends (tagged, stream).
    Send,
    /// Receives posted (their bytes are the buffers' capacity).
    Recv,
    /// Active messages.
    Am,
    /// Collectives of an NCCL communicator.
    Collective,
    /// NCCL point-to-point calls.
    PointToPoint,
    /// Requests of peers served by this process's progress, with no call of
    /// its own (the target of a NIXL READ).
    Served,
    /// File reads and writes (cuFile).
    FileRead,
    FileWrite,
    /// Anything else.
    Other,
}

impl OpClass {
    /// The class of a data call by its report name (the op table's names).
    pub fn of_op(op: &str) -> OpClass {
        let op = op
            .trim_end_matches("_nbx")
            .trim_end_matches("_nbi")
            .trim_end_matches("_nb");
        match op {
            "ucp_put" | "ucp_put_nbi" => OpClass::Put,
            "ucp_get" | "ucp_get_nbi" => OpClass::Get,
            "ucp_tag_send" | "ucp_tag_send_sync" | "ucp_stream_send" => OpClass::Send,
            "ucp_tag_recv" | "ucp_stream_recv" | "ucp_am_recv_data" => OpClass::Recv,
            "ucp_am_send" => OpClass::Am,
            "ncclSend" | "ncclRecv" => OpClass::PointToPoint,
            "cuFileRead" | "cuFileReadAsync" => OpClass::FileRead,
            "cuFileWrite" | "cuFileWriteAsync" => OpClass::FileWrite,
            o if o.starts_with("nccl") => OpClass::Collective,
            _ => OpClass::Other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            OpClass::Put => "put",
            OpClass::Get => "get",
            OpClass::Send => "send",
            OpClass::Recv => "recv",
            OpClass::Am => "am",
            OpClass::Collective => "collective",
            OpClass::PointToPoint => "p2p",
            OpClass::Served => "served",
            OpClass::FileRead => "file-read",
            OpClass::FileWrite => "file-write",
            OpClass::Other => "other",
        }
    }
}

/// Who is at the other end of a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PeerKind {
    /// A UCX endpoint (`ucp_ep_h`): one remote worker (a NIXL remote agent).
    UcxEndpoint,
    /// An NCCL communicator (every peer rank of it).
    NcclCommunicator,
    /// The peers whose requests the process served.
    Remote,
    /// A file.
    File,
}

impl PeerKind {
    pub fn name(self) -> &'static str {
        match self {
            PeerKind::UcxEndpoint => "ucx-endpoint",
            PeerKind::NcclCommunicator => "nccl-communicator",
            PeerKind::Remote => "remote",
            PeerKind::File => "file",
        }
    }
}

/// Which of an NCCL communicator's peers a path reaches, by the transport
/// NCCL's channel lines name for them (`--nccl-log`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PeerGroup {
    /// Ranks of its own host: P2P, SHM, NVLS.
    Local,
    /// Ranks NCCL reaches through its network (`NET/...`).
    Remote,
    /// CollNet's switches, which reduce the data in the network (`COLLNET/...`).
    Switch,
}

impl PeerGroup {
    /// The group of the peer one of NCCL's `via` strings reaches.
    pub fn of_via(via: &str) -> Option<PeerGroup> {
        if via.starts_with("P2P") || via.starts_with("SHM") || via == "NVLS" {
            Some(PeerGroup::Local)
        } else if via.starts_with("NET/") {
            Some(PeerGroup::Remote)
        } else if via.starts_with("COLLNET/") {
            Some(PeerGroup::Switch)
        } else {
            None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PeerGroup::Local => "local peers",
            PeerGroup::Remote => "remote peers",
            PeerGroup::Switch => "CollNet switches",
        }
    }
}

/// One path of one process, judged.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Path {
    pub pid: u32,
    #[serde(default)]
    pub comm: String,
    pub peer_kind: PeerKind,
    /// The peer: the endpoint or communicator handle, the file.
    pub peer: String,
    /// An NCCL communicator's path to some of its peers only (NCCL's log
    /// listed its connections): which ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_group: Option<PeerGroup>,
    /// Their ranks (none for CollNet's switches).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peer_ranks: Vec<u32>,
    pub op: OpClass,
    /// `cuda`, `host` or `unknown`: the memory of the path's buffers.
    pub memory: String,
    pub transport: Transport,
    /// The library's name for it: `cuda_ipc`, `cuda_copy+tcp`, `NET/Socket`...
    pub via: String,
    pub calls: u64,
    /// Bytes of the path's calls (the buffers' capacity for receives).
    pub bytes: u64,
    /// Bytes that went through host memory in the path's time: copies
    /// between GPU and host memory, socket bytes (`docs/paths.md`).
    #[serde(default)]
    pub host_bytes: u64,
    /// Bytes copied device to device in the path's time.
    #[serde(default)]
    pub device_bytes: u64,
    /// Host-memory bytes that moved while this path and others ran at once,
    /// which the tracer cannot split between them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shared_host_bytes: u64,
    /// GPU data that went through host memory.
    pub host_staged: bool,
    /// Of those, the bytes staged.
    pub staged_bytes: u64,
    #[serde(default)]
    pub basis: Basis,
    pub evidence: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// What the library's own log says of the path (`--ucx-log`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<Agreement>,
    /// Where the path went over TCP: its process's TCP figures (the
    /// report's `fabric.tcp`, counted per process and socket, not per path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<PathTcp>,
}

/// The TCP figures of a path's process (`fabric.tcp.processes[]`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PathTcp {
    pub bytes_sent: u64,
    pub retransmits: u64,
    pub retransmits_per_s: f64,
    /// CPU seconds per GB sent, where the process's CPU time was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_s_per_gb: Option<f64>,
    /// More retransmissions than the network's noise (`network-lost-packets`).
    pub lossy: bool,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl Path {
    /// An unjudged path of `pid` with `peer`, class and memory.
    pub fn new(pid: u32, peer_kind: PeerKind, peer: String, op: OpClass, memory: &str) -> Path {
        Path {
            pid,
            comm: String::new(),
            peer_kind,
            peer,
            peer_group: None,
            peer_ranks: Vec::new(),
            op,
            memory: memory.to_string(),
            transport: Transport::Unknown,
            via: "unknown".into(),
            calls: 0,
            bytes: 0,
            host_bytes: 0,
            device_bytes: 0,
            shared_host_bytes: 0,
            host_staged: false,
            staged_bytes: 0,
            basis: Basis::SetUp,
            evidence: Vec::new(),
            cause: None,
            log: None,
            tcp: None,
        }
    }

    /// Whether its bytes went over TCP: NCCL's NET/Socket, UCX's `tcp`.
    pub fn over_tcp(&self) -> bool {
        self.transport == Transport::Socket || self.via.contains("tcp") || self.via.contains("Socket")
    }

    /// Whether the path's data may be called direct: a transport whose
    /// bytes stay out of host memory (P2P, same-device IPC, GPUDirect RDMA).
    pub fn direct(&self) -> bool {
        self.transport.direct()
    }

    /// Leaves the path undecided: its calls always ran beside a larger
    /// path of the process, whose windows (and evidence) it shares.
    pub fn mark_beside(&mut self) {
        self.evidence
            .push(format!("its {} calls ({} bytes) {BESIDE}", self.calls, self.bytes));
    }

    /// Whether [`Path::mark_beside`] left it undecided.
    pub fn undecided_beside(&self) -> bool {
        self.transport == Transport::Unknown && self.evidence.last().is_some_and(|e| e.ends_with(BESIDE))
    }

    /// One line naming the path: `pid 650 get ucx endpoint 0x7f.. (cuda)`.
    pub fn label(&self) -> String {
        let peer = match self.peer_kind {
            PeerKind::UcxEndpoint => format!("ucx endpoint {}", self.peer),
            PeerKind::NcclCommunicator => match self.peer_group {
                Some(g) if self.peer_ranks.is_empty() => format!("communicator {} {}", self.peer, g.name()),
                Some(g) => format!(
                    "communicator {} {} (ranks {})",
                    self.peer,
                    g.name(),
                    self.peer_ranks
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => format!("communicator {}", self.peer),
            },
            PeerKind::Remote if self.op == OpClass::Served => "its peers' requests".to_string(),
            PeerKind::Remote => "its peers".to_string(),
            PeerKind::File => format!("file {}", self.peer),
        };
        format!("pid {} {} {} ({})", self.pid, self.op.name(), peer, self.memory)
    }
}

/// A path's share of its process's bytes, in a `mixed` verdict.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Share {
    pub op: OpClass,
    pub peer: String,
    pub transport: Transport,
    /// Fraction of the process's path bytes, 0 to 1.
    pub share: f64,
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

/// What the log says for one path, and whether it agrees.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Agreement {
    pub ucx_says: String,
    pub agrees: bool,
}
