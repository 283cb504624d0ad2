//! The UCX section of the aggregate: what the UCX tracker collected per
//! process, with the kernel-aggregated data calls per endpoint (paths are
//! decided later, by the judge).
use std::collections::BTreeMap;

use super::Aggregator;
use crate::{
    classify::{
        Transport,
        ucx::{
            Rcache, State, Tracker, UcxEndpoint, UcxProcess, UcxReport, is_data_op, is_receive, is_ucx_op, memory_of,
        },
    },
    probes::uapi::Lib,
};

/// The UCX view of one process so far (None: no UCX activity). A process
/// that maps libucp counts too when it moved bytes (copies or sockets)
/// though no UCX call was seen: attached after its set-up, its data calls
/// not (yet) counted, its paths come from the steady state.
pub fn process(t: &Tracker, agg: &Aggregator, pid: u32, maps_ucx: bool) -> Option<UcxProcess> {
    let p = agg.procs.get(&pid)?;
    let ucx_calls = p.calls.keys().any(|k| is_ucx_op(k));
    let s = t.procs.get(&pid);
    let moved = s.is_some_and(|s| s.copies.total() > 0) || p.socket.bytes_sent + p.socket.bytes_received > 0;
    if !ucx_calls && !(maps_ucx && moved) && s.is_none_or(|s| s.workers + s.endpoints + s.regs + s.gets == 0) {
        return None;
    }
    let default = State::default();
    let s = s.unwrap_or(&default);
    let (mut data_calls, mut data_bytes, mut receives, mut receive_bytes) = (0, 0, 0, 0);
    for ((p2, op, _), (calls, bytes)) in &agg.collectives {
        if *p2 != pid || !is_data_op(op) {
            continue;
        }
        if is_receive(op) {
            receives += calls;
            receive_bytes += bytes;
        } else {
            data_calls += calls;
            data_bytes += bytes;
        }
    }
    Some(UcxProcess {
        pid,
        comm: p.comm.clone(),
        workers: s.workers,
        endpoints: s.endpoints,
        mem_maps: s.mem_maps,
        mem_unmaps: s.mem_unmaps,
        registrations: s.regs,
        deregistrations: s.deregs,
        registered_bytes: s.reg_bytes,
        registrations_by_memory: s.regs_by_memory.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        rcache: Rcache {
            gets: s.gets,
            misses: s.misses,
            repeat_misses: s.repeat_misses,
            partial: t.setup_closed,
        },
        data_calls,
        data_bytes,
        receives,
        receive_bytes,
        registrations_per_data_call: (data_calls > 0).then(|| s.regs as f64 / data_calls as f64),
        copies: s.copies.clone(),
        modules: Vec::new(),
        traced_from_start: !agg.attached_running(pid),
    })
}

/// The data rows of a process: (op, handle, calls, bytes, memory).
fn endpoints_of(t: &Tracker, agg: &Aggregator, u: &UcxProcess) -> Vec<UcxEndpoint> {
    let s = t.procs.get(&u.pid);
    let gpu_seen = agg.registry.procs.get(&u.pid).is_some_and(|r| r.gpu_allocations > 0);
    agg.collectives
        .iter()
        .filter(|((pid, op, _), _)| *pid == u.pid && is_data_op(op))
        .map(|((pid, op, handle), (calls, bytes))| {
            let sample = s.and_then(|s| {
                s.samples
                    .iter()
                    .find(|((name, h), _)| name == op && h == handle)
                    .map(|(_, b)| *b)
            });
            // Outside every GPU allocation of a process traced from its
            // start that made none: host memory.
            let memory = match sample.map(memory_of) {
                Some("unknown") | None if u.traced_from_start && !gpu_seen && u.copies.total() == 0 => "host",
                Some(m) => m,
                None => "unknown",
            };
            UcxEndpoint {
                pid: *pid,
                op: op.clone(),
                endpoint: format!("{handle:#x}"),
                calls: *calls,
                bytes: *bytes,
                memory: memory.to_string(),
                transport: Transport::Unknown,
                via: "unknown".into(),
            }
        })
        .collect()
}

/// Why things are not measured, as the report says.
fn not_measured() -> Vec<String> {
    vec![
        "completion latency of UCX data calls: the calls are entry-only and aggregated in the kernel (a return probe and a request map per call would cost more than the calls); ucx_perftest and UCX_PROTO_INFO report their own".into(),
        "per-endpoint transport evidence within one tick: copies and socket bytes are seen per process and tick, so two endpoints busy in the same ticks share their evidence (their paths are then ambiguous, not direct: docs/paths.md)".into(),
    ]
}

/// The report's UCX section from the aggregator (paths are filled in by
/// `report::judged`); None when no traced process used UCX.
pub fn report(
    agg: &Aggregator,
    libraries: &BTreeMap<u32, Vec<crate::probes::planner::ProcessLibrary>>,
) -> Option<UcxReport> {
    let mut processes = Vec::new();
    let mut endpoints = Vec::new();
    for pid in agg.procs.keys() {
        let maps_ucx = libraries.get(pid).is_some_and(|l| {
            l.iter()
                .any(|l| l.lib == Lib::Ucp && l.status == crate::probes::Status::Attached)
        });
        let Some(mut u) = process(&agg.ucx, agg, *pid, maps_ucx) else {
            continue;
        };
        // Registrations outside every GPU allocation of a process traced
        // from its start that made none covered host memory.
        let gpu_seen = agg.registry.procs.get(pid).is_some_and(|r| r.gpu_allocations > 0);
        if u.traced_from_start
            && !gpu_seen
            && let Some(n) = u.registrations_by_memory.remove("unknown")
        {
            *u.registrations_by_memory.entry("host".into()).or_default() += n;
        }
        u.modules = libraries
            .get(pid)
            .and_then(|l| l.iter().find(|l| l.lib == Lib::Uct))
            .map(|l| l.modules.clone())
            .unwrap_or_default();
        endpoints.extend(endpoints_of(&agg.ucx, agg, &u));
        processes.push(u);
    }
    (!processes.is_empty()).then(|| UcxReport {
        processes,
        endpoints,
        not_measured: not_measured(),
        log: None,
    })
}
