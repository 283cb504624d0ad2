//! The exact rows in the tracing loop (`sampling/exact.rs`): their traps
//! read every beat with the sampled rows' (`sampled`), the hot ones moved
//! to the sampled rows at an off switch, and the aggregator told which ops
//! are counted exactly.
use std::{
    collections::{BTreeMap, BTreeSet},
    time::Instant,
};

use tracer_common::{AggKey, AggValue};

use super::Session;
use crate::{
    probes::{ops::op_name, uapi, uprobes::Group},
    sampling::{DEFAULT_BUDGET_HZ, EXACT_SHARE, ExactTraps, Mode},
    stats::Aggregator,
};

/// What the session keeps of the exact rows.
#[derive(Debug, Default)]
pub(super) struct Exact {
    rates: crate::sampling::ExactRates,
    /// The ops that joined the sampled rows.
    joined: BTreeSet<u32>,
    /// Whether the aggregator knows the exact ops as they are now.
    told: bool,
}

impl Session {
    /// Takes the exact rows' traps per process and op (every beat while
    /// the cycle can switch; `sampled` sums them with the others'), those
    /// of the ops still exact.
    pub(super) fn exact_read(&mut self, mut traps: ExactTraps, now: Instant) {
        traps.retain(|(_, op), _| !self.exact.joined.contains(op));
        self.exact.rates.read(now.duration_since(self.opened), traps);
    }

    /// At an off switch (the sampled links closed): the exact ops some
    /// process called over its share of the budget join the sampled rows.
    /// Returns their old links, to close with the sampled ones.
    pub(super) fn exact_join_hot(&mut self) -> Vec<aya::programs::uprobe::UProbeLink> {
        let budget = match self.duty.mode {
            Mode::Auto { budget_hz } => budget_hz,
            _ => DEFAULT_BUDGET_HZ,
        };
        let hot = self.exact.rates.hot(budget);
        if hot.is_empty() {
            return Vec::new();
        }
        let names: Vec<String> = hot.iter().map(|op| op_name(*op)).collect();
        let why = format!(
            "{:.1} s, over {:.0} traps a second",
            self.opened.elapsed().as_secs_f64(),
            EXACT_SHARE * budget
        );
        log::info!("{} join the sampled rows ({why})", names.join(", "));
        let links = self.planner.join_sampled(&mut self.ebpf, &hot, why);
        self.exact.joined.extend(hot);
        self.exact.told = false;
        links
    }

    /// Tells the aggregator which ops are counted exactly, when the cycle
    /// can switch: at the first beat, and after ops joined the sampled rows
    /// (before the interval whose off part is theirs).
    pub(super) fn exact_tell(&mut self, agg: &mut Aggregator) {
        if self.exact.told || !self.duty.cycles() {
            return;
        }
        self.exact.told = true;
        let ops: Vec<String> = uapi::TABLE
            .iter()
            .enumerate()
            .map(|(i, r)| (uapi::op_of(i), r))
            .filter(|(op, r)| r.group() == Group::Exact && !self.exact.joined.contains(op))
            .map(|(op, _)| op_name(op))
            .collect();
        agg.exact_rows(&ops);
    }
}

/// What one read of the rows says of the sampled and exact rows.
#[derive(Default)]
pub(super) struct Sampled {
    /// Counted traps per process (calls times the row's traps per call: a
    /// copy keeps its return probe).
    pub(super) traps: BTreeMap<u32, u64>,
    /// Counted calls per op, all processes (which links to attach last).
    pub(super) heat: BTreeMap<u32, u64>,
    /// The exact rows' traps per (process, op).
    pub(super) exact: ExactTraps,
}

pub(super) fn sampled(rows: &[(AggKey, AggValue)]) -> Sampled {
    let mut s = Sampled::default();
    for (k, v) in rows {
        let Some((_, r)) = uapi::row_of(k.op) else { continue };
        let group = r.group();
        if matches!(group, Group::Sampled | Group::Exact) {
            let traps = v.calls * r.traps_per_call();
            *s.traps.entry(k.tgid).or_default() += traps;
            *s.heat.entry(k.op).or_default() += v.calls;
            if group == Group::Exact {
                *s.exact.entry((k.tgid, k.op)).or_default() += traps;
            }
        }
    }
    s
}
