//! The path a process's UCX data took, decided from its evidence and
//! context: GPU data (`cuda_ipc`, `cuda_copy` staging, GPUDirect RDMA) and
//! host data (tcp, shared memory, RDMA), and the verdict it stands for.
use super::*;
use crate::classify::path::{OpClass, Path, PeerKind};

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
    /// GPUs on the host (`HostFacts::gpus`; None when unknown).
    pub gpus: Option<u64>,
    pub links: Option<GpuLinks>,
    /// Memory types of the process's data calls.
    pub memories: BTreeSet<String>,
    /// The class of the path's calls, when judging one path.
    pub op: Option<OpClass>,
    /// Host-memory bytes that moved while this path and others of the
    /// process ran at once (`stats/windows.rs`).
    pub shared_host_bytes: u64,
}

impl Context {
    fn n(&self, op: &str) -> u64 {
        self.calls.get(op).copied().unwrap_or(0)
    }

    /// Whether the process calls NCCL (its NCCL verdict stays).
    pub fn nccl(&self) -> bool {
        self.calls.keys().any(|k| crate::classify::comm::is_nccl(k))
    }
}

pub(crate) fn gb(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.2} GB", b as f64 / 1e9)
    } else {
        format!("{:.1} MB", b as f64 / 1e6)
    }
}

pub(super) fn ratio(a: u64, b: u64) -> f64 {
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

/// An undecided path of one memory type (its peer and class are the
/// caller's, who judges one path at a time).
fn blank(u: &UcxProcess, cx: &Context, memory: &str) -> Path {
    let mut p = Path::new(
        u.pid,
        PeerKind::UcxEndpoint,
        String::new(),
        cx.op.unwrap_or(OpClass::Other),
        memory,
    );
    p.comm = u.comm.clone();
    p
}

/// Marks a path inferred from the steady state.
fn inferred(p: &mut Path) {
    p.basis = comm::Basis::SteadyState;
}

/// The path of GPU data in one process.
pub(super) fn gpu_path(u: &UcxProcess, cx: &Context) -> Path {
    let c = &u.copies;
    let exports = cx.n("cuIpcGetMemHandle") + cx.n("cuMemExportToShareableHandle");
    let imports = cx.n("cuIpcOpenMemHandle") + cx.n("cuMemImportFromShareableHandle");
    let mut p = blank(u, cx, "cuda");
    // With one GPU on the host, both ends of a device-to-device copy are
    // on it: CUDA IPC between processes of one GPU crosses no link.
    let p2p = || match (cx.gpus, cx.nvlink) {
        (Some(1), _) => (
            Transport::IpcSameDevice,
            "no link at all: the host has one GPU, so both ends are in its memory (same-device IPC)",
        ),
        (_, Some(false)) => (Transport::P2pPcie, "PCIe (no NVLink between the GPUs)"),
        (_, Some(true)) => (Transport::P2pNvlink, "NVLink"),
        (_, None) => (Transport::P2pNvlink, "NVLink assumed (topology unknown)"),
    };
    if cx.gpu_mrs + cx.dmabuf_mrs > 0 {
        let dmabuf = cx.dmabuf_mrs > cx.gpu_mrs;
        p.transport = if dmabuf {
            Transport::GdrDmabuf
        } else {
            Transport::GdrPeerMem
        };
        p.via = if dmabuf {
            "rc/dc (dma-buf)".into()
        } else {
            "rc/dc (peer memory)".into()
        };
        p.evidence.push(format!(
            "{} MRs on GPU memory through peer memory and {} through dma-buf (verbs probes): the NIC reads and writes GPU memory (GPUDirect RDMA)",
            cx.gpu_mrs, cx.dmabuf_mrs
        ));
    } else if c.gpu_host_bytes > c.gpu_gpu_bytes
        && ratio(c.gpu_host_bytes, u.data_bytes.max(c.gpu_gpu_bytes)) >= CARRIED
    {
        // Where the bytes went decides, whatever was set up: copies between
        // GPU and host memory carried the path's data.
        staged(&mut p, u, cx, c.gpu_host_bytes, false);
        if exports + imports > 0 {
            p.evidence.push(format!(
                "CUDA IPC was set up ({exports} handles exported, {imports} opened) but {} was copied device to device: the data did not take cuda_ipc",
                gb(c.gpu_gpu_bytes)
            ));
        }
        emulated(&mut p, u, cx, exports + imports);
    } else if exports + imports > 0 || (c.gpu_gpu_bytes > 0 && c.gpu_gpu_bytes >= c.gpu_host_bytes) {
        let (t, link) = p2p();
        p.transport = t;
        p.via = "cuda_ipc".into();
        p.evidence.push(format!(
            "{exports} CUDA IPC handles exported and {imports} opened (cuIpcGetMemHandle/cuIpcOpenMemHandle, cuMem export/import), {} copied device to device: GPU memory of the peer is mapped and copied directly, over {link}",
            gb(c.gpu_gpu_bytes)
        ));
    } else if c.gpu_host_bytes > 0 {
        staged(&mut p, u, cx, c.gpu_host_bytes, false);
    } else if c.unknown_bytes > 0 {
        inferred(&mut p);
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
                p.via = "cuda_ipc".into();
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
        p.via = "cuda_ipc".into();
        inferred(&mut p);
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
    if p.transport.direct() && ratio(cx.shared_host_bytes, u.data_bytes) >= CARRIED {
        p.evidence.push(format!(
            "but {} went through host memory while this path and others of the process ran at once: the tracer cannot tell which of them moved it, so this one is not called direct",
            gb(cx.shared_host_bytes)
        ));
        p.transport = Transport::Ambiguous;
    }
    p
}

/// The cause of a one-sided operation on GPU memory that went through host
/// memory although cuda_ipc was there: UCX has no cuda_ipc protocol for it
/// and emulates it in software over its host transport (UCX_PROTO_INFO
/// prints `software emulation`).
fn emulated(p: &mut Path, u: &UcxProcess, cx: &Context, ipc: u64) {
    let Some(op @ (OpClass::Get | OpClass::Put | OpClass::Served)) = cx.op else {
        return;
    };
    let cuda = u.modules.iter().any(|m| m.starts_with("libuct_cuda"));
    if tls_excludes(&cx.env, "cuda_ipc") == Some(true) || (ipc == 0 && !cuda) {
        return;
    }
    let (what, instead) = match op {
        OpClass::Get => (
            "a GET (remote read) of GPU memory",
            "push instead (ucp_put / NIXL WRITE)",
        ),
        OpClass::Put => (
            "a PUT (remote write) into GPU memory",
            "read instead (ucp_get / NIXL READ)",
        ),
        _ => (
            "its peers' one-sided operations on this process's GPU memory (the target's side of an emulated GET or PUT)",
            "have the peers use the operation that has a cuda_ipc protocol (for a GET: the owner pushes, NIXL WRITE)",
        ),
    };
    let carrier = p.via.strip_prefix("cuda_copy+").unwrap_or(&p.via).to_string();
    p.via = format!("{} (software emulation)", p.via);
    p.cause = Some(format!(
        "UCX emulated {what} in software over {carrier}, through its host bounce buffers: the UCX this process loaded has no cuda_ipc protocol for this operation here, although cuda_ipc was available ({}). Do: {instead}; or use a UCX/NIXL release with a cuda_ipc protocol for it (nixl PR #2208); UCX_PROTO_INFO=y prints the protocol UCX chose",
        if ipc > 0 {
            format!("{ipc} CUDA IPC handles exported or opened")
        } else {
            "libuct_cuda loaded".to_string()
        }
    ));
}

/// Fills a host-staged (cuda_copy) path: the bytes copied between GPU and
/// host memory are the staged bytes; tcp or shared memory carried them.
pub(super) fn staged(p: &mut Path, u: &UcxProcess, cx: &Context, bytes: u64, steady: bool) {
    p.transport = Transport::HostStaged;
    p.host_staged = true;
    p.staged_bytes = bytes;
    if steady {
        inferred(p);
    }
    let carrier = if ratio(cx.socket_bytes, bytes) >= CARRIED {
        p.evidence.push(format!(
            "its socket send/recv syscalls moved {} ({:.0}% of the staged bytes): tcp carried the host copies",
            gb(cx.socket_bytes),
            ratio(cx.socket_bytes, bytes) * 100.0
        ));
        // The socket bytes are counted in the kernel, never sampled: the
        // staged data is at least what tcp carried.
        p.staged_bytes = p.staged_bytes.max(cx.socket_bytes);
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
    p.via = format!("cuda_copy+{carrier}");
    // Against what the process sent, when that is what it copied: a
    // receiver sends next to nothing, and a percentage of that says nothing.
    let of = if u.data_bytes > 0 && bytes <= u.data_bytes.saturating_mul(2) {
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
pub(super) fn host_path(u: &UcxProcess, cx: &Context, bytes: u64) -> Path {
    let mut p = blank(u, cx, "host");
    if bytes == 0 {
        p.evidence.push("data calls moved no bytes".into());
    } else if cx.socket_bytes > 0 && ratio(cx.socket_bytes, bytes) >= CARRIED {
        p.transport = Transport::Socket;
        p.via = "tcp".into();
        p.evidence.push(format!(
            "its socket send/recv syscalls moved {} for {} of host-memory data calls: tcp",
            gb(cx.socket_bytes),
            gb(bytes)
        ));
    } else if cx.host_mrs > 0 {
        p.transport = Transport::HostOnly;
        p.via = "rc/ud".into();
        p.evidence.push(format!(
            "{} MRs on host memory (verbs probes), {} UCT registrations: the NIC moves host memory directly (RDMA)",
            cx.host_mrs, u.registrations
        ));
    } else {
        p.transport = Transport::Shm;
        p.via = "shm".into();
        p.evidence.push(format!(
            "{} of host-memory data calls, sockets moved {} and no MR was registered: shared memory (posix/sysv/cma)",
            gb(bytes),
            gb(cx.socket_bytes)
        ));
    }
    p
}

/// The paths of one process: one per memory type its data had.
pub fn paths(u: &UcxProcess, cx: &Context) -> Vec<Path> {
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

/// The first evidence line of a UCX process's verdict.
pub fn summary_line(u: &UcxProcess) -> String {
    format!(
        "UCX: {} workers, {} endpoints, {} data calls ({}), {} UCT registrations",
        u.workers,
        u.endpoints,
        u.data_calls,
        gb(u.data_bytes),
        u.registrations
    )
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
                e.calls, e.endpoint, e.memory, e.via
            ),
            communicator: Some(e.endpoint.clone()),
            calls: Some(e.calls),
        })
        .collect()
}
