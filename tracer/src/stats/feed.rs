//! The aggregator's one input type. Live tracing and replay feed the same
//! inputs (`Aggregator::feed`); an observer (the `--record` recorder) sees
//! each input, and each process fact answered while handling it, in order.
use std::any::Any;

use tracer_common::{AggKey, AggValue, Event};

use super::source::Fact;

/// One input of the aggregator, with the facts answered while handling it.
#[derive(Clone, Debug)]
pub enum Input {
    Event(Event),
    Target {
        pid: u32,
        parent: Option<u32>,
    },
    Tick,
    AliveCheck,
    /// The kernel's cumulative totals, read at `t_ns` (`CLOCK_MONOTONIC`).
    Aggregates {
        t_ns: u64,
        rows: Vec<(AggKey, AggValue)>,
    },
    /// The kernel's cumulative totals read at `t_ns`, the same as the last
    /// `Aggregates` (a recording's `clock` line: the duty cycle's estimates
    /// take when each interval's counts were read from it).
    Clock {
        t_ns: u64,
    },
    /// The set-up uprobe links were closed over budget: threads' context
    /// switches are no longer seen.
    SetupClosed,
    /// One tick of the sampled rows' duty cycle (`sampling/controller.rs`): of the
    /// microseconds since the last, `on_us` in which the rows counted and
    /// `off_us` in which they did not (an off phase, or the attach that
    /// began an on phase). Only where the cycle can switch (not
    /// `--collectives exact`).
    /// `rest`: the uncounted rest of the same tick, after its totals (an
    /// on phase ended in it). `cpu`: the CPU time, in microseconds, each
    /// process of sampled rows ran in `on_us`, where it was read (none in
    /// a `rest`, or in recordings before 2026-12-06).
    Duty {
        on_us: u64,
        off_us: u64,
        rest: bool,
        cpu: Vec<(u32, u64)>,
    },
    /// What a trapped call costs the caller on this machine
    /// (`calibrate.rs`): the duty cycle's on-phase rates are corrected by
    /// it from here on.
    TrapCost(crate::sampling::TrapCost),
    /// The rows of a process probed on a first instruction the kernel
    /// single-steps (`probes/insn.rs`), in the library files it maps;
    /// given again when they change.
    Stepped {
        pid: u32,
        rows: Vec<String>,
    },
    /// The ops whose rows are counted exactly through the duty cycle's off
    /// phases from here on (`Group::Exact`: given when the cycle starts,
    /// and again when an op joins the sampled rows). None in a recording
    /// means none: recordings before 2026-12-08 sampled every row.
    ExactRows {
        ops: Vec<String>,
    },
    /// What NCCL's RAS service answered (`--nccl-ras`): the identities of
    /// communicators whose set-up was not traced (`identity::ras`).
    NcclRas(Box<crate::identity::RasQuery>),
}

/// Sees every input of the aggregator and every fact its process source
/// answered, in order (`Aggregator::observer`).
pub trait Observer: Any + std::fmt::Debug {
    fn input(&mut self, input: &Input);
    fn fact(&mut self, fact: &Fact);
}
