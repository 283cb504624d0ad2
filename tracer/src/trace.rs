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
    counters::FollPin,
    error::{Error, Result},
    events::recording,
    report::{self, Inputs, PinCounters, Report},
    session::Session,
    stats::Aggregator,
};

/// How often counters are sampled and target libraries rescanned.
const TICK: Duration = Duration::from_millis(250);

/// A periodic summary (`attach --interval`).
pub struct Interval {
    pub every: Duration,
    pub sink: Box<dyn FnMut(&IntervalRecord)>,
    last: Option<Instant>,
    prev: BTreeMap<u32, (u64, u64, u64)>,
}

impl Interval {
    pub fn new(every: Duration, sink: Box<dyn FnMut(&IntervalRecord)>) -> Self {
        Self {
            every,
            sink,
            last: None,
            prev: BTreeMap::new(),
        }
    }
}

/// One interval's per-process figures.
#[derive(Clone, Debug, Serialize)]
pub struct IntervalRecord {
    pub elapsed_s: f64,
    pub interval_s: f64,
    pub processes: Vec<IntervalProcess>,
}

#[derive(Clone, Debug, Serialize)]
pub struct IntervalProcess {
    pub pid: u32,
    pub comm: String,
    pub exited: bool,
    pub calls_per_s: f64,
    pub transports: BTreeMap<&'static str, u64>,
    pub staged_bytes_per_s: f64,
    pub registrations_per_s: f64,
    /// The process's transport verdict so far (None: no GPU communication seen).
    pub verdict: Option<&'static str>,
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
    /// Host facts (read once: at `record`, else when the report is built).
    facts: Option<recording::HostFacts>,
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
            facts: None,
        }
    }

    /// Adds a target process (and attaches its libraries).
    pub fn add_target(&mut self, pid: u32, parent: Option<u32>) -> Result<()> {
        self.session.add_target(pid)?;
        self.agg.add_process(pid, parent);
        Ok(())
    }

    /// Traces until `stop` completes. Events are handled as they arrive.
    pub async fn run_until(&mut self, stop: impl Future<Output = ()>) -> Result<()> {
        let mut stream = self.session.events()?;
        let mut batch = Vec::new();
        let mut tick = tokio::time::interval(TICK);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                r = stream.next_batch(&mut batch) => {
                    r.map_err(|e| Error::io("reading the ring buffer", e))?;
                    self.handle(&mut batch);
                }
                _ = tick.tick() => self.on_tick(),
                () = &mut stop => break,
            }
            if self.finished {
                break;
            }
        }
        stream.drain_now(&mut batch);
        self.handle(&mut batch);
        self.agg.undecoded += stream.malformed;
        self.on_tick();
        Ok(())
    }

    fn handle(&mut self, batch: &mut Vec<tracer_common::Event>) {
        for e in batch.drain(..) {
            self.agg.push(&e);
            if e.kind == kind::EXEC {
                self.session.attach_libraries_of(e.pid);
            }
        }
    }

    fn on_tick(&mut self) {
        self.agg.sample();
        if let Ok(rows) = self.session.aggregates() {
            self.agg.set_aggregates(&rows);
        }
        if self.stop_when_targets_exit && !self.agg.procs.is_empty() && self.agg.check_exited() {
            self.finished = true;
        }
        self.interval_tick();
        let live: Vec<u32> = self
            .agg
            .procs
            .iter()
            .filter(|(_, p)| !p.exited)
            .map(|(pid, _)| *pid)
            .collect();
        for pid in live {
            self.session.attach_libraries_of(pid);
        }
    }

    fn interval_tick(&mut self) {
        let Some(iv) = self.interval.as_mut() else { return };
        let now = Instant::now();
        let since = match iv.last {
            None => {
                iv.last = Some(now);
                return;
            }
            Some(l) => now.duration_since(l),
        };
        if since < iv.every {
            return;
        }
        iv.last = Some(now);
        let secs = since.as_secs_f64().max(1e-9);
        let mut processes = Vec::new();
        for (pid, p) in &self.agg.procs {
            let calls: u64 = p.calls.values().sum();
            let (pc, ps, pr) = iv
                .prev
                .insert(*pid, (calls, p.staged_bytes, p.registrations))
                .unwrap_or((0, 0, 0));
            processes.push(IntervalProcess {
                pid: *pid,
                comm: p.comm.clone(),
                exited: p.exited,
                calls_per_s: (calls - pc) as f64 / secs,
                transports: p.transports.clone(),
                staged_bytes_per_s: (p.staged_bytes - ps) as f64 / secs,
                registrations_per_s: (p.registrations - pr) as f64 / secs,
                verdict: crate::classify::comm::verdict(&crate::classify::comm::Evidence {
                    pid: *pid,
                    comm: p.comm.clone(),
                    calls: p.calls.clone(),
                    env: p.env.clone(),
                    nvlink: None,
                })
                .map(|v| v.transport.name()),
                vm_pin_kib: crate::counters::vm_pin_kib(*pid).unwrap_or(0),
            });
        }
        let rec = IntervalRecord {
            elapsed_s: self.started.elapsed().as_secs_f64(),
            interval_s: secs,
            processes,
        };
        (iv.sink)(&rec);
    }

    /// Opens the `--record` and `--transfers` files of a command.
    pub fn outputs(&mut self, t: &crate::cli::TraceArgs) -> Result<()> {
        if let Some(path) = &t.record {
            self.record(path)?;
        }
        if let Some(path) = &t.transfers {
            self.agg.transfers.sink = Some(std::io::BufWriter::new(
                std::fs::File::create(path).map_err(|e| Error::io(format!("creating {}", path.display()), e))?,
            ));
        }
        Ok(())
    }

    /// Records the aggregator's inputs to `path` (`--record`), from now on.
    pub fn record(&mut self, path: &std::path::Path) -> Result<()> {
        let header = recording::Header::now();
        self.facts = Some(header.facts.clone());
        self.agg.recorder = Some(recording::Recorder::create(path, &header)?);
        Ok(())
    }

    /// Builds the report of what was traced (and finishes the recording).
    pub fn report(&mut self, command: Vec<String>) -> Result<Report> {
        let after = FollPin::read();
        let delta = match (self.pins_before, after) {
            (Some(b), Some(a)) => Some(b.delta(&a)),
            _ => None,
        };
        let loss = self.session.loss(0, self.agg.undecoded)?;
        let inputs = Inputs {
            command,
            host: report::host(),
            facts: self.facts.take().unwrap_or_else(recording::HostFacts::read),
            duration_s: (self.started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
            coverage: self.session.planner.table(),
            loss,
            kernel_slots: self.session.kernel_slots()?,
            pins: PinCounters {
                before: self.pins_before,
                after,
                delta,
            },
            process_libraries: self
                .agg
                .procs
                .keys()
                .map(|pid| (*pid, self.session.planner.process_libraries(*pid)))
                .collect(),
        };
        if let Some(rec) = self.agg.recorder.take() {
            let events = rec.events;
            rec.finish(&recording::footer(&inputs, &self.agg, events))?;
        }
        let nvlink = inputs.facts.nvlink;
        let r = report::build(&self.agg, inputs);
        report::accounting::finish_transfers(&mut self.agg, &r, nvlink)
            .map_err(|e| Error::io("writing the transfer records", e))?;
        Ok(r)
    }
}
