//! The report's accounting sections: transfer records per (op, verdict),
//! host staging per process and communicator, and registration churn.
use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::{Collective, Latency};
use crate::{
    classify::transfer::Transfer,
    model::{FailedRegistration, RegCount},
    stats::{Aggregator, new_histogram},
};

/// Transfer records: counts per (op, verdict) and a bounded sample.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Transfers {
    /// Records (calls, for kernel-aggregated collectives) in all.
    pub total: u64,
    pub groups: Vec<TransferGroup>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct TransferGroup {
    pub op: String,
    #[serde(deserialize_with = "crate::intern::str")]
    pub transport: crate::intern::Name,
    pub count: u64,
    pub bytes: u64,
    /// The first few records of the group.
    pub sample: Vec<Transfer>,
}

pub fn transfers(agg: &Aggregator) -> Transfers {
    let groups: Vec<TransferGroup> = agg
        .transfers()
        .groups
        .iter()
        .map(|(k, g)| TransferGroup {
            op: k.op.clone(),
            transport: k.transport.name(),
            count: g.count,
            bytes: g.bytes,
            sample: g.sample.clone(),
        })
        .collect();
    Transfers {
        total: groups.iter().map(|g| g.count).sum(),
        groups,
    }
}

/// Records for the kernel-aggregated calls of each communicator (their
/// transport is the process's verdict).
pub fn collective_transfers(collectives: &[Collective], comms: &BTreeMap<u32, String>) -> Vec<Transfer> {
    collectives
        .iter()
        .map(|c| Transfer {
            pid: c.pid,
            tid: c.pid,
            comm: comms.get(&c.pid).cloned().unwrap_or_default(),
            op: c.op.clone(),
            bytes: c.bytes,
            start_ns: 0,
            dur_ns: 0,
            transport: crate::classify::Transport::from_name(c.transport),
            failed: false,
            evidence: format!(
                "{} calls on communicator {} aggregated in the kernel; transport of the process's verdict",
                c.calls, c.communicator
            ),
            communicator: Some(c.communicator.clone()),
            calls: Some(c.calls),
        })
        .collect()
}

/// Host staging of one process.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct StagingProcess {
    pub pid: u32,
    pub comm: String,
    /// Bytes of copies and collectives.
    pub moved_bytes: u64,
    pub staged_bytes: u64,
    /// staged / moved (0 when nothing moved).
    pub staged_ratio: f64,
    pub staging_copies: u64,
    pub staging_copies_per_s: f64,
    pub staged_pairs: u64,
    pub cpu_seconds: Option<f64>,
    /// CPU seconds per GB moved (the cost of moving data through this process).
    pub cpu_s_per_gb: Option<f64>,
}

/// The fewest bytes a per-GB figure is given for: below it the bytes are a
/// process's control messages, not its data (a GET's receiver sends a few
/// KiB of requests for the GBs it reads), and CPU over them is no rate.
pub const PER_GB_MIN_BYTES: u64 = 1 << 20;

/// CPU seconds per GB (10^9 bytes) moved: what moving data cost a process
/// (none below [`PER_GB_MIN_BYTES`]).
pub fn cpu_s_per_gb(cpu_seconds: Option<f64>, bytes: u64) -> Option<f64> {
    cpu_seconds
        .filter(|_| bytes >= PER_GB_MIN_BYTES)
        .map(|c| c / (bytes as f64 / 1e9))
}

/// Host staging of one communicator.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct StagingCommunicator {
    pub pid: u32,
    pub communicator: String,
    pub bytes: u64,
    pub staged_bytes: u64,
    pub staged_ratio: f64,
    #[serde(deserialize_with = "crate::intern::str")]
    pub transport: crate::intern::Name,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Staging {
    pub processes: Vec<StagingProcess>,
    pub communicators: Vec<StagingCommunicator>,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

fn per_s(n: u64, secs: f64) -> f64 {
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

/// Staging per process and communicator, from the judged report.
pub fn staging(r: &super::Report) -> Staging {
    let mut communicators = Vec::new();
    let mut coll_bytes: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for c in &r.collectives {
        let staged = crate::classify::Transport::from_name(c.transport).staged();
        // Only bytes that cross between devices count as moved (a one-rank
        // communicator moves none).
        let moved = c.moved_bytes();
        let s = if staged { moved } else { 0 };
        let e = coll_bytes.entry(c.pid).or_default();
        e.0 += moved;
        e.1 += s;
        communicators.push(StagingCommunicator {
            pid: c.pid,
            communicator: c.communicator.clone(),
            bytes: moved,
            staged_bytes: s,
            staged_ratio: ratio(s, moved),
            transport: c.transport,
        });
    }
    let processes = r
        .processes
        .iter()
        .filter(|p| p.moved_bytes > 0 || p.staged_bytes > 0 || coll_bytes.contains_key(&p.pid))
        .map(|p| {
            // A library path's bytes (UCX data calls, what a process served)
            // are moved bytes too, where its copies were fewer.
            let paths: u64 = r
                .paths
                .iter()
                .filter(|x| x.pid == p.pid && x.peer_kind != crate::classify::path::PeerKind::NcclCommunicator)
                .map(|x| x.bytes)
                .sum();
            let moved = (p.moved_bytes + coll_bytes.get(&p.pid).map_or(0, |c| c.0)).max(paths);
            StagingProcess {
                pid: p.pid,
                comm: p.comm.clone(),
                moved_bytes: moved,
                staged_bytes: p.staged_bytes,
                staged_ratio: ratio(p.staged_bytes, moved).min(1.0),
                staging_copies: p.staging_copies,
                staging_copies_per_s: per_s(p.staging_copies, r.duration_s),
                staged_pairs: p.staged_pairs,
                cpu_seconds: p.cpu_seconds,
                cpu_s_per_gb: cpu_s_per_gb(p.cpu_seconds, moved),
            }
        })
        .collect();
    Staging {
        processes,
        communicators,
    }
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct BackingRate {
    pub registrations: u64,
    pub deregistrations: u64,
    pub registrations_per_s: f64,
    pub deregistrations_per_s: f64,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Range {
    pub addr: u64,
    pub length: u64,
    /// Registrations of this range.
    pub times: u64,
    /// An io_uring buffer set: `addr` is the iovec array, `length` the count.
    pub io_uring: bool,
}

/// Registration churn of one process.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct RegistrationProcess {
    pub pid: u32,
    pub comm: String,
    #[serde(deserialize_with = "crate::intern::keys")]
    pub by_backing: BTreeMap<&'static str, BackingRate>,
    pub reregistrations_of_seen_range: u64,
    pub most_registered_range: Option<Range>,
    /// Lifetimes of MRs, pinned ranges and io_uring buffer sets that ended.
    pub lifetime: Option<Latency>,
    pub pages_pinned_per_s: f64,
    pub pages_unpinned_per_s: f64,
    pub pinned_bytes_high_water: u64,
    /// GPU and host allocations seen, by call.
    #[serde(deserialize_with = "crate::intern::keys")]
    pub allocations: BTreeMap<&'static str, u64>,
    pub failed_registrations: Vec<FailedRegistration>,
    /// Kernel registration paths that failed (`ib_umem_get: EFAULT`).
    pub kernel_failures: BTreeMap<String, u64>,
    /// Peer contexts `cuCtxEnablePeerAccess` succeeded for.
    pub peer_access_enabled: usize,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Registration {
    pub processes: Vec<RegistrationProcess>,
    /// Registration latency per backing (`host`, `gpu/peer-mem`, `gpu/dma-buf`, `io_uring`).
    #[serde(deserialize_with = "crate::intern::keys")]
    pub latency_by_backing: BTreeMap<&'static str, Latency>,
    /// Latency per kernel path (ib_umem_get, pin_user_pages*, io_uring_register,
    /// nvidia_p2p_get_pages*, ib_umem_dmabuf_get*, dma_buf_*).
    pub latency_by_kernel_path: BTreeMap<String, Latency>,
}

/// Kernel paths registration latency is broken down by.
fn kernel_path(name: &str) -> bool {
    name.starts_with("ib_umem_")
        || name.starts_with("pin_user_pages")
        || name.starts_with("io_uring_register:register")
        || name.starts_with("nvidia_p2p_get_pages")
        || name.starts_with("dma_buf_")
}

pub fn registration(agg: &Aggregator, duration_s: f64) -> Registration {
    let mut processes = Vec::new();
    for (pid, info) in agg.procs() {
        let Some(p) = agg.registry().procs.get(pid) else {
            continue;
        };
        let c = &p.churn;
        if c.registrations == 0 && p.failed.is_empty() && p.kernel_failures.is_empty() && p.allocations.is_empty() {
            continue;
        }
        let lifetime = (!c.lifetimes_ns.is_empty()).then(|| {
            let mut h = new_histogram();
            for v in &c.lifetimes_ns {
                let _ = h.record((*v).max(1));
            }
            Latency::from_hist(&h)
        });
        processes.push(RegistrationProcess {
            pid: *pid,
            comm: info.comm.clone(),
            by_backing: c
                .by_backing
                .iter()
                .map(
                    |(
                        k,
                        RegCount {
                            registrations,
                            deregistrations,
                        },
                    )| {
                        (
                            *k,
                            BackingRate {
                                registrations: *registrations,
                                deregistrations: *deregistrations,
                                registrations_per_s: per_s(*registrations, duration_s),
                                deregistrations_per_s: per_s(*deregistrations, duration_s),
                            },
                        )
                    },
                )
                .collect(),
            reregistrations_of_seen_range: c.reregistrations_of_seen_range,
            most_registered_range: c.most_registered_range.map(|(addr, length, times, io_uring)| Range {
                addr,
                length,
                times,
                io_uring,
            }),
            lifetime,
            pages_pinned_per_s: per_s(info.pages_pinned, duration_s),
            pages_unpinned_per_s: per_s(info.pages_unpinned, duration_s),
            pinned_bytes_high_water: c.pinned_bytes_high_water,
            allocations: p.allocations.clone(),
            failed_registrations: p.failed.clone(),
            kernel_failures: p.kernel_failures.clone(),
            peer_access_enabled: p.peer_enabled.len(),
        });
    }
    let mut by_path: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    for (k, s) in agg.ops() {
        if kernel_path(&k.op) {
            let h = by_path.entry(k.op.clone()).or_insert_with(new_histogram);
            let _ = h.add(&s.hist);
        }
    }
    Registration {
        processes,
        latency_by_backing: agg
            .reg_latency()
            .iter()
            .map(|(k, h)| (*k, Latency::from_hist(h)))
            .collect(),
        latency_by_kernel_path: by_path
            .iter()
            .map(|(k, h)| (k.clone(), Latency::from_hist(h)))
            .collect(),
    }
}

/// Writes the communicators' records to the `--transfers` file (their
/// verdicts need the whole trace: `judged` is the judged report) and
/// closes it.
pub fn finish_transfers(agg: &mut Aggregator, judged: &super::Report) -> crate::error::Result<()> {
    if agg.transfers().sink.is_none() && agg.transfers().sink_error.is_none() {
        return Ok(());
    }
    debug_assert!(judged.judged, "transfer records take the judged verdicts");
    let comms: BTreeMap<u32, String> = judged.processes.iter().map(|p| (p.pid, p.comm.clone())).collect();
    if let Some(out) = &mut agg.transfers_mut().sink {
        use std::io::Write as _;
        let ucx = judged
            .ucx
            .as_ref()
            .map(|u| crate::classify::ucx::transfers(u, &comms))
            .unwrap_or_default();
        for t in collective_transfers(&judged.collectives, &comms).into_iter().chain(ucx) {
            let r = serde_json::to_writer(&mut *out, &t)
                .map_err(std::io::Error::from)
                .and_then(|()| out.write_all(b"\n"));
            if let Err(e) = r {
                agg.transfers_mut().sink_error.get_or_insert(e);
                break;
            }
        }
    }
    agg.transfers_mut().finish()
}
