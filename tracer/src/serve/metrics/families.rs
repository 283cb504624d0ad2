//! The metric families of a snapshot: per process, per node and of the
//! agent itself, each registered once collected (docs/serve.md lists them).
use prometheus_client::{
    encoding::{EncodeMetric, MetricEncoder},
    metrics::{MetricType, TypedMetric, counter::ConstCounter, gauge::ConstGauge},
    registry::{Registry, Unit},
};

use self::process::process_families;
use super::*;

mod process;

/// Series of one family.
#[derive(Debug)]
struct Rows<M>(Vec<(Labels, M)>);

impl<M: EncodeMetric + TypedMetric> EncodeMetric for Rows<M> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, m) in &self.0 {
            m.encode(encoder.encode_family(labels)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        M::TYPE
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// How many series (samples) a metric writes: the exported-series gauge.
trait Series {
    fn series(&self) -> usize {
        1
    }
}

impl<N> Series for ConstCounter<N> {}
impl<N> Series for ConstGauge<N> {}

impl Series for Hist {
    /// Its buckets, `_sum` and `_count`.
    fn series(&self) -> usize {
        self.buckets.len() + 2
    }
}

/// `pid` and `comm` of a process; of a group (`--labels pod`) only what
/// names it: the pod's labels, or the command outside pods.
fn proc_labels(p: &ProcessFigures) -> Labels {
    let mut l: Labels = Vec::new();
    if p.pid != 0 {
        l.push(("pid", p.pid.to_string()));
    }
    if !p.comm.is_empty() {
        l.push(("comm", p.comm.clone()));
    }
    if let Some(pod) = &p.pod {
        for (k, v) in [
            ("namespace", &pod.namespace),
            ("pod", &pod.pod),
            ("container", &pod.container),
        ] {
            if !v.is_empty() {
                l.push((k, v.clone()));
            }
        }
    }
    l
}

/// A communicator's series: the process's labels, the identity every rank
/// shares, this rank, and the operation.
fn comm_labels(p: &ProcessFigures, c: &Communicator) -> Labels {
    with(
        proc_labels(p),
        &[
            ("communicator", &c.handle),
            ("rank", &c.rank),
            ("nranks", &c.nranks),
            ("op", &c.op),
        ],
    )
}

fn with(mut l: Labels, extra: &[(&'static str, &str)]) -> Labels {
    l.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    l
}

/// The series of one family, registered once collected.
struct Family<M> {
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    rows: Vec<(Labels, M)>,
}

impl<M: EncodeMetric + TypedMetric + Series + Send + Sync + std::fmt::Debug + 'static> Family<M> {
    fn new(name: &'static str, help: &'static str, unit: Option<Unit>) -> Self {
        Self {
            name,
            help,
            unit,
            rows: Vec::new(),
        }
    }

    fn add(&mut self, labels: Labels, m: M) -> &mut Self {
        self.rows.push((labels, m));
        self
    }

    /// Registers the family; adds its series to `n`.
    fn register(self, reg: &mut Registry, n: &mut usize) {
        *n += self.rows.iter().map(|r| r.1.series()).sum::<usize>();
        let rows = Rows(self.rows);
        match self.unit {
            Some(u) => reg.register_with_unit(self.name, self.help, u, rows),
            None => reg.register(self.name, self.help, rows),
        }
    }
}

/// A family of one unlabelled series.
fn single<M: EncodeMetric + TypedMetric + Series + Send + Sync + std::fmt::Debug + 'static>(
    reg: &mut Registry,
    n: &mut usize,
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    m: M,
) {
    let mut f = Family::new(name, help, unit);
    f.add(Vec::new(), m);
    f.register(reg, n);
}

fn counter(v: u64) -> ConstCounter<u64> {
    ConstCounter::new(v)
}

fn counter_f(v: f64) -> ConstCounter<f64> {
    ConstCounter::new(v)
}

fn gauge(v: i64) -> ConstGauge<i64> {
    ConstGauge::new(v)
}

/// `root` takes the `process_*` families as they are; the rest go under the
/// `gdrtrace` prefix and the `node` label.
pub(super) fn register(root: &mut Registry, s: &Snapshot) {
    let mut n = 0;
    agent_process(root, &s.agent, &mut n);
    let reg = root
        .sub_registry_with_prefix("gdrtrace")
        .sub_registry_with_labels([("node".into(), s.node.clone().into())].into_iter());
    process_families(reg, s, &mut n);
    node_families(reg, s, &mut n);
    agent_families(reg, s, &mut n);
    let total = n + 1;
    single(
        reg,
        &mut n,
        "exported_series",
        "Series in this exposition, this one included (the agent's cardinality; see --labels)",
        None,
        gauge(total as i64),
    );
}

/// What every Prometheus client library exports about its own process
/// (client_golang's process collector: names, types, units and help; the
/// encoder ends each help with its own period).
fn agent_process(reg: &mut Registry, a: &AgentProcess, n: &mut usize) {
    single(
        reg,
        n,
        "process_cpu",
        "Total user and system CPU time spent in seconds",
        Some(Unit::Seconds),
        counter_f(a.cpu_seconds),
    );
    for (name, help, unit, v) in [
        (
            "process_resident_memory",
            "Resident memory size in bytes",
            Some(Unit::Bytes),
            a.resident_bytes as f64,
        ),
        (
            "process_virtual_memory",
            "Virtual memory size in bytes",
            Some(Unit::Bytes),
            a.virtual_bytes as f64,
        ),
        (
            "process_open_fds",
            "Number of open file descriptors",
            None,
            a.open_fds as f64,
        ),
        (
            "process_max_fds",
            "Maximum number of open file descriptors",
            None,
            a.max_fds as f64,
        ),
        (
            "process_start_time",
            "Start time of the process since unix epoch in seconds",
            Some(Unit::Seconds),
            a.start_time_seconds,
        ),
    ] {
        single(reg, n, name, help, unit, ConstGauge::new(v));
    }
}

fn node_families(reg: &mut Registry, s: &Snapshot, n: &mut usize) {
    let mut lat = Family::new(
        "operation_duration",
        "Latency of traced operations on this node, from the in-kernel log2 slots (every completed call; _sum estimated at slot midpoints)",
        Some(Unit::Seconds),
    );
    for (op, slots) in &s.op_latency {
        lat.add(vec![("op", op.clone())], Hist::from_slots(slots));
    }
    lat.register(reg, n);
    let mut reg_lat = Family::new(
        "registration_duration",
        "Latency of memory registrations on this node, by backing",
        Some(Unit::Seconds),
    );
    for (backing, h) in &s.registration_latency {
        reg_lat.add(vec![("backing", backing.to_string())], h.clone());
    }
    reg_lat.register(reg, n);

    if let Some(p) = s.node_pins {
        single(
            reg,
            n,
            "node_pinned_pages",
            "Pages pinned on the whole node (/proc/vmstat nr_foll_pin_acquired)",
            None,
            counter(p.acquired),
        );
        single(
            reg,
            n,
            "node_unpinned_pages",
            "Pages unpinned on the whole node (/proc/vmstat nr_foll_pin_released)",
            None,
            counter(p.released),
        );
    }

    let mut probes = Family::new(
        "probe_info",
        "Probe coverage (value 1): each probe point, whether it attached and how",
        None,
    );
    for p in &s.probes {
        probes.add(
            vec![
                ("point", p.point.clone()),
                ("family", p.family.into()),
                ("status", p.status.into()),
                ("via", p.via.into()),
            ],
            gauge(1),
        );
    }
    probes.register(reg, n);
    let mut hits = Family::new(
        "probe_hits",
        "Probe entries of traced processes per operation (every trap, aggregated ones included)",
        None,
    );
    for (op, n) in &s.probe_hits {
        hits.add(vec![("op", op.clone())], counter(*n));
    }
    hits.register(reg, n);
    single(
        reg,
        n,
        "library_files_attached",
        "Library files (libcuda, libibverbs, libnccl copies) with uprobes attached",
        None,
        gauge(s.library_files as i64),
    );
    single(
        reg,
        n,
        "setup_probes_closed",
        "1 once the set-up uprobe links (context switches) were closed over their hit-rate budget",
        None,
        gauge(s.setup_probes_closed as i64),
    );

    let mut lost = Family::new(
        "events_lost",
        "Events lost, by reason: ring buffer full, in-flight table full, probe read errors, aggregation table full, malformed or undecodable records. Any non-zero value means figures are lower bounds",
        None,
    );
    for (reason, n) in &s.lost {
        lost.add(vec![("reason", reason.to_string())], counter(*n));
    }
    lost.register(reg, n);
    single(
        reg,
        n,
        "returns_without_entry",
        "Returns whose entry was not seen (a call in flight when its process was discovered); not a loss of completed calls",
        None,
        counter(s.returns_without_entry),
    );
    single(
        reg,
        n,
        "tcp_retransmits_unattributed",
        "TCP retransmissions on sockets no traced process sent on (the rest of the node, or a process whose send hook is unavailable)",
        None,
        counter(s.tcp_retransmits_unattributed),
    );
    single(
        reg,
        n,
        "discovery_read_errors",
        "Opens whose path discovery could not read (a GPU or RDMA process may have been missed)",
        None,
        counter(s.discovery_read_errors),
    );
}

fn agent_families(reg: &mut Registry, s: &Snapshot, n: &mut usize) {
    let mut build = Family::new(
        "build_info",
        "The agent's build (value 1): its release and the git revision it was built from",
        None,
    );
    build.add(
        vec![
            ("version", crate::version::RELEASE.to_string()),
            ("revision", crate::version::REVISION.to_string()),
        ],
        gauge(1),
    );
    build.register(reg, n);
    let mut discovered = Family::new(
        "targets_discovered",
        "Processes that became targets, by what gave them away (a library or device node they opened, or the /proc scan at start); their children follow in the kernel",
        None,
    );
    for (reason, n) in &s.discovered {
        discovered.add(vec![("reason", reason.to_string())], counter(*n));
    }
    discovered.register(reg, n);
    single(
        reg,
        n,
        "targets_forgotten",
        "Exited processes whose state was dropped after --exited-retention",
        None,
        counter(s.forgotten),
    );
    let mut shed = Family::new(
        "shed",
        "Work not done to stay within bounds, by what and why: targets refused (target set full, CPU budget), library rescans and process samples skipped (CPU budget)",
        None,
    );
    for (what, reason, n) in &s.shed {
        shed.add(
            vec![("what", what.to_string()), ("reason", reason.to_string())],
            counter(*n),
        );
    }
    shed.register(reg, n);
    single(reg, n, "events", "Ring-buffer records decoded", None, counter(s.events));
    let mut entries = Family::new("bpf_map_entries", "Entries in the agent's BPF maps.", None);
    for (map, n, _) in &s.maps {
        entries.add(vec![("map", map.to_string())], gauge(*n as i64));
    }
    entries.register(reg, n);
    let mut max = Family::new(
        "bpf_map_max_entries",
        "Capacity of the agent's BPF maps (--max-targets, --max-aggregate-rows)",
        None,
    );
    for (map, _, m) in &s.maps {
        max.add(vec![("map", map.to_string())], gauge(*m as i64));
    }
    max.register(reg, n);
    single(
        reg,
        n,
        "tracked_processes",
        "Processes the agent keeps state for (live, and exited within --exited-retention)",
        None,
        gauge(s.tracked as i64),
    );
    single(
        reg,
        n,
        "idle_processes",
        "Tracked processes that moved and registered nothing and joined no NCCL communicator: they have no series of their own",
        None,
        gauge(s.idle as i64),
    );
    let mut ignored = Family::new(
        "targets_ignored",
        "Processes not traced because --ignore-comm or --ignore-namespace names them, by which",
        None,
    );
    for (reason, v) in &s.ignored {
        ignored.add(vec![("reason", reason.to_string())], counter(*v));
    }
    ignored.register(reg, n);
    single(
        reg,
        n,
        "nvml_available",
        "1 when NVML (libnvidia-ml) answered in the agent: the GPUs' NVLink counters back steady-state verdicts; 0 leaves those unknown (NVIDIA_VISIBLE_DEVICES, runtimeClassName: docs/fleet.md)",
        None,
        gauge(s.nvml_available as i64),
    );
    single(
        reg,
        n,
        "agent_cpu",
        "CPU time the agent used (user + system)",
        Some(Unit::Seconds),
        counter_f(s.agent.cpu_seconds),
    );
    single(
        reg,
        n,
        "agent_resident_memory",
        "Resident memory of the agent (VmRSS)",
        Some(Unit::Bytes),
        gauge(s.agent.resident_bytes as i64),
    );
    single(
        reg,
        n,
        "agent_cpu_budget_ratio",
        "CPU the agent may use, as a fraction of one CPU (--cpu-budget)",
        None,
        ConstGauge::new(s.cpu_budget),
    );
    single(
        reg,
        n,
        "agent_shed_level",
        "0: within the CPU budget; 1: process samples and library rescans skipped; 2: new targets refused too",
        None,
        gauge(s.shed_level as i64),
    );
}
