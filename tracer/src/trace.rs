//! The tracing loop shared by `run`, `validate` and `attach`: drain events
//! into the aggregator, sample counters, pick up newly mapped libraries, stop
//! on the given future, and build the report.
use std::{
    future::Future,
    time::{Duration, Instant},
};

use tracer_common::kind;

use crate::{
    counters::FollPin,
    error::{Error, Result},
    report::{self, Inputs, PinCounters, Report},
    session::Session,
    stats::Aggregator,
};

/// How often counters are sampled and target libraries rescanned.
const TICK: Duration = Duration::from_millis(250);

pub struct Trace {
    pub session: Session,
    pub agg: Aggregator,
    pins_before: Option<FollPin>,
    started: Instant,
}

impl Trace {
    pub fn new(session: Session) -> Self {
        Self {
            session,
            agg: Aggregator::default(),
            pins_before: FollPin::read(),
            started: Instant::now(),
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

    /// Builds the report of what was traced.
    pub fn report(&self, command: Vec<String>) -> Result<Report> {
        let after = FollPin::read();
        let delta = match (self.pins_before, after) {
            (Some(b), Some(a)) => Some(b.delta(&a)),
            _ => None,
        };
        let loss = self.session.loss(0, self.agg.undecoded)?;
        Ok(report::build(
            &self.agg,
            Inputs {
                command,
                duration_s: self.started.elapsed().as_secs_f64(),
                coverage: self.session.planner.table(),
                loss,
                kernel_slots: self.session.kernel_slots()?,
                pins: PinCounters {
                    before: self.pins_before,
                    after,
                    delta,
                },
            },
        ))
    }
}
