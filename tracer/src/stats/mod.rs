//! Aggregation: an HdrHistogram per (operation, transport), per-process
//! tables, and the registry, fed event by event.
use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use tracer_common::{Event, kind};

use crate::{
    classify::{self, Transport},
    counters,
    model::Registry,
    probes::Family,
};

/// Latency bounds: 1 ns to 1 hour, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("static histogram bounds are valid")
}

#[derive(Clone, Debug)]
pub struct OpStats {
    pub family: Family,
    pub calls: u64,
    pub errors: u64,
    pub bytes: u64,
    pub pages: i64,
    pub hist: Histogram<u64>,
    /// One piece of evidence for the verdict (the first seen).
    pub evidence: String,
}

/// Per-process figures; serialized inline in the report's `processes[]`.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ProcInfo {
    pub comm: String,
    pub parent: Option<u32>,
    pub exited: bool,
    pub calls: BTreeMap<String, u64>,
    pub errors: u64,
    pub pages_pinned: u64,
    pub pages_unpinned: u64,
    /// Pages pinned by pin-family calls nested inside a verbs registration
    /// (`ib_umem_get`) on the same thread.
    pub pages_pinned_by_registration: u64,
    /// Calls per transport verdict.
    pub transports: BTreeMap<&'static str, u64>,
    /// Bytes moved through host staging (host-staged, shm, socket verdicts).
    pub staged_bytes: u64,
    /// Registrations of any kind (MRs, io_uring buffers, host registers).
    pub registrations: u64,
    /// VmPin at the moment the tracer attached (pre-existing pinned memory).
    pub vm_pin_kib_at_attach: Option<u64>,
    /// NCCL_*/CUDA_*/UCX_* variables of the process environment (read while it ran).
    pub env: BTreeMap<String, String>,
    pub vm_pin_kib_max: u64,
    pub cpu_seconds: Option<f64>,
    /// Socket data syscalls (in-kernel aggregation): bytes the kernel moved.
    pub socket: SocketTotals,
}

/// A process's socket traffic, summed over its sockets.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SocketTotals {
    pub calls: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Sockets (fds) that moved data.
    pub sockets: u64,
}

#[derive(Debug)]
pub struct Aggregator {
    pub ops: BTreeMap<(String, Transport), OpStats>,
    pub procs: BTreeMap<u32, ProcInfo>,
    pub registry: Registry,
    pub events: u64,
    /// Events whose op the tracer could not interpret (an ABI mismatch).
    pub undecoded: u64,
    /// Aggregate-only calls from the kernel: (pid, op name, handle) -> (calls, bytes).
    pub collectives: BTreeMap<(u32, String, u64), (u64, u64)>,
    /// Pin-family calls per thread not yet attributed to an enclosing call:
    /// (start, end, pages). Inner calls return (and arrive) first.
    pending_pins: std::collections::HashMap<u32, Vec<(u64, u64, u64)>>,
}

impl Default for Aggregator {
    fn default() -> Self {
        Self {
            ops: BTreeMap::new(),
            procs: BTreeMap::new(),
            registry: Registry::default(),
            events: 0,
            undecoded: 0,
            pending_pins: Default::default(),
            collectives: BTreeMap::new(),
        }
    }
}

impl Aggregator {
    /// Registers a process the tracer started or attached to.
    pub fn add_process(&mut self, pid: u32, parent: Option<u32>) {
        let p = self.procs.entry(pid).or_default();
        if p.comm.is_empty() {
            p.comm = counters::comm(pid).unwrap_or_default();
        }
        if p.env.is_empty() {
            p.env = counters::comm_env(pid);
        }
        if p.parent.is_none() {
            p.parent = parent;
        }
    }

    /// Samples the per-process counters of live processes.
    pub fn sample(&mut self) {
        for (pid, p) in self.procs.iter_mut().filter(|(_, p)| !p.exited) {
            if let Some(kib) = counters::vm_pin_kib(*pid) {
                p.vm_pin_kib_max = p.vm_pin_kib_max.max(kib);
            }
            if let Some(cpu) = counters::cpu_seconds(*pid) {
                p.cpu_seconds = Some(cpu);
            }
        }
    }

    pub fn push(&mut self, e: &Event) {
        self.events += 1;
        match e.kind {
            kind::FORK => {
                let child = e.args[0] as u32;
                // Threads share the tgid; only new processes get a row.
                if std::path::Path::new(&format!("/proc/{child}/task/{child}")).exists()
                    && counters::tgid(child).is_none_or(|t| t == child)
                {
                    self.add_process(child, Some(e.pid));
                }
            }
            kind::EXEC => {
                let p = self.procs.entry(e.pid).or_default();
                p.comm = comm_of(e);
                p.env = counters::comm_env(e.pid);
            }
            kind::EXIT => {
                self.sample();
                let p = self.procs.entry(e.pid).or_default();
                p.exited = true;
            }
            kind::CALL => self.call(e),
            _ => self.undecoded += 1,
        }
    }

    fn call(&mut self, e: &Event) {
        self.registry.observe(e);
        let Some(c) = classify::call(e, &self.registry) else {
            self.undecoded += 1;
            return;
        };
        let s = self
            .ops
            .entry((c.label.clone(), c.transport))
            .or_insert_with(|| OpStats {
                family: c.family,
                calls: 0,
                errors: 0,
                bytes: 0,
                pages: 0,
                hist: new_histogram(),
                evidence: c.evidence.clone(),
            });
        s.calls += 1;
        s.errors += c.failed as u64;
        s.bytes += c.bytes;
        s.pages += c.pages;
        let _ = s.hist.record(e.dur_ns.max(1));
        let p = self.procs.entry(e.pid).or_default();
        if p.comm.is_empty() {
            p.comm = comm_of(e);
        }
        if p.env.is_empty() {
            p.env = counters::comm_env(e.pid);
        }
        *p.transports.entry(c.transport.name()).or_default() += 1;
        if matches!(c.transport, Transport::HostStaged | Transport::Shm | Transport::Socket) {
            p.staged_bytes += c.bytes;
        }
        if c.label.contains("reg_mr") || c.label.ends_with(":register-buffers") || c.label == "cuMemHostRegister" {
            p.registrations += 1;
        }
        *p.calls.entry(c.label).or_default() += 1;
        p.errors += c.failed as u64;
        if c.pages > 0 {
            p.pages_pinned += c.pages as u64;
            let pending = self.pending_pins.entry(e.tid).or_default();
            if pending.len() >= 4096 {
                pending.remove(0);
            }
            pending.push((e.start_ns, e.start_ns + e.dur_ns, c.pages as u64));
        } else {
            p.pages_unpinned += (-c.pages) as u64;
        }
        if e.op == tracer_common::op::IB_UMEM_GET {
            let (start, end) = (e.start_ns, e.start_ns + e.dur_ns);
            let pending = self.pending_pins.entry(e.tid).or_default();
            let inside: u64 = pending
                .iter()
                .filter(|(s, f, _)| *s >= start && *f <= end)
                .map(|x| x.2)
                .sum();
            pending.retain(|(s, f, _)| !(*s >= start && *f <= end));
            if let Some(p) = self.procs.get_mut(&e.pid) {
                p.pages_pinned_by_registration += inside;
            }
        }
    }

    /// Replaces the kernel-aggregated totals (they are cumulative) and
    /// reflects them in the per-process call counts.
    pub fn set_aggregates(&mut self, rows: &[(tracer_common::AggKey, tracer_common::AggValue)]) {
        self.collectives.clear();
        let mut sockets: BTreeMap<u32, SocketTotals> = BTreeMap::new();
        let mut sock_calls: BTreeMap<(u32, String), u64> = BTreeMap::new();
        let mut fds = std::collections::BTreeSet::new();
        for (k, v) in rows {
            let name = crate::report::op_name(k.op);
            if let Some(sent) = crate::probes::catalog::socket_direction(k.op) {
                let t = sockets.entry(k.tgid).or_default();
                t.calls += v.calls;
                if sent {
                    t.bytes_sent += v.bytes;
                } else {
                    t.bytes_received += v.bytes;
                }
                if v.bytes > 0 {
                    fds.insert((k.tgid, k.handle));
                }
                *sock_calls.entry((k.tgid, name)).or_default() += v.calls;
                continue;
            }
            let e = self.collectives.entry((k.tgid, name, k.handle)).or_default();
            e.0 += v.calls;
            e.1 += v.bytes;
        }
        let mut per: BTreeMap<(u32, String), u64> = BTreeMap::new();
        for ((pid, name, _), (calls, _)) in &self.collectives {
            *per.entry((*pid, name.clone())).or_default() += calls;
        }
        for ((pid, name), calls) in per.into_iter().chain(sock_calls) {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.calls.insert(name, calls);
            }
        }
        for (pid, p) in self.procs.iter_mut() {
            p.socket = sockets.remove(pid).unwrap_or_default();
            p.socket.sockets = fds.iter().filter(|(t, _)| t == pid).count() as u64;
        }
    }

    /// Calls of one label by one process.
    pub fn calls_of(&self, pid: u32, label: &str) -> u64 {
        self.procs
            .get(&pid)
            .and_then(|p| p.calls.get(label))
            .copied()
            .unwrap_or(0)
    }
}

fn comm_of(e: &Event) -> String {
    let end = e.comm.iter().position(|&b| b == 0).unwrap_or(e.comm.len());
    String::from_utf8_lossy(&e.comm[..end]).into_owned()
}
