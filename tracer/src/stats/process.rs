//! What the aggregator keeps per process and over the trace, as the report
//! writes it: a process's figures (`ProcInfo`), its NCCL communicators,
//! its socket totals and sampled time, and the duty cycle's totals.
use std::collections::BTreeMap;

use tracer_common::Event;

/// Per-process figures; serialized inline in the report's `processes[]`.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ProcInfo {
    pub comm: String,
    pub parent: Option<u32>,
    pub exited: bool,
    pub calls: BTreeMap<String, u64>,
    pub errors: u64,
    pub pages_pinned: u64,
    pub pages_unpinned: u64,
    /// Pages pinned by pin-family calls nested inside a verbs registration
    /// (`ib_umem_get`) on the same thread.
    pub pages_pinned_by_registration: u64,
    /// Calls per transport verdict.
    #[serde(deserialize_with = "crate::intern::keys")]
    pub transports: BTreeMap<&'static str, u64>,
    /// Bytes moved through host staging (host-staged, shm, socket verdicts).
    pub staged_bytes: u64,
    /// Registrations of any kind (MRs, io_uring buffers, host registers).
    pub registrations: u64,
    /// VmPin at the moment the tracer attached (pre-existing pinned memory).
    pub vm_pin_kib_at_attach: Option<u64>,
    /// NCCL_*/CUDA_*/UCX_* variables of the process environment (read while it ran).
    pub env: BTreeMap<String, String>,
    pub vm_pin_kib_max: u64,
    pub cpu_seconds: Option<f64>,
    /// Socket data syscalls (in-kernel aggregation): bytes the kernel moved.
    pub socket: SocketTotals,
    /// Bytes of data-moving calls (copies, registrations' ranges are not counted).
    pub moved_bytes: u64,
    /// Copies that went through host memory (pageable copies, peer copies
    /// without peer access, D2H+H2D pairs through one host buffer).
    pub staging_copies: u64,
    /// D2H followed by H2D through the same host buffer (one staged transfer each).
    pub staged_pairs: u64,
    /// The rank count of each NCCL communicator the process joined
    /// (`ncclCommInitRank*`'s `nranks` argument), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nccl_ranks: Vec<u32>,
    /// The NCCL communicators the process joined, with the identity every
    /// rank of one communicator shares (`comm_id`), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub communicators: Vec<Communicator>,
    /// Its established TCP connections, read where one of its NCCL
    /// communicators had no identity (`identity::connections`): ranks
    /// holding the two ends of one connection are one job.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<crate::identity::Connection>,
    /// Whether `connections` was read.
    #[serde(skip)]
    pub connections_read: bool,
    /// Time traced while the sampled rows' duty cycle ran, and the part of
    /// it they counted in (absent when every call was counted): where it is
    /// less, the process's collective figures are estimates (`sampling/estimator.rs`).
    #[serde(skip_serializing_if = "SampledTime::is_exact")]
    pub collectives_sampled: SampledTime,
    /// Whether `env` was read since the last exec (an empty environment is an answer too).
    #[serde(skip)]
    pub env_read: bool,
}

/// One NCCL communicator of a process: its local handle and the identity
/// its ranks share.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Communicator {
    /// The local `ncclComm_t` (as `collectives[].communicator` names it).
    pub communicator: String,
    /// The init call (`ncclCommInitRank`, `ncclCommInitRankConfig`, ...);
    /// empty where it was not traced (the identity came from elsewhere).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub init: String,
    /// The hash of the `ncclUniqueId` every rank passed, as NCCL 2.26+
    /// prints it (`commId 0x...` in its `Init START`/`Init COMPLETE` lines):
    /// `0x` and 16 lowercase hex digits. Absent where the call takes no id
    /// (`ncclCommInitAll`, `ncclCommSplit`) or it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comm_id: Option<String>,
    /// The same id hashed as NCCL 2.18 to 2.25 print it (their `getHash`
    /// was DJB2a).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comm_id_legacy: Option<String>,
    /// Where `comm_id` came from: the init call, or NCCL's RAS service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comm_id_source: Option<crate::identity::IdSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nranks: Option<u32>,
}

/// Whether a communicator of `nranks` ranks moves its collectives' bytes
/// between devices: not with one rank, whose collectives stay in its one
/// GPU's memory (NCCL copies send to receive buffer, or nothing in place).
/// A rank count that is unknown (its init not traced) counts as moving.
pub fn crosses_devices(nranks: Option<u32>) -> bool {
    nranks != Some(1)
}

impl Communicator {
    /// A hash as NCCL prints it ([`crate::identity::hex_id`]).
    pub fn hex(hash: u64) -> String {
        crate::identity::hex_id(hash)
    }

    /// The communicator a successful `ncclCommInitRank*` call made, from
    /// its record: `args[0]` the new `ncclComm_t` (dereferenced at return),
    /// `args[1]` nranks, `args[2]` rank, and for rows with an id its two
    /// hashes (`tracer_common::nccl_id`; both 0: unreadable).
    pub fn of_init(e: &Event, row: &crate::probes::uapi::Row) -> Self {
        use tracer_common::nccl_id;
        let (h, legacy) = (e.args[nccl_id::HASH_ARG], e.args[nccl_id::LEGACY_HASH_ARG]);
        let id = row.unique_id.is_some() && (h, legacy) != (0, 0);
        let all = row.name == "ncclCommInitAll";
        Communicator {
            communicator: format!("{:#x}", e.args[0]),
            init: row.name.to_string(),
            comm_id: id.then(|| Self::hex(h)),
            comm_id_legacy: id.then(|| Self::hex(legacy)),
            comm_id_source: id.then_some(crate::identity::IdSource::InitCall),
            // ncclCommInitAll(comms, ndev, devlist): one process holds every rank.
            rank: (!all).then_some(e.args[2] as u32),
            nranks: Some(e.args[1] as u32),
        }
    }
}

/// Traced and sampled time of one process (`Input::Duty`), in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SampledTime {
    pub sampled_us: u64,
    pub traced_us: u64,
}

impl SampledTime {
    /// Every call of the process was counted (no off phase while it was traced).
    pub fn is_exact(&self) -> bool {
        self.sampled_us >= self.traced_us
    }

    /// The share of its traced time the rows counted (1 when exact).
    pub fn share(&self) -> f64 {
        if self.is_exact() {
            1.0
        } else {
            self.sampled_us as f64 / self.traced_us as f64
        }
    }
}

/// The duty cycle over the whole trace (`Input::Duty`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct DutyTotals {
    pub on_us: u64,
    pub off_us: u64,
    /// Off phases begun.
    pub off_phases: u64,
    /// Whether the last interval ended counting.
    #[serde(skip)]
    pub(super) ended_on: bool,
}

/// A process's socket traffic, summed over its sockets.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SocketTotals {
    pub calls: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Sockets (fds) that moved data.
    pub sockets: u64,
}
