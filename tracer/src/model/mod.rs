//! The per-process memory-region registry: GPU allocations, pinned host
//! ranges and MRs seen through the library probes. It answers "what kind of
//! memory is this address" for later events, and it is where registration
//! churn is measured (lifetimes, re-registration of a range seen before,
//! pinned-bytes high-water).
use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;
use tracer_common::{Event, op};

pub use self::space::{AddressSpace, MapKind, Mapping};
use crate::probes::uapi::{self, Kind, Lib};

mod space;

/// What backs an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backing {
    Gpu {
        device: i32,
    },
    HostPinned,
    Host,
    /// Host memory that was mapped before tracing began (attach): pageable,
    /// or pinned by a `cuMemHostRegister` the probes could not see.
    HostPreExisting,
    Unknown,
}

#[derive(Clone, Debug, Serialize)]
pub struct Region {
    pub start: u64,
    pub len: u64,
    pub backing: Backing,
    pub source: &'static str,
    pub since_ns: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Mr {
    pub addr: u64,
    pub len: u64,
    pub lkey: u32,
    pub rkey: u32,
    pub backing: Backing,
    pub since_ns: u64,
    pub handle: u64,
    /// Registration backing: `host`, `gpu/peer-mem`, `gpu/dma-buf`.
    pub kind: &'static str,
}

/// Registration backings, as churn and latency are broken down.
pub const BACKINGS: [&str; 4] = ["host", "gpu/peer-mem", "gpu/dma-buf", "io_uring"];

/// Registrations and deregistrations of one backing.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct RegCount {
    pub registrations: u64,
    pub deregistrations: u64,
}

/// A registration that failed, with what the registry knew of its memory.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct FailedRegistration {
    pub op: String,
    pub addr: u64,
    pub length: u64,
    pub backing: Backing,
    /// The allocation that holds `addr`, if seen (`cuMemAlloc`, `cuMemAllocManaged`, ...).
    #[serde(default, deserialize_with = "crate::intern::opt")]
    pub source: Option<crate::intern::Name>,
    pub ret: i64,
}

/// Churn figures per process.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Churn {
    pub registrations: u64,
    pub deregistrations: u64,
    pub reregistrations_of_seen_range: u64,
    pub pinned_bytes: u64,
    pub pinned_bytes_high_water: u64,
    /// Lifetimes (ns) of MRs and pinned ranges that ended.
    #[serde(skip)]
    pub lifetimes_ns: Vec<u64>,
    /// The most recent MR registrations (at most `MR_LOG`): address,
    /// length, lkey, rkey and backing, to match against what a program reports.
    pub mr_log: Vec<MrSeen>,
    /// Registrations and deregistrations per backing (`host`,
    /// `gpu/peer-mem`, `gpu/dma-buf`, `io_uring`).
    #[serde(deserialize_with = "crate::intern::keys")]
    pub by_backing: BTreeMap<&'static str, RegCount>,
    /// The range registered most often (address, length, times, io_uring
    /// set), when one was registered more than once.
    pub most_registered_range: Option<(u64, u64, u64, bool)>,
}

/// Registrations kept per process in `Churn::mr_log`.
pub const MR_LOG: usize = 4096;

#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct MrSeen {
    pub addr: u64,
    pub length: u64,
    pub lkey: u32,
    pub rkey: u32,
    pub backing: Backing,
}

#[derive(Debug, Default)]
pub struct Process {
    pub regions: BTreeMap<u64, Region>,
    /// MRs by the `struct ibv_mr *` returned at registration.
    pub mrs: HashMap<u64, Mr>,
    pub seen_ranges: HashMap<(u64, u64), u64>,
    /// dma-buf fds exported from GPU memory: fd -> (address, length).
    pub dmabufs: HashMap<i32, (u64, u64)>,
    pub churn: Churn,
    /// Peer contexts `cuCtxEnablePeerAccess` succeeded for.
    pub peer_enabled: HashSet<u64>,
    /// Device pairs (current context's device, peer's device) peer access was enabled for.
    pub peer_devices: HashSet<(i32, i32)>,
    /// Device of each context (`cuDevicePrimaryCtxRetain`).
    pub ctx_device: HashMap<u64, i32>,
    /// Current context per thread (`cuCtxSetCurrent`, `cuCtxPushCurrent`).
    pub current: HashMap<u32, u64>,
    /// GPU memory was allocated at some point (allocation calls seen).
    pub gpu_allocations: u64,
    /// Allocations seen per source (`cuMemAlloc`, `cuMemAllocManaged`, `cuMemHostAlloc`, ...).
    pub allocations: BTreeMap<&'static str, u64>,
    /// io_uring fixed-buffer sets registered per ring fd: (since, iovec array, count).
    pub uring: HashMap<u64, (u64, u64, u64)>,
    /// Failed registrations (at most `FAILED_LOG`).
    pub failed: Vec<FailedRegistration>,
    /// The address space when tracing began, if CUDA state predates it.
    pub before: Option<AddressSpace>,
    /// Kernel registration paths that failed, by `op: errno` (e.g. `ib_umem_get: EFAULT`).
    pub kernel_failures: BTreeMap<String, u64>,
}

/// Regions kept per process before typed copies stop adding inferred ones.
pub const INFERRED_REGIONS: usize = 1 << 16;

/// Failed registrations kept per process.
pub const FAILED_LOG: usize = 64;

#[derive(Debug, Default)]
pub struct Registry {
    pub procs: HashMap<u32, Process>,
    /// NVLink between the GPUs (`topo`, or the recording's facts), once
    /// asked for: None until a peer copy needed it.
    pub nvlink: Option<Option<bool>>,
    /// Context switches are no longer seen (the set-up links were closed
    /// over budget): a thread's last context is trusted only in processes
    /// with a single context.
    pub contexts_frozen: bool,
}

impl Registry {
    /// The GPU range a dma-buf fd was exported from, if seen.
    pub fn dmabuf(&self, pid: u32, fd: i32) -> Option<(u64, u64)> {
        self.procs.get(&pid)?.dmabufs.get(&fd).copied()
    }

    /// What backs `addr` in process `pid`: a region seen allocated, else
    /// the address space as it was when tracing began (what predates it).
    pub fn backing(&self, pid: u32, addr: u64) -> Backing {
        if let Some(r) = self.region(pid, addr) {
            return r.backing;
        }
        match self.mapped_before(pid, addr).map(|m| m.kind) {
            Some(MapKind::NvidiaDriver | MapKind::SharedAnon) => Backing::HostPinned,
            Some(MapKind::NvidiaUvm | MapKind::NoAccess) => Backing::Gpu { device: -1 },
            Some(MapKind::Host) => Backing::HostPreExisting,
            None => Backing::Unknown,
        }
    }

    /// The mapping that held `addr` when tracing began, for an address no
    /// allocation seen since covers.
    pub fn mapped_before(&self, pid: u32, addr: u64) -> Option<&Mapping> {
        if self.region(pid, addr).is_some() {
            return None;
        }
        self.procs.get(&pid)?.before.as_ref()?.find(addr)
    }

    /// How `addr`'s backing was inferred, when it came from the address space
    /// at the start rather than from an allocation seen (for evidence).
    pub fn whence(&self, pid: u32, addr: u64) -> Option<String> {
        let space = self.procs.get(&pid)?.before.as_ref()?;
        if self.region(pid, addr).is_some() {
            return None;
        }
        Some(match space.find(addr) {
            Some(m) => {
                let what = match m.kind {
                    MapKind::NvidiaDriver => {
                        format!("a {} mapping (memory the driver allocated and mapped: pinned)", m.path)
                    }
                    MapKind::NvidiaUvm => format!("a {} mapping (managed memory at its GPU address)", m.path),
                    MapKind::SharedAnon => "a shared anonymous mapping (rw-s /dev/zero), the way cuMemHostAlloc maps pinned host memory: inferred pinned, not seen allocated".into(),
                    MapKind::NoAccess => {
                        "a range the CPU cannot access (---p: CUDA's device address reservation)".into()
                    }
                    MapKind::Host => "ordinary host memory".into(),
                };
                format!(
                    "{addr:#x} lies in {what}, {:#x}-{:#x}, mapped before tracing began",
                    m.start, m.end
                )
            }
            None => format!(
                "{addr:#x} was mapped after tracing began, and no allocation or registration seen since covers it"
            ),
        })
    }

    /// Records what a process's address space held when tracing began.
    pub fn set_before(&mut self, pid: u32, space: Option<AddressSpace>) {
        if space.is_some() {
            self.procs.entry(pid).or_default().before = space;
        }
    }

    /// A new program image: nothing of the old address space holds.
    pub fn exec(&mut self, pid: u32) {
        if let Some(p) = self.procs.get_mut(&pid) {
            p.regions.clear();
            p.before = None;
        }
    }

    /// The VmPin of a process when tracing began, if its address space was kept.
    pub fn vm_pin_before(&self, pid: u32) -> Option<u64> {
        self.procs.get(&pid)?.before.as_ref()?.vm_pin_kib
    }

    /// The region that holds `addr` in process `pid`, if seen.
    pub fn region(&self, pid: u32, addr: u64) -> Option<&Region> {
        let p = self.procs.get(&pid)?;
        match p.regions.range(..=addr).next_back() {
            Some((_, r)) if addr < r.start + r.len.max(1) => Some(r),
            _ => None,
        }
    }

    /// Whether `cuCtxEnablePeerAccess` succeeded in `pid` for either context.
    pub fn peer_enabled(&self, pid: u32, a: u64, b: u64) -> bool {
        self.procs
            .get(&pid)
            .is_some_and(|p| p.peer_enabled.contains(&a) || p.peer_enabled.contains(&b))
    }

    /// Whether peer access was enabled in `pid` between two devices (either direction).
    pub fn peer_devices_enabled(&self, pid: u32, a: i32, b: i32) -> bool {
        self.procs
            .get(&pid)
            .is_some_and(|p| p.peer_devices.contains(&(a, b)) || p.peer_devices.contains(&(b, a)))
    }

    /// The device a context of `pid` was created on, if seen.
    pub fn device_of_ctx(&self, pid: u32, ctx: u64) -> Option<i32> {
        self.procs.get(&pid)?.ctx_device.get(&ctx).copied()
    }

    /// The device of the thread's current context, if known.
    fn device_of_thread(&self, pid: u32, tid: u32) -> Option<i32> {
        let p = self.procs.get(&pid)?;
        let mut devices = p.ctx_device.values();
        match (devices.next(), devices.next()) {
            // One context: its device, whatever the thread last switched to.
            (Some(d), None) => Some(*d),
            _ if self.contexts_frozen => None,
            _ => p.ctx_device.get(p.current.get(&tid)?).copied(),
        }
    }

    /// Kernel-side registration events: io_uring buffer sets (churn by ring
    /// and iovec array) and failures of the verbs registration paths.
    fn observe_kernel(&mut self, e: &Event) {
        match e.op {
            op::IO_URING_REGISTER if e.ret >= 0 => {
                let p = self.procs.entry(e.pid).or_default();
                match e.args[1] {
                    // IORING_REGISTER_BUFFERS (and BUFFERS2): fd, iovec array, count.
                    0 | 15 => {
                        p.churn.registrations += 1;
                        p.churn.by_backing.entry("io_uring").or_default().registrations += 1;
                        let key = (e.args[2], e.args[3]);
                        p.seen(key, true);
                        p.uring.insert(e.args[0], (e.start_ns, e.args[2], e.args[3]));
                    }
                    // IORING_UNREGISTER_BUFFERS.
                    1 => {
                        p.churn.deregistrations += 1;
                        p.churn.by_backing.entry("io_uring").or_default().deregistrations += 1;
                        if let Some((since, _, _)) = p.uring.remove(&e.args[0]) {
                            p.churn.lifetimes_ns.push(e.start_ns.saturating_sub(since));
                        }
                    }
                    _ => {}
                }
            }
            op::IB_UMEM_GET | op::IB_UMEM_DMABUF_GET | op::IB_UMEM_DMABUF_GET_PINNED if (-4095..0).contains(&e.ret) => {
                let name = crate::probes::catalog::point_of_op(e.op).map_or("?", |p| p.name);
                let errno = crate::error::errno_name((-e.ret) as i32);
                let p = self.procs.entry(e.pid).or_default();
                *p.kernel_failures.entry(format!("{name}: {errno}")).or_default() += 1;
            }
            _ => {}
        }
    }

    /// Feeds one call into the registry.
    pub fn observe(&mut self, e: &Event) {
        if e.op < op::USER_BASE {
            self.observe_kernel(e);
            return;
        }
        let Some((_, row)) = uapi::row_of(e.op) else { return };
        if !row.succeeded(e.ret) {
            self.failed_call(e, row);
            return;
        }
        let device = self.device_of_thread(e.pid, e.tid).unwrap_or(-1);
        if row.name == "cuCtxEnablePeerAccess" {
            self.enable_peer(e);
        }
        if row.kind == Kind::MrRegister {
            self.register_mr(e, row);
            return;
        }
        let p = self.procs.entry(e.pid).or_default();
        if matches!(row.kind, Kind::GpuAlloc | Kind::HostAlloc | Kind::HostRegister) {
            *p.allocations.entry(row.name).or_default() += 1;
        }
        match row.kind {
            Kind::GpuAlloc => {
                p.gpu_allocations += 1;
                p.add_region(e, row, e.args[0], e.args[1], Backing::Gpu { device })
            }
            // The context is the dereferenced out-pointer.
            Kind::Setup if row.name == "cuDevicePrimaryCtxRetain" => {
                p.ctx_device.insert(e.args[0], e.args[1] as i32);
            }
            Kind::Setup if row.name == "cuCtxSetCurrent" || row.name == "cuCtxPushCurrent" => {
                p.current.insert(e.tid, e.args[0]);
            }
            Kind::HostAlloc | Kind::HostRegister => {
                p.add_region(e, row, e.args[0], e.args[1], Backing::HostPinned);
                p.pin(e.args[1]);
            }
            Kind::GpuFree | Kind::HostFree | Kind::HostUnregister => {
                if let Some(r) = p.regions.remove(&e.args[0]) {
                    if r.backing == Backing::HostPinned {
                        p.unpin(r.len);
                    }
                    p.churn.lifetimes_ns.push(e.start_ns.saturating_sub(r.since_ns));
                }
            }
            // The dma-buf fd is the dereferenced out-pointer (an int).
            Kind::DmabufExport => {
                p.dmabufs.insert(e.args[0] as u32 as i32, (e.args[1], e.args[2]));
            }
            Kind::Copy => p.copy_sides(e, row),
            // cuIpcOpenMemHandle maps a peer's allocation at the returned
            // address (size not in the call: one page recorded).
            Kind::IpcImport if row.name == "cuIpcOpenMemHandle" => {
                p.add_region(e, row, e.args[0], 4096, Backing::Gpu { device: -1 })
            }
            Kind::MrDeregister => p.deregister_mr(e),
            _ => {}
        }
    }

    /// A call that failed: a failed MR registration is logged with what
    /// backs its range; a peer access enabled before counts as enabled.
    fn failed_call(&mut self, e: &Event, row: &uapi::Row) {
        if row.kind == Kind::MrRegister && row.lib == Lib::Ibverbs {
            let (addr, len) = self.mr_range(e, row);
            let region = self.region(e.pid, addr).map(|r| (r.backing, r.source));
            let p = self.procs.entry(e.pid).or_default();
            if p.failed.len() < FAILED_LOG {
                p.failed.push(FailedRegistration {
                    op: row.name.to_string(),
                    addr,
                    length: len,
                    backing: region.map_or(Backing::Unknown, |r| r.0),
                    source: region.map(|r| r.1),
                    ret: e.ret,
                });
            }
        }
        // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: enabled before.
        if row.name == "cuCtxEnablePeerAccess" && e.ret == 704 {
            self.enable_peer(e);
        }
    }

    /// A successful MR registration (or re-registration): the MR, its keys,
    /// its backing, and the churn it adds.
    fn register_mr(&mut self, e: &Event, row: &uapi::Row) {
        let handle = row.object(&e.args, e.ret);
        let (addr, len) = self.mr_range(e, row);
        // The keys are read from the returned `struct ibv_mr`; a call
        // that returns a status (`ibv_rereg_mr`) keeps the MR's.
        let keys = match (row.ret_read, self.procs.get(&e.pid).and_then(|p| p.mrs.get(&handle))) {
            (Some(_), _) => e.args[5],
            (None, Some(m)) => u64::from(m.lkey) | u64::from(m.rkey) << 32,
            (None, None) => 0,
        };
        let dmabuf = row.symbol == "ibv_reg_dmabuf_mr";
        let backing = match self.backing(e.pid, addr) {
            Backing::Unknown if dmabuf => Backing::Gpu { device: -1 },
            b => b,
        };
        let kind = match backing {
            Backing::Gpu { .. } if dmabuf => "gpu/dma-buf",
            Backing::Gpu { .. } => "gpu/peer-mem",
            _ => "host",
        };
        let p = self.procs.entry(e.pid).or_default();
        // ibv_reg_mr@@IBVERBS_1.1 calls ibv_reg_mr_iova2: the outer
        // call returns the MR the inner one already recorded.
        if p.mrs
            .get(&handle)
            .is_some_and(|m| m.addr == addr && m.len == len && m.since_ns >= e.start_ns)
        {
            return;
        }
        p.churn.registrations += 1;
        p.churn.by_backing.entry(kind).or_default().registrations += 1;
        if p.churn.mr_log.len() < MR_LOG {
            p.churn.mr_log.push(MrSeen {
                addr,
                length: len,
                lkey: keys as u32,
                rkey: (keys >> 32) as u32,
                backing,
            });
        }
        p.seen((addr, len), false);
        let before = p.mrs.insert(
            handle,
            Mr {
                addr,
                len,
                lkey: keys as u32,
                rkey: (keys >> 32) as u32,
                backing,
                since_ns: e.start_ns,
                handle,
                kind,
            },
        );
        // A re-registration moves the MR: its old range is no longer pinned.
        if let Some(old) = before {
            p.unpin(old.len);
        }
        p.pin(len);
    }
}

impl Process {
    /// A region the call made, at `start` (none at 0).
    fn add_region(&mut self, e: &Event, row: &uapi::Row, start: u64, len: u64, backing: Backing) {
        if start != 0 {
            self.regions.insert(
                start,
                Region {
                    start,
                    len,
                    backing,
                    source: row.name,
                    since_ns: e.start_ns,
                },
            );
        }
    }

    /// A typed copy names its device side (cuMemcpyHtoD's destination,
    /// cuMemcpyDtoH's source): later copies of a range allocated before
    /// tracing (or mapped by cuMemMap) know it is GPU memory.
    fn copy_sides(&mut self, e: &Event, row: &uapi::Row) {
        let (dst_dev, src_dev) = copy_direction(row.name);
        let n = if row.args.get(2) == Some(&uapi::Arg::Bytes) {
            e.args[2]
        } else {
            0
        };
        for (addr, device) in [(e.args[0], dst_dev), (e.args[1], src_dev)] {
            let known = self
                .regions
                .range(..=addr)
                .next_back()
                .is_some_and(|(_, r)| addr < r.start + r.len.max(1));
            // Bounded: a process copying to ever new addresses keeps the first ones.
            if device == Some(true) && n > 0 && !known && self.regions.len() < INFERRED_REGIONS {
                self.regions.insert(
                    addr,
                    Region {
                        start: addr,
                        len: n,
                        backing: Backing::Gpu { device: -1 },
                        source: row.name,
                        since_ns: e.start_ns,
                    },
                );
            }
        }
    }

    fn deregister_mr(&mut self, e: &Event) {
        self.churn.deregistrations += 1;
        let kind = self.mrs.get(&e.args[0]).map_or("host", |m| m.kind);
        self.churn.by_backing.entry(kind).or_default().deregistrations += 1;
        if let Some(mr) = self.mrs.remove(&e.args[0]) {
            self.churn.lifetimes_ns.push(e.start_ns.saturating_sub(mr.since_ns));
            self.unpin(mr.len);
        }
    }
}

impl Registry {
    /// `cuCtxEnablePeerAccess(peer, flags)` on the thread's current context.
    fn enable_peer(&mut self, e: &Event) {
        let p = self.procs.entry(e.pid).or_default();
        p.peer_enabled.insert(e.args[0]);
        let mine = p.current.get(&e.tid).and_then(|c| p.ctx_device.get(c)).copied();
        if let (Some(a), Some(b)) = (mine, p.ctx_device.get(&e.args[0]).copied()) {
            p.peer_devices.insert((a, b));
        }
    }

    /// The address range an MR registration covers: `ibv_reg_dmabuf_mr`
    /// takes an offset into a dma-buf, resolved through the exporting call.
    /// The range an MR call registers, by the row's argument layout: its
    /// address and length arguments; a dma-buf registration's offset is
    /// into the exported range (argument 1, the fd in argument 4).
    /// `ibv_rereg_mr(mr, flags, pd, addr, length, access)` reads its
    /// range only with `IBV_REREG_MR_CHANGE_TRANSLATION` in `flags`
    /// (rdma-core verbs.h); otherwise the MR keeps the range it had.
    pub fn mr_range(&self, e: &Event, row: &uapi::Row) -> (u64, u64) {
        const IBV_REREG_MR_CHANGE_TRANSLATION: u64 = 1;
        let at = |kind| row.arg(kind).map_or(0, |i| e.args[i]);
        if row.symbol == "ibv_reg_dmabuf_mr" {
            let base = self.dmabuf(e.pid, e.args[4] as i32).map_or(0, |(a, _)| a);
            (base + e.args[1], e.args[2])
        } else if row.returns == uapi::Returns::Status && e.args[1] & IBV_REREG_MR_CHANGE_TRANSLATION == 0 {
            let known = self.procs.get(&e.pid).and_then(|p| p.mrs.get(&e.args[0]));
            known.map_or((at(uapi::Arg::Addr), at(uapi::Arg::Bytes)), |m| (m.addr, m.len))
        } else {
            (at(uapi::Arg::Addr), at(uapi::Arg::Bytes))
        }
    }
}

impl Process {
    /// Counts a registration of `key`; a repeat is a re-registration.
    fn seen(&mut self, key: (u64, u64), uring: bool) {
        // io_uring sets are keyed by (iovec array, count), MRs by (address,
        // length): one namespace, told apart by the top bit of the count.
        let k = if uring { (key.0, key.1 | 1 << 63) } else { key };
        let seen = self.seen_ranges.entry(k).or_insert(0);
        if *seen > 0 {
            self.churn.reregistrations_of_seen_range += 1;
        }
        *seen += 1;
        let n = *seen;
        if n > 1 && self.churn.most_registered_range.is_none_or(|(_, _, m, _)| n > m) {
            self.churn.most_registered_range = Some((key.0, key.1, n, uring));
        }
    }

    fn pin(&mut self, bytes: u64) {
        self.churn.pinned_bytes += bytes;
        self.churn.pinned_bytes_high_water = self.churn.pinned_bytes_high_water.max(self.churn.pinned_bytes);
    }
    fn unpin(&mut self, bytes: u64) {
        self.churn.pinned_bytes = self.churn.pinned_bytes.saturating_sub(bytes);
    }
}

/// Which side of a copy is device memory by the API's own contract:
/// (destination, source), `Some(true)` for device, `Some(false)` for host,
/// None for unified-addressing copies (`cuMemcpy`, `cuMemcpyAsync`) that
/// take either.
pub fn copy_direction(name: &str) -> (Option<bool>, Option<bool>) {
    if name.starts_with("cuMemcpyHtoD") {
        (Some(true), Some(false))
    } else if name.starts_with("cuMemcpyDtoH") {
        (Some(false), Some(true))
    } else if name.starts_with("cuMemcpyDtoD") {
        (Some(true), Some(true))
    } else {
        (None, None)
    }
}

#[cfg(test)]
mod tests;
