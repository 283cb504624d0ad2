//! The exposition: a [`Snapshot`] of what the agent knows, rendered with
//! `prometheus-client` into OpenMetrics text (what Prometheus asks for) or
//! the classic text format 0.0.4 (everything else: curl, `promtool check
//! metrics`). A fresh registry per scrape: series of forgotten processes
//! disappear with them, and nothing is kept between scrapes.
//!
//! Names follow Prometheus conventions (`_total` counters, `_bytes`,
//! `_seconds`, base units); every name, label and the cardinality bound
//! is documented in docs/serve.md.
use hdrhistogram::Histogram;
use prometheus_client::{
    encoding::{EncodeMetric, MetricEncoder, NoLabelSet},
    metrics::{MetricType, TypedMetric},
    registry::Registry,
};
use tracer_common::MAX_SLOTS;

use self::families::register;
use super::k8s::PodLabels;
use crate::counters::FollPin;

mod families;

/// Communicators listed per process; the rest are summed into
/// `communicator="other"` (cardinality bound).
pub const MAX_COMMUNICATORS: usize = 16;

/// Histogram bucket bounds: powers of four from 256 ns to 68.7 s, on the
/// in-kernel log2 slot boundaries, so bucket counts are exact.
const BUCKET_LOG2: std::ops::RangeInclusive<u32> = 8..=36;

/// Label pairs of one series.
pub type Labels = Vec<(&'static str, String)>;

/// A histogram whose buckets were counted elsewhere (the kernel's log2
/// slots, an HdrHistogram): per-bucket counts, upper bounds in seconds,
/// the last bound `+Inf` (see [`Hist::close`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Hist {
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_s: f64,
}

impl TypedMetric for Hist {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Hist {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_histogram::<NoLabelSet>(self.sum_s, self.count, &self.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

impl Hist {
    /// From the kernel's log2 slots (slot `i` holds `[2^i, 2^(i+1))` ns, the
    /// last everything longer). The sum is estimated at 1.5 x 2^i per call.
    pub fn from_slots(slots: &[u64]) -> Self {
        let mut buckets = Vec::new();
        let mut next_slot = 0usize;
        for k in BUCKET_LOG2.step_by(2) {
            // Calls below 2^k ns: slots 0..k (all their values are < 2^k).
            let upto = (k as usize).min(slots.len());
            let n: u64 = slots[next_slot.min(upto)..upto].iter().sum();
            next_slot = upto;
            buckets.push(((1u64 << k) as f64 / 1e9, n));
        }
        let count = slots.iter().sum();
        let sum_s: f64 = slots
            .iter()
            .enumerate()
            .take(MAX_SLOTS as usize)
            .map(|(i, c)| *c as f64 * 1.5 * (1u64 << i.min(62)) as f64 / 1e9)
            .sum();
        Self { buckets, count, sum_s }.close()
    }

    /// Ends the buckets with `le="+Inf"` holding what is above the last
    /// finite bound. prometheus-client's OpenMetrics encoder writes the
    /// buckets it is given as they are (only its classic-text encoder adds
    /// a missing `+Inf`), and without that bucket Prometheus's
    /// `histogram_quantile` returns NaN (issue 24).
    fn close(mut self) -> Self {
        let finite: u64 = self.buckets.iter().map(|b| b.1).sum();
        self.buckets.push((f64::INFINITY, self.count.saturating_sub(finite)));
        self
    }

    /// From an HdrHistogram of nanoseconds.
    pub fn from_hdr(h: &Histogram<u64>) -> Self {
        let mut buckets = Vec::new();
        let mut below = 0u64;
        for k in BUCKET_LOG2.step_by(2) {
            let bound = 1u64 << k;
            let upto: u64 = h
                .iter_recorded()
                .filter(|v| v.value_iterated_to() < bound)
                .map(|v| v.count_at_value())
                .sum();
            buckets.push((bound as f64 / 1e9, upto - below));
            below = upto;
        }
        Self {
            buckets,
            count: h.len(),
            sum_s: h.mean() * h.len() as f64 / 1e9,
        }
        .close()
    }
}

/// Paths per process with series of their own; the rest are summed into
/// one with `op` and `peer` `other`, so a process has at most this many
/// plus one (an endpoint per remote agent would otherwise grow with the job).
pub const MAX_PATHS: usize = 8;

/// One path of a process, as series (`gdrtrace_path_*`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PathFigures {
    /// `ucx-endpoint`, `nccl-communicator`, `remote`, `file`.
    pub peer_kind: &'static str,
    /// The endpoint or communicator (its `commId` where known), the file.
    pub peer: String,
    pub op: &'static str,
    pub memory: String,
    pub transport: &'static str,
    pub host_staged: bool,
    pub bytes: u64,
    pub host_bytes: u64,
}

/// The verdict of one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerdictFigures {
    pub transport: &'static str,
    pub host_staged: bool,
    /// `setup-calls` (peer checks, buffer exports/imports, staging
    /// allocations seen), `steady-state` (socket bytes, NVLink counters),
    /// `one-rank` (a communicator of one rank: nothing crosses a link) or
    /// `none` (unknown).
    pub evidence_kind: &'static str,
    /// NCCL's network path where its network carried the traffic
    /// (`NET/Socket`, `NET/IB`, `NET/IB/GDRDMA`), else empty.
    pub net: &'static str,
    /// Why the process is host-staged, as a bounded kind
    /// (`classify::comm::CauseKind::id`: `no-rdma-device`,
    /// `env-nccl-ib-disable`, ...), else empty.
    pub cause: &'static str,
}

/// The verdict of one communicator of a process: the process's, except
/// where the evidence is the communicator's own (one rank).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommVerdict {
    pub communicator: String,
    pub rank: String,
    pub nranks: String,
    pub verdict: VerdictFigures,
}

/// One communicator's in-kernel totals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Communicator {
    /// The label: NCCL's `commId` (the hash of the `ncclUniqueId`, the same
    /// on every rank), `local-N` (the process's N-th communicator, when the
    /// init call was not seen), or `other` (beyond `MAX_COMMUNICATORS`).
    pub handle: String,
    /// This process's rank in it and its rank count (empty when unknown).
    pub rank: String,
    pub nranks: String,
    pub op: String,
    pub calls: u64,
    pub bytes: u64,
    /// Counted plus the estimates of the duty cycle's closed off phases
    /// (equal to the counted figures where every call was counted).
    pub calls_estimated: u64,
    pub bytes_estimated: u64,
}

/// What one tracked process did, or (`--labels pod`) a pod's processes,
/// or the processes of one command outside pods: then `pid` is 0, and
/// `comm` empty for a pod.
#[derive(Clone, Debug, Default)]
pub struct ProcessFigures {
    pub pid: u32,
    pub comm: String,
    pub pod: Option<PodLabels>,
    pub discovered_by: &'static str,
    pub exited: bool,
    /// The process's `NCCL_HOSTID` (NCCL's host identity; empty when unset):
    /// `gdrtrace job --prometheus` counts hosts as NCCL does.
    pub nccl_hostid: String,
    /// Tracked processes summed here (1 for a process).
    pub processes: u64,
    /// The process's verdict: its series when it has no communicator.
    pub verdict: Option<VerdictFigures>,
    /// Per communicator (by its label).
    pub comm_verdicts: Vec<CommVerdict>,
    /// Its paths, the busiest [`MAX_PATHS`] by bytes, the rest as `other`.
    pub paths: Vec<PathFigures>,
    pub communicators: Vec<Communicator>,
    pub moved_bytes: u64,
    pub staged_bytes: u64,
    /// The same with the estimates of the duty cycle's closed off phases.
    pub moved_bytes_estimated: u64,
    pub staged_bytes_estimated: u64,
    /// (backing, registrations, deregistrations).
    pub registrations: Vec<(&'static str, u64, u64)>,
    pub pages_pinned: u64,
    pub pages_unpinned: u64,
    pub pinned_bytes: Option<u64>,
    pub cpu_seconds: Option<f64>,
    pub calls_by_transport: Vec<(&'static str, u64)>,
    pub socket_sent_bytes: u64,
    pub socket_received_bytes: u64,
    /// The share of its traced time its collectives, group and UCX data
    /// calls were counted in (1 when every call was: `--collectives`).
    pub collective_sampled_ratio: f64,
    /// Some of its estimates are lower bounds: calls that were mostly
    /// traps while counted (`stats::Aggregator::estimates_lower_bound`).
    pub estimates_lower_bound: bool,
}

impl ProcessFigures {
    /// Whether the process moved or registered a byte (copies, collectives,
    /// socket bytes, registrations, pinned pages) or joined an NCCL
    /// communicator. The others (a loader that mapped libcuda and exited,
    /// torch's helper processes) get no series of their own; they are
    /// counted in `gdrtrace_idle_processes`.
    pub fn active(&self) -> bool {
        self.moved_bytes_estimated > 0
            || self.staged_bytes_estimated > 0
            || self.registrations.iter().any(|r| r.1 + r.2 > 0)
            || self.pages_pinned > 0
            || self.pinned_bytes.is_some_and(|b| b > 0)
            || !self.communicators.is_empty()
            || self.socket_sent_bytes + self.socket_received_bytes > 0
    }

    /// Adds `o`'s counters to these (`--labels pod`). Gauges: pinned bytes
    /// add, the sampled share is the smallest, a lower bound in one makes
    /// the sum one; verdict rows are joined.
    pub fn absorb(&mut self, o: &ProcessFigures) {
        self.processes += o.processes;
        // Per pod, paths are summed by what they are, their peers aside.
        for p in &o.paths {
            match self.paths.iter_mut().find(|x| {
                (x.peer_kind, x.op, &x.memory, x.transport, x.host_staged)
                    == (p.peer_kind, p.op, &p.memory, p.transport, p.host_staged)
            }) {
                Some(x) => {
                    x.bytes += p.bytes;
                    x.host_bytes += p.host_bytes;
                }
                None => self.paths.push(PathFigures {
                    peer: String::new(),
                    ..p.clone()
                }),
            }
        }
        self.moved_bytes += o.moved_bytes;
        self.staged_bytes += o.staged_bytes;
        self.moved_bytes_estimated += o.moved_bytes_estimated;
        self.staged_bytes_estimated += o.staged_bytes_estimated;
        for (b, r, d) in &o.registrations {
            match self.registrations.iter_mut().find(|x| x.0 == *b) {
                Some(x) => {
                    x.1 += r;
                    x.2 += d;
                }
                None => self.registrations.push((b, *r, *d)),
            }
        }
        self.pages_pinned += o.pages_pinned;
        self.pages_unpinned += o.pages_unpinned;
        self.pinned_bytes = match (self.pinned_bytes, o.pinned_bytes) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.cpu_seconds = match (self.cpu_seconds, o.cpu_seconds) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        for (t, n) in &o.calls_by_transport {
            match self.calls_by_transport.iter_mut().find(|x| x.0 == *t) {
                Some(x) => x.1 += n,
                None => self.calls_by_transport.push((t, *n)),
            }
        }
        self.socket_sent_bytes += o.socket_sent_bytes;
        self.socket_received_bytes += o.socket_received_bytes;
        for c in &o.communicators {
            match self
                .communicators
                .iter_mut()
                .find(|x| (&x.handle, &x.op, &x.rank, &x.nranks) == (&c.handle, &c.op, &c.rank, &c.nranks))
            {
                Some(x) => {
                    x.calls += c.calls;
                    x.bytes += c.bytes;
                    x.calls_estimated += c.calls_estimated;
                    x.bytes_estimated += c.bytes_estimated;
                }
                None => self.communicators.push(c.clone()),
            }
        }
        if !o.communicators.is_empty() {
            self.collective_sampled_ratio = if self.communicators.len() == o.communicators.len() {
                o.collective_sampled_ratio
            } else {
                self.collective_sampled_ratio.min(o.collective_sampled_ratio)
            };
        }
        self.estimates_lower_bound |= o.estimates_lower_bound;
        for v in &o.comm_verdicts {
            if !self.comm_verdicts.contains(v) {
                self.comm_verdicts.push(v.clone());
            }
        }
        if self.verdict.is_none() {
            self.verdict = o.verdict.clone();
        }
    }
}

/// One probe point of the coverage table.
#[derive(Clone, Debug)]
pub struct Probe {
    pub point: String,
    pub family: &'static str,
    pub status: &'static str,
    pub via: &'static str,
}

/// Everything one scrape shows.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub node: String,
    pub processes: Vec<ProcessFigures>,
    /// Per op name: the kernel's log2 latency slots (every completed call).
    pub op_latency: Vec<(String, Vec<u64>)>,
    /// Registration latency per backing.
    pub registration_latency: Vec<(&'static str, Hist)>,
    pub probes: Vec<Probe>,
    pub probe_hits: Vec<(String, u64)>,
    pub library_files: u64,
    pub setup_probes_closed: bool,
    /// Events lost, per reason.
    pub lost: Vec<(&'static str, u64)>,
    pub returns_without_entry: u64,
    pub discovery_read_errors: u64,
    /// Work shed, per (what, reason).
    pub shed: Vec<(&'static str, &'static str, u64)>,
    pub discovered: Vec<(&'static str, u64)>,
    pub forgotten: u64,
    pub events: u64,
    /// (map, entries, max entries).
    pub maps: Vec<(&'static str, u64, u64)>,
    pub node_pins: Option<FollPin>,
    /// The agent's own process (`gdrtrace_agent_*` and the `process_*`
    /// families Prometheus client libraries export).
    pub agent: AgentProcess,
    pub cpu_budget: f64,
    pub shed_level: u8,
    pub tracked: u64,
    /// Tracked processes without series of their own ([`ProcessFigures::active`]).
    pub idle: u64,
    /// Processes not traced by `--ignore-comm` / `--ignore-namespace`, by reason.
    pub ignored: Vec<(&'static str, u64)>,
    /// Whether NVML answered in the agent (NVLink counters for steady-state verdicts).
    pub nvml_available: bool,
}

impl Snapshot {
    /// A snapshot with every family populated: what the checks of the
    /// exposition (docs/serve.md's table, the alerting rules, the Grafana
    /// dashboard, `promtool check metrics`) read without a live agent.
    pub fn example() -> Self {
        let mut slots = vec![0u64; MAX_SLOTS as usize];
        slots[12] = 3;
        let mut reg = crate::stats::new_histogram();
        let _ = reg.record(5_000);
        Snapshot {
            node: "node-a".into(),
            processes: vec![ProcessFigures {
                pid: 4242,
                comm: "python3".into(),
                pod: Some(PodLabels {
                    namespace: "ml".into(),
                    pod: "trainer-0".into(),
                    container: "worker".into(),
                }),
                discovered_by: "libnccl",
                exited: false,
                nccl_hostid: String::new(),
                processes: 1,
                verdict: Some(VerdictFigures {
                    transport: "shm",
                    host_staged: true,
                    evidence_kind: "setup-calls",
                    net: "",
                    cause: "env-nccl-p2p-disable",
                }),
                comm_verdicts: vec![CommVerdict {
                    communicator: "0x5e3c1d2a9b8f7a61".into(),
                    rank: "0".into(),
                    nranks: "2".into(),
                    verdict: VerdictFigures {
                        transport: "shm",
                        host_staged: true,
                        evidence_kind: "setup-calls",
                        net: "",
                        cause: "env-nccl-p2p-disable",
                    },
                }],
                paths: vec![PathFigures {
                    peer_kind: "nccl-communicator",
                    peer: "0x5e3c1d2a9b8f7a61".into(),
                    op: "collective",
                    memory: "cuda".into(),
                    transport: "shm",
                    host_staged: true,
                    bytes: 1 << 30,
                    host_bytes: 1 << 30,
                }],
                communicators: vec![Communicator {
                    handle: "0x5e3c1d2a9b8f7a61".into(),
                    rank: "0".into(),
                    nranks: "2".into(),
                    op: "ncclAllReduce".into(),
                    calls: 100,
                    bytes: 1 << 20,
                    calls_estimated: 1000,
                    bytes_estimated: 10 << 20,
                }],
                moved_bytes: 1 << 20,
                staged_bytes: 1 << 20,
                moved_bytes_estimated: 10 << 20,
                staged_bytes_estimated: 10 << 20,
                registrations: vec![("host", 3, 2)],
                pages_pinned: 16,
                pages_unpinned: 16,
                pinned_bytes: Some(65536),
                cpu_seconds: Some(1.5),
                calls_by_transport: vec![("shm", 100)],
                socket_sent_bytes: 10,
                collective_sampled_ratio: 1.0,
                socket_received_bytes: 10,
                estimates_lower_bound: false,
            }],
            op_latency: vec![("ibv_reg_mr".into(), slots)],
            registration_latency: vec![("host", Hist::from_hdr(&reg))],
            probes: vec![Probe {
                point: "libibverbs".into(),
                family: "ibverbs",
                status: "attached",
                via: "uprobe_multi",
            }],
            probe_hits: vec![("ibv_reg_mr".into(), 3)],
            library_files: 1,
            setup_probes_closed: false,
            lost: vec![("ringbuf_full", 0)],
            returns_without_entry: 0,
            discovery_read_errors: 0,
            shed: vec![("target", "targets-full", 0)],
            discovered: vec![("libnccl", 1)],
            forgotten: 0,
            events: 10,
            maps: vec![("TARGETS", 1, 16384)],
            node_pins: Some(FollPin {
                acquired: 16,
                released: 16,
            }),
            agent: AgentProcess {
                cpu_seconds: 0.5,
                resident_bytes: 1 << 24,
                virtual_bytes: 1 << 30,
                open_fds: 40,
                max_fds: 1024,
                start_time_seconds: 1.7649e9,
            },
            cpu_budget: 0.05,
            shed_level: 0,
            tracked: 2,
            idle: 1,
            ignored: vec![("comm", 0), ("namespace", 0)],
            nvml_available: false,
        }
    }
}

/// The agent's own process, as Prometheus client libraries describe theirs
/// (client_golang's process collector: the same names and sources).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentProcess {
    /// User + system CPU time (getrusage).
    pub cpu_seconds: f64,
    /// VmRSS and VmSize of /proc/self/status.
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    /// Entries of /proc/self/fd, and the soft RLIMIT_NOFILE.
    pub open_fds: u64,
    pub max_fds: u64,
    /// Since the epoch: the boot time (/proc/stat `btime`) plus the
    /// process's start in clock ticks after boot (/proc/self/stat field 22).
    pub start_time_seconds: f64,
}

impl AgentProcess {
    /// The CPU time alone (the CPU budget reads it every beat).
    pub fn cpu_seconds_now() -> f64 {
        // SAFETY: getrusage fills the struct we own.
        let mut r: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
        let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
        t(r.ru_utime) + t(r.ru_stime)
    }

    /// This process, now; a figure that cannot be read is 0.
    pub fn read() -> Self {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit fills the struct we own.
        let max_fds = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            lim.rlim_cur
        } else {
            0
        };
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let kib = |key| crate::counters::parse_status_kib(&status, key).unwrap_or(0) * 1024;
        Self {
            cpu_seconds: Self::cpu_seconds_now(),
            resident_bytes: kib("VmRSS:"),
            virtual_bytes: kib("VmSize:"),
            open_fds: std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64),
            max_fds,
            start_time_seconds: start_time_seconds().unwrap_or(0.0),
        }
    }
}

/// When this process started, in seconds since the epoch.
fn start_time_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which may hold spaces and ')'; the
    // start time is field 22, the 20th after it.
    let after = &stat[stat.rfind(')')? + 1..];
    let ticks: f64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let btime: f64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| btime + ticks / hz as f64)
}

/// The wire format of a scrape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    Text,
}

impl Format {
    /// OpenMetrics when the scraper asks for it (Prometheus does), the
    /// classic text format otherwise.
    pub fn negotiate(accept: Option<&str>) -> Self {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        }
    }
}

/// Renders a snapshot.
pub fn render(s: &Snapshot, format: Format) -> String {
    // The `process_*` families carry neither the prefix nor the node label,
    // as every Prometheus client library exports them.
    let mut reg = Registry::default();
    register(&mut reg, s);
    let mut out = String::new();
    let r = match format {
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &reg),
        Format::Text => prometheus_client::encoding::prometheus_text::encode(&mut out, &reg),
    };
    // Writing into a String cannot fail; a label the encoder refuses would
    // be a bug, and the scrape then says so instead of serving half.
    if let Err(e) = r {
        return format!("# gdrtrace: encoding the metrics failed: {e}\n");
    }
    out
}

#[cfg(test)]
mod tests;
