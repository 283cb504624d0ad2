use std::collections::BTreeMap;

use serde_json::Value;

use super::tls_excludes;
use crate::classify::explain::{
    Hits, arr, env, peer_client, peer_client_evidence, pid_of, process, registration, s, u,
};

fn ucx_processes(r: &Value) -> &[Value] {
    arr(&r["ucx"]["processes"])
}

fn env_of(r: &Value, pid: u32) -> BTreeMap<String, String> {
    process(r, pid)
        .and_then(|p| p["env"].as_object())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn calls(r: &Value, pid: u32, op: &str) -> u64 {
    process(r, pid).map_or(0, |p| u(&p["calls"][op]))
}

/// Host-staged GPU paths of a UCX process.
fn staged_gpu(up: &Value) -> Vec<&Value> {
    arr(&up["paths"])
        .iter()
        .filter(|p| p["host_staged"] == true && s(&p["memory"]) == "cuda")
        .collect()
}

fn describe(p: &Value) -> String {
    format!(
        "{} memory went {} via {} ({} bytes staged through host memory)",
        s(&p["memory"]),
        s(&p["transport"]),
        s(&p["path"]),
        u(&p["staged_bytes"])
    )
}

pub fn tls_excludes_direct(r: &Value) -> Hits {
    let rdma_nic = !arr(&r["facts"]["rdma_devices"]).is_empty();
    let mut out = Vec::new();
    for up in ucx_processes(r) {
        let pid = pid_of(up);
        let staged = staged_gpu(up);
        let envm = env_of(r, pid);
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
        out.push((pid, ev));
    }
    out
}

pub fn cuda_ipc_unavailable(r: &Value) -> Hits {
    let mut out = Vec::new();
    for up in ucx_processes(r) {
        let pid = pid_of(up);
        let envm = env_of(r, pid);
        let Some(first) = staged_gpu(up).into_iter().next() else {
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
        let modules: Vec<&str> = arr(&up["modules"]).iter().map(s).collect();
        if !modules.is_empty() && !modules.iter().any(|m| m.starts_with("libuct_cuda")) {
            ev.push(format!(
                "UCX's CUDA transport module (libuct_cuda) is not loaded; the process maps {}",
                modules.join(", ")
            ));
        }
        if r["facts"]["nvlink"] == false {
            ev.push("no NVLink joins the GPUs (topology): peer access, if any, is over PCIe".into());
        }
        for l in arr(&r["ucx"]["log"]["processes"]).iter().filter(|l| pid_of(l) == pid) {
            ev.extend(
                arr(&l["warnings"])
                    .iter()
                    .map(s)
                    .filter(|w| w.contains("cuda_ipc") || w.contains("cuIpc") || w.contains("peer"))
                    .map(|w| format!("UCX log: {w}")),
            );
        }
        out.push((pid, ev));
    }
    out
}

pub fn gpu_rdma_without_peer_memory(r: &Value) -> Hits {
    if peer_client(r) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for up in ucx_processes(r) {
        let pid = pid_of(up);
        let mut ev: Vec<String> = staged_gpu(up)
            .into_iter()
            .filter(|p| s(&p["path"]).ends_with("rc/ud"))
            .map(describe)
            .collect();
        if let Some(reg) = registration(r).iter().find(|x| pid_of(x) == pid) {
            if u(&reg["by_backing"]["gpu/dma-buf"]["registrations"]) > 0 {
                continue;
            }
            ev.extend(
                arr(&reg["failed_registrations"])
                    .iter()
                    .filter(|f| f["backing"].get("gpu").is_some())
                    .map(|f| {
                        format!(
                            "{} on GPU memory {:#x}+{} failed",
                            s(&f["op"]),
                            u(&f["addr"]),
                            u(&f["length"])
                        )
                    }),
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

fn counts(up: &Value) -> String {
    format!(
        "{} UCT registrations and {} deregistrations for {} data calls ({}); {} rcache lookups, {} misses",
        u(&up["registrations"]),
        u(&up["deregistrations"]),
        u(&up["data_calls"]),
        up["registrations_per_data_call"]
            .as_f64()
            .map_or("no data calls".to_string(), |x| format!("{x:.2} per call")),
        u(&up["rcache"]["gets"]),
        u(&up["rcache"]["misses"])
    )
}

pub fn rcache_disabled(r: &Value) -> Hits {
    let mut out = Vec::new();
    for up in ucx_processes(r) {
        let pid = pid_of(up);
        let Some(p) = process(r, pid) else { continue };
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
        if ev.is_empty() || u(&up["registrations"]) == 0 {
            continue;
        }
        ev.push(counts(up));
        out.push((pid, ev));
    }
    out
}

pub fn rcache_thrashing(r: &Value) -> Hits {
    let mut out = Vec::new();
    for up in ucx_processes(r) {
        let c = &up["rcache"];
        let (gets, misses, repeat) = (u(&c["gets"]), u(&c["misses"]), u(&c["repeat_misses"]));
        if gets < 8 || misses * 2 < gets || repeat < 4 {
            continue;
        }
        out.push((
            pid_of(up),
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

/// The UCX paths and what UCX's log said of them, for `explain`.
pub fn explain_text(r: &Value) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let procs = ucx_processes(r);
    if procs.is_empty() {
        return o;
    }
    let _ = writeln!(o, "\nUCX paths");
    for up in procs {
        for p in arr(&up["paths"]) {
            let log = match p["log"]["agrees"].as_bool() {
                Some(a) => format!(
                    "; UCX log: {} ({})",
                    s(&p["log"]["ucx_says"]),
                    if a { "agrees" } else { "DISAGREES" }
                ),
                None => String::new(),
            };
            let _ = writeln!(
                o,
                "  pid {} {}: {} memory {} via {}{log}",
                pid_of(up),
                s(&up["comm"]),
                s(&p["memory"]),
                s(&p["transport"]),
                s(&p["path"])
            );
        }
    }
    o
}

/// UCX registering on its transfers, where the registrations reached a
/// NIC (verbs MRs) or the cache was switched off: (pid, what).
pub fn registering_paths(r: &Value) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for up in ucx_processes(r) {
        let pid = pid_of(up);
        let per = up["registrations_per_data_call"].as_f64().unwrap_or(0.0);
        if per < 0.5 || u(&up["data_calls"]) < 4 {
            continue;
        }
        let nic = registration(r).iter().any(|x| {
            pid_of(x) == pid
                && x["by_backing"]
                    .as_object()
                    .is_some_and(|b| b.iter().any(|(k, v)| k != "io_uring" && u(&v["registrations"]) > 0))
        });
        let off = process(r, pid)
            .is_some_and(|p| env(p, "UCX_RCACHE_ENABLE").is_some_and(off) || env(p, "UCX_IB_REG_METHODS").is_some());
        if nic || off {
            out.push((
                pid,
                format!(
                    "UCX registers memory on its transfers: {} UCT registrations for {} data calls ({per:.2} per call)",
                    u(&up["registrations"]),
                    u(&up["data_calls"])
                ),
            ));
        }
    }
    out
}
