//! The tracing loop shared by `run`, `validate` and `attach`: drain events
//! into the aggregator, sample counters, pick up newly mapped libraries, stop
//! on the given future, and build the report.
use std::{
    collections::BTreeMap,
    future::Future,
    time::{Duration, Instant},
};

use serde::Serialize;
use tracer_common::kind;

use crate::{
    classify::steady::GpuLinks,
    counters::FollPin,
    error::{Error, Result},
    output::StreamFile,
    recording,
    report::{
        self, Inputs, PinCounters, Report,
        fabric::{FabricInputs, PortBase},
    },
    session::Session,
    stats::Aggregator,
};

/// How often counters are sampled and target libraries rescanned.
pub const TICK: Duration = crate::sampling::BEAT;
/// How often the ring buffer is drained between wake-ups: records are
/// submitted without waking the reader until the buffer fills to
/// `LoadOptions::wakeup_bytes`, so a quiet buffer is read on this beat.
pub const DRAIN: Duration = Duration::from_millis(50);
/// How long the end of a trace waits for a trap cost still being measured
/// (`calibrate.rs`: about a second on an idle host).
const CALIBRATION_WAIT: Duration = Duration::from_secs(10);
/// Hits per second of the set-up uprobes (`Row::group` `Setup`: context
/// switches, registration-cache lookups) above which their link is closed:
/// a job that makes a context current on every API call, or looks up the
/// registration cache on every send, pays a trap per call (0.6-0.85 us on
/// the GPU machine), and the set-up facts are known by then (docs/perf.md).
pub const SETUP_BUDGET_HZ: f64 = 500.0;

/// A periodic summary (`attach --interval`).
pub struct Interval {
    pub every: Duration,
    pub sink: Box<dyn FnMut(&IntervalRecord)>,
    /// Also the judged report of the trace so far, each interval (`top`'s
    /// view is made from it, as `replay`'s is from a recording).
    pub snapshots: Option<Box<dyn FnMut(Report)>>,
    last: Option<Instant>,
    prev: BTreeMap<u32, (u64, u64, u64)>,
    /// Kernel latency slots per op at the previous interval.
    prev_slots: BTreeMap<u32, Vec<u64>>,
}

impl Interval {
    pub fn new(every: Duration, sink: Box<dyn FnMut(&IntervalRecord)>) -> Self {
        Self {
            every,
            sink,
            snapshots: None,
            last: None,
            prev: BTreeMap::new(),
            prev_slots: BTreeMap::new(),
        }
    }
}

/// One interval's per-process figures (a line of `--jsonl`).
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct IntervalRecord {
    pub elapsed_s: f64,
    pub interval_s: f64,
    pub processes: Vec<IntervalProcess>,
    /// The busiest operations of the interval (all targets), with the p99
    /// latency from the in-kernel log2 slots (every completed call, including
    /// the aggregate-only hot ones): the upper bound of the p99 slot.
    pub hot_ops: Vec<HotOp>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct HotOp {
    pub op: String,
    pub calls_per_s: f64,
    pub p99_ns_at_most: u64,
}

/// The hot operations between two snapshots of the kernel latency slots.
pub fn hot_ops(prev: &BTreeMap<u32, Vec<u64>>, now: &BTreeMap<u32, Vec<u64>>, secs: f64, top: usize) -> Vec<HotOp> {
    let mut out: Vec<HotOp> = now
        .iter()
        .filter_map(|(op, slots)| {
            let before = prev.get(op);
            let delta: Vec<u64> = slots
                .iter()
                .enumerate()
                .map(|(i, c)| c.saturating_sub(before.and_then(|b| b.get(i)).copied().unwrap_or(0)))
                .collect();
            let calls: u64 = delta.iter().sum();
            if calls == 0 {
                return None;
            }
            let target = (calls * 99).div_ceil(100);
            let mut seen = 0;
            let slot = delta
                .iter()
                .position(|c| {
                    seen += c;
                    seen >= target.max(1)
                })
                .unwrap_or(delta.len() - 1);
            Some(HotOp {
                op: crate::probes::ops::op_name(*op),
                calls_per_s: calls as f64 / secs,
                // Slot i holds durations in [2^i, 2^(i+1)).
                p99_ns_at_most: 1u64 << (slot + 1).min(63),
            })
        })
        .collect();
    out.sort_by(|a, b| b.calls_per_s.total_cmp(&a.calls_per_s));
    out.truncate(top);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_ops_p99_from_slot_deltas() {
        let op = tracer_common::op::SENDTO;
        let mut before = vec![0u64; 40];
        before[10] = 1000; // earlier calls must not count
        let mut now = before.clone();
        now[12] += 990; // 4-8 us
        now[20] += 10; // 1-2 ms: the slowest 1%
        let prev = BTreeMap::from([(op, before)]);
        let cur = BTreeMap::from([(op, now)]);
        let h = hot_ops(&prev, &cur, 2.0, 4);
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].op, "sendto");
        assert_eq!(h[0].calls_per_s, 500.0);
        assert_eq!(h[0].p99_ns_at_most, 1 << 13, "99% of calls are at most 8 us");
        let mut slow = cur[&op].clone();
        slow[20] += 20;
        let h = hot_ops(&prev, &BTreeMap::from([(op, slow)]), 1.0, 4);
        assert_eq!(h[0].p99_ns_at_most, 1 << 21, "3% above 1 ms moves p99 there");
        assert!(hot_ops(&cur, &cur, 1.0, 4).is_empty(), "no calls, no hot op");
    }
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct IntervalProcess {
    pub pid: u32,
    pub comm: String,
    pub exited: bool,
    pub calls_per_s: f64,
    #[serde(deserialize_with = "crate::intern::keys")]
    pub transports: BTreeMap<&'static str, u64>,
    pub staged_bytes_per_s: f64,
    pub registrations_per_s: f64,
    /// The process's transport verdict so far (None: no GPU communication seen).
    #[serde(deserialize_with = "crate::intern::opt")]
    pub verdict: Option<crate::intern::Name>,
    /// Why the verdict is `unknown`, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    pub vm_pin_kib: u64,
}

pub struct Trace {
    pub session: Session,
    pub agg: Aggregator,
    /// Periodic summaries, if asked for.
    pub interval: Option<Interval>,
    /// Stop once every target process has exited (attach).
    pub stop_when_targets_exit: bool,
    finished: bool,
    pins_before: Option<FollPin>,
    started: Instant,
    /// GPU link counters when tracing started (None: no GPU or no NVML).
    links_base: Option<LinksBase>,
    /// GPU link traffic between start and the end of `run_until` (the
    /// window the aggregates cover; probes may stay live while detaching).
    links_window: Option<GpuLinks>,
    /// Host facts (read once: at `record`, else when the report is built).
    facts: Option<crate::host::HostFacts>,
    /// Files that failed while the report was built (`--record`,
    /// `--transfers`); the report is still returned, the command exits non-zero.
    pub late_errors: Vec<Error>,
    /// The `--record` stream once its footer is written: the workloads'
    /// summaries follow, then `StreamFile::finish`.
    pub recording: Option<StreamFile>,
    /// Set-up uprobe hits at the last tick, and when.
    setup_hits: (u64, Instant),
    /// When tracing began (`CLOCK_MONOTONIC`): the recording's `started_ns`
    /// and the timeline's start.
    started_ns: u64,
    /// The timeline (`--trace-event`), rendered with the report.
    pub timeline: Option<String>,
    /// The trap cost, measured once the duty cycle first samples.
    calibration: crate::calibrate::Background,
    /// RDMA ports and counters when tracing began.
    ports: PortBase,
    /// RDMA devices each process held open.
    devices: crate::topo::rdma::Holders,
    /// NCCL's RAS service, asked once a communicator without an identity
    /// is seen (`--nccl-ras`).
    pub nccl_ras: Option<crate::identity::ras::Asker>,
}

#[derive(Clone, Debug)]
struct LiveVerdict {
    transport: &'static str,
    host_staged: bool,
    /// Bytes that crossed host memory beyond the process's staged bytes
    /// (collectives of a host-staged transport, UCX's staging copies).
    collective_bytes: u64,
    why: Option<String>,
}

/// What the GPU link counters looked like when tracing started (also the
/// agent's, `serve`).
#[derive(Clone, Copy, Debug)]
pub struct LinksBase {
    nvlink_bytes: u64,
    nvlink_between_gpus: bool,
    rdma_nics: usize,
}

impl LinksBase {
    pub fn sample() -> Option<Self> {
        let nvlink_bytes = nvlink_bytes_now()?;
        let topo = crate::topo::discover();
        Some(Self {
            nvlink_bytes,
            nvlink_between_gpus: topo.nvlink().unwrap_or(false),
            rdma_nics: topo.nics.len(),
        })
    }

    /// Traffic since the base sample.
    pub fn since(&self) -> Option<GpuLinks> {
        Some(GpuLinks {
            nvlink_between_gpus: self.nvlink_between_gpus,
            nvlink_bytes: nvlink_bytes_now()?.saturating_sub(self.nvlink_bytes),
            rdma_nics: self.rdma_nics,
            gpu_processes: None,
        })
    }
}

/// Whether an op is a verbs call (libibverbs, or the kernel's verbs family).
fn verbs_op(op: u32) -> bool {
    use crate::probes::{Family, catalog::point_of_op, uapi::Lib};
    crate::probes::uapi::row_of(op).is_some_and(|(_, r)| r.lib == Lib::Ibverbs)
        || point_of_op(op).is_some_and(|p| p.family == Family::Verbs)
}

/// NVLink data bytes sent by all GPUs so far (NVML counters).
fn nvlink_bytes_now() -> Option<u64> {
    let gpus = crate::topo::nvlink_traffic()?;
    let tx: Vec<u64> = gpus.iter().filter_map(|g| g.nvlink_tx_bytes).collect();
    (!tx.is_empty()).then(|| tx.iter().sum())
}

impl Trace {
    pub fn new(session: Session) -> Self {
        Self {
            session,
            agg: Aggregator::default(),
            interval: None,
            stop_when_targets_exit: false,
            finished: false,
            pins_before: FollPin::read(),
            started: Instant::now(),
            links_base: LinksBase::sample(),
            links_window: None,
            facts: None,
            late_errors: Vec::new(),
            recording: None,
            setup_hits: (0, Instant::now()),
            started_ns: crate::host::monotonic_ns(),
            timeline: None,
            calibration: Default::default(),
            ports: PortBase::sample(),
            devices: Default::default(),
            nccl_ras: None,
        }
    }

    /// Adds a target process (and attaches its libraries).
    pub fn add_target(&mut self, pid: u32, parent: Option<u32>) -> Result<()> {
        self.session.add_target(pid)?;
        self.agg.add_process(pid, parent);
        Ok(())
    }

    /// Traces until `stop` completes, then closes the window in the kernel
    /// (the stop switch) and drains what is left: the report can be built
    /// at once, and probes that fire while links close are not recorded.
    /// Events are handled in batches: when the kernel wakes the reader (the
    /// buffer is filling) and on every drain beat.
    pub async fn run_until(&mut self, stop: impl Future<Output = ()>) -> Result<()> {
        let mut stream = self.session.events()?;
        let mut batch = Vec::new();
        let mut tick = tokio::time::interval(TICK);
        let mut drain = tokio::time::interval(DRAIN);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                r = stream.next_or_beat(&mut batch, &mut drain) => {
                    r.map_err(|e| Error::io("reading the ring buffer", e))?;
                    self.handle(&mut batch);
                }
                _ = tick.tick() => {
                    // The kernel's counts are read next: the records before them go first.
                    stream.drain_now(&mut batch);
                    self.handle(&mut batch);
                    self.on_tick();
                }
                () = Session::until(self.session.duty_deadline()) => {
                    stream.drain_now(&mut batch);
                    self.handle(&mut batch);
                    self.session.duty_due(&mut self.agg);
                }
                () = &mut stop => break,
            }
            if self.finished {
                break;
            }
        }
        self.session.stop()?;
        stream.drain_now(&mut batch);
        self.handle(&mut batch);
        self.agg.add_undecoded(stream.malformed);
        // A loop over budget from its start can end before the trap cost
        // is measured (a second or two, longer on a loaded host): its
        // estimates wait for it, as the estimator takes it from the start.
        // Without it, the stand-in copy loop of issue 25 under `run` with
        // both CPUs of the development host busy read `~10,000` each way,
        // unmarked, in 4 of 4 runs (2026-12-05).
        if self.session.needs_trap_cost()
            && let Some(c) = self.calibration.wait(CALIBRATION_WAIT)
        {
            self.agg.trap_cost(c);
        }
        self.on_tick();
        // A communicator first seen in the last drain is asked about now; a
        // query under way is waited for (the job may be gone: that is said).
        if let Some(ras) = &mut self.nccl_ras {
            ras.due(|| !self.agg.unidentified().is_empty());
            if let Some(q) = ras.wait(self.agg.procs().keys().copied().collect::<Vec<_>>()) {
                self.agg.nccl_ras(q);
            }
        }
        // Who else had the GPUs open: the counters are theirs too.
        self.links_window = self.links_base.and_then(|b| b.since()).map(|mut l| {
            l.gpu_processes = Some(crate::counters::gpu_processes());
            l
        });
        Ok(())
    }

    fn handle(&mut self, batch: &mut Vec<tracer_common::Event>) {
        for e in batch.drain(..) {
            self.agg.push(&e);
            if e.kind == kind::EXEC {
                self.session.attach_libraries_of(e.pid);
            }
            // A verbs call: the process has a device open now, and may be
            // gone by the next tick (a short ib_write_bw).
            if e.kind == kind::CALL && self.ports.any() && verbs_op(e.op) {
                self.devices.look_now(e.pid);
            }
        }
    }

    fn on_tick(&mut self) {
        self.budget_setup();
        self.agg.sample();
        self.session.aggregate_tick(&mut self.agg);
        self.calibrate();
        self.ask_nccl_ras();
        if self.stop_when_targets_exit && !self.agg.procs().is_empty() && self.agg.check_exited() {
            self.finished = true;
        }
        if self.interval.is_some() && self.facts.is_none() {
            // The interval verdicts read the host facts the report will (no RDMA NIC, NVLink).
            self.facts = Some(crate::host::HostFacts::read());
        }
        self.interval_tick();
        for pid in self.agg.live_pids() {
            self.session.attach_libraries_of(pid);
        }
        if self.ports.any() {
            self.devices.look(self.agg.live_pids().into_iter());
        }
    }

    /// What a trap costs, once it may be needed (on a thread; its result
    /// corrects the estimates from then on).
    fn calibrate(&mut self) {
        if self.session.needs_trap_cost() {
            self.calibration.start();
        }
        if let Some(c) = self.calibration.poll() {
            self.agg.trap_cost(c);
        }
    }

    /// NCCL's RAS service, asked once a communicator without an identity
    /// is seen; its answer fed to the aggregator when it is in.
    fn ask_nccl_ras(&mut self) {
        let Some(ras) = &mut self.nccl_ras else { return };
        ras.due(|| !self.agg.unidentified().is_empty());
        if let Some(q) = ras.poll(self.agg.procs().keys().copied().collect::<Vec<_>>()) {
            self.agg.nccl_ras(q);
        }
    }

    /// Closes the set-up uprobe links once their hit rate is over budget.
    fn budget_setup(&mut self) {
        if self
            .session
            .budget_setup(&mut self.setup_hits, SETUP_BUDGET_HZ)
            .is_some()
        {
            self.agg.setup_closed();
        }
    }

    fn interval_tick(&mut self) {
        let Some(mut iv) = self.interval.take() else { return };
        let now = Instant::now();
        match iv.last {
            None => iv.last = Some(now),
            Some(l) if now.duration_since(l) >= iv.every => {
                iv.last = Some(now);
                let since = now.duration_since(l);
                let mut rec = self.interval_record(&mut iv.prev, since);
                if let Ok(slots) = self.session.kernel_slots() {
                    rec.hot_ops = hot_ops(&iv.prev_slots, &slots, since.as_secs_f64().max(1e-9), 4);
                    iv.prev_slots = slots;
                }
                (iv.sink)(&rec);
                if let Some(snap) = &mut iv.snapshots {
                    match self.snapshot() {
                        Ok(r) => snap(r),
                        Err(e) => log::warn!("the report so far: {}", crate::error::describe(&e)),
                    }
                }
            }
            Some(_) => {}
        }
        self.interval = Some(iv);
    }

    fn interval_record(&self, prev: &mut BTreeMap<u32, (u64, u64, u64)>, since: Duration) -> IntervalRecord {
        let secs = since.as_secs_f64().max(1e-9);
        let verdicts = self.live_verdicts();
        let mut processes = Vec::new();
        for (pid, p) in self.agg.procs() {
            let calls: u64 = p.calls.values().sum();
            let verdict = verdicts.get(pid);
            // Collective bytes of a process on a host-staged transport
            // crossed host memory.
            let staged = p.staged_bytes
                + verdict
                    .as_ref()
                    .filter(|v| v.host_staged)
                    .map_or(0, |v| v.collective_bytes);
            let (pc, ps, pr) = prev.insert(*pid, (calls, staged, p.registrations)).unwrap_or((0, 0, 0));
            processes.push(IntervalProcess {
                pid: *pid,
                comm: p.comm.clone(),
                exited: p.exited,
                calls_per_s: calls.saturating_sub(pc) as f64 / secs,
                transports: p.transports.clone(),
                staged_bytes_per_s: staged.saturating_sub(ps) as f64 / secs,
                registrations_per_s: p.registrations.saturating_sub(pr) as f64 / secs,
                why: verdict.as_ref().and_then(|v| v.why.clone()),
                verdict: verdict.map(|v| v.transport),
                vm_pin_kib: crate::counters::vm_pin_kib(*pid).unwrap_or(0),
            });
        }
        IntervalRecord {
            elapsed_s: self.started.elapsed().as_secs_f64(),
            interval_s: secs,
            processes,
            hot_ops: Vec::new(),
        }
    }

    /// Every process's transport verdict so far, by the report's judging
    /// function (set-up calls, else the steady state against the other
    /// processes of the window; UCX processes by their UCX paths).
    fn live_verdicts(&self) -> BTreeMap<u32, LiveVerdict> {
        let links = self.links_base.and_then(|b| b.since());
        let inputs = crate::judge::Inputs::of_aggregator(&self.agg, links, self.facts.clone());
        let (verdicts, paths) = crate::judge::judge(&inputs);
        verdicts
            .into_iter()
            .map(|v| {
                let extra = inputs.collectives_of(v.pid).1 + crate::judge::paths::extra_staged(&paths, &inputs, v.pid);
                let live = LiveVerdict {
                    transport: v.transport.name(),
                    host_staged: v.host_staged,
                    collective_bytes: extra,
                    // The last line of evidence says what was missing.
                    why: matches!(v.transport, crate::classify::Transport::Unknown)
                        .then(|| v.evidence.last().cloned())
                        .flatten(),
                };
                (v.pid, live)
            })
            .collect()
    }

    /// Opens the `--record` and `--transfers` files of a command (streams
    /// with a fallback file: see `output::StreamFile`), and collects the
    /// timeline when `--trace-event` is given.
    pub fn outputs(
        &mut self,
        record: Option<&std::path::Path>,
        transfers: Option<&std::path::Path>,
        timeline: bool,
    ) -> Result<()> {
        if timeline {
            self.agg.keep_timeline(self.started_ns);
        }
        if let Some(path) = record {
            self.record(path)?;
        }
        if let Some(path) = transfers {
            self.agg.transfers_mut().sink = Some(std::io::BufWriter::new(StreamFile::create("--transfers", path)?));
        }
        Ok(())
    }

    /// Records the aggregator's inputs to `path` (`--record`), from now on.
    pub fn record(&mut self, path: &std::path::Path) -> Result<()> {
        let mut header = recording::Header::now();
        header.started_ns = self.started_ns;
        self.facts = Some(header.facts.clone());
        let out = StreamFile::create("--record", path)?;
        self.agg
            .set_observer(Box::new(recording::Recorder::create(out, &header)?));
        Ok(())
    }

    /// Builds the report of what was traced, judged (the one place a live
    /// report is judged, with the NCCL log when given), and finishes the
    /// recording and the transfer records.
    pub fn report(&mut self, command: Vec<String>, nccl_log: Option<&str>) -> Result<Report> {
        // The duty cycle's last interval has its counts (replay does the same).
        self.agg.settle();
        let facts = self.facts.take().unwrap_or_else(crate::host::HostFacts::read);
        let inputs = self.inputs(command, facts)?;
        self.finish_report(inputs, nccl_log)
    }

    /// The judged and explained report of the trace so far, while it runs
    /// (`top`): built, judged and explained by the same code as the final one, leaving the trace as it
    /// was (the recording, the transfer records and the timeline go on; the
    /// duty cycle's open interval is left unsettled).
    pub fn snapshot(&self) -> Result<Report> {
        let facts = self.facts.clone().unwrap_or_else(crate::host::HostFacts::read);
        let inputs = self.inputs(Vec::new(), facts)?;
        let nvlink = inputs.facts.nvlink;
        let mut r = report::build(&self.agg, inputs);
        r.judge_with(None, nvlink);
        crate::explain::fill(&mut r);
        Ok(r)
    }

    /// What the report is built from besides the aggregator, as of now.
    fn inputs(&self, command: Vec<String>, facts: crate::host::HostFacts) -> Result<Inputs> {
        let after = FollPin::read();
        let delta = match (self.pins_before, after) {
            (Some(b), Some(a)) => Some(b.delta(&a)),
            _ => None,
        };
        let loss = self.session.loss(0, self.agg.undecoded())?;
        let mut fabric = FabricInputs {
            devices: self.devices.held().clone(),
            unattributed_retransmits: self.session.counter(tracer_common::counter::TCP_RETRANSMIT_UNOWNED)?,
            ..Default::default()
        };
        self.ports.deltas(&mut fabric);
        Ok(Inputs {
            command,
            gpu_links: self
                .links_window
                .clone()
                .or_else(|| self.links_base.and_then(|b| b.since())),
            host: crate::host::host(),
            facts,
            duration_s: (self.started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
            coverage: self.session.planner.table(),
            loss,
            kernel_slots: self.session.kernel_slots()?,
            probe_hits: self.session.hits()?,
            pins: PinCounters {
                before: self.pins_before,
                after,
                delta,
            },
            process_libraries: self
                .agg
                .procs()
                .keys()
                .map(|pid| (*pid, self.session.planner.process_libraries(*pid)))
                .collect(),
            fabric,
        })
    }

    /// Finishes the recording and builds the final, judged report.
    fn finish_report(&mut self, inputs: Inputs, nccl_log: Option<&str>) -> Result<Report> {
        let recorder = self
            .agg
            .take_observer()
            .and_then(|o| (o as Box<dyn std::any::Any>).downcast::<recording::Recorder>().ok());
        if let Some(rec) = recorder {
            let events = rec.events;
            let (out, r) = rec.finish(&recording::footer(&inputs, &self.agg, events));
            if let Err(e) = r {
                self.late_errors.push(e);
            }
            self.recording = Some(out);
        }
        let nvlink = inputs.facts.nvlink;
        let mut r = report::build(&self.agg, inputs);
        r.judge_with(nccl_log, nvlink);
        crate::explain::fill(&mut r);
        if let Err(e) = report::accounting::finish_transfers(&mut self.agg, &r) {
            self.late_errors.push(e);
        }
        self.timeline = self.agg.take_timeline().map(|t| report::timeline::render(&t, &r));
        Ok(r)
    }
}
