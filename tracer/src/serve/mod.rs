//! `gdrtrace serve`: the node agent. It finds every GPU or RDMA process as
//! it appears (in the kernel, `discover.rs`; in `/proc` at start), traces
//! it with the same cheap plan as `attach` (uprobe_multi links per library
//! file, entry-only hot rows, set-up links closed over budget, records
//! drained on a beat), forgets it a while after it exits, and serves what
//! it knows as Prometheus metrics (docs/serve.md).
//!
//! Its cost is bounded by its options: the target set's size
//! (`--max-targets`), the kernel tables' sizes, and a CPU budget above
//! which it sheds work. Everything refused or skipped is a counter
//! (`gdrtrace_shed_total`), every lost event too (`gdrtrace_events_lost_total`).
pub mod discover;
pub mod http;
pub mod k8s;
pub mod kernel;
pub mod metrics;
mod snapshot;
mod targets;
pub mod webconfig;

use std::{
    collections::{BTreeMap, BTreeSet},
    future::Future,
    path::PathBuf,
    time::{Duration, Instant},
};

use std::sync::Arc;

use tokio::sync::mpsc;
use tracer_common::{Event, counter, discover as reason, kind};

use self::{
    http::{Health, Scrape},
    k8s::{PodIndex, PodLabels},
    metrics::{Communicator, ProcessFigures, Snapshot, VerdictFigures},
};
use crate::{
    classify::{Transport, comm::Basis, steady::GpuLinks},
    error::{Error, Result},
    host::HostFacts,
    judge,
    loader::{self, LoadOptions},
    probes::{Status, catalog::DISCOVERY_POINTS},
    session::{Session, SessionOptions},
    stats::Aggregator,
    units::parse_duration,
};

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address of the metrics endpoint (`/metrics`): HOST:PORT, or :PORT
    /// for every interface.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9464")]
    pub listen: http::Listen,
    /// The `node` label (default: $NODE_NAME, else the host name).
    #[arg(long)]
    pub node: Option<String>,
    /// Entries of the kernel's target set: discovered processes, their
    /// children and their threads. Beyond it new processes are refused
    /// and counted (gdrtrace_shed_total{what="target"}).
    #[arg(long, default_value_t = tracer_common::MAX_TARGETS)]
    pub max_targets: u32,
    /// Rows of the in-kernel aggregation (process, op, communicator).
    #[arg(long, default_value_t = tracer_common::MAX_AGG_ROWS)]
    pub max_aggregate_rows: u32,
    /// Traced calls in flight at once.
    #[arg(long, default_value_t = tracer_common::MAX_INFLIGHT)]
    pub max_inflight: u32,
    /// Event ring buffer size in bytes (a power of two, at least one page).
    #[arg(long, default_value_t = tracer_common::RINGBUF_BYTES as u64)]
    pub ringbuf_bytes: u64,
    /// CPU the agent may use, as a fraction of one CPU. Above it, it skips
    /// process samples and library rescans, then refuses new targets
    /// (each counted in gdrtrace_shed_total).
    #[arg(long, default_value_t = 0.05)]
    pub cpu_budget: f64,
    /// How long an exited process's series stay (its final counts must
    /// outlive a scrape interval) before its state is dropped.
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    pub exited_retention: Duration,
    /// Directory holding the kubelet's `pods/` and `containers/` logs, for
    /// the namespace, pod and container labels.
    #[arg(long, default_value = "/var/log")]
    pub kubelet_log_root: PathBuf,
    /// Do not attach uprobes to the installed libcuda/libibverbs/libnccl up
    /// front (copies processes map are attached as they are found).
    #[arg(long)]
    pub no_installed_libraries: bool,
    /// Stop after this long (default: run until SIGINT or SIGTERM).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// How collectives, group and UCX data calls are counted: `auto` (every
    /// call while each process makes at most 1000 a second, duty-cycled
    /// above; the counters then hold what was counted and
    /// gdrtrace_collective_sampled_ratio the share of time sampled),
    /// `auto:HZ`, `exact`, or `ON/PERIOD` (e.g. 1s/10s).
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub collectives: crate::sampling::Mode,
    /// Series per `process` (pid and comm labels) or per `pod` (namespace,
    /// pod and container; processes outside pods by comm): `pod` keeps the
    /// series count at the node's pods, not its pids.
    #[arg(long, value_enum, default_value = "process")]
    pub labels: LabelMode,
    /// Command names (the kernel's 15-byte comm) never to trace, comma
    /// separated or repeated (counted in gdrtrace_targets_ignored_total).
    #[arg(long, value_name = "COMM", value_delimiter = ',')]
    pub ignore_comm: Vec<String>,
    /// Kubernetes namespaces whose processes are never traced.
    #[arg(long, value_name = "NAMESPACE", value_delimiter = ',')]
    pub ignore_namespace: Vec<String>,
    /// TLS and basic auth for the metrics port, from a web-config file in
    /// node_exporter's format (tls_server_config, basic_auth_users with
    /// bcrypt hashes; docs/fleet.md).
    #[arg(long, value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,
    /// `/healthz` fails when the event loop or the ring-buffer reader has
    /// not run for this long.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub stall_after: Duration,
    /// Ask NCCL's RAS service (NCCL 2.24+) at HOST:PORT (default
    /// localhost:28028) for the identity of communicators whose set-up the
    /// agent did not see, at most once a minute while there are any. Off
    /// unless given: RAS queries run through every process of a job.
    #[arg(long, value_name = "HOST:PORT", num_args = 0..=1, require_equals = true,
          default_missing_value = crate::identity::ras::DEFAULT_ADDR)]
    pub nccl_ras: Option<String>,
}

/// How often `serve --nccl-ras` may ask NCCL's RAS service again while
/// communicators without identity are tracked.
const RAS_EVERY: Duration = Duration::from_secs(60);

/// What a per-process series set is labelled by (`--labels`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LabelMode {
    Process,
    Pod,
}

/// A pod (namespace, pod, container) or, outside pods, a command: what
/// `--labels pod` sums a process into.
type Group = (Option<PodLabels>, String);

/// How often the agent does its housekeeping.
const TICK: Duration = Duration::from_secs(1);
/// The CPU budget's window: long enough that one busy moment (a scrape, a
/// burst of discoveries) does not shed work by itself.
const BUDGET_WINDOW: Duration = Duration::from_secs(10);
/// How often the agent checks that its processes are alive (an exit record
/// lost to a full ring buffer must not keep a process forever).
const ALIVE_EVERY: Duration = Duration::from_secs(5);
/// When a process's libraries are looked up again after it was discovered
/// or exec'd, or opened a library: the loader maps a file right after
/// opening it, `dlopen` at any time.
const RESCANS: [Duration; 4] = [
    Duration::ZERO,
    Duration::from_millis(200),
    Duration::from_secs(1),
    Duration::from_secs(5),
];
/// Records kept room for between batches: a burst (the agent descheduled
/// while the ring buffer filled) grows the batch to the buffer's size, and
/// that memory goes back once the burst is handled.
const BATCH_KEEP: usize = 4096;
/// Distinct registered ranges remembered per process: the agent exports no
/// re-registration figure, and a process registering fresh buffers for
/// days would grow the table without end.
const SEEN_RANGES: usize = 65_536;

/// The CPU budget: measured over windows; over budget sheds a level of
/// work, under half of it gives one back.
#[derive(Debug)]
pub struct Budget {
    /// Fraction of one CPU.
    pub limit: f64,
    window: Duration,
    since: Option<(Instant, f64)>,
    pub level: u8,
}

impl Budget {
    pub fn new(limit: f64, window: Duration) -> Self {
        Self {
            limit,
            window,
            since: None,
            level: 0,
        }
    }

    /// Feeds the agent's CPU seconds at `now`; returns the new level when it
    /// changed.
    pub fn update(&mut self, now: Instant, cpu_seconds: f64) -> Option<u8> {
        let Some((t0, c0)) = self.since else {
            self.since = Some((now, cpu_seconds));
            return None;
        };
        let wall = now.duration_since(t0);
        if wall < self.window {
            return None;
        }
        self.since = Some((now, cpu_seconds));
        let used = (cpu_seconds - c0).max(0.0) / wall.as_secs_f64();
        let before = self.level;
        if used > self.limit {
            self.level = (self.level + 1).min(2);
        } else if used < self.limit / 2.0 {
            self.level = self.level.saturating_sub(1);
        }
        (self.level != before).then_some(self.level)
    }
}

/// What the agent keeps per process besides the aggregator's row.
#[derive(Debug, Default)]
struct Meta {
    /// `discover::*` reason (`NONE`: followed from a parent).
    reason: u32,
    exited_at: Option<Instant>,
    /// Looked up once (`Some(None)`: not in a pod).
    pod: Option<Option<PodLabels>>,
    /// Library rescans still due.
    rescans: Vec<Instant>,
    /// What its counters have been given so far.
    flow: Flow,
}

/// A process's byte counters, kept monotonic by construction: each call of
/// [`Agent::account`] adds what its collectives moved since the last one,
/// as host-staged when its verdict of that moment is, and never takes
/// anything back when the verdict changes later (issue 24: a verdict flip
/// once moved `host_staged_bytes_total` by the whole history, down as well
/// as up, and Prometheus read the drop as a reset).
#[derive(Debug, Default)]
struct Flow {
    /// Collective bytes counted in the kernel, and estimated (counted plus
    /// the closed off phases of the duty cycle), accounted so far.
    counted: u64,
    estimated: u64,
    /// Of those, what moved while the verdict was host-staged.
    staged: u64,
    staged_estimated: u64,
    /// The CPU time last exported.
    cpu_seconds: Option<f64>,
    /// Communicators with series of their own, in order of first use (at
    /// most `MAX_COMMUNICATORS`); later ones are summed as `other`. A
    /// communicator once named stays named and one summed stays summed, so
    /// neither its series nor `other` ever decreases.
    named: Vec<u64>,
}

struct Agent {
    session: Session,
    agg: Aggregator,
    /// The trap cost, measured once the duty cycle first samples.
    calibration: crate::calibrate::Background,
    meta: BTreeMap<u32, Meta>,
    pods: PodIndex,
    node: String,
    me: u32,
    retention: Duration,
    budget: Budget,
    /// NVLink and RDMA devices of the node, read at start (judging).
    facts: HostFacts,
    /// NVLink counters when the agent started (steady-state verdicts).
    links: Option<crate::trace::LinksBase>,
    setup_hits: (u64, Instant),
    discovered: BTreeMap<u32, u64>,
    forgotten: u64,
    /// Work shed in user space, per (what, reason).
    shed: BTreeMap<(&'static str, &'static str), u64>,
    discover_events: u64,
    malformed: u64,
    last_alive: Instant,
    /// Processes refused (shed) whose records may still be in flight: they
    /// are not tracked, and their exit clears them.
    refused: BTreeSet<u32>,
    /// What the probes answer from (heartbeats, readiness).
    health: Arc<Health>,
    labels: LabelMode,
    ignore_comm: BTreeSet<String>,
    ignore_namespace: BTreeSet<String>,
    /// Processes not traced by the ignore lists, by `comm` or `namespace`.
    ignored: BTreeMap<&'static str, u64>,
    /// `--labels pod`: the final counters of a group's forgotten processes,
    /// so that the group's counters do not go down when one leaves, and
    /// when the last one was forgotten.
    retired: BTreeMap<Group, (ProcessFigures, Instant)>,
    nvml_available: bool,
    /// The RDMA devices processes hold open, where the node has one.
    rdma: Option<crate::topo::rdma::Holders>,
    /// NCCL's RAS service (`--nccl-ras`).
    nccl_ras: Option<crate::identity::ras::Asker>,
}

/// The node label: `--node`, else `$NODE_NAME` (the DaemonSet sets it from
/// `spec.nodeName`), else the host name.
fn node_name(arg: Option<&str>) -> String {
    if let Some(n) = arg {
        return n.to_string();
    }
    if let Ok(n) = std::env::var("NODE_NAME")
        && !n.is_empty()
    {
        return n;
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub fn serve(args: &ServeArgs) -> Result<i32> {
    if !(args.cpu_budget > 0.0 && args.cpu_budget.is_finite()) {
        return Err(Error::Usage(format!(
            "--cpu-budget {} must be a positive fraction of one CPU (e.g. 0.05 for 5%)",
            args.cpu_budget
        )));
    }
    for (name, v) in [
        ("--max-targets", args.max_targets),
        ("--max-aggregate-rows", args.max_aggregate_rows),
        ("--max-inflight", args.max_inflight),
    ] {
        if v == 0 {
            return Err(Error::Usage(format!("{name} must be at least 1")));
        }
    }
    // A bad web-config file fails before any probe is loaded.
    let web = match &args.web_config_file {
        Some(f) => Some(webconfig::WebConfig::load(f).map_err(|e| Error::Usage(format!("--web-config-file: {e}")))?),
        None => None,
    };
    let scheme = if web.as_ref().is_some_and(|w| w.tls.is_some()) {
        "https"
    } else {
        "http"
    };
    let me = std::process::id();
    let opts = SessionOptions {
        load: LoadOptions {
            ringbuf_bytes: loader::check_ringbuf_size(args.ringbuf_bytes)?,
            targets_only: true,
            max_entries: vec![
                ("TARGETS", args.max_targets),
                ("AGGREGATE", args.max_aggregate_rows),
                ("INFLIGHT", args.max_inflight),
            ],
            ..LoadOptions::default()
        },
        families: None,
        installed_libraries: !args.no_installed_libraries,
        collectives: args.collectives,
    };
    let mut session = Session::open(&opts)?;
    kernel::set_agent(&mut session.ebpf, me)?;
    for point in DISCOVERY_POINTS.iter() {
        let Some(row) = session.planner.attach_point(&mut session.ebpf, point) else {
            continue;
        };
        if point.required && row.status == Status::Unavailable {
            return Err(Error::Usage(format!(
                "cannot discover new processes: {} is {}",
                row.point,
                row.summary()
            )));
        }
    }
    let facts = HostFacts::read();
    let rdma = (!facts.rdma_devices.is_empty()).then(Default::default);
    let links = crate::trace::LinksBase::sample();
    let node = node_name(args.node.as_deref());
    let mut agent = Agent {
        calibration: Default::default(),
        session,
        agg: Aggregator::default(),
        meta: BTreeMap::new(),
        pods: PodIndex::new(args.kubelet_log_root.clone()),
        node: node.clone(),
        me,
        retention: args.exited_retention,
        budget: Budget::new(args.cpu_budget, BUDGET_WINDOW),
        facts,
        links,
        setup_hits: (0, Instant::now()),
        discovered: BTreeMap::new(),
        forgotten: 0,
        shed: BTreeMap::new(),
        discover_events: 0,
        malformed: 0,
        last_alive: Instant::now(),
        refused: BTreeSet::new(),
        health: Arc::new(Health::new(args.stall_after)),
        labels: args.labels,
        ignore_comm: args.ignore_comm.iter().cloned().collect(),
        ignore_namespace: args.ignore_namespace.iter().cloned().collect(),
        ignored: BTreeMap::new(),
        retired: BTreeMap::new(),
        nvml_available: crate::topo::nvlink_traffic().is_some(),
        rdma,
        nccl_ras: args
            .nccl_ras
            .as_deref()
            .map(|a| crate::identity::ras::Asker::new(a, Some(RAS_EVERY))),
    };
    let rt = crate::signals::runtime()?;
    let (tx, rx) = mpsc::channel(8);
    let addr = http::spawn(args.listen, tx, agent.health.clone(), web).map_err(|e| {
        Error::Usage(format!(
            "cannot listen on {}: {e} (another agent running? choose another --listen)",
            args.listen
        ))
    })?;
    rt.block_on(async {
        let stop = crate::signals::stop_signal(args.duration)?;
        let running = agent.scan();
        agent.health.set_ready();
        errln!(
            "gdrtrace: serving metrics on {scheme}://{addr}/metrics (node {node}; {running} GPU/RDMA process(es) already running, traced from now on)"
        );
        agent.run(rx, stop).await
    })?;
    crate::session::report_close(&mut agent.session);
    errln!(
        "gdrtrace: serve stopped: {} process(es) discovered, {} forgotten",
        agent.discovered.values().sum::<u64>(),
        agent.forgotten
    );
    Ok(0)
}

#[cfg(test)]
mod tests;
