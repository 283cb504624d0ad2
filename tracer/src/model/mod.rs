//! The per-process memory-region registry: GPU allocations, pinned host
//! ranges and MRs seen through the library probes. It answers "what kind of
//! memory is this address" for later events, and it is where registration
//! churn is measured (lifetimes, re-registration of a range seen before,
//! pinned-bytes high-water).
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use tracer_common::Event;

use crate::{
    classify::Transport,
    probes::uapi::{self, Kind, Lib},
};

/// What backs an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backing {
    Gpu { device: i32 },
    HostPinned,
    Host,
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
}

/// Churn figures per process.
#[derive(Clone, Debug, Default, Serialize)]
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
}

/// Registrations kept per process in `Churn::mr_log`.
pub const MR_LOG: usize = 4096;

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
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
}

#[derive(Debug, Default)]
pub struct Registry {
    pub procs: HashMap<u32, Process>,
}

impl Registry {
    /// The GPU range a dma-buf fd was exported from, if seen.
    pub fn dmabuf(&self, pid: u32, fd: i32) -> Option<(u64, u64)> {
        self.procs.get(&pid)?.dmabufs.get(&fd).copied()
    }

    /// What backs `addr` in process `pid`, from what was seen.
    pub fn backing(&self, pid: u32, addr: u64) -> Backing {
        let Some(p) = self.procs.get(&pid) else {
            return Backing::Unknown;
        };
        match p.regions.range(..=addr).next_back() {
            Some((_, r)) if addr < r.start + r.len => r.backing,
            _ => Backing::Unknown,
        }
    }

    /// Feeds one library call into the registry.
    pub fn observe(&mut self, e: &Event) {
        let Some((_, row)) = uapi::row_of(e.op) else { return };
        let ok = match row.lib {
            Lib::Ibverbs => {
                matches!(row.kind, Kind::MrRegister) && e.ret != 0 || row.kind == Kind::MrDeregister && e.ret == 0
            }
            _ => e.ret == 0,
        };
        if !ok {
            return;
        }
        let p = self.procs.entry(e.pid).or_default();
        let add = |p: &mut Process, start: u64, len: u64, backing: Backing| {
            if start != 0 {
                p.regions.insert(
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
        };
        match row.kind {
            Kind::GpuAlloc => add(p, e.args[0], e.args[1], Backing::Gpu { device: -1 }),
            Kind::HostAlloc => {
                add(p, e.args[0], e.args[1], Backing::HostPinned);
                p.pin(e.args[1]);
            }
            Kind::HostRegister => {
                add(p, e.args[0], e.args[1], Backing::HostPinned);
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
            // cuIpcOpenMemHandle maps a peer's allocation at the returned
            // address (size not in the call: one page recorded).
            Kind::IpcImport if row.name == "cuIpcOpenMemHandle" => add(p, e.args[0], 4096, Backing::Gpu { device: -1 }),
            Kind::IpcImport => {}
            Kind::MrRegister => {
                let (addr, len) = (e.args[1], e.args[2]);
                let keys = e.args[5];
                let backing = self.backing(e.pid, addr);
                let p = self.procs.entry(e.pid).or_default();
                // ibv_reg_mr@@IBVERBS_1.1 calls ibv_reg_mr_iova2: the outer
                // call returns the MR the inner one already recorded.
                if p.mrs
                    .get(&(e.ret as u64))
                    .is_some_and(|m| m.addr == addr && m.len == len && m.since_ns >= e.start_ns)
                {
                    return;
                }
                p.churn.registrations += 1;
                if p.churn.mr_log.len() < MR_LOG {
                    p.churn.mr_log.push(MrSeen {
                        addr,
                        length: len,
                        lkey: keys as u32,
                        rkey: (keys >> 32) as u32,
                        backing,
                    });
                }
                let seen = p.seen_ranges.entry((addr, len)).or_insert(0);
                if *seen > 0 {
                    p.churn.reregistrations_of_seen_range += 1;
                }
                *seen += 1;
                p.mrs.insert(
                    e.ret as u64,
                    Mr {
                        addr,
                        len,
                        lkey: keys as u32,
                        rkey: (keys >> 32) as u32,
                        backing,
                        since_ns: e.start_ns,
                        handle: e.ret as u64,
                    },
                );
                p.pin(len);
            }
            Kind::MrDeregister => {
                p.churn.deregistrations += 1;
                if let Some(mr) = p.mrs.remove(&e.args[0]) {
                    p.churn.lifetimes_ns.push(e.start_ns.saturating_sub(mr.since_ns));
                    p.unpin(mr.len);
                }
            }
            _ => {}
        }
    }
}

impl Process {
    fn pin(&mut self, bytes: u64) {
        self.churn.pinned_bytes += bytes;
        self.churn.pinned_bytes_high_water = self.churn.pinned_bytes_high_water.max(self.churn.pinned_bytes);
    }
    fn unpin(&mut self, bytes: u64) {
        self.churn.pinned_bytes = self.churn.pinned_bytes.saturating_sub(bytes);
    }
}

/// The verdict of a copy from what backs its source and destination.
pub fn copy_verdict(name: &str, src: Backing, dst: Backing) -> (Transport, String) {
    use Backing::*;
    let staged = |side: &str| {
        (
            Transport::HostStaged,
            format!(
                "{name}: {side} is pageable host memory (not from cuMemAllocHost/cuMemHostAlloc/cuMemHostRegister): the driver stages it through a pinned bounce buffer"
            ),
        )
    };
    match (src, dst) {
        (Gpu { .. }, Gpu { .. }) => (
            Transport::Unknown,
            format!("{name}: device to device; peer path not yet known"),
        ),
        (HostPinned, Gpu { .. }) | (Gpu { .. }, HostPinned) => (
            Transport::HostOnly,
            format!("{name}: DMA between GPU and pinned host memory"),
        ),
        (Host | Unknown, Gpu { .. }) => staged("source"),
        (Gpu { .. }, Host | Unknown) => staged("destination"),
        _ => (
            Transport::Unknown,
            format!("{name}: neither side is a GPU allocation seen by the tracer"),
        ),
    }
}
