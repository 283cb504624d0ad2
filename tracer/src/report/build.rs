//! The report of an aggregator: each section from what the aggregator
//! holds and the inputs besides it (`Inputs`), before any judgement
//! (`judged.rs`).
use tracer_common::MAX_SLOTS;

use super::{
    Bucket, Collective, Counted, Inputs, KernelHistogram, Latency, Operation, Override, ProbeHits, Process, Report,
    SCHEMA, accounting, serialize_hist, signals,
};
use crate::{probes::ops::op_name, stats::Aggregator};

pub fn build(agg: &Aggregator, inputs: Inputs) -> Report {
    let incomplete = !inputs.loss.complete;
    let signals = signals(&inputs.coverage, inputs.pins.delta.is_some());
    Report {
        schema: SCHEMA,
        tool_version: crate::version::VERSION,
        host: inputs.host,
        command: inputs.command,
        duration_s: inputs.duration_s,
        signals,
        operations: operations(agg, incomplete),
        kernel_histograms: kernel_histograms(&inputs.kernel_slots),
        probe_hits: inputs
            .probe_hits
            .iter()
            .map(|(op, hits)| ProbeHits {
                op: op_name(*op),
                hits: *hits,
            })
            .collect(),
        processes: processes(agg, &inputs.process_libraries),
        pin_counters: inputs.pins,
        loss: inputs.loss,
        coverage: inputs.coverage,
        verdicts: Vec::new(),
        paths: Vec::new(),
        windows: agg.windows(),
        collectives: collectives(agg),
        sampling: (agg.duty_totals().off_us > 0).then_some(agg.duty_totals()),
        transfers: accounting::transfers(agg),
        staging: accounting::Staging::default(),
        registration: accounting::registration(agg, inputs.duration_s),
        facts: inputs.facts,
        overrides: overrides(agg),
        nccl_log: None,
        nccl_ras: agg.nccl_ras_answer().cloned(),
        explain: Default::default(),
        workloads: Vec::new(),
        gpu_links: inputs.gpu_links,
        ucx: crate::stats::ucx::report(agg, &inputs.process_libraries),
        gds: crate::stats::gds::report(agg),
        judged: false,
    }
}

/// One row per (operation, transport) the aggregator saw.
fn operations(agg: &Aggregator, incomplete: bool) -> Vec<Operation> {
    agg.ops()
        .iter()
        .map(|(k, s)| Operation {
            name: k.op.clone(),
            family: s.family,
            transport: k.transport.name(),
            calls: s.calls,
            errors: s.errors,
            bytes: s.bytes,
            pages: s.pages,
            evidence: s.evidence.clone(),
            incomplete,
            latency: Latency::from_hist(&s.hist),
            histogram: serialize_hist(&s.hist),
            counted: agg.copies().counted_calls(&k.op, k.transport),
            lower_bound: agg.copies_lower_bound(&k.op, k.transport),
        })
        .collect()
}

/// The kernel's log2 latency slots of each op that has any.
fn kernel_histograms(kernel_slots: &std::collections::BTreeMap<u32, Vec<u64>>) -> Vec<KernelHistogram> {
    kernel_slots
        .iter()
        .filter(|(_, slots)| slots.iter().any(|&c| c > 0))
        .map(|(op_code, slots)| KernelHistogram {
            name: op_name(*op_code),
            calls: slots.iter().sum(),
            unit: "ns",
            buckets: slots
                .iter()
                .enumerate()
                .filter(|(_, c)| **c > 0)
                .map(|(i, c)| Bucket {
                    min: 1u64 << i,
                    max: if i as u32 == MAX_SLOTS - 1 {
                        u64::MAX
                    } else {
                        1u64 << (i + 1)
                    },
                    count: *c,
                })
                .collect(),
        })
        .collect()
}

/// Every traced process, with its registrations' churn and its libraries.
fn processes(
    agg: &Aggregator,
    libraries: &std::collections::BTreeMap<u32, Vec<crate::probes::planner::ProcessLibrary>>,
) -> Vec<Process> {
    agg.procs()
        .iter()
        .map(|(pid, p)| Process {
            pid: *pid,
            info: p.clone(),
            churn: agg.registry().procs.get(pid).map(|r| r.churn.clone()),
            libraries: libraries.get(pid).cloned().unwrap_or_default(),
        })
        .collect()
}

/// The kernel-aggregated collectives per process and communicator, with
/// the identity its ranks share; as counted where the duty cycle's
/// estimate differs. UCX's data calls are aggregated the same way; they
/// are reported per endpoint in the UCX section.
fn collectives(agg: &Aggregator) -> Vec<Collective> {
    agg.collectives()
        .iter()
        .filter(|((_, op, _), _)| !crate::classify::ucx::is_data_op(op))
        .map(|(key, (calls, bytes))| {
            let (pid, op, handle) = key;
            let counted = agg
                .collectives_counted()
                .get(key)
                .filter(|c| **c != (*calls, *bytes))
                .map(|(calls, bytes)| Counted {
                    calls: *calls,
                    bytes: *bytes,
                });
            let communicator = format!("{handle:#x}");
            let ident = agg.communicator(*pid, *handle);
            Collective {
                pid: *pid,
                op: op.clone(),
                communicator,
                calls: *calls,
                bytes: *bytes,
                transport: "unknown",
                counted,
                lower_bound: agg.lower_bound(key),
                comm_id: ident.and_then(|c| c.comm_id.clone()),
                rank: ident.and_then(|c| c.rank),
                nranks: ident.and_then(|c| c.nranks),
            }
        })
        .collect()
}

/// The NCCL_* and UCX_* variables each process set that change how it
/// communicates.
fn overrides(agg: &Aggregator) -> Vec<Override> {
    agg.procs()
        .iter()
        .flat_map(|(pid, p)| {
            p.env
                .iter()
                .filter(|(k, _)| (k.starts_with("NCCL_") || k.starts_with("UCX_")) && !informational(k))
                .map(|(k, v)| Override {
                    pid: *pid,
                    var: k.clone(),
                    value: v.clone(),
                })
        })
        .collect()
}

/// Variables that describe rather than change communication.
fn informational(var: &str) -> bool {
    matches!(
        var,
        "NCCL_VERSION" | "NCCL_DEBUG" | "NCCL_DEBUG_FILE" | "NCCL_DEBUG_SUBSYS" | "UCX_LOG_LEVEL"
    )
}
