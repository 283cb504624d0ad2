//! Recordings (`--record FILE`, schema `gdrtrace.recording/v1`, described in
//! docs/recording.md): the aggregator's whole input as JSON lines, so that
//! `gdrtrace replay` rebuilds the report through the same aggregator,
//! classification and report code.
//!
//! A recording is a header, then inputs in the order the aggregator received
//! them (`event`, `target`, `tick`, `alive-check`, `aggregates`, `duty`,
//! `setup-closed`), each input
//! followed by the process facts the live source answered while it was
//! handled (`process`, `env`, `sample`, `gone`), then a footer (loss,
//! coverage, pin counters, duration) and, optionally, a `workloads` line.
//! Every line is a typed record (serde derive, `codec.rs`): written with
//! its `type`, read back by it.
use std::{
    collections::BTreeMap,
    io::{BufWriter, Write as _},
    path::Path,
};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracer_common::{AggKey, AggValue, Event};

use crate::{
    error::{Error, Result},
    host::{Host, HostFacts, monotonic_ns},
    output::StreamFile,
    probes::{
        Coverage,
        ops::{op_code, op_name},
        planner::ProcessLibrary,
    },
    report::{Inputs, Loss, PinCounters},
    stats::{
        Aggregator,
        feed::{Input, Observer},
        source::Fact,
    },
};

pub const SCHEMA: &str = "gdrtrace.recording/v1";
/// Schema family: a recording `gdrtrace.recording/vN` with N > 1 is newer
/// than this build.
const SCHEMA_PREFIX: &str = "gdrtrace.recording/v";

/// The first line.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Header {
    pub schema: String,
    pub tool_version: String,
    pub host: Host,
    pub facts: HostFacts,
    /// The clock of every `*_ns` field (`CLOCK_MONOTONIC`), and its value at the start.
    pub clock: String,
    pub started_ns: u64,
    /// The `ncclCommInitRank*` events carry the hashes of the id the rank
    /// passed in `args[4]` and `args[5]` (0 where it was not read). Absent
    /// (false) in recordings before 2026-12-06, whose id slots may hold
    /// what the registers held (the tracer read no id before 2026-12-02):
    /// they are read as unread.
    #[serde(default)]
    pub nccl_id_hashes: bool,
}

impl Header {
    /// The header of a recording starting now, on this machine.
    pub fn now() -> Self {
        Header {
            schema: SCHEMA.into(),
            tool_version: crate::version::VERSION.into(),
            host: crate::host::host(),
            facts: HostFacts::read(),
            clock: "CLOCK_MONOTONIC".into(),
            started_ns: monotonic_ns(),
            nccl_id_hashes: true,
        }
    }
}

/// The footer of a trace, from the report inputs the trace gathered.
pub fn footer(inputs: &Inputs, agg: &Aggregator, events: u64) -> Footer {
    Footer {
        command: inputs.command.clone(),
        duration_s: inputs.duration_s,
        events,
        loss: inputs.loss.clone(),
        pin_counters: inputs.pins.clone(),
        coverage: inputs.coverage.clone(),
        kernel_slots: inputs
            .kernel_slots
            .iter()
            .map(|(code, slots)| Slots {
                op: op_name(*code),
                op_code: *code,
                slots: slots.clone(),
            })
            .collect(),
        process_libraries: inputs.process_libraries.clone(),
        vm_pin_kib_at_attach: agg.vm_pins_at_attach(),
        gpu_links: inputs.gpu_links.clone(),
        probe_hits: inputs
            .probe_hits
            .iter()
            .map(|(op, hits)| crate::report::ProbeHits {
                op: op_name(*op),
                hits: *hits,
            })
            .collect(),
        fabric: inputs.fabric.clone(),
    }
}

/// The report inputs a recording's header and footer hold.
pub fn inputs_of(header: &Header, footer: &Footer) -> Inputs {
    Inputs {
        command: footer.command.clone(),
        gpu_links: footer.gpu_links.clone(),
        host: header.host.clone(),
        facts: header.facts.clone(),
        duration_s: footer.duration_s,
        coverage: footer.coverage.clone(),
        loss: footer.loss.clone(),
        kernel_slots: footer
            .kernel_slots
            .iter()
            .map(|s| (op_code(&s.op).unwrap_or(s.op_code), s.slots.clone()))
            .collect(),
        pins: footer.pin_counters.clone(),
        process_libraries: footer.process_libraries.clone(),
        probe_hits: footer
            .probe_hits
            .iter()
            .filter_map(|h| Some((op_code(&h.op)?, h.hits)))
            .collect(),
        fabric: footer.fabric.clone(),
    }
}

/// In-kernel log2 slots of one op.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Slots {
    pub op: String,
    pub op_code: u32,
    pub slots: Vec<u64>,
}

/// The last line of the trace (before an optional `workloads` line).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Footer {
    pub command: Vec<String>,
    pub duration_s: f64,
    /// Events written (a truncated file has fewer lines than this).
    pub events: u64,
    pub loss: Loss,
    pub pin_counters: PinCounters,
    pub coverage: Vec<Coverage>,
    pub kernel_slots: Vec<Slots>,
    #[serde(default)]
    pub process_libraries: BTreeMap<u32, Vec<ProcessLibrary>>,
    /// `VmPin` at attach, per process (`attach`).
    #[serde(default)]
    pub vm_pin_kib_at_attach: BTreeMap<u32, u64>,
    /// GPU interconnect traffic over the window (steady-state evidence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_links: Option<crate::counters::GpuLinks>,
    /// Probe entries per op.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probe_hits: Vec<crate::report::ProbeHits>,
    /// Port counters over the window, the RDMA devices processes held,
    /// unattributed TCP retransmissions.
    #[serde(default)]
    pub fabric: crate::report::fabric::FabricInputs,
}

/// A strategy's name in this build (`unknown` for one it does not have).
fn strategy(name: &str) -> &'static str {
    crate::probes::catalog::Strategy::ALL
        .into_iter()
        .map(|s| s.name())
        .find(|s| *s == name)
        .unwrap_or("unknown")
}

mod codec;
mod reader;
mod writer;

#[cfg(test)]
mod tests;

pub use self::{
    codec::{
        AggRow, Aggregates, Clock, Count, Duty, EventLine, ExactRows, Hex, Line, Pid, Ret, Stepped, Target, TrapCost,
        Workloads, line_json,
    },
    reader::*,
    writer::*,
};
