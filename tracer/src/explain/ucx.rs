//! The explain rules about UCX (registered in `RULES`): what UCX's paths,
//! registrations and cache show, with the process's environment.
use std::collections::BTreeMap;

use super::*;
use crate::classify::{
    path::{OpClass, Path, PeerKind},
    ucx::{UcxProcess, tls_excludes},
};

fn ucx_processes(r: &Report) -> &[UcxProcess] {
    r.ucx.as_ref().map_or(&[], |u| &u.processes)
}

fn env_of(r: &Report, pid: u32) -> BTreeMap<String, String> {
    process(r, pid).map(|p| p.env.clone()).unwrap_or_default()
}

fn calls(r: &Report, pid: u32, op: &str) -> u64 {
    process(r, pid).map_or(0, |p| p.calls.get(op).copied().unwrap_or(0))
}

/// Host-staged GPU paths of a UCX process (its endpoints' and what it served).
fn staged_gpu<'a>(r: &'a Report, up: &UcxProcess) -> Vec<&'a Path> {
    r.paths
        .iter()
        .filter(|p| {
            p.pid == up.pid
                && p.host_staged
                && p.memory == "cuda"
                && matches!(p.peer_kind, PeerKind::UcxEndpoint | PeerKind::Remote)
        })
        .collect()
}

fn describe(p: &Path) -> String {
    format!(
        "{}: {} memory went {} via {} ({} bytes staged through host memory)",
        p.label(),
        p.memory,
        p.transport.name(),
        p.via,
        p.staged_bytes
    )
}

/// GETs or PUTs on GPU memory that UCX emulated in software over a host
/// transport while cuda_ipc was set up (the path's cause says so).
pub fn emulated_rma(r: &Report) -> Hits {
    let mut out = Vec::new();
    for up in ucx_processes(r) {
        for p in staged_gpu(r, up).into_iter().filter(|p| {
            matches!(p.op, OpClass::Get | OpClass::Put | OpClass::Served) && p.via.ends_with("(software emulation)")
        }) {
            let mut ev = vec![describe(p)];
            ev.extend(p.evidence.iter().filter(|e| e.contains("CUDA IPC")).cloned());
            if let Some(l) = &p.log {
                ev.push(format!(
                    "UCX's log ({}): {}",
                    if l.agrees { "agrees" } else { "disagrees" },
                    l.ucx_says
                ));
            }
            let log = r.ucx.as_ref().and_then(|u| u.log.as_ref());
            if let Some(v) = log
                .into_iter()
                .flat_map(|l| &l.processes)
                .find(|l| l.pid == up.pid)
                .and_then(|l| l.version.as_ref())
            {
                ev.push(format!("UCX {v}"));
            }
            out.push((up.pid, ev));
        }
    }
    out
}

pub fn tls_excludes_direct(r: &Report) -> Hits {
    let rdma_nic = !r.facts.rdma_devices.is_empty();
    let mut out = Vec::new();
    for up in ucx_processes(r) {
        let staged = staged_gpu(r, up);
        let envm = env_of(r, up.pid);
        let (Some(first), Some(tls)) = (staged.first(), envm.get("UCX_TLS")) else {
            continue;
        };
        let mut ev: Vec<String> = [
            ("cuda_ipc", "CUDA IPC between the GPUs of one node", true),
            ("rc_mlx5", "rc, GPUDirect RDMA through the NIC", rdma_nic),
            ("dc_mlx5", "dc, GPUDirect RDMA through the NIC", rdma_nic),
        ]
        .into_iter()
        .filter(|(tl, _, relevant)| *relevant && tls_excludes(&envm, tl) == Some(true))
        .map(|(tl, what, _)| format!("UCX_TLS={tls} in the process environment excludes {tl} ({what})"))
        .collect();
        if ev.is_empty() {
            continue;
        }
        ev.push(describe(first));
        out.push((up.pid, ev));
    }
    out
}

pub fn cuda_ipc_unavailable(r: &Report) -> Hits {
    let mut out = Vec::new();
    for up in ucx_processes(r) {
        let pid = up.pid;
        let envm = env_of(r, pid);
        let Some(first) = staged_gpu(r, up).into_iter().next() else {
            continue;
        };
        if tls_excludes(&envm, "cuda_ipc") == Some(true) {
            continue;
        }
        let ipc: u64 = [
            "cuIpcGetMemHandle",
            "cuIpcOpenMemHandle",
            "cuMemExportToShareableHandle",
            "cuMemImportFromShareableHandle",
        ]
        .iter()
        .map(|op| calls(r, pid, op))
        .sum();
        if ipc > 0 {
            continue;
        }
        let mut ev = vec![
            match envm.get("UCX_TLS") {
                Some(v) => format!("UCX_TLS={v} allows cuda_ipc"),
                None => "UCX_TLS is not set: every transport, cuda_ipc included, is allowed".into(),
            },
            "no CUDA IPC handle was exported or opened (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuMem export/import: 0 calls)".into(),
            describe(first),
        ];
        let modules = &up.modules;
        if !modules.is_empty() && !modules.iter().any(|m| m.starts_with("libuct_cuda")) {
            ev.push(format!(
                "UCX's CUDA transport module (libuct_cuda) is not loaded; the process maps {}",
                modules.join(", ")
            ));
        }
        if r.facts.nvlink == Some(false) {
            ev.push("no NVLink joins the GPUs (topology): peer access, if any, is over PCIe".into());
        }
        let log = r.ucx.as_ref().and_then(|u| u.log.as_ref());
        for l in log.into_iter().flat_map(|l| &l.processes).filter(|l| l.pid == pid) {
            ev.extend(
                l.warnings
                    .iter()
                    .filter(|w| w.contains("cuda_ipc") || w.contains("cuIpc") || w.contains("peer"))
                    .map(|w| format!("UCX log: {w}")),
            );
        }
        out.push((pid, ev));
    }
    out
}

pub fn gpu_rdma_without_peer_memory(r: &Report) -> Hits {
    if peer_client(r) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for up in ucx_processes(r) {
        let pid = up.pid;
        let mut ev: Vec<String> = staged_gpu(r, up)
            .into_iter()
            .filter(|p| p.via.ends_with("rc/ud"))
            .map(describe)
            .collect();
        if let Some(reg) = registration(r).iter().find(|x| x.pid == pid) {
            if registrations(reg, "gpu/dma-buf") > 0 {
                continue;
            }
            ev.extend(
                reg.failed_registrations
                    .iter()
                    .filter(|f| matches!(f.backing, crate::model::Backing::Gpu { .. }))
                    .map(|f| format!("{} on GPU memory {:#x}+{} failed", f.op, f.addr, f.length)),
            );
        }
        if ev.is_empty() {
            continue;
        }
        ev.extend(peer_client_evidence(r));
        out.push((pid, ev));
    }
    out
}

fn off(v: &str) -> bool {
    matches!(v.to_ascii_lowercase().as_str(), "n" | "no" | "0" | "off" | "false")
}

fn counts(up: &UcxProcess) -> String {
    format!(
        "{} UCT registrations and {} deregistrations for {} data calls ({}); {} rcache lookups, {} misses",
        up.registrations,
        up.deregistrations,
        up.data_calls,
        up.registrations_per_data_call
            .filter(|x| x.is_finite())
            .map_or("no data calls".to_string(), |x| format!("{x:.2} per call")),
        up.rcache.gets,
        up.rcache.misses
    )
}

pub fn rcache_disabled(r: &Report) -> Hits {
    let mut out = Vec::new();
    for up in ucx_processes(r) {
        let Some(p) = process(r, up.pid) else { continue };
        let mut ev = Vec::new();
        if let Some(v) = env(p, "UCX_RCACHE_ENABLE").filter(|v| off(v)) {
            ev.push(format!(
                "UCX_RCACHE_ENABLE={v} in the process environment: UCX's own registration cache is off"
            ));
        }
        if let Some(v) = env(p, "UCX_IB_REG_METHODS").filter(|v| !v.split(',').any(|m| m.trim() == "rcache")) {
            ev.push(format!(
                "UCX_IB_REG_METHODS={v} in the process environment: the InfiniBand memory domain registers without its cache"
            ));
        }
        if ev.is_empty() || up.registrations == 0 {
            continue;
        }
        ev.push(counts(up));
        out.push((up.pid, ev));
    }
    out
}

pub fn rcache_thrashing(r: &Report) -> Hits {
    let mut out = Vec::new();
    for up in ucx_processes(r) {
        let c = &up.rcache;
        let (gets, misses, repeat) = (c.gets, c.misses, c.repeat_misses);
        if gets < 8 || misses * 2 < gets || repeat < 4 {
            continue;
        }
        out.push((
            up.pid,
            vec![
                format!(
                    "{gets} registration-cache lookups, {misses} misses (hit rate {:.0}%), {repeat} misses of ranges that had missed before: their regions were evicted or invalidated in between",
                    (gets - misses) as f64 * 100.0 / gets as f64
                ),
                counts(up),
            ],
        ));
    }
    out
}

/// UCX registering on its transfers, where the registrations reached a
/// NIC (verbs MRs) or the cache was switched off: (pid, what).
pub fn registering_paths(r: &Report) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for up in ucx_processes(r) {
        let pid = up.pid;
        let per = up.registrations_per_data_call.filter(|x| x.is_finite()).unwrap_or(0.0);
        if per < 0.5 || up.data_calls < 4 {
            continue;
        }
        let nic = registration(r).iter().any(|x| {
            x.pid == pid
                && x.by_backing
                    .iter()
                    .any(|(k, v)| *k != "io_uring" && v.registrations > 0)
        });
        let off = process(r, pid)
            .is_some_and(|p| env(p, "UCX_RCACHE_ENABLE").is_some_and(off) || env(p, "UCX_IB_REG_METHODS").is_some());
        if nic || off {
            out.push((
                pid,
                format!(
                    "UCX registers memory on its transfers: {} UCT registrations for {} data calls ({per:.2} per call)",
                    up.registrations, up.data_calls
                ),
            ));
        }
    }
    out
}
