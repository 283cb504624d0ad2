//! The names the probe table (`uapi.rs`) shares with the catalog and the
//! uprobe links: a family of probes, and the link group of an offset. They
//! live here, below all three, so that no two of them import each other.
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// Process lifecycle (target-set maintenance).
    Sched,
    /// Syscall tracepoints on registration paths.
    Syscall,
    /// Socket data syscalls (send/recv), aggregated in the kernel.
    Socket,
    /// TCP retransmissions per (process, socket) and the sends that name
    /// each socket's process, aggregated in the kernel.
    Network,
    /// Kernel page pinning (`pin_user_pages*`, `unpin_*`).
    Pinning,
    /// Kernel side of verbs memory registration.
    Verbs,
    /// NVIDIA peer memory (nvidia_p2p_*).
    PeerMem,
    /// dma-buf attach/map.
    DmaBuf,
    /// Counters read from procfs.
    Counters,
    /// libcuda driver API.
    Cuda,
    /// libibverbs.
    Ibverbs,
    /// libnccl.
    Nccl,
    /// UCX: libucp, libuct and libucs.
    Ucx,
    /// Positional file I/O and ioctls, aggregated per (process, fd).
    FileIo,
    /// libcufile (GPUDirect Storage).
    Gds,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Sched => "sched",
            Family::Syscall => "syscall",
            Family::Socket => "socket",
            Family::Network => "network",
            Family::Pinning => "pinning",
            Family::Verbs => "verbs",
            Family::PeerMem => "peer-mem",
            Family::DmaBuf => "dma-buf",
            Family::Counters => "counters",
            Family::Cuda => "cuda",
            Family::Ibverbs => "ibverbs",
            Family::Nccl => "nccl",
            Family::Ucx => "ucx",
            Family::FileIo => "file-io",
            Family::Gds => "gds",
        }
    }
}

/// Which link of a file an offset joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Group {
    Steady,
    Setup,
    /// Calls that each move a whole message or buffer (UCX's data calls,
    /// CUDA copies): counted exactly, one link per op, until a process
    /// traps on them over a tenth of the budget a second; then that op
    /// joins `Sampled` for good (docs/sampling.md#exact-rows).
    Exact,
    Sampled,
}

impl Group {
    /// Every group, in attach order.
    pub const ALL: [Group; 4] = [Group::Steady, Group::Setup, Group::Exact, Group::Sampled];

    /// As doctor and the docs name it.
    pub fn name(self) -> &'static str {
        match self {
            Group::Steady => "steady",
            Group::Setup => "setup",
            Group::Exact => "exact",
            Group::Sampled => "sampled",
        }
    }

    /// How the group's link is budgeted, one line.
    pub fn budget(self) -> &'static str {
        match self {
            Group::Steady => "always attached (set-up and registration calls)",
            Group::Setup => "closed for good over SETUP_BUDGET_HZ hits/s",
            Group::Exact => {
                "counted exactly until a process traps on an op over a tenth of the budget a second; then that op is duty-cycled"
            }
            Group::Sampled => "summed in the kernel; duty-cycled over 1,000 traps/s per process (--collectives)",
        }
    }
}
