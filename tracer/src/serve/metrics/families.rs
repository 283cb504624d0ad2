//! The metric families of a snapshot: per process, per node and of the
//! agent itself, each registered once collected (docs/serve.md lists them).
use prometheus_client::{
    encoding::{EncodeMetric, MetricEncoder},
    metrics::{MetricType, TypedMetric, counter::ConstCounter, gauge::ConstGauge},
    registry::{Registry, Unit},
};

use super::*;

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

fn process_families(reg: &mut Registry, s: &Snapshot, n: &mut usize) {
    let mut info = Family::new(
        "process_info",
        "A tracked GPU or RDMA process that moved or registered bytes (value 1): how it was discovered and whether it exited (kept until --exited-retention); with --labels pod, one per pod (and per command outside pods), whose process count is gdrtrace_processes",
        None,
    );
    let mut count = Family::new(
        "processes",
        "Tracked processes that moved or registered bytes behind these labels: 1 per process, with --labels pod the pod's (or the command's outside pods); sum() counts them in either mode",
        None,
    );
    for p in &s.processes {
        count.add(proc_labels(p), gauge(p.processes.max(1) as i64));
    }
    count.register(reg, n);
    for p in &s.processes {
        let labels = if p.pid == 0 {
            proc_labels(p)
        } else {
            with(
                proc_labels(p),
                &[
                    ("discovered_by", p.discovered_by),
                    ("exited", if p.exited { "true" } else { "false" }),
                    ("nccl_hostid", &p.nccl_hostid),
                ],
            )
        };
        info.add(labels, gauge(1));
    }
    info.register(reg, n);

    let mut verdict = Family::new(
        "transport_verdict_info",
        "The transport verdict of a process and its communicators (value 1), with the kind of evidence it rests on",
        None,
    );
    let verdict_labels = |p: &ProcessFigures, v: &VerdictFigures, c: &str, rank: &str, nranks: &str| {
        with(
            proc_labels(p),
            &[
                ("transport", v.transport),
                ("host_staged", if v.host_staged { "true" } else { "false" }),
                ("evidence_kind", v.evidence_kind),
                ("net", v.net),
                ("cause", v.cause),
                ("communicator", c),
                ("rank", rank),
                ("nranks", nranks),
            ],
        )
    };
    for p in &s.processes {
        if p.comm_verdicts.is_empty() {
            if let Some(v) = &p.verdict {
                verdict.add(verdict_labels(p, v, "", "", ""), gauge(1));
            }
            continue;
        }
        for c in &p.comm_verdicts {
            verdict.add(
                verdict_labels(p, &c.verdict, &c.communicator, &c.rank, &c.nranks),
                gauge(1),
            );
        }
    }
    verdict.register(reg, n);

    let path_labels = |p: &ProcessFigures, x: &PathFigures| {
        with(
            proc_labels(p),
            &[
                ("peer_kind", x.peer_kind),
                ("peer", &x.peer),
                ("op", x.op),
                ("memory", &x.memory),
                ("transport", x.transport),
                ("host_staged", if x.host_staged { "true" } else { "false" }),
            ],
        )
    };
    let mut path_info = Family::new(
        "path_info",
        "Each path of a process (a peer, an operation class, a memory type) with the transport judged from where its bytes went (value 1); at most 8 per process by bytes, the rest summed as op=\"other\"",
        None,
    );
    let mut path_bytes = Family::new(
        "path",
        "Bytes of a path's calls so far (estimated where the duty cycle sampled them, so a later estimate may revise them)",
        Some(Unit::Bytes),
    );
    let mut path_host = Family::new(
        "path_host",
        "Bytes that went through host memory in a path's time (copies between GPU and host memory, socket bytes)",
        Some(Unit::Bytes),
    );
    for p in &s.processes {
        for x in &p.paths {
            path_info.add(path_labels(p, x), gauge(1));
            path_bytes.add(path_labels(p, x), gauge(x.bytes as i64));
            path_host.add(path_labels(p, x), gauge(x.host_bytes as i64));
        }
    }
    path_info.register(reg, n);
    path_bytes.register(reg, n);
    path_host.register(reg, n);

    let mut moved = Family::new(
        "moved",
        "Bytes a process moved: copies (in-kernel totals, with the estimates of the off phases where the duty cycle sampled them) and collectives as counted in the kernel",
        Some(Unit::Bytes),
    );
    let mut staged = Family::new(
        "host_staged",
        "Bytes a process moved through host memory: pageable or staged copies, and collectives on a host-staged transport (shm, socket)",
        Some(Unit::Bytes),
    );
    let mut moved_est = Family::new(
        "moved_estimated",
        "Bytes a process moved, with the estimates of the collectives the duty cycle did not count (each off phase added once, when the rates on both sides of it are known; an off phase before an exit only up to its communicator's destroy): compare with gdrtrace_moved_bytes_total",
        Some(Unit::Bytes),
    );
    let mut staged_est = Family::new(
        "host_staged_estimated",
        "Bytes a process moved through host memory, with the estimates of the collectives the duty cycle did not count (as gdrtrace_moved_estimated_bytes_total)",
        Some(Unit::Bytes),
    );
    for p in &s.processes {
        moved.add(proc_labels(p), counter(p.moved_bytes));
        staged.add(proc_labels(p), counter(p.staged_bytes));
        moved_est.add(proc_labels(p), counter(p.moved_bytes_estimated));
        staged_est.add(proc_labels(p), counter(p.staged_bytes_estimated));
    }
    moved.register(reg, n);
    staged.register(reg, n);
    moved_est.register(reg, n);
    staged_est.register(reg, n);

    let mut calls = Family::new(
        "collective_calls",
        "Collective and point-to-point calls per communicator, counted in the kernel (in the duty cycle's on phases only: see gdrtrace_collective_estimated_calls_total)",
        None,
    );
    let mut calls_est = Family::new(
        "collective_estimated_calls",
        "Collective and point-to-point calls per communicator: counted, plus the estimates of the duty cycle's off phases from the rates on both sides of each (added once each closes; equal to gdrtrace_collective_calls_total where every call was counted)",
        None,
    );
    let mut bytes_est = Family::new(
        "collective_estimated",
        "Bytes of collective and point-to-point calls per communicator: counted, plus the estimates of the duty cycle's off phases (as gdrtrace_collective_estimated_calls_total)",
        Some(Unit::Bytes),
    );
    for p in &s.processes {
        for c in &p.communicators {
            let labels = comm_labels(p, c);
            calls.add(labels.clone(), counter(c.calls));
            calls_est.add(labels.clone(), counter(c.calls_estimated));
            bytes_est.add(labels, counter(c.bytes_estimated));
        }
    }
    calls.register(reg, n);
    calls_est.register(reg, n);
    bytes_est.register(reg, n);
    let mut ratio = Family::new(
        "collective_sampled_ratio",
        "Share of a process's traced time in which its collective, group and UCX data calls were counted (1: every call; below 1 the duty cycle sampled them, and the _estimated_ counters estimate the rest)",
        None,
    );
    for p in s.processes.iter().filter(|p| !p.communicators.is_empty()) {
        ratio.add(proc_labels(p), ConstGauge::new(p.collective_sampled_ratio));
    }
    ratio.register(reg, n);
    let mut bound = Family::new(
        "estimates_lower_bound",
        "1 where a process's _estimated_ figures are lower bounds: its sampled calls (copies, collectives) were mostly traps while counted, or began late in the on phase an estimate carries on, so untraced they ran faster than can be told (--collectives exact counts every call); 0 otherwise",
        None,
    );
    for p in &s.processes {
        bound.add(proc_labels(p), gauge(p.estimates_lower_bound as i64));
    }
    bound.register(reg, n);
    let mut bytes = Family::new(
        "collective",
        "Bytes of collective and point-to-point calls per communicator (count x data-type size), counted in the kernel",
        Some(Unit::Bytes),
    );
    for p in &s.processes {
        for c in &p.communicators {
            bytes.add(comm_labels(p, c), counter(c.bytes));
        }
    }
    bytes.register(reg, n);

    let mut regs = Family::new(
        "registrations",
        "Memory registrations (MRs, io_uring buffer sets, host registrations) by what backs the memory",
        None,
    );
    for p in &s.processes {
        for (backing, n, _) in &p.registrations {
            regs.add(with(proc_labels(p), &[("backing", backing)]), counter(*n));
        }
    }
    regs.register(reg, n);
    let mut deregs = Family::new(
        "deregistrations",
        "Memory deregistrations by what backs the memory",
        None,
    );
    for p in &s.processes {
        for (backing, _, n) in &p.registrations {
            deregs.add(with(proc_labels(p), &[("backing", backing)]), counter(*n));
        }
    }
    deregs.register(reg, n);

    let mut pinned = Family::new(
        "process_pinned",
        "Memory the kernel holds pinned for a process (VmPin)",
        Some(Unit::Bytes),
    );
    let mut cpu = Family::new(
        "process_cpu",
        "CPU time of a tracked process (user + system)",
        Some(Unit::Seconds),
    );
    for p in &s.processes {
        if let Some(b) = p.pinned_bytes {
            pinned.add(proc_labels(p), gauge(b as i64));
        }
        if let Some(c) = p.cpu_seconds {
            cpu.add(proc_labels(p), counter_f(c));
        }
    }
    pinned.register(reg, n);
    cpu.register(reg, n);

    let mut pin_pages = Family::new(
        "pinned_pages",
        "Pages pinned by the kernel's pinning functions for a process (kernel probes; only where fentry or kprobes load)",
        None,
    );
    let mut unpin_pages = Family::new(
        "unpinned_pages",
        "Pages unpinned by the kernel's unpinning functions for a process (kernel probes)",
        None,
    );
    let mut by_transport = Family::new(
        "calls",
        "Traced calls of a process by the transport verdict of each call",
        None,
    );
    let mut socket = Family::new(
        "socket",
        "Bytes through a process's socket send/recv syscalls (in-kernel totals), by direction",
        Some(Unit::Bytes),
    );
    for p in &s.processes {
        if p.pages_pinned + p.pages_unpinned > 0 {
            pin_pages.add(proc_labels(p), counter(p.pages_pinned));
            unpin_pages.add(proc_labels(p), counter(p.pages_unpinned));
        }
        for (t, n) in &p.calls_by_transport {
            by_transport.add(with(proc_labels(p), &[("transport", t)]), counter(*n));
        }
        if p.socket_sent_bytes + p.socket_received_bytes > 0 {
            socket.add(
                with(proc_labels(p), &[("direction", "sent")]),
                counter(p.socket_sent_bytes),
            );
            socket.add(
                with(proc_labels(p), &[("direction", "received")]),
                counter(p.socket_received_bytes),
            );
        }
    }
    pin_pages.register(reg, n);
    unpin_pages.register(reg, n);
    by_transport.register(reg, n);
    socket.register(reg, n);
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
