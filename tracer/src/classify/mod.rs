//! What one event means: its report label, family, bytes and pages moved or
//! pinned, whether it failed, and the transport verdict with its evidence.
//! `unknown` is an honest answer; a wrong verdict is not.
pub mod comm;
pub mod copy;
pub mod gds;
pub mod path;
pub mod steady;
pub mod transfer;
pub mod ucx;
pub mod ucx_log;

use serde::Serialize;
use tracer_common::{Event, op};

use crate::{
    model::{Backing, Registry},
    probes::{
        Family,
        catalog::point_of_op,
        uapi::{self, Arg, Kind},
    },
};

pub use self::copy::copy_sides;
use self::copy::{cross_device_verdict, peer_copy_verdict};

/// The transport verdict vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Transport {
    #[serde(rename = "gpudirect-rdma/peer-mem")]
    GdrPeerMem,
    #[serde(rename = "gpudirect-rdma/dma-buf")]
    GdrDmabuf,
    /// DMA between storage and GPU memory (GPUDirect Storage: nvidia-fs or
    /// PCI P2PDMA): not a GPU-GPU link, not a NIC, and no host memory.
    #[serde(rename = "gpudirect-storage")]
    GpuDirectStorage,
    #[serde(rename = "host-staged")]
    HostStaged,
    #[serde(rename = "p2p/nvlink")]
    P2pNvlink,
    #[serde(rename = "p2p/pcie")]
    P2pPcie,
    /// Memory shared between processes or contexts of one GPU (CUDA IPC,
    /// UCX `cuda_ipc`, a peer copy whose two contexts are on one device):
    /// the copy stays in that GPU's memory and crosses no link.
    #[serde(rename = "ipc/same-device")]
    IpcSameDevice,
    #[serde(rename = "shm")]
    Shm,
    #[serde(rename = "socket")]
    Socket,
    /// DMA between a GPU and pinned host memory (a copy, not staging).
    #[serde(rename = "gpu-host-dma")]
    GpuHostDma,
    /// No GPU involved (io_uring buffers, host MRs, pinned host pages).
    #[serde(rename = "host-only")]
    HostOnly,
    /// The evidence fits more than one transport (the verdict's evidence says which).
    #[serde(rename = "ambiguous")]
    Ambiguous,
    /// A process whose paths took different transports (its verdict's
    /// `paths` give each one's share); never a path's own transport.
    #[serde(rename = "mixed")]
    Mixed,
    #[serde(rename = "unknown")]
    Unknown,
}

/// Reports name verdicts; readers of any version map the names back (an
/// unknown name reads as `unknown`, never as an error).
impl<'de> serde::Deserialize<'de> for Transport {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Ok(Transport::from_name(&name))
    }
}

impl Transport {
    pub const ALL: [Transport; 14] = [
        Transport::GdrPeerMem,
        Transport::GdrDmabuf,
        Transport::GpuDirectStorage,
        Transport::HostStaged,
        Transport::P2pNvlink,
        Transport::P2pPcie,
        Transport::IpcSameDevice,
        Transport::Shm,
        Transport::Socket,
        Transport::GpuHostDma,
        Transport::HostOnly,
        Transport::Ambiguous,
        Transport::Mixed,
        Transport::Unknown,
    ];

    /// The verdict a report name stands for (`unknown` for anything else).
    pub fn from_name(name: &str) -> Transport {
        Transport::ALL
            .into_iter()
            .find(|t| t.name() == name)
            .unwrap_or(Transport::Unknown)
    }

    pub fn name(self) -> &'static str {
        match self {
            Transport::GdrPeerMem => "gpudirect-rdma/peer-mem",
            Transport::GdrDmabuf => "gpudirect-rdma/dma-buf",
            Transport::GpuDirectStorage => "gpudirect-storage",
            Transport::HostStaged => "host-staged",
            Transport::P2pNvlink => "p2p/nvlink",
            Transport::P2pPcie => "p2p/pcie",
            Transport::IpcSameDevice => "ipc/same-device",
            Transport::Shm => "shm",
            Transport::Socket => "socket",
            Transport::GpuHostDma => "gpu-host-dma",
            Transport::HostOnly => "host-only",
            Transport::Ambiguous => "ambiguous",
            Transport::Mixed => "mixed",
            Transport::Unknown => "unknown",
        }
    }

    /// The current name of an operation's transport as a report of any
    /// version wrote it: reports before `gpu-host-dma` existed labelled
    /// copies between a GPU and pinned host memory `host-only`, which now
    /// means "no GPU involved" (docs/report-schema.md, vocabulary changes).
    pub fn current_name<'a>(op: &str, name: &'a str) -> &'a str {
        if name == "host-only" && op.starts_with("cuMemcpy") {
            Transport::GpuHostDma.name()
        } else {
            name
        }
    }

    /// Whether bytes on this transport went through host memory.
    pub fn staged(self) -> bool {
        matches!(self, Transport::HostStaged | Transport::Shm | Transport::Socket)
    }

    /// Whether this transport keeps GPU data out of host memory: peer to
    /// peer, inside one GPU, or the NIC on GPU memory.
    pub fn direct(self) -> bool {
        matches!(
            self,
            Transport::GdrPeerMem
                | Transport::GdrDmabuf
                | Transport::GpuDirectStorage
                | Transport::P2pNvlink
                | Transport::P2pPcie
                | Transport::IpcSameDevice
        )
    }
}

/// The interpretation of one completed call.
#[derive(Clone, Debug)]
pub struct Call {
    pub label: String,
    pub family: Family,
    pub bytes: u64,
    /// Pages pinned (+) or unpinned (-) by this call, for pin-family ops.
    pub pages: i64,
    pub failed: bool,
    pub transport: Transport,
    pub evidence: String,
}

/// io_uring_register opcodes (include/uapi/linux/io_uring.h).
fn io_uring_opcode(code: u64) -> String {
    match code {
        0 => "register-buffers".into(),
        1 => "unregister-buffers".into(),
        15 => "register-buffers2".into(),
        16 => "register-buffers-update".into(),
        other => format!("opcode-{other}"),
    }
}

/// Whether a kernel return value is an error pointer or negative errno.
fn kernel_err(ret: i64) -> bool {
    (-4095..0).contains(&ret)
}

/// Interprets a completed call. The registry is consulted for addresses.
pub fn call(e: &Event, registry: &Registry) -> Option<Call> {
    let mut c = interpret(e, registry)?;
    // A failed call moved nothing: its verdict is unknown, its evidence stays.
    if c.failed && c.transport != Transport::Unknown {
        c.evidence = format!(
            "failed ({} would have been {}): {}",
            c.label,
            c.transport.name(),
            c.evidence
        );
        c.transport = Transport::Unknown;
    }
    Some(c)
}

fn interpret(e: &Event, registry: &Registry) -> Option<Call> {
    const PAGE: u64 = 4096;
    if e.op >= op::USER_BASE {
        return library_call(e, registry);
    }
    let point = point_of_op(e.op)?;
    let name = point.name;
    let mut c = Call {
        label: name.to_string(),
        family: point.family,
        bytes: 0,
        pages: 0,
        failed: kernel_err(e.ret),
        transport: Transport::Unknown,
        evidence: String::new(),
    };
    match e.op {
        op::IO_URING_REGISTER => {
            c.label = format!("io_uring_register:{}", io_uring_opcode(e.args[1]));
            c.failed = e.ret < 0;
            c.transport = Transport::HostOnly;
            c.evidence = "io_uring fixed buffers are host memory pinned with pin_user_pages".into();
        }
        op::PIN_USER_PAGES..=op::GET_USER_PAGES_UNLOCKED => {
            let pages = e.ret.max(0);
            c.pages = if e.op <= op::PIN_USER_PAGES_UNLOCKED { pages } else { 0 };
            c.bytes = pages as u64 * PAGE;
            c.failed = e.ret < 0;
            c.transport = Transport::HostOnly;
            c.evidence = format!("{name} pins host pages of the calling process");
        }
        op::UNPIN_USER_PAGES | op::UNPIN_USER_PAGES_DIRTY_LOCK | op::UNPIN_USER_PAGE_RANGE_DIRTY_LOCK => {
            c.pages = -(e.args[1] as i64);
            c.bytes = e.args[1] * PAGE;
            c.failed = false;
            c.transport = Transport::HostOnly;
        }
        op::UNPIN_USER_PAGE | op::UNPIN_FOLIO | op::UNPIN_USER_FOLIO => {
            c.pages = if e.op == op::UNPIN_USER_FOLIO {
                -(e.args[1] as i64)
            } else {
                -1
            };
            c.failed = false;
            c.transport = Transport::HostOnly;
        }
        op::IB_UMEM_GET => {
            c.bytes = e.args[2];
            c.transport = match registry.backing(e.pid, e.args[1]) {
                Backing::Gpu { .. } => Transport::GdrPeerMem,
                _ => Transport::HostOnly,
            };
            c.evidence = format!("ib_umem_get addr {:#x} len {} pins host pages", e.args[1], e.args[2]);
        }
        op::IB_UMEM_DMABUF_GET | op::IB_UMEM_DMABUF_GET_PINNED => {
            c.bytes = e.args[2];
            c.transport = Transport::GdrDmabuf;
            c.evidence = format!("MR backed by dma-buf fd {}", e.args[3] as i32);
        }
        op::BENCH_GETPPID => {
            c.transport = Transport::HostOnly;
            c.evidence = "benchmark event source (getppid)".into();
        }
        op::NV_P2P_GET_PAGES | op::NV_P2P_GET_PAGES_PERSISTENT => {
            c.bytes = e.args[if e.op == op::NV_P2P_GET_PAGES { 3 } else { 1 }];
            c.transport = Transport::GdrPeerMem;
            c.evidence = "nvidia_p2p_get_pages pinned GPU memory for a peer device".into();
        }
        _ => {}
    }
    Some(c)
}

fn library_call(e: &Event, registry: &Registry) -> Option<Call> {
    let (_, row) = uapi::row_of(e.op)?;
    let family = row.lib.family();
    let bytes = row.args.iter().position(|a| *a == Arg::Bytes).map_or(0, |i| e.args[i]);
    let failed = !row.succeeded(e.ret);
    let mut c = Call {
        label: row.name.to_string(),
        family,
        bytes,
        pages: 0,
        failed,
        transport: Transport::Unknown,
        evidence: String::new(),
    };
    match row.kind {
        Kind::Copy if row.args.len() >= 3 && row.args[2] == Arg::Bytes => {
            let (dst, src) = copy_sides(e, row.name, registry);
            (c.transport, c.evidence) = match (src, dst) {
                (Backing::Gpu { device: a }, Backing::Gpu { device: b }) if a >= 0 && b >= 0 && a != b => {
                    cross_device_verdict(e, row.name, a, b, registry)
                }
                (Backing::Gpu { device: a }, Backing::Gpu { device: b }) if a >= 0 && a == b => (
                    Transport::Unknown,
                    format!("{}: device to device on device {a}: a copy within one GPU", row.name),
                ),
                _ => copy::copy_verdict(row.name, src, dst),
            };
            // Say where a side's backing came from when it predates the trace.
            for addr in [e.args[1], e.args[0]] {
                if let Some(w) = registry.whence(e.pid, addr) {
                    c.evidence.push_str(&format!("; {w}"));
                }
            }
            if let Some(kib) = registry
                .vm_pin_before(e.pid)
                .filter(|_| c.transport == Transport::Unknown)
            {
                c.evidence.push_str(&format!("; VmPin when tracing began: {kib} kB"));
            }
        }
        // cuMemcpyPeer(dst, dstCtx, src, srcCtx, n): between two contexts.
        Kind::Copy if row.peer_copy() => {
            (c.transport, c.evidence) = peer_copy_verdict(e, row.name, registry);
        }
        Kind::MrRegister => {
            let keys = if row.ret_read.is_some() && !c.failed {
                format!("MR lkey {:#x} ", e.args[5] as u32)
            } else {
                "MR ".to_string()
            };
            if row.symbol == "ibv_reg_dmabuf_mr" {
                c.transport = Transport::GdrDmabuf;
                let fd = e.args[4] as i32;
                c.evidence = match registry.dmabuf(e.pid, fd) {
                    Some((addr, len)) => {
                        let alloc = registry.region(e.pid, addr).map_or("allocation not seen", |r| r.source);
                        format!(
                            "{keys}covers GPU range {addr:#x}+{len} ({alloc}) registered through dma-buf fd {fd} exported by cuMemGetHandleForAddressRange"
                        )
                    }
                    None => format!("{keys}registered through dma-buf fd {fd} (exporter not seen)"),
                };
                if c.failed {
                    c.evidence = format!("ibv_reg_dmabuf_mr failed: {}", c.evidence);
                }
            } else {
                let (addr, _) = registry.mr_range(e, row);
                let region = registry.region(e.pid, addr);
                let source = region.map_or("", |r| r.source);
                match registry.backing(e.pid, addr) {
                    Backing::Gpu { .. } if source == "cuMemAllocManaged" => {
                        c.transport = Transport::HostStaged;
                        c.evidence = format!(
                            "{keys}covers managed memory {addr:#x} (cuMemAllocManaged): the NIC reaches the pages wherever they reside, usually host memory"
                        );
                    }
                    Backing::Gpu { device } => {
                        c.transport = Transport::GdrPeerMem;
                        let dev = if device >= 0 {
                            format!(", device {device}")
                        } else {
                            String::new()
                        };
                        c.evidence = format!(
                            "{keys}covers GPU allocation {:#x} ({source}{dev}) registered through peer memory",
                            region.map_or(addr, |r| r.start)
                        );
                    }
                    Backing::HostPinned | Backing::Host | Backing::HostPreExisting => {
                        c.transport = Transport::HostOnly;
                        c.evidence = format!("{keys}covers host memory {addr:#x} ({source})");
                    }
                    Backing::Unknown => {
                        c.transport = Transport::HostOnly;
                        c.evidence = format!("{keys}{addr:#x} is not in any GPU allocation seen: host memory");
                    }
                }
                if c.failed {
                    c.evidence = format!("{} failed: {}", row.name, c.evidence);
                }
            }
        }
        _ => {}
    }
    Some(c)
}

/// Builds a job's trace call by call, for tests of verdicts and accounting:
/// events as the probes deliver them, through the aggregator, into a
/// judged report.
#[cfg(test)]
pub(crate) mod tests_support {
    use tracer_common::{Event, kind};

    use crate::{
        report::Report,
        stats::{
            Aggregator,
            source::{Fact, Recorded},
        },
    };

    pub struct Job {
        pub agg: Aggregator,
        /// The next inputs' answers of the process source.
        pending: std::rc::Rc<std::cell::RefCell<Vec<Fact>>>,
        t: u64,
    }

    impl Job {
        /// A job whose processes the tracer saw from their start.
        pub fn new() -> Self {
            let source = Recorded::default();
            let pending = source.pending.clone();
            Job {
                agg: Aggregator::with_source(Box::new(source)),
                pending,
                t: 1_000_000,
            }
        }

        /// Adds a process, with the facts `/proc` would have answered.
        pub fn process(&mut self, pid: u32, facts: Vec<Fact>) -> &mut Self {
            *self.pending.borrow_mut() = facts;
            self.agg.add_process(pid, None);
            self
        }

        /// One successful library call of `pid` (args as the probes read them).
        pub fn call(&mut self, pid: u32, name: &str, args: &[u64]) -> &mut Self {
            self.call_ret(pid, name, args, 0)
        }

        pub fn call_ret(&mut self, pid: u32, name: &str, args: &[u64], ret: i64) -> &mut Self {
            let op = crate::probes::ops::op_code(name).unwrap_or_else(|| panic!("no op {name}"));
            let mut e = Event {
                kind: kind::CALL,
                op,
                pid,
                tid: pid,
                start_ns: self.t,
                dur_ns: 10_000,
                ret,
                ..Default::default()
            };
            e.args[..args.len()].copy_from_slice(args);
            e.comm[..3].copy_from_slice(b"job");
            self.t += 50_000;
            self.agg.push(&e);
            self
        }

        /// The answers `/proc` would give to the next inputs.
        pub fn facts(&mut self, facts: Vec<Fact>) -> &mut Self {
            *self.pending.borrow_mut() = facts;
            self
        }

        /// The first call of an aggregated row (`kind::ENTRY`), returning `ret`.
        pub fn entry(&mut self, pid: u32, name: &str, args: &[u64], ret: i64) -> &mut Self {
            let op = crate::probes::ops::op_code(name).unwrap_or_else(|| panic!("no op {name}"));
            let mut e = Event {
                kind: kind::ENTRY,
                op,
                pid,
                tid: pid,
                start_ns: self.t,
                ret,
                ..Default::default()
            };
            e.args[..args.len()].copy_from_slice(args);
            self.t += 50_000;
            self.agg.push(&e);
            self
        }

        /// The kernel's cumulative rows: (pid, op, handle, calls, bytes).
        pub fn aggregates(&mut self, rows: &[(u32, &str, u64, u64, u64)]) -> &mut Self {
            let rows: Vec<_> = rows
                .iter()
                .map(|(pid, name, handle, calls, bytes)| {
                    let op = crate::probes::ops::op_code(name).unwrap_or_else(|| panic!("no op {name}"));
                    (
                        tracer_common::AggKey {
                            tgid: *pid,
                            op,
                            handle: *handle,
                        },
                        tracer_common::AggValue {
                            calls: *calls,
                            bytes: *bytes,
                        },
                    )
                })
                .collect();
            self.t += 100_000_000;
            self.agg.set_aggregates(self.t, &rows);
            self
        }

        /// The judged report.
        pub fn report(&self) -> Report {
            self.report_with(crate::host::HostFacts::default())
        }

        /// The judged report, with the host facts of the machine.
        pub fn report_with(&self, facts: crate::host::HostFacts) -> Report {
            let mut r = crate::report::tests_support::report_of(&self.agg);
            r.facts = facts;
            r.judge_with(None, None);
            crate::explain::fill(&mut r);
            r
        }
    }
}

/// Attach after allocation (issue 12): copies of buffers that existed
/// before the probes, classified from the address space at attach.
#[cfg(test)]
mod pre_existing_tests {
    use super::tests_support::Job;
    use crate::{
        model::{AddressSpace, MapKind, Mapping},
        stats::source::Fact,
    };

    const P: u32 = 200;
    const N: u64 = 1 << 20;
    const RESERVED: u64 = 0x2_0000_0000; // CUDA's device address reservation (---p)
    const DRIVER: u64 = 0x3_0020_0000; // /dev/nvidiactl: pinned host allocations
    const HEAP: u64 = 0x55d0_c000_0000; // ordinary host memory then
    const PINNED: u64 = 0x7fe3_2400_0000; // rw-s /dev/zero (deleted): torch's pin_memory()
    const LATER: u64 = 0x7e00_0000_0000; // mapped after attach

    fn attached() -> Job {
        let m = |start, end, kind, path: &str| Mapping {
            start,
            end,
            kind,
            path: path.into(),
        };
        let space = AddressSpace {
            vm_pin_kib: Some(0),
            mappings: vec![
                m(RESERVED, 0x3_0020_0000, MapKind::NoAccess, ""),
                m(DRIVER, 0x3_0060_0000, MapKind::NvidiaDriver, "/dev/nvidiactl"),
                m(HEAP, HEAP + (64 << 20), MapKind::Host, ""),
                m(PINNED, PINNED + (64 << 20), MapKind::SharedAnon, ""),
            ],
        };
        let mut j = Job::new();
        j.process(P, vec![Fact::Space { pid: P, space }]);
        j
    }

    fn op<'a>(r: &'a crate::report::Report, name: &str) -> &'a crate::report::Operation {
        r.operations
            .iter()
            .find(|o| o.name == name)
            .unwrap_or_else(|| panic!("no {name}: {:?}", r.operations))
    }

    #[test]
    fn pinned_buffer_allocated_before_attach_is_dma() {
        let mut j = attached();
        j.call(P, "cuMemcpyHtoDAsync", &[RESERVED + 4096, DRIVER + 64, N, 0]);
        let r = j.report();
        let o = op(&r, "cuMemcpyHtoDAsync");
        assert_eq!(o.transport, "gpu-host-dma", "{}", o.evidence);
        assert!(o.evidence.contains("/dev/nvidiactl mapping"), "{}", o.evidence);
        assert_eq!(r.staging.processes[0].staged_bytes, 0);
    }

    /// The H200 machine showed torch's pinned buffer (cudaHostAlloc) as a
    /// shared anonymous mapping, not a driver-device mapping.
    #[test]
    fn shared_anonymous_buffer_mapped_before_attach_is_inferred_pinned() {
        let mut j = attached();
        j.call(P, "cuMemcpyDtoHAsync", &[PINNED + 4096, RESERVED + 4096, N, 0]);
        let r = j.report();
        let o = op(&r, "cuMemcpyDtoHAsync");
        assert_eq!(o.transport, "gpu-host-dma", "{}", o.evidence);
        assert!(o.evidence.contains("inferred pinned"), "{}", o.evidence);
        assert_eq!(r.staging.processes[0].staged_bytes, 0);
    }

    #[test]
    fn host_memory_mapped_before_attach_is_unknown_with_the_reason() {
        let mut j = attached();
        j.call(P, "cuMemcpyHtoD", &[RESERVED + 4096, HEAP + 128, N]);
        let r = j.report();
        let o = op(&r, "cuMemcpyHtoD");
        assert_eq!(o.transport, "unknown");
        for part in [
            "unless cuMemHostRegister pinned it",
            "ordinary host memory",
            "VmPin when tracing began: 0 kB",
        ] {
            assert!(o.evidence.contains(part), "{part}: {}", o.evidence);
        }
    }

    #[test]
    fn memory_mapped_after_attach_follows_the_usual_rules() {
        let mut j = attached();
        j.call(P, "cuMemcpyDtoH", &[LATER, RESERVED + 4096, N]);
        let r = j.report();
        let o = op(&r, "cuMemcpyDtoH");
        assert_eq!(o.transport, "host-staged", "{}", o.evidence);
        assert!(o.evidence.contains("mapped after tracing began"), "{}", o.evidence);
    }

    /// A unified-addressing copy (cuMemcpyAsync) names no direction: the
    /// device side is known from the reservation, or from an earlier typed
    /// copy of the same range.
    #[test]
    fn unified_copies_of_pre_existing_buffers() {
        let mut j = attached();
        j.call(P, "cuMemcpyAsync", &[RESERVED + 4096, DRIVER, N, 0]);
        // A device range outside any mapping seen at attach (cuMemMap'd later):
        // the typed copy says it is device memory, the unified one reuses it.
        j.call(P, "cuMemcpyDtoH", &[DRIVER, LATER, N])
            .call(P, "cuMemcpyAsync", &[DRIVER, LATER + 512, 4096, 0]);
        let r = j.report();
        let unified: Vec<_> = r.operations.iter().filter(|o| o.name == "cuMemcpyAsync").collect();
        assert_eq!(unified.len(), 1, "{unified:?}");
        assert_eq!((unified[0].transport, unified[0].calls), ("gpu-host-dma", 2));
    }

    /// Not attached (traced from the start): an unseen host address is
    /// pageable, as before.
    #[test]
    fn without_an_address_space_unseen_host_memory_is_pageable() {
        let mut j = Job::new();
        j.process(P, Vec::new())
            .call(P, "cuMemAlloc", &[RESERVED, N])
            .call(P, "cuMemcpyHtoD", &[RESERVED, HEAP, N]);
        assert_eq!(op(&j.report(), "cuMemcpyHtoD").transport, "host-staged");
    }
}
