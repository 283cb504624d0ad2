//! Transfer records: one observable data-moving operation each (a CUDA
//! copy, an MR registration, a batch of pinned pages, an io_uring buffer
//! registration, the calls of one communicator), with the transport verdict
//! and the evidence that decided it. Also the detector of application-level
//! staging: a device-to-host copy followed by a host-to-device copy through
//! the same host buffer on the same thread.
use std::collections::HashMap;

use serde::Serialize;
use tracer_common::{Event, op};

use super::{Call, Transport};
use crate::{
    model::{Backing, Registry},
    probes::uapi::{self, Kind},
};

/// How long after a device-to-host copy a host-to-device copy through the
/// same buffer still counts as the second half of one staged transfer.
pub const PAIR_WINDOW_NS: u64 = 1_000_000_000;

/// Records kept per (op, verdict) in the report's sample.
pub const SAMPLE_PER_GROUP: usize = 3;

#[derive(Clone, Debug, Serialize)]
pub struct Transfer {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub op: String,
    pub bytes: u64,
    pub start_ns: u64,
    pub dur_ns: u64,
    pub transport: Transport,
    pub failed: bool,
    pub evidence: String,
    /// Communicator handle (collectives and point-to-point calls).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub communicator: Option<String>,
    /// Calls this record stands for (kernel-aggregated collectives).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<u64>,
}

/// Whether a classified call moves or exposes data (a transfer).
pub fn is_transfer(e: &Event, c: &Call) -> bool {
    if let Some((_, row)) = uapi::row_of(e.op) {
        return matches!(row.kind, Kind::Copy | Kind::MrRegister | Kind::HostRegister);
    }
    match e.op {
        op::IO_URING_REGISTER => c.label.ends_with(":register-buffers") || c.label.ends_with(":register-buffers2"),
        op::PIN_USER_PAGES..=op::PIN_USER_PAGES_UNLOCKED => c.pages > 0,
        op::IB_UMEM_GET | op::IB_UMEM_DMABUF_GET | op::IB_UMEM_DMABUF_GET_PINNED => true,
        op::NV_P2P_GET_PAGES | op::NV_P2P_GET_PAGES_PERSISTENT => true,
        _ => false,
    }
}

pub fn of_call(e: &Event, c: &Call, comm: &str) -> Transfer {
    Transfer {
        pid: e.pid,
        tid: e.tid,
        comm: comm.to_string(),
        op: c.label.clone(),
        bytes: c.bytes,
        start_ns: e.start_ns,
        dur_ns: e.dur_ns,
        transport: c.transport,
        failed: c.failed,
        evidence: c.evidence.clone(),
        communicator: None,
        calls: None,
    }
}

/// One half of a possible staged pair: a device-to-host copy.
#[derive(Clone, Copy, Debug)]
struct D2h {
    host: u64,
    len: u64,
    gpu: u64,
    start_ns: u64,
    end_ns: u64,
    pinned: bool,
}

/// Finds D2H → H2D pairs through the same host buffer, per thread.
#[derive(Debug, Default)]
pub struct PairDetector {
    last: HashMap<(u32, u32), D2h>,
}

impl PairDetector {
    /// Drops the pending downloads of an exited process.
    pub fn forget(&mut self, pid: u32) {
        self.last.retain(|(p, _), _| *p != pid);
    }

    /// Feeds one successful copy; returns the staged pair it completes.
    pub fn copy(&mut self, e: &Event, c: &Call, registry: &Registry, comm: &str) -> Option<Transfer> {
        let (_, row) = uapi::row_of(e.op)?;
        if row.kind != Kind::Copy || row.args.len() < 3 || row.args[2] != uapi::Arg::Bytes || c.failed {
            return None;
        }
        let (dst, src, n) = (e.args[0], e.args[1], e.args[2]);
        let gpu = |a| matches!(registry.backing(e.pid, a), Backing::Gpu { .. });
        let key = (e.pid, e.tid);
        let end = e.start_ns + e.dur_ns;
        if gpu(src) && !gpu(dst) {
            self.last.insert(
                key,
                D2h {
                    host: dst,
                    len: n,
                    gpu: src,
                    start_ns: e.start_ns,
                    end_ns: end,
                    pinned: registry.backing(e.pid, dst) == Backing::HostPinned,
                },
            );
            return None;
        }
        if !gpu(dst) || gpu(src) {
            return None;
        }
        let d = *self.last.get(&key)?;
        let overlaps = src < d.host + d.len && d.host < src + n;
        if !overlaps || e.start_ns < d.end_ns || e.start_ns - d.end_ns > PAIR_WINDOW_NS {
            return None;
        }
        self.last.remove(&key);
        let memory = if d.pinned { "pinned" } else { "pageable" };
        Some(Transfer {
            pid: e.pid,
            tid: e.tid,
            comm: comm.to_string(),
            op: "cuMemcpyDtoH+cuMemcpyHtoD".into(),
            bytes: n.min(d.len),
            start_ns: d.start_ns,
            dur_ns: end - d.start_ns,
            transport: Transport::HostStaged,
            failed: false,
            evidence: format!(
                "GPU {:#x} -> host {:#x}+{} ({memory}) -> GPU {dst:#x} on thread {}: a device-to-device transfer staged through host memory ({} us between the copies)",
                d.gpu,
                d.host,
                d.len,
                e.tid,
                (e.start_ns - d.end_ns) / 1000
            ),
            communicator: None,
            calls: None,
        })
    }
}
