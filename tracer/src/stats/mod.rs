//! Aggregation: an HdrHistogram per (operation, transport), per-process
//! tables, and the registry, fed event by event. Facts about processes that
//! events do not carry come from a [`source::ProcSource`] (`/proc` live, the
//! recording on replay); with a recorder attached, every input and every
//! answer is written down, so a replay repeats the same steps.
pub mod copies;
pub mod duty;
pub mod feed;
pub mod source;
pub mod timeline;
pub mod ucx;

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use tracer_common::{Event, kind};

use self::{
    feed::{Input, Observer},
    source::{Fact, LiveProc, Look, ProcSource},
};
use crate::{
    classify::{
        self, Transport,
        transfer::{self, PairDetector, Transfer},
    },
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
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
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
    #[serde(deserialize_with = "crate::intern::keys")]
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
    /// Bytes of data-moving calls (copies, registrations' ranges are not counted).
    pub moved_bytes: u64,
    /// Copies that went through host memory (pageable copies, peer copies
    /// without peer access, D2H+H2D pairs through one host buffer).
    pub staging_copies: u64,
    /// D2H followed by H2D through the same host buffer (one staged transfer each).
    pub staged_pairs: u64,
    /// The rank count of each NCCL communicator the process joined
    /// (`ncclCommInitRank*`'s `nranks` argument), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nccl_ranks: Vec<u32>,
    /// The NCCL communicators the process joined, with the identity every
    /// rank of one communicator shares (`comm_id`), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub communicators: Vec<Communicator>,
    /// Time traced while the sampled rows' duty cycle ran, and the part of
    /// it they counted in (absent when every call was counted): where it is
    /// less, the process's collective figures are estimates (`stats/duty.rs`).
    #[serde(skip_serializing_if = "SampledTime::is_exact")]
    pub collectives_sampled: SampledTime,
    /// Whether `env` was read since the last exec (an empty environment is an answer too).
    #[serde(skip)]
    pub env_read: bool,
}

/// One NCCL communicator of a process: its local handle and the identity
/// its ranks share.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Communicator {
    /// The local `ncclComm_t` (as `collectives[].communicator` names it).
    pub communicator: String,
    /// The init call (`ncclCommInitRank`, `ncclCommInitRankConfig`, ...).
    pub init: String,
    /// The hash of the `ncclUniqueId` every rank passed, as NCCL 2.26+
    /// prints it (`commId 0x...` in its `Init START`/`Init COMPLETE` lines):
    /// `0x` and 16 lowercase hex digits. Absent where the call takes no id
    /// (`ncclCommInitAll`, `ncclCommSplit`) or it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comm_id: Option<String>,
    /// The same id hashed as NCCL 2.18 to 2.25 print it (their `getHash`
    /// was DJB2a).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comm_id_legacy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nranks: Option<u32>,
}

impl Communicator {
    /// A hash as NCCL prints it (`%lx` after `0x`, here zero-padded to 16
    /// digits so that every id has one spelling).
    pub fn hex(hash: u64) -> String {
        format!("{hash:#018x}")
    }

    /// The communicator a successful `ncclCommInitRank*` call made, from
    /// its record: `args[0]` the new `ncclComm_t` (dereferenced at return),
    /// `args[1]` nranks, `args[2]` rank, and for rows with an id its two
    /// hashes (`tracer_common::nccl_id`; both 0: unreadable).
    pub fn of_init(e: &Event, row: &crate::probes::uapi::Row) -> Self {
        use tracer_common::nccl_id;
        let (h, legacy) = (e.args[nccl_id::HASH_ARG], e.args[nccl_id::LEGACY_HASH_ARG]);
        let id = row.unique_id.is_some() && (h, legacy) != (0, 0);
        let all = row.name == "ncclCommInitAll";
        Communicator {
            communicator: format!("{:#x}", e.args[0]),
            init: row.name.to_string(),
            comm_id: id.then(|| Self::hex(h)),
            comm_id_legacy: id.then(|| Self::hex(legacy)),
            // ncclCommInitAll(comms, ndev, devlist): one process holds every rank.
            rank: (!all).then_some(e.args[2] as u32),
            nranks: Some(e.args[1] as u32),
        }
    }
}

/// Traced and sampled time of one process (`Input::Duty`), in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SampledTime {
    pub sampled_us: u64,
    pub traced_us: u64,
}

impl SampledTime {
    /// Every call of the process was counted (no off phase while it was traced).
    pub fn is_exact(&self) -> bool {
        self.sampled_us >= self.traced_us
    }

    /// The share of its traced time the rows counted (1 when exact).
    pub fn share(&self) -> f64 {
        if self.is_exact() {
            1.0
        } else {
            self.sampled_us as f64 / self.traced_us as f64
        }
    }
}

/// The duty cycle over the whole trace (`Input::Duty`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct DutyTotals {
    pub on_us: u64,
    pub off_us: u64,
    /// Off phases begun.
    pub off_phases: u64,
    /// Whether the last interval ended counting.
    #[serde(skip)]
    ended_on: bool,
}

/// A process's socket traffic, summed over its sockets.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SocketTotals {
    pub calls: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Sockets (fds) that moved data.
    pub sockets: u64,
}

/// Pin-family calls of one thread not yet attributed: (start, end, pages).
type PendingPins = Vec<(u64, u64, u64)>;

#[derive(Debug)]
pub struct Aggregator {
    pub ops: BTreeMap<(String, Transport), OpStats>,
    pub procs: BTreeMap<u32, ProcInfo>,
    pub registry: Registry,
    pub events: u64,
    /// Events whose op the tracer could not interpret (an ABI mismatch).
    pub undecoded: u64,
    /// Aggregate-only calls from the kernel: (pid, op name, handle) ->
    /// (calls, bytes), with the estimate of the time the duty cycle did not
    /// count them (`stats/duty.rs`); what every report and verdict reads.
    pub collectives: BTreeMap<(u32, String, u64), (u64, u64)>,
    /// The same rows as the kernel counted them (monotonic: `serve`'s counters).
    pub collectives_counted: BTreeMap<(u32, String, u64), (u64, u64)>,
    /// Copies counted in the kernel per (pid, op name, row handle): their
    /// first calls and verdicts, and their totals (`stats/copies.rs`).
    pub copies: copies::CopyRows,
    /// The sampled rows' duty cycle over the trace.
    pub duty: DutyTotals,
    /// Their estimates for the time they were not counted.
    estimator: duty::Estimator,
    /// Pin-family calls per (process, thread) not yet attributed to an
    /// enclosing call: (start, end, pages). Inner calls return (and arrive)
    /// first.
    pending_pins: std::collections::HashMap<(u32, u32), PendingPins>,
    /// Where process facts come from.
    pub source: Box<dyn ProcSource>,
    /// Sees every input and fact (the `--record` recorder).
    pub observer: Option<Box<dyn Observer>>,
    /// Transfer records: counts and a sample per (op, verdict), and the
    /// `--transfers` file.
    pub transfers: Transfers,
    /// Every call and aggregated interval, for `--trace-event`.
    pub timeline: Option<timeline::Timeline>,
    pairs: PairDetector,
    /// Registration latency per backing (`host`, `gpu/peer-mem`, `gpu/dma-buf`, `io_uring`).
    pub reg_latency: BTreeMap<&'static str, Histogram<u64>>,
    /// UCX evidence per process (registrations, cache lookups, buffer
    /// samples of the aggregated data calls, copies by side).
    pub ucx: classify::ucx::Tracker,
}

/// Transfer records per (op, verdict).
#[derive(Debug, Default)]
pub struct Transfers {
    pub groups: BTreeMap<(String, Transport), TransferGroup>,
    /// The `--transfers` stream (a write error moves it to a fallback
    /// file: `output::StreamFile`); `sink_error` holds a serialization error.
    pub sink: Option<std::io::BufWriter<crate::output::StreamFile>>,
    pub sink_error: Option<std::io::Error>,
}

#[derive(Clone, Debug, Default)]
pub struct TransferGroup {
    pub count: u64,
    pub bytes: u64,
    pub sample: Vec<Transfer>,
}

impl Transfers {
    pub fn add(&mut self, t: Transfer) {
        if let Some(out) = &mut self.sink
            && self.sink_error.is_none()
        {
            use std::io::Write as _;
            let r = serde_json::to_writer(&mut *out, &t)
                .map_err(std::io::Error::from)
                .and_then(|()| out.write_all(b"\n"));
            if let Err(e) = r {
                self.sink_error = Some(e);
            }
        }
        let g = self.groups.entry((t.op.clone(), t.transport)).or_default();
        g.count += t.calls.unwrap_or(1);
        g.bytes += t.bytes;
        if g.sample.len() < transfer::SAMPLE_PER_GROUP {
            g.sample.push(t);
        }
    }

    /// Flushes and closes the `--transfers` file; the error says where
    /// the records went when it failed.
    pub fn finish(&mut self) -> crate::error::Result<()> {
        let serialized = match self.sink_error.take() {
            Some(e) => Err(crate::error::Error::io("serializing the transfer records", e)),
            None => Ok(()),
        };
        let closed = match self.sink.take() {
            // A StreamFile takes every byte: the flush cannot fail.
            Some(out) => match out.into_inner() {
                Ok(s) => s.finish(),
                Err(e) => e.into_inner().into_parts().0.finish(),
            },
            None => Ok(()),
        };
        closed.and(serialized)
    }
}

impl Default for Aggregator {
    fn default() -> Self {
        Self::with_source(Box::new(LiveProc))
    }
}

impl Aggregator {
    pub fn with_source(source: Box<dyn ProcSource>) -> Self {
        Self {
            ops: BTreeMap::new(),
            procs: BTreeMap::new(),
            registry: Registry::default(),
            events: 0,
            undecoded: 0,
            pending_pins: Default::default(),
            collectives: BTreeMap::new(),
            collectives_counted: BTreeMap::new(),
            copies: Default::default(),
            duty: DutyTotals::default(),
            estimator: duty::Estimator::default(),
            source,
            observer: None,
            transfers: Transfers::default(),
            timeline: None,
            pairs: PairDetector::default(),
            reg_latency: BTreeMap::new(),
            ucx: Default::default(),
        }
    }

    fn note(&mut self, f: Fact) {
        if let Some(o) = &mut self.observer {
            o.fact(&f);
        }
    }

    fn observe(&mut self, input: impl FnOnce() -> Input) {
        if let Some(o) = &mut self.observer {
            o.input(&input());
        }
    }

    /// Handles one input: what live tracing does call by call, and replay
    /// does from a recording.
    pub fn feed(&mut self, input: &Input) {
        match input {
            Input::Event(e) => self.push(e),
            Input::Target { pid, parent } => self.add_process(*pid, *parent),
            Input::Tick => self.sample(),
            Input::AliveCheck => {
                self.check_exited();
            }
            Input::Aggregates { t_ns, rows } => self.set_aggregates(*t_ns, rows),
            Input::SetupClosed => self.setup_closed(),
            Input::Duty { on_us, off_us } => self.duty(*on_us, *off_us),
        }
    }

    /// One tick of the duty cycle: `on_us` in which the sampled rows
    /// counted and `off_us` in which they did not, for every live process;
    /// the uncounted time is estimated row by row (`stats/duty.rs`).
    pub fn duty(&mut self, on_us: u64, off_us: u64) {
        self.observe(|| Input::Duty { on_us, off_us });
        let d = &mut self.duty;
        d.on_us += on_us;
        d.off_us += off_us;
        if on_us == 0 && off_us > 0 && d.ended_on {
            d.off_phases += 1;
        }
        d.ended_on = on_us > 0;
        for p in self.procs.values_mut().filter(|p| !p.exited) {
            p.collectives_sampled.traced_us += on_us + off_us;
            p.collectives_sampled.sampled_us += on_us;
        }
        let procs = &self.procs;
        let counted = sampled_rows(&self.collectives_counted, &self.copies.counted());
        self.estimator.interval(&counted, on_us, off_us, |pid| {
            procs.get(&pid).is_some_and(|p| !p.exited)
        });
        // The estimates follow with the kernel's totals of this tick
        // (`set_aggregates`) or, in a replay whose totals did not change,
        // with the next ones or `settle`.
    }

    /// Registers a process the tracer started or attached to.
    pub fn add_process(&mut self, pid: u32, parent: Option<u32>) {
        self.observe(|| Input::Target { pid, parent });
        self.add_looked(pid, parent, None);
    }

    fn add_looked(&mut self, pid: u32, parent: Option<u32>, look: Option<Look>) {
        if !self.procs.contains_key(&pid) {
            self.first_sight(pid);
        }
        let needs = self.procs.get(&pid).is_none_or(|p| p.comm.is_empty() || !p.env_read);
        let look = match look {
            Some(l) => Some(l),
            None if needs => {
                let l = self.source.look(pid);
                self.note(Fact::Process {
                    pid,
                    parent,
                    comm: l.comm.clone(),
                    env: l.env.clone(),
                });
                Some(l)
            }
            None => None,
        };
        let p = self.procs.entry(pid).or_default();
        if let Some(l) = look {
            if p.comm.is_empty() {
                p.comm = l.comm.unwrap_or_default();
            }
            if !p.env_read {
                p.env = l.env;
                p.env_read = true;
            }
        }
        if p.parent.is_none() {
            p.parent = parent;
        }
    }

    /// What predates the trace of a process seen for the first time: its
    /// address space, when CUDA state (NVIDIA device mappings) is there.
    fn first_sight(&mut self, pid: u32) {
        if let Some(space) = self.source.space(pid) {
            self.note(Fact::Space {
                pid,
                space: space.clone(),
            });
            self.registry.set_before(pid, Some(space));
        }
    }

    /// Reads the environment of `pid` if not read since its last exec.
    fn read_env(&mut self, pid: u32) {
        if self.procs.get(&pid).is_some_and(|p| p.env_read) {
            return;
        }
        let env = self.source.env(pid);
        self.note(Fact::Env { pid, env: env.clone() });
        let p = self.procs.entry(pid).or_default();
        p.env = env;
        p.env_read = true;
    }

    /// Samples the per-process counters of live processes (every tick).
    pub fn sample(&mut self) {
        self.observe(|| Input::Tick);
        self.sample_live();
    }

    /// Traced processes not known to have exited.
    pub fn live_pids(&self) -> Vec<u32> {
        self.procs
            .iter()
            .filter(|(_, p)| !p.exited)
            .map(|(pid, _)| *pid)
            .collect()
    }

    fn sample_live(&mut self) {
        let live = self.live_pids();
        for pid in live {
            let (kib, cpu) = self.source.sample(pid);
            self.note(Fact::Sample {
                pid,
                vm_pin_kib: kib,
                cpu_seconds: cpu,
            });
            let Some(p) = self.procs.get_mut(&pid) else { continue };
            if let Some(kib) = kib {
                p.vm_pin_kib_max = p.vm_pin_kib_max.max(kib);
            }
            if let Some(cpu) = cpu {
                p.cpu_seconds = Some(cpu);
            }
        }
    }

    /// The set-up uprobe links were closed: context switches are no longer
    /// seen, so the registry stops trusting a thread's last context where a
    /// process has several.
    pub fn setup_closed(&mut self) {
        self.observe(|| Input::SetupClosed);
        self.registry.contexts_frozen = true;
        self.ucx.setup_closed();
    }

    /// Drops everything kept about an exited process (its row, registry,
    /// pending pins and copy pairs), so a long-running agent's memory stays
    /// flat as processes come and go (`gdrtrace serve`). Totals per
    /// operation and transfer group keep what it did.
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
        self.registry.procs.remove(&pid);
        self.pending_pins.retain(|(p, _), _| *p != pid);
        self.pairs.forget(pid);
        self.collectives.retain(|(p, _, _), _| *p != pid);
        self.collectives_counted.retain(|(p, _, _), _| *p != pid);
        self.copies.forget(pid);
        self.estimator.forget(pid);
    }

    /// Marks processes that no longer exist as exited; true when none is left.
    pub fn check_exited(&mut self) -> bool {
        self.observe(|| Input::AliveCheck);
        let live = self.live_pids();
        for pid in live {
            if !self.source.alive(pid) {
                self.note(Fact::Gone { pid });
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.exited = true;
                }
                self.estimator.exited(pid);
            }
        }
        self.procs.values().all(|p| p.exited)
    }

    pub fn push(&mut self, e: &Event) {
        self.observe(|| Input::Event(*e));
        self.events += 1;
        if let Some(t) = &mut self.timeline {
            t.thread(e);
        }
        match e.kind {
            kind::FORK => {
                let child = e.args[0] as u32;
                // Threads share the tgid; only new processes get a row.
                if let Some(l) = self.source.look_child(child) {
                    self.note(Fact::Process {
                        pid: child,
                        parent: Some(e.pid),
                        comm: l.comm.clone(),
                        env: l.env.clone(),
                    });
                    self.add_looked(child, Some(e.pid), Some(l));
                }
            }
            kind::EXEC => {
                self.registry.exec(e.pid);
                let p = self.procs.entry(e.pid).or_default();
                p.comm = comm_of(e);
                p.env_read = false;
                self.read_env(e.pid);
            }
            kind::EXIT => {
                self.sample_live();
                let p = self.procs.entry(e.pid).or_default();
                p.exited = true;
                self.estimator.exited(e.pid);
                // Per-call records carry no name: a process that was gone
                // before procfs could name it is named by its exit record.
                if p.comm.is_empty() {
                    p.comm = comm_of(e);
                }
            }
            kind::CALL | kind::ENTRY => {
                self.call(e);
            }
            kind::ROW_FIRST => self.row_first(e),
            _ => self.undecoded += 1,
        }
    }

    /// The first call of a copy row (`kind::ROW_FIRST`): a call like any
    /// other, whose verdict the row's later calls share.
    fn row_first(&mut self, e: &Event) {
        let handle = e.ret as u64;
        let first = Event {
            kind: kind::CALL,
            ret: 0,
            ..*e
        };
        if let Some(c) = self.call(&first) {
            self.copies.first(e.pid, e.op, handle, first, &c);
        }
    }

    /// Adds the copies counted (or estimated) since the last time, per
    /// class, to every figure a copy event adds to, with the verdict of the
    /// class's first calls (or takes back what an estimate lost); their
    /// transfer record is one per class (`settle`).
    fn add_copy_rows(&mut self) {
        let estimator = &self.estimator;
        for (key, calls, bytes) in self.copies.due(|k, c| estimator.estimate(k, c)) {
            let Some(class) = self.copies.classes.get(&key) else {
                continue;
            };
            let (e, c) = (class.first, class.call.clone());
            let add = |v: &mut u64, d: i64| *v = v.saturating_add_signed(d);
            self.ucx.observe_many(&e, c.transport, &self.registry, calls, bytes);
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
            add(&mut s.calls, calls);
            add(&mut s.bytes, bytes);
            let p = self.procs.entry(e.pid).or_default();
            add(&mut p.moved_bytes, bytes);
            if c.transport == Transport::HostStaged {
                add(&mut p.staging_copies, calls);
            }
            add(p.transports.entry(c.transport.name()).or_default(), calls);
            if c.transport.staged() {
                add(&mut p.staged_bytes, bytes);
            }
            add(p.calls.entry(c.label).or_default(), calls);
        }
    }

    fn call(&mut self, e: &Event) -> Option<classify::Call> {
        // A process first seen by its calls (attach --all) was running before.
        if !self.procs.contains_key(&e.pid) {
            self.first_sight(e.pid);
        }
        // The first call of an aggregated row: a sample of its arguments,
        // not a call (the kernel counts those).
        if e.kind == kind::ENTRY && crate::probes::uapi::row_of(e.op).is_some_and(|(_, r)| r.aggregate) {
            self.ucx.sample(e, &self.registry);
            return None;
        }
        if self.registry.nvlink.is_none()
            && crate::probes::uapi::row_of(e.op).is_some_and(|(_, r)| r.kind == crate::probes::uapi::Kind::Copy)
        {
            self.registry.nvlink = Some(self.source.nvlink());
        }
        let regs_before = self.registry.procs.get(&e.pid).map_or(0, |p| p.churn.registrations);
        self.registry.observe(e);
        let row = crate::probes::uapi::row_of(e.op).map(|(_, r)| r);
        let kind_is = |k: crate::probes::uapi::Kind| row.is_some_and(|r| r.kind == k);
        let Some(c) = classify::call(e, &self.registry) else {
            self.undecoded += 1;
            if let Some(t) = &mut self.timeline {
                t.call(e, None, false, 0);
            }
            return None;
        };
        let classified = c.clone();
        // A registration: one the registry counted (MRs, io_uring buffer
        // sets), or pinned host memory registered with CUDA.
        let registered = self.registry.procs.get(&e.pid).map_or(0, |p| p.churn.registrations) > regs_before
            || (kind_is(crate::probes::uapi::Kind::HostRegister) && !c.failed);
        self.ucx.observe(e, c.transport, &self.registry);
        // ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
        // (and ...Config(..., config)), ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist):
        // the communicators' rank count in the second register.
        if kind_is(crate::probes::uapi::Kind::CommInit) && !c.failed {
            let p = self.procs.entry(e.pid).or_default();
            p.nccl_ranks.push(e.args[1] as u32);
        }
        // ncclResult_t ncclCommDestroy(ncclComm_t comm) (and ncclCommAbort):
        // the communicator's calls ended here (the duty cycle's estimates).
        if kind_is(crate::probes::uapi::Kind::CommEnd) && !c.failed {
            self.estimator.row_ended(e.pid, e.args[0]);
        }
        if let Some((_, row)) = crate::probes::uapi::row_of(e.op)
            && row.kind == crate::probes::uapi::Kind::CommInit
            && e.kind == kind::CALL
            && !c.failed
        {
            let p = self.procs.entry(e.pid).or_default();
            p.communicators.push(Communicator::of_init(e, row));
        }
        if registered {
            let backing = match c.transport {
                Transport::GdrDmabuf => "gpu/dma-buf",
                Transport::GdrPeerMem => "gpu/peer-mem",
                _ if e.op == tracer_common::op::IO_URING_REGISTER => "io_uring",
                _ => "host",
            };
            let _ = self
                .reg_latency
                .entry(backing)
                .or_insert_with(new_histogram)
                .record(e.dur_ns.max(1));
        }
        let is_transfer = transfer::is_transfer(e, &c);
        if let Some(t) = &mut self.timeline {
            let copy =
                crate::probes::uapi::row_of(e.op).is_some_and(|(_, r)| r.kind == crate::probes::uapi::Kind::Copy);
            t.call(e, Some(&c), is_transfer, if copy && !c.failed { c.bytes } else { 0 });
        }
        if is_transfer {
            let comm = self.procs.get(&e.pid).map_or_else(|| comm_of(e), |p| p.comm.clone());
            let comm = if comm.is_empty() { comm_of(e) } else { comm };
            self.transfers.add(transfer::of_call(e, &c, &comm));
            let copy = kind_is(crate::probes::uapi::Kind::Copy);
            if copy && !c.failed {
                let pair = self.pairs.copy(e, &c, &self.registry, &comm);
                let p = self.procs.entry(e.pid).or_default();
                p.moved_bytes += c.bytes;
                if c.transport == Transport::HostStaged {
                    p.staging_copies += 1;
                }
                if let Some(pair) = pair {
                    if let Some(t) = &mut self.timeline {
                        t.staged_pair(pair.bytes);
                    }
                    p.staged_pairs += 1;
                    if c.transport != Transport::HostStaged {
                        p.staging_copies += 1;
                        p.staged_bytes += pair.bytes;
                    }
                    self.transfers.add(pair);
                }
            }
        }
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
        // Entry-only records have no duration.
        if e.kind == kind::CALL {
            let _ = s.hist.record(e.dur_ns.max(1));
        }
        self.read_env(e.pid);
        let p = self.procs.entry(e.pid).or_default();
        if p.comm.is_empty() {
            p.comm = comm_of(e);
        }
        *p.transports.entry(c.transport.name()).or_default() += 1;
        if c.transport.staged() {
            p.staged_bytes += c.bytes;
        }
        if registered {
            p.registrations += 1;
        }
        *p.calls.entry(c.label).or_default() += 1;
        p.errors += c.failed as u64;
        if c.pages > 0 {
            p.pages_pinned += c.pages as u64;
            let pending = self.pending_pins.entry((e.pid, e.tid)).or_default();
            if pending.len() >= 4096 {
                pending.remove(0);
            }
            pending.push((e.start_ns, e.start_ns + e.dur_ns, c.pages as u64));
        } else {
            p.pages_unpinned += (-c.pages) as u64;
        }
        if e.op == tracer_common::op::IB_UMEM_GET {
            let (start, end) = (e.start_ns, e.start_ns + e.dur_ns);
            let pending = self.pending_pins.entry((e.pid, e.tid)).or_default();
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
        Some(classified)
    }

    /// Replaces the kernel-aggregated totals (they are cumulative) and
    /// reflects them in the per-process call counts.
    pub fn set_aggregates(&mut self, t_ns: u64, rows: &[(tracer_common::AggKey, tracer_common::AggValue)]) {
        self.observe(|| Input::Aggregates {
            t_ns,
            rows: rows.to_vec(),
        });
        if let Some(t) = &mut self.timeline {
            let copies = &self.copies;
            t.aggregates(
                t_ns,
                rows,
                |k| crate::probes::catalog::socket_direction(k.op).is_none(),
                |k| copies.call_of(k.tgid, k.op, k.handle),
            );
        }
        self.collectives_counted.clear();
        let mut copies: BTreeMap<(u32, u32, u64), (u64, u64)> = BTreeMap::new();
        let mut sockets: BTreeMap<u32, SocketTotals> = BTreeMap::new();
        let mut sock_calls: BTreeMap<(u32, String), u64> = BTreeMap::new();
        let mut fds = std::collections::BTreeSet::new();
        for (k, v) in rows {
            let name = crate::probes::ops::op_name(k.op);
            if crate::probes::uapi::row_of(k.op).is_some_and(|(_, r)| r.copy_rows()) {
                let e = copies.entry((k.tgid, k.op, k.handle)).or_default();
                e.0 += v.calls;
                e.1 += v.bytes;
                continue;
            }
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
            let e = self.collectives_counted.entry((k.tgid, name, k.handle)).or_default();
            e.0 += v.calls;
            e.1 += v.bytes;
        }
        // A process running collectives that no target set announced
        // (`attach --all`): it gets its row, name, environment and parent.
        let new: std::collections::BTreeSet<u32> = self
            .collectives_counted
            .keys()
            .map(|(pid, _, _)| *pid)
            .filter(|pid| !self.procs.contains_key(pid))
            .collect();
        for pid in new {
            let l = self.source.look(pid);
            self.note(Fact::Process {
                pid,
                parent: l.parent,
                comm: l.comm.clone(),
                env: l.env.clone(),
            });
            self.add_looked(pid, l.parent, Some(l));
        }
        for ((pid, name), calls) in sock_calls {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.calls.insert(name, calls);
            }
        }
        self.copies.set_kernel(copies);
        // The counts of the duty cycle's last interval.
        self.estimator
            .counts(&sampled_rows(&self.collectives_counted, &self.copies.counted()));
        self.scale_collectives();
        for (pid, p) in self.procs.iter_mut() {
            p.socket = sockets.remove(pid).unwrap_or_default();
            p.socket.sockets = fds.iter().filter(|(t, _)| t == pid).count() as u64;
        }
    }

    /// The kernel's totals are final (the report is built next): the duty
    /// cycle's last interval gets them, if no totals came after it.
    pub fn settle(&mut self) {
        self.estimator
            .settle(&sampled_rows(&self.collectives_counted, &self.copies.counted()));
        self.scale_collectives();
        // One transfer record per copy class for the calls beyond its
        // first ones (which have their own), like the collectives' one per
        // communicator.
        let rows: Vec<_> = self
            .copies
            .classes
            .values()
            .filter(|r| r.applied.0 > 0)
            .cloned()
            .collect();
        for r in rows {
            let comm = self.procs.get(&r.first.pid).map(|p| p.comm.clone()).unwrap_or_default();
            let mut t = transfer::of_call(&r.first, &r.call, &comm);
            t.bytes = r.applied.1;
            t.calls = Some(r.applied.0);
            self.transfers.add(t);
        }
    }

    /// The collective rows as every report reads them: counted, plus the
    /// estimate of the time the duty cycle did not count them, and
    /// reflected in the per-process call counts.
    fn scale_collectives(&mut self) {
        self.collectives = self
            .collectives_counted
            .iter()
            .map(|(k, c)| (k.clone(), self.estimator.estimate(k, *c)))
            .collect();
        let mut per: BTreeMap<(u32, String), u64> = BTreeMap::new();
        for ((pid, name, _), (calls, _)) in &self.collectives {
            *per.entry((*pid, name.clone())).or_default() += calls;
        }
        for ((pid, name), calls) in per {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.calls.insert(name, calls);
            }
        }
        self.add_copy_rows();
    }

    /// The sampled rows as counted plus the estimates of the duty cycle's
    /// off phases that closed, never an open one: each figure only grows
    /// (`serve`'s estimated counters).
    pub fn collectives_estimated(&self) -> BTreeMap<(u32, String, u64), (u64, u64)> {
        self.collectives_counted
            .iter()
            .map(|(k, c)| (k.clone(), self.estimator.closed(k, *c)))
            .collect()
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

/// The rows of the duty-cycled group as counted: collectives, group and
/// UCX data calls, and copies (their keys never collide: op names differ).
fn sampled_rows(
    collectives: &BTreeMap<duty::RowKey, (u64, u64)>,
    copies: &BTreeMap<duty::RowKey, (u64, u64)>,
) -> BTreeMap<duty::RowKey, (u64, u64)> {
    let mut all = collectives.clone();
    all.extend(copies.iter().map(|(k, v)| (k.clone(), *v)));
    all
}

fn comm_of(e: &Event) -> String {
    let end = e.comm.iter().position(|&b| b == 0).unwrap_or(e.comm.len());
    String::from_utf8_lossy(&e.comm[..end]).into_owned()
}

#[cfg(test)]
mod tests;
