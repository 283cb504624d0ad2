//! Reports: the JSON document (schema `gdrtrace.report/v1`, documented in
//! docs/report-schema.md) and its text rendering.
pub mod accounting;
mod build;
pub mod fabric;
pub mod findings;
pub mod judged;
mod shape;
pub use shape::Keys;
pub mod text;
pub mod timeline;

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::{
    counters::FollPin,
    host::{Host, HostFacts},
    model::Churn,
    probes::{Coverage, Family},
    stats::ProcInfo,
};

pub use self::build::build;

pub const SCHEMA: &str = "gdrtrace.report/v1";

/// One latency bucket `[min, max)`, in the histogram's unit.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Bucket {
    pub min: u64,
    pub max: u64,
    pub count: u64,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Latency {
    #[serde(deserialize_with = "crate::intern::str")]
    pub unit: crate::intern::Name,
    pub count: u64,
    pub min: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub buckets: Vec<Bucket>,
}

impl Latency {
    pub fn from_hist(h: &Histogram<u64>) -> Self {
        Latency {
            unit: "ns",
            count: h.len(),
            min: h.min(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            buckets: log2_buckets(h.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value()))),
        }
    }
}

/// HdrHistogram's V2+DEFLATE serialized form, base64 (as in HdrHistogram
/// interval logs); `None` only if serialization fails.
pub fn serialize_hist(h: &Histogram<u64>) -> Option<String> {
    use base64::Engine as _;
    use hdrhistogram::serialization::Serializer as _;
    let mut buf = Vec::new();
    hdrhistogram::serialization::V2DeflateSerializer::new()
        .serialize(h, &mut buf)
        .ok()?;
    Some(base64::engine::general_purpose::STANDARD.encode(buf))
}

/// Power-of-two buckets, as bpftrace's `hist()` prints them.
pub fn log2_buckets(values: impl Iterator<Item = (u64, u64)>) -> Vec<Bucket> {
    let mut slots: BTreeMap<u32, u64> = BTreeMap::new();
    for (v, n) in values {
        *slots.entry(tracer_common::log2_slot(v.max(1)).min(63)).or_default() += n;
    }
    slots
        .into_iter()
        .map(|(s, count)| Bucket {
            min: 1u64 << s,
            max: 1u64 << (s + 1),
            count,
        })
        .collect()
}

/// One (process, op, communicator) row of in-kernel aggregated calls.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Collective {
    pub pid: u32,
    pub op: String,
    pub communicator: String,
    /// Calls and bytes: counted, or estimated from the counted ones where
    /// the duty cycle sampled the process (then `counted` says what the
    /// kernel counted).
    pub calls: u64,
    pub bytes: u64,
    #[serde(deserialize_with = "crate::intern::str")]
    pub transport: crate::intern::Name,
    /// What the kernel counted, when `calls` and `bytes` are estimates
    /// (`--collectives`; the process's `collectives_sampled` says how much
    /// of its time that was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted: Option<Counted>,
    /// The estimate rests on on phases whose calls were mostly traps (more
    /// than half of the process's time): the calls run faster untraced
    /// than can be told, and `calls` is a lower bound.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lower_bound: bool,
    /// The communicator's identity across ranks (`processes[].communicators`):
    /// the hash of its `ncclUniqueId` as NCCL prints it, this process's rank
    /// and the rank count; absent where the init call was not seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nranks: Option<u32>,
}

impl Collective {
    /// The bytes that crossed between devices
    /// ([`crate::stats::crosses_devices`]).
    pub fn moved_bytes(&self) -> u64 {
        if crate::stats::crosses_devices(self.nranks) {
            self.bytes
        } else {
            0
        }
    }
}

/// Calls and bytes as counted in on phases of the duty cycle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Counted {
    pub calls: u64,
    pub bytes: u64,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Operation {
    pub name: String,
    pub family: Family,
    #[serde(deserialize_with = "crate::intern::str")]
    pub transport: crate::intern::Name,
    pub calls: u64,
    pub errors: u64,
    pub bytes: u64,
    /// Pages pinned (+) / unpinned (-), for pin-family operations.
    pub pages: i64,
    pub evidence: String,
    /// True when events may be missing (drops), so the histogram is a lower bound.
    pub incomplete: bool,
    pub latency: Latency,
    /// The latency histogram itself, HdrHistogram's V2+DEFLATE serialized
    /// form in base64, so baselines can recompute percentiles exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histogram: Option<String>,
    /// Copies summed in the kernel under the duty cycle: the calls counted,
    /// where `calls` adds the estimate of the off phases (absent: counted).
    /// The histogram holds the evented calls only (first calls of each
    /// address pair, failures); `kernel_histograms` has every call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted: Option<u64>,
    /// `calls` is a lower bound (as [`Collective::lower_bound`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lower_bound: bool,
}

/// An op aggregated in the kernel (log2 slots), evented or not.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct KernelHistogram {
    pub name: String,
    pub calls: u64,
    #[serde(deserialize_with = "crate::intern::str")]
    pub unit: crate::intern::Name,
    pub buckets: Vec<Bucket>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Process {
    pub pid: u32,
    /// What the aggregator knows of the process (serialized inline).
    #[serde(flatten)]
    pub info: ProcInfo,
    pub churn: Option<Churn>,
    /// libcuda/libibverbs/libnccl in this process: attached, or why not.
    #[serde(default)]
    pub libraries: Vec<crate::probes::planner::ProcessLibrary>,
}

impl std::ops::Deref for Process {
    type Target = ProcInfo;
    fn deref(&self) -> &ProcInfo {
        &self.info
    }
}

impl std::ops::DerefMut for Process {
    fn deref_mut(&mut self) -> &mut ProcInfo {
        &mut self.info
    }
}

/// Where one signal came from.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Signal {
    #[serde(deserialize_with = "crate::intern::str")]
    pub signal: crate::intern::Name,
    /// The probe family behind it (the coverage rows of that family).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<Family>,
    /// `probe` or `counter`.
    #[serde(deserialize_with = "crate::intern::str")]
    pub source: crate::intern::Name,
    pub how: String,
    pub available: bool,
}

/// Everything that could have been lost, with exact counts.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Loss {
    pub ringbuf_drops: u64,
    pub inflight_full: u64,
    pub return_without_entry: u64,
    pub targets_full: u64,
    pub read_errors: u64,
    pub malformed_records: u64,
    pub undecoded_events: u64,
    /// Lines of the recording a replay skipped as damaged (not JSON, too
    /// deep, no record type): what they held is missing. Absent when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub damaged_lines: u64,
    /// True when nothing was lost.
    pub complete: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Loss {
    /// Sets `complete` from the counts (`return_without_entry` is
    /// informational: calls in flight at attach).
    pub fn settle(&mut self) {
        self.complete = self.ringbuf_drops
            + self.inflight_full
            + self.targets_full
            + self.read_errors
            + self.malformed_records
            + self.undecoded_events
            + self.damaged_lines
            == 0;
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PinCounters {
    pub before: Option<FollPin>,
    pub after: Option<FollPin>,
    pub delta: Option<FollPin>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Report {
    #[serde(deserialize_with = "schema")]
    pub schema: crate::intern::Name,
    #[serde(deserialize_with = "crate::intern::str")]
    pub tool_version: crate::intern::Name,
    pub host: Host,
    pub command: Vec<String>,
    pub duration_s: f64,
    pub signals: Vec<Signal>,
    pub operations: Vec<Operation>,
    pub kernel_histograms: Vec<KernelHistogram>,
    /// Probe entries of traced processes per op (every hit, entry-only and
    /// aggregated ops included): what the probes cost, in traps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probe_hits: Vec<ProbeHits>,
    #[serde(deserialize_with = "shape::checked_seq")]
    pub processes: Vec<Process>,
    pub pin_counters: PinCounters,
    pub loss: Loss,
    pub coverage: Vec<Coverage>,
    /// Per-process communication verdicts with evidence and cause: the
    /// summary of each process's paths.
    pub verdicts: Vec<crate::classify::comm::Verdict>,
    /// Every path of every process (process, peer, operation class,
    /// memory), judged from where its bytes went (docs/paths.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<crate::classify::path::Path>,
    /// The evidence the paths were judged from: per process, what moved
    /// while which of its path rows carried its data (`stats/windows.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<crate::stats::windows::Window>,
    /// Collectives and point-to-point calls per (process, communicator),
    /// aggregated in the kernel, with the transport of the process's verdict.
    #[serde(default)]
    pub collectives: Vec<Collective>,
    /// The duty cycle of collectives, group and UCX data calls over the
    /// trace, when it had off phases (`--collectives`; absent: every call
    /// was counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<crate::stats::DutyTotals>,
    /// Transfer records per (op, verdict), with a sample of each.
    #[serde(default)]
    pub transfers: accounting::Transfers,
    /// Host staging per process and communicator.
    #[serde(default)]
    pub staging: accounting::Staging,
    /// Registration churn and latency.
    #[serde(default)]
    pub registration: accounting::Registration,
    /// Host facts the explain rules use (read when tracing started).
    #[serde(default)]
    pub facts: HostFacts,
    /// NCCL_*/UCX_* variables in effect per process (NCCL_VERSION and the
    /// logging variables aside).
    #[serde(default)]
    pub overrides: Vec<Override>,
    /// NCCL's own log, per communicator, against the tracer's verdicts (`--nccl-log`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_log: Option<crate::classify::comm::NcclLog>,
    /// What NCCL's RAS service answered (`--nccl-ras`) and what it told of
    /// the communicators whose set-up was not traced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_ras: Option<crate::identity::ras::NcclRas>,
    /// Root causes of staged or unexpected paths (the explain stage's
    /// rules, `crate::explain::fill`).
    #[serde(default)]
    pub explain: findings::Explain,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<serde_json::Value>,
    /// GPU interconnect traffic over the traced window (NVML counters),
    /// when readable: steady-state evidence for jobs attached after set-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_links: Option<crate::classify::steady::GpuLinks>,
    /// UCX processes: endpoints, data calls, paths per memory type,
    /// registrations and the registration cache (`classify/ucx/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ucx: Option<crate::classify::ucx::UcxReport>,
    /// What the network did: TCP retransmissions per process and socket,
    /// RDMA port counters by class (`report/fabric.rs`); absent from
    /// reports older than it.
    #[serde(default, skip_serializing_if = "fabric::Fabric::is_empty")]
    pub fabric: fabric::Fabric,
    /// Processes that used libcufile (GPUDirect Storage): driver, file
    /// handles, buffers, reads and writes per handle, and each file's
    /// positional I/O and nvidia-fs ioctls (`classify/gds/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gds: Option<crate::classify::gds::GdsReport>,
    /// Whether `judge` ran (verdicts, staging and collective transfers are final).
    #[serde(skip)]
    pub judged: bool,
}

impl Report {
    /// The path of `pid` on `memory` that moved the most bytes.
    pub fn path_of(&self, pid: u32, memory: &str) -> Option<&crate::classify::path::Path> {
        self.paths
            .iter()
            .filter(|p| p.pid == pid && p.memory == memory)
            .max_by_key(|p| p.bytes)
    }
}

/// Probe entries of one op.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct ProbeHits {
    pub op: String,
    pub hits: u64,
}

/// One NCCL_*/UCX_* variable of a process's environment.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Override {
    pub pid: u32,
    pub var: String,
    pub value: String,
}

/// Inputs of a report besides the aggregator.
pub struct Inputs {
    pub command: Vec<String>,
    pub gpu_links: Option<crate::classify::steady::GpuLinks>,
    pub host: Host,
    pub facts: HostFacts,
    pub duration_s: f64,
    pub coverage: Vec<Coverage>,
    pub loss: Loss,
    pub kernel_slots: BTreeMap<u32, Vec<u64>>,
    pub pins: PinCounters,
    /// Per-process library coverage, from the planner.
    pub process_libraries: BTreeMap<u32, Vec<crate::probes::planner::ProcessLibrary>>,
    /// Probe entries per op code (the kernel's `HITS`).
    pub probe_hits: BTreeMap<u32, u64>,
    /// Port counters, the devices processes held, unattributed retransmissions.
    pub fabric: fabric::FabricInputs,
}

/// The typed reader of a saved report (`compare`, `explain`): every section
/// into the report's own types, so a value of the wrong type anywhere
/// (`processes[0].errors: "12"`, `kernel_histograms[0].calls: "12"`) is an
/// error naming its field. A section that must be an object and is an
/// array (`"loss": [1]`, which serde would read as the struct's fields in
/// order) is refused too (`shape`). `de` is read as it comes: from a file
/// no tree is built first. The top-level keys it had are kept in `keys`.
pub fn read_typed_from<'de, D: serde::Deserializer<'de>>(
    de: D,
    keys: &shape::Keys,
) -> std::result::Result<Report, serde_path_to_error::Error<D::Error>> {
    let mut track = serde_path_to_error::Track::new();
    let tracked = serde_path_to_error::Deserializer::new(de, &mut track);
    shape::strict(tracked, Some(keys)).map_err(|e| serde_path_to_error::Error::new(track.path(), e))
}

/// [`read_typed_from`] a JSON value, the error one line naming the field.
pub fn read_typed(v: &serde_json::Value) -> std::result::Result<Report, String> {
    read_typed_from(v, &shape::Keys::default()).map_err(|e| format!("`{}`: {}", e.path(), e.inner()))
}

/// A report's `schema`: this one, or the report is read no further (its
/// other fields would be taken for what they are not).
fn schema<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<crate::intern::Name, D::Error> {
    let s = serde_json::Value::deserialize(d)?;
    if s == SCHEMA {
        Ok(SCHEMA)
    } else {
        Err(serde::de::Error::custom(format!("has schema {s}")))
    }
}

/// Which signals came from probes and which from counters, and whether each
/// was available on this run.
pub(crate) fn signals(coverage: &[Coverage], vmstat: bool) -> Vec<Signal> {
    let attached = |family: Family| {
        let rows: Vec<_> = coverage
            .iter()
            .filter(|c| c.family == family && c.status == crate::probes::Status::Attached)
            .collect();
        let how = rows
            .iter()
            .map(|c| format!("{} ({})", c.point, c.via.unwrap_or("?")))
            .collect::<Vec<_>>()
            .join(", ");
        (
            !rows.is_empty(),
            if rows.is_empty() {
                "no probe point of this family attached".to_string()
            } else {
                how
            },
        )
    };
    let mut out = Vec::new();
    let (ok, how) = attached(Family::Syscall);
    out.push(Signal {
        signal: "registration syscalls: counts and latency",
        family: Some(Family::Syscall),
        source: "probe",
        how,
        available: ok,
    });
    for (family, signal) in [
        (Family::Pinning, "kernel page pinning: calls, pages, latency"),
        (Family::Verbs, "kernel verbs memory registration"),
        (Family::PeerMem, "peer-memory (nvidia_p2p) pinning"),
        (Family::DmaBuf, "dma-buf attach/map"),
        (Family::Cuda, "libcuda allocations and copies"),
        (Family::Ibverbs, "libibverbs MR registration"),
        (Family::Nccl, "libnccl communicators and collectives"),
        (Family::Ucx, "UCX endpoints, registrations and data calls"),
        (Family::Gds, "libcufile (GPUDirect Storage) files, buffers and I/O"),
    ] {
        // Traces from before a family existed have no row of it.
        if family == Family::Gds && !coverage.iter().any(|c| c.family == family) {
            continue;
        }
        let (ok, how) = attached(family);
        out.push(Signal {
            signal,
            family: Some(family),
            source: "probe",
            how,
            available: ok,
        });
    }
    out.push(Signal {
        signal: "pinned pages, system-wide",
        family: None,
        source: "counter",
        how: "/proc/vmstat nr_foll_pin_acquired/nr_foll_pin_released sampled before and after".into(),
        available: vmstat,
    });
    out.push(Signal {
        signal: "pinned memory per process",
        family: None,
        source: "counter",
        how: "/proc/PID/status VmPin sampled while the process ran".into(),
        available: true,
    });
    out
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;
    use crate::stats::Aggregator;

    /// A report of nothing, for tests that fill in what they need.
    pub fn empty_report() -> Report {
        report_of(&Aggregator::default())
    }

    /// The (unjudged) report of what an aggregator holds.
    pub fn report_of(agg: &Aggregator) -> Report {
        build(
            agg,
            Inputs {
                command: Vec::new(),
                gpu_links: None,
                host: Host::default(),
                facts: HostFacts::default(),
                duration_s: 1.0,
                coverage: Vec::new(),
                loss: Loss::default(),
                kernel_slots: BTreeMap::new(),
                pins: PinCounters::default(),
                process_libraries: BTreeMap::new(),
                probe_hits: BTreeMap::new(),
                fabric: Default::default(),
            },
        )
    }
}

#[cfg(test)]
mod tests;
