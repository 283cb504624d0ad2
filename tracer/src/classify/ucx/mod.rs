//! UCX: which path each process's data took, per memory type and endpoint,
//! from evidence. UCX picks a transport per endpoint and memory type at
//! wire-up and says so only when the job was launched with
//! `UCX_PROTO_INFO=y` or `UCX_LOG_LEVEL=info`; the calls it makes say it
//! anyway (UCX 1.13 and 1.22 sources, and ucx_perftest runs in the VM tier
//! and on 2xH200, docs/validation/):
//! - `cuda_ipc`: CUDA IPC handles exported and opened (`cuIpcGetMemHandle`
//!   / `cuIpcOpenMemHandle`, or cuMem export/import), then device-to-device
//!   copies from the mapped peer memory: p2p over NVLink or PCIe;
//! - `cuda_copy` staging: copies between GPU memory and host bounce
//!   buffers, whose bytes then travel by tcp (the process's socket bytes)
//!   or shared memory: host-staged, the copied bytes being the staged bytes;
//! - `rc`/`dc` with GPU memory: MRs on GPU memory (peer memory) or dma-buf
//!   MRs, from the verbs probes: GPUDirect RDMA;
//! - host memory: socket bytes (tcp), host MRs (rc/ud), or neither (shared
//!   memory: posix, sysv, cma).
//!
//! A job attached after its set-up shows no IPC handles or allocations; its
//! copies (sides unknown), socket bytes and the GPUs' NVLink counters decide
//! then, and the verdict says it was inferred. Registration churn as UCX
//! sees it: UCT memory-domain registrations (`uct_md_mem_reg*`, a wrapper
//! calling `_v2` counted once), registration-cache lookups
//! (`ucs_rcache_get`) and misses (a region inserted into a cache's page
//! table during the lookup), and registrations per data call. UCX's own log
//! (`--ucx-log`, [`super::ucx_log`]) corroborates, never decides.
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::{Deserialize, Serialize};
use tracer_common::{Event, kind};

use super::{Transport, comm, steady::GpuLinks, transfer::Transfer};
use crate::{
    model::{Backing, Registry},
    probes::uapi::{self, Arg, Kind, Lib},
};

/// A path "carries" the data when it moved at least this fraction of it
/// (as `steady.rs`: control traffic and wire-up stay far below).
const CARRIED: f64 = 0.10;
/// NVLink is idle below this fraction of the data bytes.
const IDLE: f64 = 0.01;
/// Pending region inserts kept per thread while waiting for their lookup.
const PENDING: usize = 64;
/// Missed ranges remembered per process to recognise a repeat miss (a job
/// that misses on ever new ranges stops adding past this; repeats of the
/// remembered ones are still counted).
const MISSED: usize = 1 << 16;

/// Copies a process made through libcuda, by what the two sides are.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Copies {
    pub calls: u64,
    /// One side GPU memory, the other host memory (pinned or pageable).
    pub gpu_host_bytes: u64,
    /// Both sides GPU memory (a peer's, mapped through CUDA IPC, included).
    pub gpu_gpu_bytes: u64,
    /// Neither side is an allocation the tracer saw (attached after set-up).
    pub unknown_bytes: u64,
    /// Of `gpu_host_bytes`, the pageable-host copies the copy classifier
    /// already counted as host-staged.
    pub already_staged_bytes: u64,
}

impl Copies {
    pub fn total(&self) -> u64 {
        self.gpu_host_bytes + self.gpu_gpu_bytes + self.unknown_bytes
    }
}

/// The registration cache as UCX used it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Rcache {
    /// `ucs_rcache_get` calls.
    pub gets: u64,
    /// Lookups during which a region was inserted into a page table: the
    /// cache had no region for the range and made (registered) one.
    pub misses: u64,
    /// Misses of a range that missed before: its region was evicted or
    /// invalidated in between (thrashing).
    pub repeat_misses: u64,
    /// True when the lookups' probes were closed over budget before the
    /// end (`Setup` links): the counts cover the time before.
    pub partial: bool,
}

/// One process's UCX activity, as the probes saw it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct UcxProcess {
    pub pid: u32,
    pub comm: String,
    pub workers: u64,
    pub endpoints: u64,
    pub mem_maps: u64,
    pub mem_unmaps: u64,
    /// Registrations with UCT memory domains (`uct_md_mem_reg[_v2]`).
    pub registrations: u64,
    pub deregistrations: u64,
    pub registered_bytes: u64,
    /// Registrations by the memory they covered (`cuda`, `host`, `unknown`).
    pub registrations_by_memory: BTreeMap<String, u64>,
    pub rcache: Rcache,
    /// Data calls that move data (sends, puts, gets; receives posted aside).
    pub data_calls: u64,
    pub data_bytes: u64,
    /// Receives posted, and the capacity of their buffers.
    pub receives: u64,
    pub receive_bytes: u64,
    /// `registrations / data_calls`: near 0 with a warm cache, near 1 or
    /// more when every transfer registers its buffer.
    pub registrations_per_data_call: Option<f64>,
    pub copies: Copies,
    /// UCX transport modules the process maps (`libuct_cuda.so.0`, ...).
    #[serde(default)]
    pub modules: Vec<String>,
    /// Whether the process was traced from its start (`run`), so a buffer
    /// outside every GPU allocation seen is host memory.
    pub traced_from_start: bool,
}

/// Data calls of one (process, op, endpoint or worker), aggregated in the kernel.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct UcxEndpoint {
    pub pid: u32,
    pub op: String,
    /// The `ucp_ep_h` (the worker for receives).
    pub endpoint: String,
    pub calls: u64,
    /// Bytes passed (for receives: the buffers' capacity).
    pub bytes: u64,
    /// What the first call's buffer was (`cuda`, `host`, `unknown`).
    pub memory: String,
    pub transport: Transport,
    /// The path's `via` (`paths[]`), once judged.
    #[serde(alias = "path")]
    pub via: String,
}

/// The report's UCX section.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct UcxReport {
    pub processes: Vec<UcxProcess>,
    pub endpoints: Vec<UcxEndpoint>,
    /// What is not measured, and why.
    pub not_measured: Vec<String>,
    /// UCX's own log against the paths (`--ucx-log`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<super::ucx_log::UcxLog>,
}

/// Whether an op name is one of the UCX data calls (aggregated per endpoint).
pub fn is_data_op(name: &str) -> bool {
    uapi::TABLE.iter().any(|r| r.kind == Kind::UcxData && r.name == name)
}

/// Receives post buffers; their bytes are capacity, not data moved.
pub(crate) fn is_receive(name: &str) -> bool {
    name.contains("_recv")
}

pub(crate) fn is_ucx_op(name: &str) -> bool {
    uapi::TABLE
        .iter()
        .any(|r| r.name == name && matches!(r.lib, Lib::Ucp | Lib::Uct | Lib::Ucs))
}

/// Per-process state while tracing.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) workers: u64,
    pub(crate) endpoints: u64,
    pub(crate) mem_maps: u64,
    pub(crate) mem_unmaps: u64,
    pub(crate) regs: u64,
    pub(crate) deregs: u64,
    pub(crate) reg_bytes: u64,
    pub(crate) regs_by_memory: BTreeMap<&'static str, u64>,
    /// The last registration per thread: (memh, start): a wrapper returns
    /// the memory handle its inner call recorded, and started earlier.
    pub(crate) last_reg: HashMap<u32, (u64, u64)>,
    pub(crate) gets: u64,
    pub(crate) misses: u64,
    pub(crate) repeat_misses: u64,
    pub(crate) missed: HashSet<(u64, u64)>,
    /// Start times of page-table inserts per thread, not yet inside a lookup.
    pub(crate) inserts: HashMap<u32, Vec<u64>>,
    /// (op, handle) -> what the row's first call's buffer was.
    pub(crate) samples: BTreeMap<(&'static str, u64), Backing>,
    pub(crate) copies: Copies,
}

/// Collects the UCX evidence of every process from the event stream (the
/// aggregator feeds it, so a replay rebuilds it).
#[derive(Debug, Default)]
pub struct Tracker {
    pub(crate) procs: BTreeMap<u32, State>,
    /// The `Setup` links (registration-cache lookups) were closed over budget.
    pub(crate) setup_closed: bool,
}

pub(crate) fn memory_of(b: Backing) -> &'static str {
    match b {
        Backing::Gpu { .. } => "cuda",
        Backing::HostPinned | Backing::Host | Backing::HostPreExisting => "host",
        Backing::Unknown => "unknown",
    }
}

mod paths;
mod track;

#[cfg(test)]
mod tests;

pub use self::paths::{Context, paths, summary_line, tls_excludes, transfers};
