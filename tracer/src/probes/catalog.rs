//! The probe catalog: one declarative row per logical probe point, with the
//! attach strategies to try in order. Kernel functions try fentry/fexit, then
//! kprobe/kretprobe; points with a tracepoint or procfs stand-in list it
//! last. Library functions come from the uprobe table in `uapi.rs`.
use serde::Serialize;
use tracer_common::op;

pub use super::kinds::Family;

/// What a probe point is attached to.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// A kernel function (vmlinux or module), by symbol name.
    KernelFn(&'static str),
    /// A static tracepoint.
    Tracepoint { category: &'static str, name: &'static str },
    /// A static tracepoint where the kernel has it, else a kernel function
    /// that sees the same calls (fentry/kprobe strategies): for points whose
    /// tracepoint is newer than some kernels traced.
    TracepointOr {
        category: &'static str,
        name: &'static str,
        func: &'static str,
    },
    /// A procfs file read by user space.
    Procfs(&'static str),
    /// Library functions from the uprobe table, by library.
    Library(super::uapi::Lib),
}

/// One way to attach a point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// fentry + fexit (BTF trampolines).
    Fentry,
    /// kprobe + kretprobe.
    Kprobe,
    /// A tracepoint program (pair), named by its programs.
    Tracepoint,
    /// The shared BTF-typed `sys_enter`/`sys_exit` tracepoint programs
    /// (`tp_btf`), which dispatch on the syscall number (syscall rows) and
    /// read the registers without a helper call.
    BtfSyscall,
    /// The shared raw `sys_enter`/`sys_exit` tracepoint programs: the same
    /// dispatch, where the kernel refuses `tp_btf`.
    RawSyscall,
    /// uprobe + uretprobe on library symbols, one perf-event link per offset.
    Uprobe,
    /// uprobe + uretprobe on library symbols, one `uprobe_multi` link per
    /// (file, program).
    UprobeMulti,
    /// Sampled from procfs by user space.
    Procfs,
}

impl Strategy {
    pub const ALL: [Strategy; 8] = [
        Strategy::Fentry,
        Strategy::Kprobe,
        Strategy::Tracepoint,
        Strategy::BtfSyscall,
        Strategy::RawSyscall,
        Strategy::Uprobe,
        Strategy::UprobeMulti,
        Strategy::Procfs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Fentry => "fentry/fexit",
            Strategy::Kprobe => "kprobe/kretprobe",
            Strategy::Tracepoint => "tracepoint",
            Strategy::BtfSyscall => "tp_btf",
            Strategy::RawSyscall => "raw_tracepoint",
            Strategy::Uprobe => "uprobe/uretprobe",
            Strategy::UprobeMulti => "uprobe_multi",
            Strategy::Procfs => "procfs",
        }
    }
}

/// A logical probe point.
#[derive(Clone, Copy, Debug)]
pub struct ProbePoint {
    /// Stable name used in reports and baselines (`family:function`).
    pub name: &'static str,
    pub family: Family,
    pub target: Target,
    /// Op code its events carry (`op::NONE` for lifecycle/counters).
    pub op: u32,
    /// Whether the tracer cannot work without it.
    pub required: bool,
    /// Strategies in order of preference.
    pub strategies: &'static [Strategy],
    /// eBPF programs for the tracepoint strategy (entry, optional return).
    pub programs: &'static [&'static str],
    /// Tracepoint fields the programs read at fixed offsets: the planner
    /// attaches them only where this kernel's format agrees.
    pub fields: &'static [(&'static str, u32)],
}

impl Target {
    /// The kernel function the fentry/kprobe strategies attach to.
    pub fn kernel_fn(&self) -> Option<&'static str> {
        match *self {
            Target::KernelFn(f) | Target::TracepointOr { func: f, .. } => Some(f),
            _ => None,
        }
    }
}

const KFN: &[Strategy] = &[Strategy::Fentry, Strategy::Kprobe];

macro_rules! kernel_rows {
    ($family:expr, $($func:ident => $op:expr),* $(,)?) => {
        [$(ProbePoint {
            name: concat!(stringify!($func)),
            family: $family,
            target: Target::KernelFn(stringify!($func)),
            op: $op,
            required: false,
            strategies: KFN,
            programs: &[],
            fields: &[],
        }),*]
    };
}

const fn tp(
    name: &'static str,
    family: Family,
    category: &'static str,
    tp_name: &'static str,
    op: u32,
    programs: &'static [&'static str],
) -> ProbePoint {
    ProbePoint {
        name,
        family,
        target: Target::Tracepoint {
            category,
            name: tp_name,
        },
        op,
        required: true,
        strategies: if syscall_nr(tp_name).is_some() {
            &[Strategy::BtfSyscall, Strategy::RawSyscall, Strategy::Tracepoint]
        } else {
            &[Strategy::Tracepoint]
        },
        programs,
        fields: &[],
    }
}

/// The x86_64 number of the syscall behind a `sys_enter_X` tracepoint, for
/// the syscall rows (arch/x86/entry/syscalls/syscall_64.tbl).
pub const fn syscall_nr(tracepoint: &str) -> Option<u32> {
    const ROWS: [(&str, u32); 13] = [
        ("sys_enter_ioctl", 16),
        ("sys_enter_pread64", 17),
        ("sys_enter_pwrite64", 18),
        ("sys_enter_sendto", 44),
        ("sys_enter_recvfrom", 45),
        ("sys_enter_sendmsg", 46),
        ("sys_enter_recvmsg", 47),
        ("sys_enter_getppid", 110),
        ("sys_enter_preadv", 295),
        ("sys_enter_pwritev", 296),
        ("sys_enter_preadv2", 327),
        ("sys_enter_pwritev2", 328),
        ("sys_enter_io_uring_register", 427),
    ];
    let mut i = 0;
    while i < ROWS.len() {
        if const_eq(ROWS[i].0, tracepoint) {
            return Some(ROWS[i].1);
        }
        i += 1;
    }
    None
}

const fn const_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn procfs(name: &'static str, path: &'static str) -> ProbePoint {
    ProbePoint {
        name,
        family: Family::Counters,
        target: Target::Procfs(path),
        op: op::NONE,
        required: false,
        strategies: &[Strategy::Procfs],
        programs: &[],
        fields: &[],
    }
}

const fn library(name: &'static str, family: Family, lib: super::uapi::Lib) -> ProbePoint {
    ProbePoint {
        name,
        family,
        target: Target::Library(lib),
        op: op::NONE,
        required: false,
        strategies: &[Strategy::Uprobe],
        programs: &[],
        fields: &[],
    }
}

const LIFECYCLE: [ProbePoint; 4] = [
    tp(
        "sched_process_fork",
        Family::Sched,
        "sched",
        "sched_process_fork",
        op::NONE,
        &["sched_process_fork"],
    ),
    tp(
        "sched_process_exec",
        Family::Sched,
        "sched",
        "sched_process_exec",
        op::NONE,
        &["sched_process_exec"],
    ),
    tp(
        "sched_process_exit",
        Family::Sched,
        "sched",
        "sched_process_exit",
        op::NONE,
        &["sched_process_exit"],
    ),
    tp(
        "io_uring_register",
        Family::Syscall,
        "syscalls",
        "sys_enter_io_uring_register",
        op::IO_URING_REGISTER,
        &["sys_enter_io_uring_register", "sys_exit_io_uring_register"],
    ),
];

/// Socket data syscalls: optional (a kernel without them still traces),
/// aggregate-only (see [`kernel_config`]).
const SOCKETS: [ProbePoint; 4] = {
    const fn sock(name: &'static str, tp_name: &'static str, op: u32, programs: &'static [&'static str]) -> ProbePoint {
        let mut p = tp(name, Family::Socket, "syscalls", tp_name, op, programs);
        p.required = false;
        p
    }
    [
        sock(
            "sendto",
            "sys_enter_sendto",
            op::SENDTO,
            &["sys_enter_sendto", "sys_exit_sendto"],
        ),
        sock(
            "sendmsg",
            "sys_enter_sendmsg",
            op::SENDMSG,
            &["sys_enter_sendmsg", "sys_exit_sendmsg"],
        ),
        sock(
            "recvfrom",
            "sys_enter_recvfrom",
            op::RECVFROM,
            &["sys_enter_recvfrom", "sys_exit_recvfrom"],
        ),
        sock(
            "recvmsg",
            "sys_enter_recvmsg",
            op::RECVMSG,
            &["sys_enter_recvmsg", "sys_exit_recvmsg"],
        ),
    ]
};

/// TCP retransmissions and the sends that name each socket's process
/// (tracer-ebpf/src/net.rs): optional, aggregate-only per (process,
/// socket). The send point is `sock_send_length` (6.2+), else
/// `tcp_sendmsg` by fentry or kprobe; the close point forgets a socket's
/// process when it closes.
const NETWORK: [ProbePoint; 3] = [
    ProbePoint {
        name: "tcp_retransmit_skb",
        family: Family::Network,
        target: Target::Tracepoint {
            category: "tcp",
            name: "tcp_retransmit_skb",
        },
        op: op::TCP_RETRANSMIT,
        required: false,
        strategies: &[Strategy::Tracepoint],
        programs: &["tcp_retransmit_skb"],
        fields: &[
            ("skaddr", 16),
            ("state", 24),
            ("sport", 28),
            ("dport", 30),
            ("family", 32),
            ("saddr_v6", 42),
            ("daddr_v6", 58),
        ],
    },
    ProbePoint {
        name: "tcp_send",
        target: Target::TracepointOr {
            category: "sock",
            name: "sock_send_length",
            func: "tcp_sendmsg",
        },
        strategies: &[Strategy::Tracepoint, Strategy::Fentry, Strategy::Kprobe],
        programs: &["sock_send_length"],
        fields: &[("sk", 8), ("family", 16), ("protocol", 18), ("ret", 20)],
        ..kernel_rows!(Family::Network, tcp_sendmsg => op::TCP_SEND)[0]
    },
    ProbePoint {
        name: "tcp_close",
        family: Family::Network,
        target: Target::Tracepoint {
            category: "sock",
            name: "inet_sock_set_state",
        },
        op: op::NONE,
        required: false,
        strategies: &[Strategy::Tracepoint],
        programs: &["inet_sock_set_state"],
        fields: &[("skaddr", 8), ("newstate", 20), ("protocol", 30)],
    },
];

/// Whether an op is one of the network rows (`NETWORK`), whose kernel rows
/// are per (process, socket), neither socket syscalls nor collectives.
pub fn is_network(op_code: u32) -> bool {
    matches!(op_code, op::TCP_SEND | op::TCP_RETRANSMIT)
}

/// Positional file I/O and ioctls: optional, aggregate-only per (process,
/// fd) like the sockets, and sampled (see [`kernel_config`]): a cuFile loop
/// of small reads makes a syscall per read, which the duty cycle's off
/// phases leave uncounted (and estimate) as they do its cuFile calls.
const FILES: [ProbePoint; 7] = {
    const fn file(name: &'static str, tp_name: &'static str, op: u32, programs: &'static [&'static str]) -> ProbePoint {
        let mut p = tp(name, Family::FileIo, "syscalls", tp_name, op, programs);
        p.required = false;
        p
    }
    [
        file(
            "pread64",
            "sys_enter_pread64",
            op::PREAD64,
            &["sys_enter_pread64", "sys_exit_pread64"],
        ),
        file(
            "pwrite64",
            "sys_enter_pwrite64",
            op::PWRITE64,
            &["sys_enter_pwrite64", "sys_exit_pwrite64"],
        ),
        file(
            "preadv",
            "sys_enter_preadv",
            op::PREADV,
            &["sys_enter_preadv", "sys_exit_preadv"],
        ),
        file(
            "pwritev",
            "sys_enter_pwritev",
            op::PWRITEV,
            &["sys_enter_pwritev", "sys_exit_pwritev"],
        ),
        file(
            "preadv2",
            "sys_enter_preadv2",
            op::PREADV2,
            &["sys_enter_preadv2", "sys_exit_preadv2"],
        ),
        file(
            "pwritev2",
            "sys_enter_pwritev2",
            op::PWRITEV2,
            &["sys_enter_pwritev2", "sys_exit_pwritev2"],
        ),
        file(
            "ioctl",
            "sys_enter_ioctl",
            op::IOCTL,
            &["sys_enter_ioctl", "sys_exit_ioctl"],
        ),
    ]
};

/// The eBPF-side configuration of kernel-side ops that need one (the
/// uprobe table configures library ops itself): rows per fd (argument 0),
/// bytes from the return value; the file ops are also sampled.
pub fn kernel_config(op_code: u32) -> Option<tracer_common::OpConfig> {
    use tracer_common::op_flags::{AGGREGATE_ONLY, BYTES_FROM_RET, SAMPLED, SOCK_OWNER};
    let flags = match op_code {
        op::SENDTO | op::SENDMSG | op::RECVFROM | op::RECVMSG => AGGREGATE_ONLY | BYTES_FROM_RET,
        // The sender becomes the socket's owner (its retransmissions).
        op::TCP_SEND => AGGREGATE_ONLY | BYTES_FROM_RET | SOCK_OWNER,
        op::IOCTL => AGGREGATE_ONLY | SAMPLED,
        op::P2PDMA_MAP_SEGMENT | op::P2PDMA_MAP_TYPE => AGGREGATE_ONLY,
        o if file_direction(o).is_some() => AGGREGATE_ONLY | BYTES_FROM_RET | SAMPLED,
        _ => return None,
    };
    Some(tracer_common::OpConfig {
        flags,
        deref_args: 0,
        ret_read_offset: u32::MAX,
        count_arg: tracer_common::NO_ARG,
        dtype_arg: tracer_common::NO_ARG,
        // Rows per fd (argument 0) or `struct sock *` (TCP sends); the
        // P2PDMA rows one per process.
        handle_arg: if matches!(op_code, op::P2PDMA_MAP_SEGMENT | op::P2PDMA_MAP_TYPE) {
            tracer_common::NO_ARG
        } else {
            0
        },
        key_args: 0,
        id_src: tracer_common::NO_ARG,
        read_arg: tracer_common::NO_ARG,
        _pad: [0; 2],
    })
}

/// Whether an op reads a file (`Some(false)`) or writes it (`Some(true)`):
/// the positional file I/O syscalls.
pub fn file_direction(op_code: u32) -> Option<bool> {
    match op_code {
        op::PWRITE64 | op::PWRITEV | op::PWRITEV2 => Some(true),
        op::PREAD64 | op::PREADV | op::PREADV2 => Some(false),
        _ => None,
    }
}

/// Whether an op's kernel rows are evidence of the file paths: file I/O and
/// ioctls per fd, P2PDMA mappings per process.
pub fn file_evidence_op(op_code: u32) -> bool {
    matches!(op_code, op::IOCTL | op::P2PDMA_MAP_SEGMENT | op::P2PDMA_MAP_TYPE) || file_direction(op_code).is_some()
}

/// Whether an op counts socket bytes sent (`Some(true)`) or received.
pub fn socket_direction(op_code: u32) -> Option<bool> {
    match op_code {
        op::SENDTO | op::SENDMSG => Some(true),
        op::RECVFROM | op::RECVMSG => Some(false),
        _ => None,
    }
}

const PINNING: [ProbePoint; 14] = kernel_rows!(Family::Pinning,
    pin_user_pages => op::PIN_USER_PAGES,
    pin_user_pages_fast => op::PIN_USER_PAGES_FAST,
    pin_user_pages_remote => op::PIN_USER_PAGES_REMOTE,
    pin_user_pages_unlocked => op::PIN_USER_PAGES_UNLOCKED,
    get_user_pages => op::GET_USER_PAGES,
    get_user_pages_fast => op::GET_USER_PAGES_FAST,
    get_user_pages_remote => op::GET_USER_PAGES_REMOTE,
    get_user_pages_unlocked => op::GET_USER_PAGES_UNLOCKED,
    unpin_user_pages => op::UNPIN_USER_PAGES,
    unpin_user_pages_dirty_lock => op::UNPIN_USER_PAGES_DIRTY_LOCK,
    unpin_user_page => op::UNPIN_USER_PAGE,
    unpin_user_page_range_dirty_lock => op::UNPIN_USER_PAGE_RANGE_DIRTY_LOCK,
    unpin_folio => op::UNPIN_FOLIO,
    unpin_user_folio => op::UNPIN_USER_FOLIO,
);

const VERBS: [ProbePoint; 6] = kernel_rows!(Family::Verbs,
    ib_umem_get => op::IB_UMEM_GET,
    ib_umem_release => op::IB_UMEM_RELEASE,
    ib_umem_dmabuf_get => op::IB_UMEM_DMABUF_GET,
    ib_umem_dmabuf_get_pinned => op::IB_UMEM_DMABUF_GET_PINNED,
    ib_uverbs_reg_mr => op::UVERBS_REG_MR,
    ib_uverbs_dereg_mr => op::UVERBS_DEREG_MR,
);

const PEERMEM: [ProbePoint; 5] = kernel_rows!(Family::PeerMem,
    nvidia_p2p_get_pages => op::NV_P2P_GET_PAGES,
    nvidia_p2p_get_pages_persistent => op::NV_P2P_GET_PAGES_PERSISTENT,
    nvidia_p2p_put_pages => op::NV_P2P_PUT_PAGES,
    nvidia_p2p_dma_map_pages => op::NV_P2P_DMA_MAP_PAGES,
    nvidia_p2p_dma_unmap_pages => op::NV_P2P_DMA_UNMAP_PAGES,
);

const DMABUF: [ProbePoint; 6] = kernel_rows!(Family::DmaBuf,
    dma_buf_dynamic_attach => op::DMA_BUF_DYNAMIC_ATTACH,
    dma_buf_map_attachment => op::DMA_BUF_MAP_ATTACHMENT,
    dma_buf_map_attachment_unlocked => op::DMA_BUF_MAP_ATTACHMENT_UNLOCKED,
    dma_buf_unmap_attachment => op::DMA_BUF_UNMAP_ATTACHMENT,
    dma_buf_unmap_attachment_unlocked => op::DMA_BUF_UNMAP_ATTACHMENT_UNLOCKED,
    dma_buf_detach => op::DMA_BUF_DETACH,
);

/// PCI peer-to-peer DMA mapping of a block I/O's pages: where cuFile runs
/// in P2PDMA mode, the NVMe driver maps GPU memory here (summed per process).
const P2PDMA: [ProbePoint; 2] = kernel_rows!(Family::Gds,
    pci_p2pdma_map_segment => op::P2PDMA_MAP_SEGMENT,
    pci_p2pdma_map_type => op::P2PDMA_MAP_TYPE,
);

const COUNTERS: [ProbePoint; 2] = [
    procfs("vmstat:nr_foll_pin", "/proc/vmstat"),
    procfs("status:VmPin", "/proc/PID/status"),
];

const LIBRARIES: [ProbePoint; 7] = [
    library("libcuda", Family::Cuda, super::uapi::Lib::Cuda),
    library("libibverbs", Family::Ibverbs, super::uapi::Lib::Ibverbs),
    library("libnccl", Family::Nccl, super::uapi::Lib::Nccl),
    library("libucp", Family::Ucx, super::uapi::Lib::Ucp),
    library("libuct", Family::Ucx, super::uapi::Lib::Uct),
    library("libucs", Family::Ucx, super::uapi::Lib::Ucs),
    library("libcufile", Family::Gds, super::uapi::Lib::Cufile),
];

const fn concat_catalog() -> [ProbePoint; 60] {
    let mut out = [LIFECYCLE[0]; 60];
    let mut i = 0;
    macro_rules! push {
        ($arr:expr) => {{
            let mut j = 0;
            while j < $arr.len() {
                out[i] = $arr[j];
                i += 1;
                j += 1;
            }
        }};
    }
    push!(LIFECYCLE);
    push!(SOCKETS);
    push!(NETWORK);
    push!(FILES);
    push!(PINNING);
    push!(VERBS);
    push!(PEERMEM);
    push!(DMABUF);
    push!(P2PDMA);
    push!(COUNTERS);
    push!(LIBRARIES);
    assert!(i == 60);
    out
}

/// Every probe point gdrtrace knows, in report order.
pub static CATALOG: [ProbePoint; 60] = concat_catalog();

/// The pipeline benchmark's event source (`gdrtrace bench pipeline`): not
/// in the catalog, so no trace attaches it, but its events decode like any
/// syscall's.
pub static BENCH_POINT: ProbePoint = tp(
    "getppid",
    Family::Syscall,
    "syscalls",
    "sys_enter_getppid",
    op::BENCH_GETPPID,
    &["bench_sys_enter_getppid"],
);

/// Discovery points of `gdrtrace serve` (not in the catalog: only the agent
/// attaches them): a process that opens a GPU or RDMA device node or a
/// library of the table joins the target set in the kernel
/// (`tracer-ebpf/src/discover.rs`). `open(2)` is legacy and absent on some
/// architectures, so only `openat` is required.
pub static DISCOVERY_POINTS: [ProbePoint; 2] = [
    tp(
        "discover:openat",
        Family::Sched,
        "syscalls",
        "sys_enter_openat",
        op::NONE,
        &["sys_enter_openat", "sys_exit_openat"],
    ),
    ProbePoint {
        required: false,
        ..tp(
            "discover:open",
            Family::Sched,
            "syscalls",
            "sys_enter_open",
            op::NONE,
            &["sys_enter_open", "sys_exit_open"],
        )
    },
];

/// The catalog row of a kernel-side op.
pub fn point_of_op(op: u32) -> Option<&'static ProbePoint> {
    CATALOG
        .iter()
        .chain(std::iter::once(&BENCH_POINT))
        .find(|p| p.op == op && p.op != tracer_common::op::NONE)
}

/// A stable hash of the catalog (names, strategies, ops), for baselines.
pub fn catalog_hash() -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |s: &str| {
        for b in s.bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    };
    for p in CATALOG.iter() {
        feed(p.name);
        feed(p.family.name());
        feed(&p.op.to_string());
        for s in p.strategies {
            feed(s.name());
        }
    }
    for row in super::uapi::TABLE {
        feed(row.symbol);
        feed(row.name);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_ops_distinct() {
        let mut names: Vec<_> = CATALOG.iter().map(|p| p.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CATALOG.len());
        let mut ops: Vec<_> = CATALOG.iter().map(|p| p.op).filter(|&o| o != op::NONE).collect();
        let n = ops.len();
        ops.sort();
        ops.dedup();
        assert_eq!(ops.len(), n);
        // The kernel ops outside the catalog take no catalog op's code.
        assert!(!ops.contains(&op::BENCH_GETPPID));
        assert!(ops.iter().all(|&o| o < op::USER_BASE));
    }

    #[test]
    fn op_flags_are_distinct_bits() {
        use tracer_common::op_flags::*;
        let flags = [
            AGGREGATE_ONLY,
            BYTES_FROM_RET,
            ENTRY_ONLY,
            TRACK_CTX,
            SAMPLE_FIRST,
            SAMPLED,
            COPY_ROWS,
            REGION,
            NCCL_ID,
            SETUP,
            FAIL_EVENTS,
            COUNT_DEREF,
            SOCK_OWNER,
        ];
        let mut seen = 0u32;
        for f in flags {
            assert!(f.is_power_of_two(), "flag {f} is one bit");
            assert_eq!(seen & f, 0, "flag {f} is taken twice");
            seen |= f;
        }
    }
}
