//! Aggregation: an HdrHistogram per (operation, transport), per-process
//! tables, and the registry, fed event by event. Facts about processes that
//! events do not carry come from a [`source::ProcSource`] (`/proc` live, the
//! recording on replay); with a recorder attached, every input and every
//! answer is written down, so a replay repeats the same steps.
//!
//! The steps, a file each: processes coming and going (`lifecycle.rs`), a
//! call into every figure (`calls.rs`), the kernel's aggregated rows and
//! the duty cycle's estimates (`kernel.rs`), who the communicators are
//! where their set-up was not traced (`identity.rs`); what is kept per
//! process (`process.rs`) and the transfer records (`transfers.rs`).
mod calls;
pub mod copies;
pub mod feed;
pub mod gds;
mod identity;
mod kernel;
mod lifecycle;
mod net;
mod process;
pub mod source;
pub mod timeline;
mod transfers;
pub mod ucx;
pub mod windows;

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use tracer_common::Event;

use self::{
    feed::{Input, Observer},
    source::{Fact, LiveProc, ProcSource},
};
pub use self::{
    net::{TcpSocket, TcpSockets},
    process::{Communicator, DutyTotals, ProcInfo, SampledTime, SocketTotals, crosses_devices},
    transfers::{TransferGroup, Transfers},
};
pub use crate::sampling::RowKey;
use crate::{
    classify::{self, Transport, transfer::PairDetector},
    model::Registry,
    probes::Family,
    sampling,
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

/// An operation's row: its label (`cuMemcpyHtoD`, `ibv_reg_mr`, ...) and
/// the verdict of its calls. Ordered by label, then verdict.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpKey {
    pub op: String,
    pub transport: Transport,
}

impl OpKey {
    pub fn new(op: &str, transport: Transport) -> Self {
        Self {
            op: op.to_string(),
            transport,
        }
    }
}

/// A thread of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct ThreadKey {
    pid: u32,
    tid: u32,
}

impl ThreadKey {
    fn of(e: &Event) -> Self {
        Self { pid: e.pid, tid: e.tid }
    }
}

/// Pin-family calls of one thread not yet attributed: (start, end, pages).
type PendingPins = Vec<(u64, u64, u64)>;

/// Calls and bytes of a kernel-aggregated row.
pub type CallsBytes = (u64, u64);

#[derive(Debug)]
pub struct Aggregator {
    ops: BTreeMap<OpKey, OpStats>,
    procs: BTreeMap<u32, ProcInfo>,
    registry: Registry,
    events: u64,
    /// Events whose op the tracer could not interpret (an ABI mismatch).
    undecoded: u64,
    /// Aggregate-only calls from the kernel per (pid, op name, handle),
    /// with the estimate of the time the duty cycle did not count them
    /// (`sampling/estimator.rs`); what every report and verdict reads.
    collectives: BTreeMap<RowKey, CallsBytes>,
    /// The same rows as the kernel counted them (monotonic: `serve`'s counters).
    collectives_counted: BTreeMap<RowKey, CallsBytes>,
    /// Copies counted in the kernel per (pid, op name, row handle): their
    /// first calls and verdicts, and their totals (`stats/copies.rs`).
    copies: copies::CopyRows,
    /// The sampled rows' duty cycle over the trace.
    duty: DutyTotals,
    /// Their estimates for the time they were not counted.
    estimator: sampling::Estimator,
    /// Processes that exited since the duty cycle's last tick, and those
    /// that exited in the tick before it: the tick a process exited in
    /// still counts it ([`Aggregator::duty`]).
    exiting: std::collections::BTreeSet<u32>,
    credited: std::collections::BTreeSet<u32>,
    /// Pin-family calls per thread not yet attributed to an enclosing
    /// call: (start, end, pages). Inner calls return (and arrive) first.
    pending_pins: std::collections::HashMap<ThreadKey, PendingPins>,
    /// Where process facts come from.
    source: Box<dyn ProcSource>,
    /// Sees every input and fact (the `--record` recorder).
    observer: Option<Box<dyn Observer>>,
    /// Transfer records: counts and a sample per (op, verdict), and the
    /// `--transfers` file.
    transfers: Transfers,
    /// Every call and aggregated interval, for `--trace-event`.
    timeline: Option<timeline::Timeline>,
    pairs: PairDetector,
    /// Registration latency per backing (`host`, `gpu/peer-mem`, `gpu/dma-buf`, `io_uring`).
    reg_latency: BTreeMap<&'static str, Histogram<u64>>,
    /// UCX evidence per process (registrations, cache lookups, buffer
    /// samples of the aggregated data calls, copies by side).
    ucx: classify::ucx::Tracker,
    /// TCP sends and retransmissions per (process, socket) (`stats/net.rs`).
    tcp: TcpSockets,
    /// Where each process's bytes went while which paths ran (`windows.rs`).
    windows: windows::Windows,
    /// cuFile reads and writes per (pid, op, handle) and the file I/O and
    /// ioctls per (pid, op, fd), as the kernel counted them (sampled rows),
    /// and with the duty cycle's estimates (`stats/gds.rs`).
    io_counted: BTreeMap<RowKey, CallsBytes>,
    io: BTreeMap<RowKey, CallsBytes>,
    /// P2PDMA mappings per process (`pci_p2pdma_map_*`, counted).
    p2pdma: BTreeMap<u32, u64>,
    /// cuFile evidence per process (driver, handles, buffers, samples, fds).
    gds: classify::gds::Tracker,
    /// NCCL's RAS answer and what it told (`identity.rs`).
    nccl_ras: Option<crate::identity::ras::NcclRas>,
    /// Processes the tracer attached to while they ran, with their VmPin
    /// then (None: unreadable); the others were traced from their start.
    /// Kept apart from the rows: `attach --all` names them before a row
    /// exists.
    attached_running: BTreeMap<u32, Option<u64>>,
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
            estimator: sampling::Estimator::default(),
            exiting: Default::default(),
            credited: Default::default(),
            source,
            observer: None,
            transfers: Transfers::default(),
            timeline: None,
            pairs: PairDetector::default(),
            reg_latency: BTreeMap::new(),
            ucx: Default::default(),
            tcp: TcpSockets::new(),
            windows: Default::default(),
            io_counted: BTreeMap::new(),
            io: BTreeMap::new(),
            p2pdma: BTreeMap::new(),
            gds: Default::default(),
            nccl_ras: None,
            attached_running: BTreeMap::new(),
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
            Input::Clock { t_ns } => self.same_aggregates(*t_ns),
            Input::SetupClosed => self.setup_closed(),
            Input::Duty {
                on_us,
                off_us,
                rest: false,
                cpu,
            } => self.duty(*on_us, *off_us, cpu),
            Input::Duty { off_us, rest: true, .. } => self.duty_rest(*off_us),
            Input::TrapCost(c) => self.trap_cost(*c),
            Input::Stepped { pid, rows } => self.stepped(*pid, rows),
            Input::NcclRas(q) => self.nccl_ras((**q).clone()),
            Input::ExactRows { ops } => self.exact_rows(ops),
        }
    }

    /// One tick of the duty cycle: `on_us` in which the sampled rows
    /// counted and `off_us` in which they did not, for every live process,
    /// and the CPU time some of them ran in `on_us` (pid, microseconds);
    /// the uncounted time is estimated row by row (`sampling/estimator.rs`).
    pub fn duty(&mut self, on_us: u64, off_us: u64, cpu: &[(u32, u64)]) {
        self.observe(|| Input::Duty {
            on_us,
            off_us,
            rest: false,
            cpu: cpu.to_vec(),
        });
        // Those that exited in the last tick are done with: their gaps
        // close (after the rest of that tick, which the estimator is
        // given first).
        for pid in std::mem::take(&mut self.credited) {
            self.estimator.exited(pid);
        }
        // A process that exited in this tick lived in part of it: a copy
        // loop whose probes closed makes its calls up to its exit. Left out
        // of the tick it exited in, its last off phase was dropped, and its
        // copies were reported as counted, every one, where the kernel saw
        // 4% of them (`bench copies`). Which part it lived is not known: the
        // whole tick is taken, as a gap it exited in is taken to its end.
        self.credited = std::mem::take(&mut self.exiting);
        self.interval(on_us, off_us, cpu.iter().copied().collect());
    }

    /// The uncounted rest of the tick after its kernel totals: an on phase
    /// ended in it ([`crate::session::Session::aggregate_tick`]).
    pub fn duty_rest(&mut self, off_us: u64) {
        self.observe(|| Input::Duty {
            on_us: 0,
            off_us,
            rest: true,
            cpu: Vec::new(),
        });
        self.interval(0, off_us, sampling::Cpu::new());
    }

    fn interval(&mut self, on_us: u64, off_us: u64, cpu: sampling::Cpu) {
        let d = &mut self.duty;
        d.on_us += on_us;
        d.off_us += off_us;
        if on_us == 0 && off_us > 0 && d.ended_on {
            d.off_phases += 1;
        }
        d.ended_on = on_us > 0;
        let credited = &self.credited;
        let alive = |pid: u32, p: &ProcInfo| !p.exited || credited.contains(&pid);
        for (_, p) in self.procs.iter_mut().filter(|(pid, p)| alive(**pid, p)) {
            p.collectives_sampled.traced_us += on_us + off_us;
            p.collectives_sampled.sampled_us += on_us;
        }
        let procs = &self.procs;
        let counted = sampled_rows(&self.collectives_counted, &self.copies.counted(), &self.io_counted);
        self.estimator.interval(&counted, on_us, off_us, &cpu, |pid| {
            procs.get(&pid).is_some_and(|p| alive(pid, p))
        });
        // The estimates follow with the kernel's totals of this tick
        // (`set_aggregates`) or, in a replay whose totals did not change,
        // with the next ones or `settle`.
    }

    /// The ops whose rows are counted exactly through the off phases from
    /// here on (`Input::ExactRows`): the estimator leaves their rows as
    /// counted, and an op that leaves the set is estimated from then on.
    pub fn exact_rows(&mut self, ops: &[String]) {
        self.observe(|| Input::ExactRows { ops: ops.to_vec() });
        self.estimator.exact_rows(ops.to_vec());
    }

    /// What a trapped call costs the caller (`calibrate.rs`): the duty
    /// cycle's on-phase rates are corrected by it from here on.
    pub fn trap_cost(&mut self, c: sampling::TrapCost) {
        self.observe(|| Input::TrapCost(c));
        self.estimator.trap_cost(c);
    }

    /// The rows of `pid` probed on a single-stepped first instruction
    /// (recorded only when they change).
    pub fn stepped<S: AsRef<str>>(&mut self, pid: u32, rows: &[S]) {
        let rows: Vec<String> = rows.iter().map(|s| s.as_ref().to_string()).collect();
        if self.estimator.stepped_of(pid) == rows.as_slice() {
            return;
        }
        self.observe(|| Input::Stepped {
            pid,
            rows: rows.clone(),
        });
        self.estimator.stepped(pid, rows);
    }

    /// Registers a process the tracer started or attached to.
    pub fn add_process(&mut self, pid: u32, parent: Option<u32>) {
        self.observe(|| Input::Target { pid, parent });
        self.add_looked(pid, parent, None);
    }

    /// Rows per (operation, verdict).
    pub fn ops(&self) -> &BTreeMap<OpKey, OpStats> {
        &self.ops
    }

    /// Every process seen, exited ones until `forget`.
    pub fn procs(&self) -> &BTreeMap<u32, ProcInfo> {
        &self.procs
    }

    /// The identity of process `pid`'s communicator `handle` (its local
    /// `ncclComm_t`), from its latest init call with that handle.
    pub fn communicator(&self, pid: u32, handle: u64) -> Option<&Communicator> {
        let name = format!("{handle:#x}");
        self.procs
            .get(&pid)
            .and_then(|p| p.communicators.iter().rev().find(|c| c.communicator == name))
    }

    /// What each process allocated, registered and mapped.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The registry, for an agent that trims the logs it exports nothing of.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Records seen.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Records the tracer could not interpret.
    pub fn undecoded(&self) -> u64 {
        self.undecoded
    }

    /// Adds records that could not be read at all (malformed).
    pub fn add_undecoded(&mut self, n: u64) {
        self.undecoded += n;
    }

    /// Where each process's bytes went while which of its paths ran.
    pub fn windows(&self) -> Vec<windows::Window> {
        self.windows.report()
    }

    /// The kernel-aggregated rows with the duty cycle's estimates.
    pub fn collectives(&self) -> &BTreeMap<RowKey, CallsBytes> {
        &self.collectives
    }

    /// Whether a sampled row's estimate is a lower bound
    /// ([`sampling::Estimator::lower_bound`]).
    pub fn lower_bound(&self, key: &RowKey) -> bool {
        self.estimator.lower_bound(key)
    }

    /// Whether any of process `pid`'s estimates is a lower bound.
    pub fn estimates_lower_bound(&self, pid: u32) -> bool {
        self.estimator.lower_bound_in(pid)
    }

    /// Whether the copies of (label, verdict) hold an estimate that is a
    /// lower bound.
    pub fn copies_lower_bound(&self, label: &str, transport: Transport) -> bool {
        self.copies
            .classes_of(label, transport)
            .any(|(k, _)| self.estimator.lower_bound(k))
    }

    /// cuFile reads and writes per handle and the file I/O of cuFile
    /// processes per fd, with the duty cycle's estimates.
    pub fn io_rows(&self) -> &BTreeMap<RowKey, CallsBytes> {
        &self.io
    }

    /// The kernel-aggregated rows as counted.
    pub fn collectives_counted(&self) -> &BTreeMap<RowKey, CallsBytes> {
        &self.collectives_counted
    }

    /// The copies counted in the kernel.
    pub fn copies(&self) -> &copies::CopyRows {
        &self.copies
    }

    /// The duty cycle's totals over the trace.
    pub fn duty_totals(&self) -> DutyTotals {
        self.duty
    }

    /// Registration latency per backing.
    pub fn reg_latency(&self) -> &BTreeMap<&'static str, Histogram<u64>> {
        &self.reg_latency
    }

    /// The transfer records.
    pub fn transfers(&self) -> &Transfers {
        &self.transfers
    }

    /// The transfer records, to open or close their `--transfers` file.
    pub fn transfers_mut(&mut self) -> &mut Transfers {
        &mut self.transfers
    }

    /// Keeps every call and interval from here on (`--trace-event`).
    pub fn keep_timeline(&mut self, started_ns: u64) {
        self.timeline = Some(timeline::Timeline::new(started_ns));
    }

    /// The timeline kept, once.
    pub fn take_timeline(&mut self) -> Option<timeline::Timeline> {
        self.timeline.take()
    }

    /// Shows every input and fact to `o` from here on (`--record`).
    pub fn set_observer(&mut self, o: Box<dyn Observer>) {
        self.observer = Some(o);
    }

    /// The observer, taken back to be finished (the recorder's footer).
    pub fn take_observer(&mut self) -> Option<Box<dyn Observer>> {
        self.observer.take()
    }

    /// The VmPin a process had when the tracer attached to it while it ran.
    pub fn set_vm_pin_at_attach(&mut self, pid: u32, kib: Option<u64>) {
        self.attached_running.insert(pid, kib);
        if let Some(p) = self.procs.get_mut(&pid) {
            p.vm_pin_kib_at_attach = kib;
        }
    }

    /// Whether the tracer attached to `pid` while it ran (its set-up
    /// before that was not seen).
    pub fn attached_running(&self, pid: u32) -> bool {
        self.attached_running.contains_key(&pid)
            || self.procs.get(&pid).is_some_and(|p| p.vm_pin_kib_at_attach.is_some())
    }

    /// The VmPin of every process attached to while it ran, where read.
    pub fn vm_pins_at_attach(&self) -> BTreeMap<u32, u64> {
        let rows = self
            .procs
            .iter()
            .filter_map(|(pid, p)| Some((*pid, p.vm_pin_kib_at_attach?)));
        let early = self.attached_running.iter().filter_map(|(pid, k)| Some((*pid, (*k)?)));
        early.chain(rows).collect()
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
/// UCX data calls, copies, cuFile reads and writes and the file syscalls
/// (their keys never collide: op names differ).
fn sampled_rows(
    collectives: &BTreeMap<RowKey, CallsBytes>,
    copies: &BTreeMap<RowKey, CallsBytes>,
    io: &BTreeMap<RowKey, CallsBytes>,
) -> BTreeMap<RowKey, CallsBytes> {
    let mut all = collectives.clone();
    all.extend(copies.iter().map(|(k, v)| (k.clone(), *v)));
    all.extend(io.iter().map(|(k, v)| (k.clone(), *v)));
    all
}

/// The name an event record carries (`comm`, NUL-padded).
fn comm_of(e: &Event) -> String {
    let end = e.comm.iter().position(|&b| b == 0).unwrap_or(e.comm.len());
    String::from_utf8_lossy(&e.comm[..end]).into_owned()
}

#[cfg(test)]
mod tests;
