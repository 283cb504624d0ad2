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
    /// The path of each memory type the process moved (after judging).
    #[serde(default)]
    pub paths: Vec<UcxPath>,
}

/// The path one memory type's data took in one process.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct UcxPath {
    /// `cuda` or `host`.
    pub memory: String,
    pub transport: Transport,
    /// The UCX transports it stands for: `cuda_ipc`, `cuda_copy+tcp`,
    /// `cuda_copy+shm`, `rc/dc (peer memory)`, `tcp`, `shm`, `rc/ud`.
    pub path: String,
    /// GPU data that went through host memory.
    pub host_staged: bool,
    pub staged_bytes: u64,
    /// From the steady state (no set-up calls seen).
    pub inferred: bool,
    pub evidence: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// What UCX's own log says for this process and memory type (`--ucx-log`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<super::ucx_log::Agreement>,
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
    pub path: String,
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

impl Tracker {
    /// The first call of an aggregated row (`op_flags::SAMPLE_FIRST`): what
    /// its buffer argument points at.
    pub fn sample(&mut self, e: &Event, registry: &Registry) {
        let Some((_, row)) = uapi::row_of(e.op) else { return };
        let Some((count, _, handle)) = row.coll else { return };
        let Some(buffer) = (count as usize).checked_sub(1) else {
            return;
        };
        let backing = registry.backing(e.pid, e.args[buffer]);
        let key = (row.name, e.args.get(handle as usize).copied().unwrap_or(0));
        self.procs
            .entry(e.pid)
            .or_default()
            .samples
            .entry(key)
            .or_insert(backing);
    }

    /// The set-up links were closed: lookups are no longer seen.
    pub fn setup_closed(&mut self) {
        self.setup_closed = true;
    }

    /// A completed call (after the registry saw it).
    pub fn observe(&mut self, e: &Event, transport: Transport, registry: &Registry) {
        if e.kind != kind::CALL {
            return;
        }
        let Some((_, row)) = uapi::row_of(e.op) else { return };
        let ok = e.ret == 0;
        if row.kind == Kind::Copy {
            if ok {
                self.copy(e, row, transport, registry);
            }
            return;
        }
        if !matches!(row.lib, Lib::Ucp | Lib::Uct | Lib::Ucs) {
            return;
        }
        let s = self.procs.entry(e.pid).or_default();
        match row.kind {
            Kind::UcxWorker if ok => s.workers += 1,
            Kind::UcxEndpoint if ok => s.endpoints += 1,
            Kind::UcxMemMap if ok => s.mem_maps += 1,
            Kind::UcxMemUnmap if ok => s.mem_unmaps += 1,
            Kind::UcxMdReg if ok => {
                // 1.22's uct_md_mem_reg calls uct_md_mem_reg_v2: the inner
                // call returns first with the same handle.
                let memh = e.args[4];
                if s.last_reg
                    .get(&e.tid)
                    .is_some_and(|(h, start)| *h == memh && e.start_ns <= *start)
                {
                    return;
                }
                s.last_reg.insert(e.tid, (memh, e.start_ns));
                s.regs += 1;
                s.reg_bytes += e.args[2];
                *s.regs_by_memory
                    .entry(memory_of(registry.backing(e.pid, e.args[1])))
                    .or_default() += 1;
            }
            Kind::UcxMdDereg if ok => s.deregs += 1,
            Kind::UcxRegionInsert => {
                let v = s.inserts.entry(e.tid).or_default();
                if v.len() >= PENDING {
                    v.remove(0);
                }
                v.push(e.start_ns);
            }
            Kind::UcxRcacheGet => {
                s.gets += 1;
                let (start, end) = (e.start_ns, e.start_ns + e.dur_ns);
                let inside = s
                    .inserts
                    .get_mut(&e.tid)
                    .map(|v| {
                        let n = v.iter().filter(|t| (start..=end).contains(*t)).count();
                        v.retain(|t| !(start..=end).contains(t));
                        n
                    })
                    .unwrap_or(0);
                if inside > 0 {
                    s.misses += 1;
                    let range = (e.args[1], e.args[2]);
                    if s.missed.contains(&range) {
                        s.repeat_misses += 1;
                    } else if s.missed.len() < MISSED {
                        s.missed.insert(range);
                    }
                }
            }
            _ => {}
        }
    }

    fn copy(&mut self, e: &Event, row: &uapi::Row, transport: Transport, registry: &Registry) {
        let gpu = |a: u64| matches!(registry.backing(e.pid, a), Backing::Gpu { .. });
        let name = row.name;
        let sized = row.args.len() >= 3 && row.args[2] == Arg::Bytes;
        let peer = name.starts_with("cuMemcpyPeer");
        if !sized && !peer {
            return; // 2D/3D copies: their size is behind a descriptor pointer
        }
        let bytes = if peer { e.args[4] } else { e.args[2] };
        let c = &mut self.procs.entry(e.pid).or_default().copies;
        c.calls += 1;
        // The API names the direction; unified copies need the registry.
        if peer || name.contains("DtoD") {
            c.gpu_gpu_bytes += bytes;
        } else if name.contains("HtoD") || name.contains("DtoH") {
            c.gpu_host_bytes += bytes;
        } else {
            match (gpu(e.args[0]), gpu(e.args[1])) {
                (true, true) => c.gpu_gpu_bytes += bytes,
                (true, false) | (false, true) => c.gpu_host_bytes += bytes,
                (false, false) => {
                    c.unknown_bytes += bytes;
                    return;
                }
            }
        }
        if transport == Transport::HostStaged && !(peer || name.contains("DtoD")) {
            c.already_staged_bytes += bytes;
        }
    }
}

/// What the decision needs besides the UCX evidence.
#[derive(Clone, Debug, Default)]
pub struct Context {
    pub calls: BTreeMap<String, u64>,
    pub env: BTreeMap<String, String>,
    pub socket_bytes: u64,
    /// MRs registered on GPU memory: through peer memory, through dma-buf.
    pub gpu_mrs: u64,
    pub dmabuf_mrs: u64,
    /// MRs on host memory (RDMA with host memory).
    pub host_mrs: u64,
    pub nvlink: Option<bool>,
    pub links: Option<GpuLinks>,
    /// Memory types of the process's data calls.
    pub memories: BTreeSet<String>,
}

impl Context {
    fn n(&self, op: &str) -> u64 {
        self.calls.get(op).copied().unwrap_or(0)
    }

    /// Whether the process calls NCCL (its NCCL verdict stays).
    pub fn nccl(&self) -> bool {
        self.calls.keys().any(|k| k.starts_with("nccl"))
    }
}

pub(crate) fn gb(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.2} GB", b as f64 / 1e9)
    } else {
        format!("{:.1} MB", b as f64 / 1e6)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    a as f64 / b.max(1) as f64
}

/// What `UCX_TLS` does to one transport: `Some(true)` excluded,
/// `Some(false)` allowed explicitly or by an alias, None when unset. UCX
/// aliases: `cuda` (cuda_copy, cuda_ipc, gdr_copy), `sm`/`shm` (posix,
/// sysv, cma, knem, xpmem), `ib` (rc, ud, dc and their variants), `all`.
pub fn tls_excludes(env: &BTreeMap<String, String>, tl: &str) -> Option<bool> {
    let value = env.get("UCX_TLS")?.trim();
    let (negated, list) = match value.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, value),
    };
    let family = |name: &str| -> bool {
        let name = name.trim().trim_end_matches("_x");
        name == tl
            || name == "all"
            || (name == "cuda" && tl.starts_with("cuda") || name == "cuda" && tl == "gdr_copy")
            || ((name == "sm" || name == "shm") && matches!(tl, "posix" | "sysv" | "cma" | "knem" | "xpmem"))
            || (name == "ib" && (tl.starts_with("rc") || tl.starts_with("ud") || tl.starts_with("dc")))
            || (name == "rc" && tl.starts_with("rc"))
            || (name == "dc" && tl.starts_with("dc"))
            || (name == "ud" && tl.starts_with("ud"))
    };
    let listed = list.split(',').any(family);
    Some(if negated { listed } else { !listed })
}

/// The path of GPU data in one process.
fn gpu_path(u: &UcxProcess, cx: &Context) -> UcxPath {
    let c = &u.copies;
    let exports = cx.n("cuIpcGetMemHandle") + cx.n("cuMemExportToShareableHandle");
    let imports = cx.n("cuIpcOpenMemHandle") + cx.n("cuMemImportFromShareableHandle");
    let mut p = UcxPath {
        memory: "cuda".into(),
        transport: Transport::Unknown,
        path: "unknown".into(),
        host_staged: false,
        staged_bytes: 0,
        inferred: false,
        evidence: Vec::new(),
        cause: None,
        log: None,
    };
    let p2p = || match cx.nvlink {
        Some(false) => (Transport::P2pPcie, "PCIe (no NVLink between the GPUs)"),
        Some(true) => (Transport::P2pNvlink, "NVLink"),
        None => (Transport::P2pNvlink, "NVLink assumed (topology unknown)"),
    };
    if cx.gpu_mrs + cx.dmabuf_mrs > 0 {
        let dmabuf = cx.dmabuf_mrs > cx.gpu_mrs;
        p.transport = if dmabuf {
            Transport::GdrDmabuf
        } else {
            Transport::GdrPeerMem
        };
        p.path = if dmabuf {
            "rc/dc (dma-buf)".into()
        } else {
            "rc/dc (peer memory)".into()
        };
        p.evidence.push(format!(
            "{} MRs on GPU memory through peer memory and {} through dma-buf (verbs probes): the NIC reads and writes GPU memory (GPUDirect RDMA)",
            cx.gpu_mrs, cx.dmabuf_mrs
        ));
    } else if exports + imports > 0 || (c.gpu_gpu_bytes > 0 && c.gpu_gpu_bytes >= c.gpu_host_bytes) {
        let (t, link) = p2p();
        p.transport = t;
        p.path = "cuda_ipc".into();
        p.evidence.push(format!(
            "{exports} CUDA IPC handles exported and {imports} opened (cuIpcGetMemHandle/cuIpcOpenMemHandle, cuMem export/import), {} copied device to device: GPU memory of the peer is mapped and copied directly over {link}",
            gb(c.gpu_gpu_bytes)
        ));
    } else if c.gpu_host_bytes > 0 {
        staged(&mut p, u, cx, c.gpu_host_bytes, false);
    } else if c.unknown_bytes > 0 {
        p.inferred = true;
        p.evidence.push(format!(
            "inferred from the steady state (allocations made before the probes were live): {} copies through libcuda moved {} between memory the tracer did not see allocated",
            c.calls,
            gb(c.unknown_bytes)
        ));
        let nv = cx.links.as_ref().map(|l| l.nvlink_bytes);
        match &cx.links {
            Some(l) if ratio(l.nvlink_bytes, c.unknown_bytes) >= CARRIED => {
                let (t, _) = p2p();
                p.transport = t;
                p.path = "cuda_ipc".into();
                p.evidence.push(format!(
                    "the GPUs' NVLink counters moved {} in the same window ({:.0}% of the copied bytes): device-to-device copies over NVLink (cuda_ipc)",
                    gb(l.nvlink_bytes),
                    ratio(l.nvlink_bytes, c.unknown_bytes) * 100.0
                ));
            }
            _ if ratio(cx.socket_bytes, c.unknown_bytes) >= CARRIED
                || tls_excludes(&cx.env, "cuda_ipc") == Some(true)
                || cx.links.as_ref().is_some_and(|l| {
                    l.nvlink_between_gpus && l.rdma_nics == 0 && ratio(l.nvlink_bytes, c.unknown_bytes) < IDLE
                }) =>
            {
                if let Some(b) = nv {
                    p.evidence.push(format!(
                        "NVLink moved {} ({:.2}% of the copied bytes): not device to device",
                        gb(b),
                        ratio(b, c.unknown_bytes) * 100.0
                    ));
                }
                staged(&mut p, u, cx, c.unknown_bytes, true);
            }
            _ => p.evidence.push(format!(
                "NVLink counters {} and sockets {}: not enough to tell CUDA IPC from staging",
                nv.map_or("unavailable".to_string(), gb),
                gb(cx.socket_bytes)
            )),
        }
    } else if let Some(l) = cx
        .links
        .as_ref()
        .filter(|l| u.data_bytes > 0 && ratio(l.nvlink_bytes, u.data_bytes) >= CARRIED)
    {
        let (t, _) = p2p();
        p.transport = t;
        p.path = "cuda_ipc".into();
        p.inferred = true;
        p.evidence.push(format!(
            "inferred from the steady state: no copies in this process (the peer copies), and NVLink moved {} for {} of GPU data sent ({:.0}%)",
            gb(l.nvlink_bytes),
            gb(u.data_bytes),
            ratio(l.nvlink_bytes, u.data_bytes) * 100.0
        ));
    } else {
        p.evidence.push(
            "GPU memory in UCX data calls, but no CUDA IPC handles, no copies through libcuda and no MRs on GPU memory were seen (attached after set-up, and the peer does the copies?)"
                .into(),
        );
    }
    if p.host_staged && tls_excludes(&cx.env, "cuda_ipc") == Some(true) {
        p.cause = Some(format!(
            "UCX_TLS={} in the process environment excludes cuda_ipc: UCX staged GPU data through host memory (cuda_copy)",
            cx.env.get("UCX_TLS").map_or("", String::as_str)
        ));
    }
    p
}

/// Fills a host-staged (cuda_copy) path: the bytes copied between GPU and
/// host memory are the staged bytes; tcp or shared memory carried them.
fn staged(p: &mut UcxPath, u: &UcxProcess, cx: &Context, bytes: u64, inferred: bool) {
    p.transport = Transport::HostStaged;
    p.host_staged = true;
    p.staged_bytes = bytes;
    p.inferred |= inferred;
    let carrier = if ratio(cx.socket_bytes, bytes) >= CARRIED {
        p.evidence.push(format!(
            "its socket send/recv syscalls moved {} ({:.0}% of the staged bytes): tcp carried the host copies",
            gb(cx.socket_bytes),
            ratio(cx.socket_bytes, bytes) * 100.0
        ));
        "tcp"
    } else if cx.host_mrs > 0 {
        p.evidence.push(format!(
            "{} MRs on host memory: RDMA carried the host copies",
            cx.host_mrs
        ));
        "rc/ud"
    } else {
        p.evidence.push(format!(
            "sockets moved {} and no host MR was registered: shared memory carried the host copies",
            gb(cx.socket_bytes)
        ));
        "shm"
    };
    p.path = format!("cuda_copy+{carrier}");
    let of = if u.data_bytes > 0 {
        format!(
            " ({:.1}% of the {} sent)",
            ratio(bytes, u.data_bytes) * 100.0,
            gb(u.data_bytes)
        )
    } else {
        String::new()
    };
    p.evidence.insert(
        0,
        format!(
            "{} copied between GPU and host memory through libcuda{of}: cuda_copy staging through host bounce buffers",
            gb(bytes)
        ),
    );
}

/// The path of host-memory data in one process.
fn host_path(u: &UcxProcess, cx: &Context, bytes: u64) -> UcxPath {
    let mut p = UcxPath {
        memory: "host".into(),
        transport: Transport::Unknown,
        path: "unknown".into(),
        host_staged: false,
        staged_bytes: 0,
        inferred: false,
        evidence: Vec::new(),
        cause: None,
        log: None,
    };
    if bytes == 0 {
        p.evidence.push("data calls moved no bytes".into());
    } else if cx.socket_bytes > 0 && ratio(cx.socket_bytes, bytes) >= CARRIED {
        p.transport = Transport::Socket;
        p.path = "tcp".into();
        p.evidence.push(format!(
            "its socket send/recv syscalls moved {} for {} of host-memory data calls: tcp",
            gb(cx.socket_bytes),
            gb(bytes)
        ));
    } else if cx.host_mrs > 0 {
        p.transport = Transport::HostOnly;
        p.path = "rc/ud".into();
        p.evidence.push(format!(
            "{} MRs on host memory (verbs probes), {} UCT registrations: the NIC moves host memory directly (RDMA)",
            cx.host_mrs, u.registrations
        ));
    } else {
        p.transport = Transport::Shm;
        p.path = "shm".into();
        p.evidence.push(format!(
            "{} of host-memory data calls, sockets moved {} and no MR was registered: shared memory (posix/sysv/cma)",
            gb(bytes),
            gb(cx.socket_bytes)
        ));
    }
    p
}

/// The paths of one process: one per memory type its data had.
pub fn paths(u: &UcxProcess, cx: &Context) -> Vec<UcxPath> {
    let mut out = Vec::new();
    // GPU data: a buffer in a GPU allocation, or (memory not seen allocated)
    // copies through libcuda, GPU MRs, or NVLink busy with the data's bytes.
    let gpu_signs = u.copies.total() > 0
        || cx.gpu_mrs + cx.dmabuf_mrs > 0
        || cx
            .links
            .as_ref()
            .is_some_and(|l| u.data_bytes > 0 && ratio(l.nvlink_bytes, u.data_bytes) >= CARRIED);
    let gpu =
        cx.memories.contains("cuda") || ((cx.memories.contains("unknown") || cx.memories.is_empty()) && gpu_signs);
    if gpu {
        out.push(gpu_path(u, cx));
    }
    let host = cx.memories.contains("host") || (!gpu && !cx.memories.is_empty());
    if host || (out.is_empty() && u.data_calls + u.receives > 0) {
        // A receiver's data is what its posted buffers could hold.
        out.push(host_path(u, cx, u.data_bytes.max(u.receive_bytes)));
    }
    out
}

/// The verdict a process's paths stand for (GPU data first).
pub fn verdict_of(u: &UcxProcess, paths: &[UcxPath]) -> Option<comm::Verdict> {
    let p = paths.first()?;
    let mut evidence = vec![format!(
        "UCX: {} workers, {} endpoints, {} data calls ({}), {} UCT registrations; {} memory via {}",
        u.workers,
        u.endpoints,
        u.data_calls,
        gb(u.data_bytes),
        u.registrations,
        p.memory,
        p.path
    )];
    evidence.extend(p.evidence.iter().cloned());
    Some(comm::Verdict {
        pid: u.pid,
        comm: u.comm.clone(),
        transport: p.transport,
        host_staged: p.host_staged,
        basis: if p.inferred {
            comm::Basis::SteadyState
        } else {
            comm::Basis::SetUp
        },
        evidence,
        cause: p.cause.clone(),
        nccl_log: None,
    })
}

/// One transfer record per (process, op, endpoint) of the data calls, with
/// the endpoint's path (like the collectives' records).
pub fn transfers(ux: &UcxReport, comms: &BTreeMap<u32, String>) -> Vec<Transfer> {
    ux.endpoints
        .iter()
        .map(|e| Transfer {
            pid: e.pid,
            tid: e.pid,
            comm: comms.get(&e.pid).cloned().unwrap_or_default(),
            op: e.op.clone(),
            bytes: e.bytes,
            start_ns: 0,
            dur_ns: 0,
            transport: e.transport,
            failed: false,
            evidence: format!(
                "{} UCX calls on endpoint {} aggregated in the kernel; {} memory via {}",
                e.calls, e.endpoint, e.memory, e.path
            ),
            communicator: Some(e.endpoint.clone()),
            calls: Some(e.calls),
        })
        .collect()
}

/// The explain rules about UCX (registered in `explain::RULES`). Like every
/// rule they read the report's JSON, so saved reports are explained alike.
pub mod rules {
    use std::collections::BTreeMap;

    use serde_json::Value;

    use super::tls_excludes;
    use crate::classify::explain::{
        Hits, arr, env, peer_client, peer_client_evidence, pid_of, process, registration, s, u,
    };

    fn ucx_processes(r: &Value) -> &[Value] {
        arr(&r["ucx"]["processes"])
    }

    fn env_of(r: &Value, pid: u32) -> BTreeMap<String, String> {
        process(r, pid)
            .and_then(|p| p["env"].as_object())
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn calls(r: &Value, pid: u32, op: &str) -> u64 {
        process(r, pid).map_or(0, |p| u(&p["calls"][op]))
    }

    /// Host-staged GPU paths of a UCX process.
    fn staged_gpu(up: &Value) -> Vec<&Value> {
        arr(&up["paths"])
            .iter()
            .filter(|p| p["host_staged"] == true && s(&p["memory"]) == "cuda")
            .collect()
    }

    fn describe(p: &Value) -> String {
        format!(
            "{} memory went {} via {} ({} bytes staged through host memory)",
            s(&p["memory"]),
            s(&p["transport"]),
            s(&p["path"]),
            u(&p["staged_bytes"])
        )
    }

    pub fn tls_excludes_direct(r: &Value) -> Hits {
        let rdma_nic = !arr(&r["facts"]["rdma_devices"]).is_empty();
        let mut out = Vec::new();
        for up in ucx_processes(r) {
            let pid = pid_of(up);
            let staged = staged_gpu(up);
            let envm = env_of(r, pid);
            let (Some(first), Some(tls)) = (staged.first(), envm.get("UCX_TLS")) else {
                continue;
            };
            let mut ev: Vec<String> = [
                ("cuda_ipc", "CUDA IPC between the GPUs of one node", true),
                ("rc_mlx5", "rc, GPUDirect RDMA through the NIC", rdma_nic),
                ("dc_mlx5", "dc, GPUDirect RDMA through the NIC", rdma_nic),
            ]
            .into_iter()
            .filter(|(tl, _, relevant)| *relevant && tls_excludes(&envm, tl) == Some(true))
            .map(|(tl, what, _)| format!("UCX_TLS={tls} in the process environment excludes {tl} ({what})"))
            .collect();
            if ev.is_empty() {
                continue;
            }
            ev.push(describe(first));
            out.push((pid, ev));
        }
        out
    }

    pub fn cuda_ipc_unavailable(r: &Value) -> Hits {
        let mut out = Vec::new();
        for up in ucx_processes(r) {
            let pid = pid_of(up);
            let envm = env_of(r, pid);
            let Some(first) = staged_gpu(up).into_iter().next() else {
                continue;
            };
            if tls_excludes(&envm, "cuda_ipc") == Some(true) {
                continue;
            }
            let ipc: u64 = [
                "cuIpcGetMemHandle",
                "cuIpcOpenMemHandle",
                "cuMemExportToShareableHandle",
                "cuMemImportFromShareableHandle",
            ]
            .iter()
            .map(|op| calls(r, pid, op))
            .sum();
            if ipc > 0 {
                continue;
            }
            let mut ev = vec![
                match envm.get("UCX_TLS") {
                    Some(v) => format!("UCX_TLS={v} allows cuda_ipc"),
                    None => "UCX_TLS is not set: every transport, cuda_ipc included, is allowed".into(),
                },
                "no CUDA IPC handle was exported or opened (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuMem export/import: 0 calls)".into(),
                describe(first),
            ];
            let modules: Vec<&str> = arr(&up["modules"]).iter().map(s).collect();
            if !modules.is_empty() && !modules.iter().any(|m| m.starts_with("libuct_cuda")) {
                ev.push(format!(
                    "UCX's CUDA transport module (libuct_cuda) is not loaded; the process maps {}",
                    modules.join(", ")
                ));
            }
            if r["facts"]["nvlink"] == false {
                ev.push("no NVLink joins the GPUs (topology): peer access, if any, is over PCIe".into());
            }
            for l in arr(&r["ucx"]["log"]["processes"]).iter().filter(|l| pid_of(l) == pid) {
                ev.extend(
                    arr(&l["warnings"])
                        .iter()
                        .map(s)
                        .filter(|w| w.contains("cuda_ipc") || w.contains("cuIpc") || w.contains("peer"))
                        .map(|w| format!("UCX log: {w}")),
                );
            }
            out.push((pid, ev));
        }
        out
    }

    pub fn gpu_rdma_without_peer_memory(r: &Value) -> Hits {
        if peer_client(r) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for up in ucx_processes(r) {
            let pid = pid_of(up);
            let mut ev: Vec<String> = staged_gpu(up)
                .into_iter()
                .filter(|p| s(&p["path"]).ends_with("rc/ud"))
                .map(describe)
                .collect();
            if let Some(reg) = registration(r).iter().find(|x| pid_of(x) == pid) {
                if u(&reg["by_backing"]["gpu/dma-buf"]["registrations"]) > 0 {
                    continue;
                }
                ev.extend(
                    arr(&reg["failed_registrations"])
                        .iter()
                        .filter(|f| f["backing"].get("gpu").is_some())
                        .map(|f| {
                            format!(
                                "{} on GPU memory {:#x}+{} failed",
                                s(&f["op"]),
                                u(&f["addr"]),
                                u(&f["length"])
                            )
                        }),
                );
            }
            if ev.is_empty() {
                continue;
            }
            ev.extend(peer_client_evidence(r));
            out.push((pid, ev));
        }
        out
    }

    fn off(v: &str) -> bool {
        matches!(v.to_ascii_lowercase().as_str(), "n" | "no" | "0" | "off" | "false")
    }

    fn counts(up: &Value) -> String {
        format!(
            "{} UCT registrations and {} deregistrations for {} data calls ({}); {} rcache lookups, {} misses",
            u(&up["registrations"]),
            u(&up["deregistrations"]),
            u(&up["data_calls"]),
            up["registrations_per_data_call"]
                .as_f64()
                .map_or("no data calls".to_string(), |x| format!("{x:.2} per call")),
            u(&up["rcache"]["gets"]),
            u(&up["rcache"]["misses"])
        )
    }

    pub fn rcache_disabled(r: &Value) -> Hits {
        let mut out = Vec::new();
        for up in ucx_processes(r) {
            let pid = pid_of(up);
            let Some(p) = process(r, pid) else { continue };
            let mut ev = Vec::new();
            if let Some(v) = env(p, "UCX_RCACHE_ENABLE").filter(|v| off(v)) {
                ev.push(format!(
                    "UCX_RCACHE_ENABLE={v} in the process environment: UCX's own registration cache is off"
                ));
            }
            if let Some(v) = env(p, "UCX_IB_REG_METHODS").filter(|v| !v.split(',').any(|m| m.trim() == "rcache")) {
                ev.push(format!(
                    "UCX_IB_REG_METHODS={v} in the process environment: the InfiniBand memory domain registers without its cache"
                ));
            }
            if ev.is_empty() || u(&up["registrations"]) == 0 {
                continue;
            }
            ev.push(counts(up));
            out.push((pid, ev));
        }
        out
    }

    pub fn rcache_thrashing(r: &Value) -> Hits {
        let mut out = Vec::new();
        for up in ucx_processes(r) {
            let c = &up["rcache"];
            let (gets, misses, repeat) = (u(&c["gets"]), u(&c["misses"]), u(&c["repeat_misses"]));
            if gets < 8 || misses * 2 < gets || repeat < 4 {
                continue;
            }
            out.push((
                pid_of(up),
                vec![
                    format!(
                        "{gets} registration-cache lookups, {misses} misses (hit rate {:.0}%), {repeat} misses of ranges that had missed before: their regions were evicted or invalidated in between",
                        (gets - misses) as f64 * 100.0 / gets as f64
                    ),
                    counts(up),
                ],
            ));
        }
        out
    }

    /// The UCX paths and what UCX's log said of them, for `explain`.
    pub fn explain_text(r: &Value) -> String {
        use std::fmt::Write as _;
        let mut o = String::new();
        let procs = ucx_processes(r);
        if procs.is_empty() {
            return o;
        }
        let _ = writeln!(o, "\nUCX paths");
        for up in procs {
            for p in arr(&up["paths"]) {
                let log = match p["log"]["agrees"].as_bool() {
                    Some(a) => format!(
                        "; UCX log: {} ({})",
                        s(&p["log"]["ucx_says"]),
                        if a { "agrees" } else { "DISAGREES" }
                    ),
                    None => String::new(),
                };
                let _ = writeln!(
                    o,
                    "  pid {} {}: {} memory {} via {}{log}",
                    pid_of(up),
                    s(&up["comm"]),
                    s(&p["memory"]),
                    s(&p["transport"]),
                    s(&p["path"])
                );
            }
        }
        o
    }

    /// UCX registering on its transfers, where the registrations reached a
    /// NIC (verbs MRs) or the cache was switched off: (pid, what).
    pub fn registering_paths(r: &Value) -> Vec<(u32, String)> {
        let mut out = Vec::new();
        for up in ucx_processes(r) {
            let pid = pid_of(up);
            let per = up["registrations_per_data_call"].as_f64().unwrap_or(0.0);
            if per < 0.5 || u(&up["data_calls"]) < 4 {
                continue;
            }
            let nic = registration(r).iter().any(|x| {
                pid_of(x) == pid
                    && x["by_backing"]
                        .as_object()
                        .is_some_and(|b| b.iter().any(|(k, v)| k != "io_uring" && u(&v["registrations"]) > 0))
            });
            let off = process(r, pid).is_some_and(|p| {
                env(p, "UCX_RCACHE_ENABLE").is_some_and(off) || env(p, "UCX_IB_REG_METHODS").is_some()
            });
            if nic || off {
                out.push((
                    pid,
                    format!(
                        "UCX registers memory on its transfers: {} UCT registrations for {} data calls ({per:.2} per call)",
                        u(&up["registrations"]),
                        u(&up["data_calls"])
                    ),
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_(data_bytes: u64, copies: Copies) -> UcxProcess {
        UcxProcess {
            pid: 7,
            comm: "ucx_perftest".into(),
            workers: 1,
            endpoints: 1,
            data_calls: 100,
            data_bytes,
            copies,
            traced_from_start: true,
            ..Default::default()
        }
    }

    fn cx(memory: &str, calls: &[(&str, u64)], env: &[(&str, &str)], socket: u64) -> Context {
        Context {
            calls: calls.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            socket_bytes: socket,
            nvlink: Some(true),
            memories: [memory.to_string()].into(),
            ..Default::default()
        }
    }

    const MB64: u64 = 64 << 20;

    #[test]
    fn cuda_ipc_from_handles_and_device_copies() {
        let u = proc_(
            MB64,
            Copies {
                calls: 10,
                gpu_gpu_bytes: MB64,
                ..Default::default()
            },
        );
        let p = paths(&u, &cx("cuda", &[("cuIpcOpenMemHandle", 1)], &[], 4096));
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].transport, p[0].path.as_str()), (Transport::P2pNvlink, "cuda_ipc"));
        assert!(!p[0].host_staged);
        // The same without NVLink: PCIe.
        let mut c = cx("cuda", &[("cuIpcGetMemHandle", 1)], &[], 0);
        c.nvlink = Some(false);
        assert_eq!(paths(&u, &c)[0].transport, Transport::P2pPcie);
    }

    #[test]
    fn cuda_copy_staging_counts_the_copied_bytes_and_its_carrier() {
        let copies = Copies {
            calls: 64,
            gpu_host_bytes: MB64,
            ..Default::default()
        };
        let u = proc_(MB64, copies);
        let env = [("UCX_TLS", "^cuda_ipc")];
        let tcp = paths(&u, &cx("cuda", &[], &env, MB64 + 8192));
        assert_eq!(
            (tcp[0].transport, tcp[0].path.as_str()),
            (Transport::HostStaged, "cuda_copy+tcp")
        );
        assert_eq!(tcp[0].staged_bytes, MB64);
        assert!(tcp[0].host_staged);
        assert!(tcp[0].cause.as_deref().unwrap().contains("excludes cuda_ipc"));
        let shm = paths(&u, &cx("cuda", &[], &[], 16384));
        assert_eq!(shm[0].path, "cuda_copy+shm");
        assert!(shm[0].cause.is_none(), "cuda_ipc not excluded: no env cause");
    }

    #[test]
    fn attached_after_set_up_infers_from_counters_or_says_why_not() {
        let u = proc_(
            MB64,
            Copies {
                calls: 64,
                unknown_bytes: MB64,
                ..Default::default()
            },
        );
        let mut c = cx("unknown", &[], &[], 0);
        c.links = Some(GpuLinks {
            nvlink_between_gpus: true,
            nvlink_bytes: MB64,
            rdma_nics: 0,
            gpu_processes: None,
        });
        let p = paths(&u, &c);
        assert_eq!((p[0].transport, p[0].inferred), (Transport::P2pNvlink, true));
        c.links = Some(GpuLinks {
            nvlink_between_gpus: true,
            nvlink_bytes: 0,
            rdma_nics: 0,
            gpu_processes: None,
        });
        let p = paths(&u, &c);
        assert_eq!(
            (p[0].transport, p[0].path.as_str()),
            (Transport::HostStaged, "cuda_copy+shm")
        );
        c.links = None;
        let p = paths(&u, &c);
        assert_eq!(p[0].transport, Transport::Unknown);
        assert!(p[0].evidence.iter().any(|e| e.contains("not enough")));
    }

    #[test]
    fn an_attached_sender_without_copies_is_told_by_nvlink() {
        // cuda_ipc attached after set-up: the receiver copies, the sender
        // only sends; its buffer was allocated before the tracer came.
        let u = UcxProcess {
            traced_from_start: false,
            ..proc_(MB64, Copies::default())
        };
        let mut c = cx("unknown", &[], &[], 0);
        c.links = Some(GpuLinks {
            nvlink_between_gpus: true,
            nvlink_bytes: MB64,
            rdma_nics: 0,
            gpu_processes: None,
        });
        let p = paths(&u, &c);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(
            (p[0].memory.as_str(), p[0].transport, p[0].inferred),
            ("cuda", Transport::P2pNvlink, true)
        );
        // No NVLink traffic and no copies: host memory.
        c.links = None;
        assert_eq!(paths(&u, &c)[0].memory, "host");
    }

    #[test]
    fn no_data_no_path() {
        let u = UcxProcess {
            data_calls: 0,
            ..proc_(0, Copies::default())
        };
        assert!(paths(&u, &Context::default()).is_empty());
    }

    #[test]
    fn host_memory_by_carrier() {
        let u = proc_(MB64, Copies::default());
        assert_eq!(paths(&u, &cx("host", &[], &[], MB64))[0].transport, Transport::Socket);
        assert_eq!(paths(&u, &cx("host", &[], &[], 8192))[0].transport, Transport::Shm);
        let mut rc = cx("host", &[], &[], 8192);
        rc.host_mrs = 4;
        let p = paths(&u, &rc);
        assert_eq!((p[0].transport, p[0].path.as_str()), (Transport::HostOnly, "rc/ud"));
        assert!(!p[0].host_staged);
    }

    #[test]
    fn gpu_mrs_are_gpudirect_rdma() {
        let u = proc_(MB64, Copies::default());
        let mut c = cx("cuda", &[], &[], 0);
        c.gpu_mrs = 2;
        assert_eq!(paths(&u, &c)[0].transport, Transport::GdrPeerMem);
        c.gpu_mrs = 0;
        c.dmabuf_mrs = 2;
        assert_eq!(paths(&u, &c)[0].transport, Transport::GdrDmabuf);
    }

    /// A report's JSON with one UCX process and one path.
    fn report_json(
        env: serde_json::Value,
        calls: serde_json::Value,
        path: serde_json::Value,
        rcache: serde_json::Value,
    ) -> serde_json::Value {
        serde_json::json!({
            "processes": [{"pid": 7, "comm": "ucx_perftest", "env": env, "calls": calls}],
            "facts": {"nvlink": true, "modules": [], "memory_peers": false, "rdma_devices": []},
            "ucx": {"processes": [{
                "pid": 7, "comm": "ucx_perftest", "registrations": 40, "deregistrations": 40, "data_calls": 40,
                "registrations_per_data_call": 1.0, "modules": ["libuct_cma.so.0"], "rcache": rcache, "paths": [path]
            }]}
        })
    }

    fn fired(r: &serde_json::Value) -> Vec<&'static str> {
        crate::classify::explain::findings(r).iter().map(|f| f.rule).collect()
    }

    #[test]
    fn rules_on_staged_gpu_data() {
        let staged = serde_json::json!({"memory": "cuda", "transport": "host-staged", "path": "cuda_copy+shm",
            "host_staged": true, "staged_bytes": 1024});
        let no_cache = serde_json::json!({"gets": 0, "misses": 0, "repeat_misses": 0});
        let r = report_json(
            serde_json::json!({"UCX_TLS": "^cuda_ipc"}),
            serde_json::json!({}),
            staged.clone(),
            no_cache.clone(),
        );
        let f = fired(&r);
        assert!(
            f.contains(&"ucx-tls-excludes-direct") && !f.contains(&"ucx-cuda-ipc-unavailable"),
            "{f:?}"
        );
        let r = report_json(
            serde_json::json!({}),
            serde_json::json!({}),
            staged.clone(),
            no_cache.clone(),
        );
        let findings = crate::classify::explain::findings(&r);
        let ipc = findings
            .iter()
            .find(|f| f.rule == "ucx-cuda-ipc-unavailable")
            .expect("cuda_ipc unavailable");
        assert!(
            ipc.evidence
                .iter()
                .any(|e| e.contains("libuct_cuda") && e.contains("not loaded")),
            "{ipc:?}"
        );
        // CUDA IPC handles were exchanged: something else staged the data.
        let r = report_json(
            serde_json::json!({}),
            serde_json::json!({"cuIpcGetMemHandle": 2}),
            staged,
            no_cache.clone(),
        );
        assert!(!fired(&r).contains(&"ucx-cuda-ipc-unavailable"));
        let rdma = serde_json::json!({"memory": "cuda", "transport": "host-staged", "path": "cuda_copy+rc/ud",
            "host_staged": true, "staged_bytes": 1024});
        let r = report_json(
            serde_json::json!({"UCX_TLS": "rc,cuda_copy,cuda_ipc"}),
            serde_json::json!({}),
            rdma,
            no_cache,
        );
        assert!(fired(&r).contains(&"ucx-gpu-rdma-without-peer-memory"));
    }

    #[test]
    fn rules_on_the_registration_cache() {
        let host =
            serde_json::json!({"memory": "host", "transport": "host-only", "path": "rc/ud", "host_staged": false});
        let thrash = serde_json::json!({"gets": 40, "misses": 30, "repeat_misses": 12});
        let r = report_json(serde_json::json!({}), serde_json::json!({}), host.clone(), thrash);
        let f = fired(&r);
        assert!(
            f.contains(&"ucx-rcache-thrashing") && !f.contains(&"ucx-rcache-disabled"),
            "{f:?}"
        );
        let warm = serde_json::json!({"gets": 40, "misses": 2, "repeat_misses": 0});
        assert!(
            fired(&report_json(
                serde_json::json!({}),
                serde_json::json!({}),
                host.clone(),
                warm.clone()
            ))
            .is_empty()
        );
        let off = report_json(
            serde_json::json!({"UCX_RCACHE_ENABLE": "n"}),
            serde_json::json!({}),
            host,
            warm,
        );
        assert_eq!(fired(&off), vec!["ucx-rcache-disabled"]);
    }

    #[test]
    fn ucx_tls_aliases() {
        let env = |v: &str| BTreeMap::from([("UCX_TLS".to_string(), v.to_string())]);
        assert_eq!(tls_excludes(&BTreeMap::new(), "cuda_ipc"), None);
        assert_eq!(tls_excludes(&env("^cuda_ipc"), "cuda_ipc"), Some(true));
        assert_eq!(tls_excludes(&env("^cuda_ipc"), "cuda_copy"), Some(false));
        assert_eq!(tls_excludes(&env("tcp,cuda_copy"), "cuda_ipc"), Some(true));
        assert_eq!(tls_excludes(&env("sm,cuda"), "cuda_ipc"), Some(false));
        assert_eq!(tls_excludes(&env("all"), "cuda_ipc"), Some(false));
        assert_eq!(tls_excludes(&env("rc_x,sm"), "rc_mlx5"), Some(false));
        assert_eq!(tls_excludes(&env("^ib"), "rc_verbs"), Some(true));
        assert_eq!(tls_excludes(&env("tcp"), "posix"), Some(true));
    }
}
