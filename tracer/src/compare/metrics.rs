//! What `compare` reads from one report: verdicts, latency per operation
//! and transport, moved and staged bytes, bandwidth series.
use std::collections::BTreeMap;

use super::{
    decode_hist,
    document::{Workload, workloads},
};
use crate::report::{Operation, Report, accounting::PER_GB_MIN_BYTES};

/// Latency of one (operation, transport).
#[derive(Clone, Debug)]
pub struct Lat {
    pub count: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
    /// Percentiles recomputed from the serialized histogram (not copied).
    pub exact: bool,
    /// Power-of-two buckets `(min, max, count)`.
    pub buckets: Vec<(u64, u64, u64)>,
}

/// One point of a bandwidth series (from a workload summary).
#[derive(Clone, Debug)]
pub struct BwPoint {
    pub size: u64,
    pub gbps: f64,
    pub cpu_s_per_gb: Option<f64>,
}

/// What `compare` reads from one report.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Transport verdict -> processes with it.
    pub verdicts: BTreeMap<String, u64>,
    /// Operation -> transport -> calls.
    pub op_transports: BTreeMap<String, BTreeMap<String, u64>>,
    /// Path (`comm op peer-kind memory`: what stays the same across runs,
    /// unlike pids and handles) -> transport -> paths.
    pub path_transports: BTreeMap<String, BTreeMap<String, u64>>,
    /// `op [transport]` -> latency.
    pub latency: BTreeMap<String, Lat>,
    /// Bytes of copies and collectives, and of those the host-staged part.
    pub moved_bytes: u64,
    pub staged_bytes: u64,
    pub cpu_seconds: f64,
    pub registrations: u64,
    pub duration_s: f64,
    /// Series (copy case, collective) -> points by size.
    pub bandwidth: BTreeMap<String, Vec<BwPoint>>,
    /// TCP of the traced processes (`fabric.tcp`): bytes sent, the
    /// retransmissions on their sockets, and the CPU time of those that sent.
    pub tcp_sent_bytes: u64,
    pub tcp_retransmits: u64,
    pub tcp_cpu_seconds: f64,
    /// RDMA ports (`fabric.ports`): retries, and packets sent where counted.
    pub port_retries: u64,
    pub port_packets: Option<u64>,
}

/// Whether a report's transport name is one whose bytes go through host
/// memory (the rule is `Transport::staged`).
pub fn staged_transport(t: &str) -> bool {
    crate::classify::Transport::from_name(t).staged()
}

fn latency_of(o: &Operation) -> Lat {
    if let Some(h) = o.histogram.as_deref().and_then(|h| decode_hist(h).ok()) {
        return Lat {
            count: h.len(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            max: h.max(),
            exact: true,
            buckets: crate::report::log2_buckets(
                h.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())),
            )
            .into_iter()
            .map(|b| (b.min, b.max, b.count))
            .collect(),
        };
    }
    let l = &o.latency;
    Lat {
        count: l.count,
        p50: l.p50,
        p90: l.p90,
        p99: l.p99,
        max: l.max,
        exact: false,
        buckets: l.buckets.iter().map(|b| (b.min, b.max, b.count)).collect(),
    }
}

/// `*sum += n`, or an error naming what overflowed (a report whose counts,
/// summed across processes or operations, pass 2^64 - 1 cannot be compared:
/// a wrapped sum would compare as a small one).
fn add(sum: &mut u64, n: u64, what: &str) -> Result<(), String> {
    *sum = sum
        .checked_add(n)
        .ok_or_else(|| format!("the sum of {what} overflows a 64-bit count"))?;
    Ok(())
}

/// Bandwidth series from a workload summary: cuda-copy's `results[]`
/// `{case, size, gbps, cpu_s_per_gb}`, nccl's `sizes[]` `{size, busbw,
/// iters, cpu_s}`.
fn bandwidth(w: &Workload, out: &mut BTreeMap<String, Vec<BwPoint>>) {
    let s = &w.summary;
    for (key, points) in s.series() {
        for x in points {
            let Some(size) = x.size else { continue };
            let Some(gbps) = x.gbps.or(x.busbw) else {
                continue;
            };
            let series = x
                .case
                .clone()
                .or_else(|| s.op.as_ref().map(|op| format!("{op} busbw")))
                .unwrap_or_else(|| key.to_string());
            let cpu = x.cpu_s_per_gb.or_else(|| {
                let bytes = size as f64 * x.iters?;
                (bytes > 0.0).then(|| x.cpu_s.unwrap_or(0.0) / (bytes / 1e9))
            });
            out.entry(series).or_default().push(BwPoint {
                size,
                gbps,
                cpu_s_per_gb: cpu,
            });
        }
    }
}

impl Metrics {
    /// What `compare` reads from a checked report; an error when a sum
    /// overflows.
    pub fn of(r: &Report) -> Result<Metrics, String> {
        let mut m = Metrics {
            duration_s: r.duration_s,
            ..Metrics::default()
        };
        for v in &r.verdicts {
            *m.verdicts.entry(v.transport.name().to_string()).or_default() += 1;
        }
        for p in &r.paths {
            let key = format!("{} {} {} {}", p.comm, p.op.name(), p.peer_kind.name(), p.memory);
            *m.path_transports
                .entry(key)
                .or_default()
                .entry(p.transport.name().to_string())
                .or_default() += 1;
        }
        for o in &r.operations {
            let name = o.name.clone();
            // Old baselines name GPU<->pinned copies `host-only`: read as today's name.
            let transport = crate::classify::Transport::current_name(&name, o.transport).to_string();
            let per_op = m.op_transports.entry(name.clone()).or_default();
            add(
                per_op.entry(transport.clone()).or_default(),
                o.calls,
                "operations[].calls",
            )?;
            per_op
                .values()
                .try_fold(0u64, |a, b| a.checked_add(*b))
                .ok_or_else(|| format!("the sum of operations[].calls of {name} overflows a 64-bit count"))?;
            if name.starts_with("cuMemcpy") {
                add(
                    &mut m.moved_bytes,
                    o.bytes,
                    "operations[].bytes and collectives[].bytes",
                )?;
                if staged_transport(&transport) {
                    add(&mut m.staged_bytes, o.bytes, "staged bytes")?;
                }
            }
            m.latency.insert(format!("{name} [{transport}]"), latency_of(o));
        }
        for c in &r.collectives {
            // Bytes that crossed between devices (none on a one-rank communicator).
            let bytes = c.moved_bytes();
            add(&mut m.moved_bytes, bytes, "operations[].bytes and collectives[].bytes")?;
            if staged_transport(c.transport) {
                add(&mut m.staged_bytes, bytes, "staged bytes")?;
            }
        }
        for p in &r.processes {
            m.cpu_seconds += p.cpu_seconds.unwrap_or(0.0);
            add(&mut m.registrations, p.registrations, "processes[].registrations")?;
        }
        for t in &r.fabric.tcp.processes {
            add(&mut m.tcp_sent_bytes, t.bytes_sent, "fabric.tcp.processes[].bytes_sent")?;
            add(
                &mut m.tcp_retransmits,
                t.retransmits,
                "fabric.tcp.processes[].retransmits",
            )?;
            if t.bytes_sent > 0 {
                let cpu = r.processes.iter().find(|p| p.pid == t.pid).and_then(|p| p.cpu_seconds);
                m.tcp_cpu_seconds += cpu.unwrap_or(0.0);
            }
        }
        for p in &r.fabric.ports {
            add(&mut m.port_retries, p.retries, "fabric.ports[].retries")?;
            if let Some(n) = p.packets_sent {
                add(m.port_packets.get_or_insert(0), n, "fabric.ports[].packets_sent")?;
            }
        }
        for w in workloads(r) {
            bandwidth(&w, &mut m.bandwidth);
        }
        for pts in m.bandwidth.values_mut() {
            pts.sort_by_key(|p| p.size);
        }
        if !m.cpu_seconds.is_finite() {
            return Err("the sum of processes[].cpu_seconds is not a finite number".into());
        }
        Ok(m)
    }

    /// Host-staged share of moved bytes, in percent.
    pub fn staged_pct(&self) -> Option<f64> {
        (self.moved_bytes > 0).then(|| self.staged_bytes as f64 * 100.0 / self.moved_bytes as f64)
    }

    /// Whether the CPU time of the run is enough to judge CPU per GB: see
    /// [`MIN_CPU_SECONDS`]. Runs that moved too little to have a figure count as enough.
    pub fn cpu_judgeable(&self) -> bool {
        (self.moved_bytes < PER_GB_MIN_BYTES || self.cpu_seconds >= MIN_CPU_SECONDS)
            && (self.tcp_sent_bytes < PER_GB_MIN_BYTES || self.tcp_cpu_seconds >= MIN_CPU_SECONDS)
    }

    /// CPU seconds of the traced processes per GB moved (with at least 1 MiB moved).
    pub fn cpu_per_gb(&self) -> Option<f64> {
        (self.moved_bytes >= PER_GB_MIN_BYTES && self.cpu_seconds > 0.0)
            .then(|| self.cpu_seconds / (self.moved_bytes as f64 / 1e9))
    }

    /// TCP retransmissions per GB sent, once anything was sent.
    pub fn retransmits_per_gb(&self) -> Option<f64> {
        crate::report::fabric::per_gb(self.tcp_retransmits, self.tcp_sent_bytes)
    }

    /// CPU seconds of the processes that sent over TCP per GB they sent (1 MiB or more).
    pub fn tcp_cpu_per_gb(&self) -> Option<f64> {
        (self.tcp_sent_bytes >= PER_GB_MIN_BYTES && self.tcp_cpu_seconds > 0.0)
            .then(|| self.tcp_cpu_seconds / (self.tcp_sent_bytes as f64 / 1e9))
    }

    /// RDMA port retries per packet sent, where the ports count packets.
    pub fn retry_share(&self) -> Option<f64> {
        self.port_packets
            .filter(|n| *n > 0)
            .map(|n| self.port_retries as f64 / n as f64)
    }

    /// `p2p/nvlink x2, shm x1`.
    pub fn verdict_mix(&self) -> String {
        if self.verdicts.is_empty() {
            return "none".into();
        }
        self.verdicts
            .iter()
            .map(|(t, n)| format!("{t} x{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The least CPU time a run's CPU per GB is judged on. Process CPU clocks
/// move by scheduler ticks (10 ms at 100 Hz): under 0.2 s one tick is over
/// 5% of the figure, and the ticks of short runs alone crossed the 25%
/// threshold between unchanged runs on the 2-vCPU host (one tick more:
/// +25.0%). Where any run on either side has less, the row is left out.
pub const MIN_CPU_SECONDS: f64 = 0.2;
