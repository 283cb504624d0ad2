//! The rule table: each rule names what it reads of the report and the
//! cause it stands for; its check returns the findings per process.
use super::*;
use crate::{
    classify::comm::{LogProcess, Net, Plugin},
    model::Backing,
};

fn on_gpu(b: &Backing) -> bool {
    matches!(b, Backing::Gpu { .. })
}

/// NCCL's log per process (`nccl_log.processes[]`).
fn log_processes(r: &Report) -> &[LogProcess] {
    r.nccl_log.as_ref().map_or(&[], |l| &l.processes)
}

pub(super) fn no_peer_memory(r: &Report) -> Hits {
    if peer_client(r) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for reg in registration(r) {
        let mut ev = Vec::new();
        for f in &reg.failed_registrations {
            if f.op != "ibv_reg_dmabuf_mr" && on_gpu(&f.backing) {
                ev.push(format!(
                    "{} on GPU memory {:#x}+{} ({}) failed",
                    f.op,
                    f.addr,
                    f.length,
                    f.source.unwrap_or("allocation seen")
                ));
            }
        }
        if let Some(n) = reg.kernel_failures.get("ib_umem_get: EFAULT") {
            ev.push(format!(
                "ib_umem_get failed with EFAULT (Bad address) x{n}: the pages are not host memory it can pin"
            ));
        }
        if !ev.is_empty() {
            ev.extend(peer_client_evidence(r));
            out.push((reg.pid, ev));
        }
    }
    for p in log_processes(r) {
        let lines: Vec<String> = p
            .gdr_lines
            .iter()
            .filter(|l| l.contains("GPU Direct RDMA Disabled") && !l.contains("distance"))
            .map(|l| format!("NCCL log: {l}"))
            .collect();
        if !lines.is_empty() && !out.iter().any(|(pid, _)| *pid == p.pid) {
            let mut ev = lines;
            ev.extend(peer_client_evidence(r));
            out.push((p.pid, ev));
        }
    }
    out
}

pub(super) fn dmabuf_unsupported(r: &Report) -> Hits {
    let mut out = Vec::new();
    for reg in registration(r) {
        let mut ev = Vec::new();
        for f in &reg.failed_registrations {
            if f.op == "ibv_reg_dmabuf_mr" {
                ev.push(format!(
                    "ibv_reg_dmabuf_mr for GPU range {:#x}+{} failed",
                    f.addr, f.length
                ));
            }
        }
        for (k, n) in &reg.kernel_failures {
            if k.starts_with("ib_umem_dmabuf_get") {
                ev.push(format!("{k} x{n} in the kernel"));
            }
        }
        if !ev.is_empty() {
            out.push((reg.pid, ev));
        }
    }
    for p in log_processes(r) {
        let ev: Vec<String> = p
            .warnings
            .iter()
            .filter(|w| w.contains("ibv_reg_dmabuf_mr failed"))
            .map(|w| format!("NCCL log: WARN {w}"))
            .collect();
        if !ev.is_empty() {
            match out.iter_mut().find(|(pid, _)| *pid == p.pid) {
                Some((_, e)) => e.extend(ev),
                None => out.push((p.pid, ev)),
            }
        }
    }
    out
}

/// NCCL variables that switch a transport off, and whether a value does.
pub(super) fn forcing(var: &str, value: &str) -> Option<&'static str> {
    let off = |v: &str| v == "0" || v.eq_ignore_ascii_case("false");
    let on = |v: &str| !v.is_empty() && !off(v);
    match var {
        "NCCL_P2P_DISABLE" if on(value) => Some("disables peer-to-peer between GPUs (NVLink/PCIe P2P)"),
        "NCCL_SHM_DISABLE" if on(value) => Some("disables the shared-memory transport"),
        "NCCL_IB_DISABLE" if on(value) => Some("disables InfiniBand/RoCE: the network goes through sockets"),
        "NCCL_NET_GDR_LEVEL" | "NCCL_NET_GDR_LEVEL_INTERNAL" => {
            Some("limits GPUDirect RDMA to GPU-NIC paths up to this distance (LOC or 0 turns it off)")
        }
        "NCCL_DMABUF_ENABLE" if off(value) => Some("disables dma-buf registration of GPU memory"),
        "NCCL_P2P_LEVEL" => Some("limits P2P to GPU pairs up to this distance (LOC or 0 turns it off)"),
        "NCCL_NET_GDR_READ" if off(value) => Some("turns GPUDirect RDMA reads off: NCCL sends from host buffers"),
        "NCCL_NET" if value.eq_ignore_ascii_case("socket") => Some("selects the socket network transport"),
        _ => None,
    }
}

pub(super) fn nccl_env(r: &Report) -> Hits {
    let mut out = Vec::new();
    for p in &r.processes {
        if !uses_nccl(p) {
            continue;
        }
        let mut ev: Vec<String> = p
            .env
            .iter()
            .filter_map(|(k, v)| Some(format!("{k}={v} in the process environment: {}", forcing(k, v)?)))
            .collect();
        if ev.is_empty() {
            continue;
        }
        if let Some(v) = r.verdicts.iter().find(|v| v.pid == p.pid) {
            ev.push(format!("transport verdict: {}{}", v.transport.name(), net_of(v)));
            if let Some(why) = &v.other_hosts {
                ev.push(why.clone());
            }
        }
        out.push((p.pid, ev));
    }
    out
}

/// The NCCL log's view of one process (`nccl_log.processes[]`).
fn log_process(r: &Report, pid: u32) -> Option<&LogProcess> {
    log_processes(r).iter().find(|p| p.pid == pid)
}

/// The NCCL log's host identities, when its ranks have more than one: NCCL
/// counts them as different hosts (a report of one rank, whose peers were
/// traced elsewhere, learns it from the log).
fn log_hosts(r: &Report) -> Option<String> {
    let mut ids: Vec<String> = log_processes(r)
        .iter()
        .filter_map(|p| p.host_id.as_ref().map(|id| format!("NCCL_HOSTID={id} (pid {})", p.pid)))
        .collect();
    let distinct: std::collections::BTreeSet<&str> =
        log_processes(r).iter().filter_map(|p| p.host_id.as_deref()).collect();
    (distinct.len() > 1).then(|| {
        ids.truncate(8);
        format!("NCCL log: ranks on different hosts to NCCL: {}", ids.join(", "))
    })
}

/// Whether a variable in a process's environment forces `var`'s effect.
fn forced(p: &Process, var: &str) -> bool {
    env(p, var).is_some_and(|v| forcing(var, v).is_some())
}

pub(super) fn no_rdma_device(r: &Report) -> Hits {
    let mut out = Vec::new();
    for v in &r.verdicts {
        if v.transport != Transport::Socket {
            continue;
        }
        let pid = v.pid;
        let Some(p) = process(r, pid) else { continue };
        let inter_node = v.other_hosts.as_deref();
        // A variable chose the socket network, or ruled P2P and SHM out
        // between ranks of one host: `nccl-env-forced` names it.
        if forced(p, "NCCL_IB_DISABLE")
            || forced(p, "NCCL_NET")
            || (inter_node.is_none() && forced(p, "NCCL_P2P_DISABLE") && forced(p, "NCCL_SHM_DISABLE"))
        {
            continue;
        }
        // It used verbs: a device was there.
        if p.calls.keys().any(|k| k.starts_with("ibv_")) {
            continue;
        }
        let log = log_process(r, pid);
        let no_device_line = log.and_then(|l| {
            l.net_lines
                .iter()
                .find(|x| x.starts_with("NET/IB") && x.contains("No device found"))
        });
        let no_devices = r.facts.rdma_devices.is_empty();
        if !no_devices && no_device_line.is_none() {
            continue;
        }
        let mut ev = vec![format!("transport verdict socket{}", net_of(v))];
        if no_devices {
            ev.push(
                "no RDMA device on this host (/sys/class/infiniband is empty) and no ibv_* call by the process".into(),
            );
        }
        if let Some(l) = no_device_line {
            ev.push(format!("NCCL log: {l}"));
        }
        if let Some(l) = log {
            if let Some(n) = &l.network {
                ev.push(format!("NCCL log: Using network {n}"));
            }
            ev.extend(
                l.net_lines
                    .iter()
                    .filter(|x| x.starts_with("NET/Socket"))
                    .map(|x| format!("NCCL log: {x}")),
            );
            if let Some(id) = &l.host_id {
                ev.push(format!("NCCL log: NCCL_HOSTID set by environment to {id}"));
            }
        }
        match inter_node {
            Some(why) => ev.push(why.to_string()),
            None => ev.extend(log_hosts(r)),
        }
        out.push((pid, ev));
    }
    out
}

/// Whether a network is a plugin's (not NCCL's own IB or socket network).
fn is_plugin(net: Net) -> bool {
    !matches!(net.plugin, Plugin::Socket | Plugin::Ib | Plugin::Nvls)
}

/// A plugin's own lines on GPUDirect RDMA: aws-ofi-nccl's `NET/OFI` lines
/// on GDR, FI_HMEM and dma-buf, and NCCL's `NET/<plugin> : GPU Direct RDMA
/// Disabled` lines for a plugin's NICs.
fn plugin_gdr_lines(l: &LogProcess) -> impl Iterator<Item = String> + '_ {
    let ofi = l.net_lines.iter().filter(|x| {
        x.starts_with("NET/OFI")
            && (x.contains("GDR") || x.contains("HMEM") || x.contains("DMA-BUF registrations: false"))
    });
    let disabled = l.gdr_lines.iter().filter(|x| {
        x.contains("GPU Direct RDMA Disabled") && x.split(" : ").next().and_then(Net::of_via).is_some_and(is_plugin)
    });
    ofi.chain(disabled).map(|x| format!("NCCL log: {x}"))
}

pub(super) fn plugin_no_gdr(r: &Report) -> Hits {
    let mut out = Vec::new();
    for v in &r.verdicts {
        // A plugin's network without GDRDMA: staged, or its own lines say GDR is off.
        if !v.net.is_some_and(|n| is_plugin(n) && !n.gdr) {
            continue;
        }
        let mut ev: Vec<String> = log_process(r, v.pid).map_or(Vec::new(), |l| plugin_gdr_lines(l).collect());
        if !v.host_staged && ev.is_empty() {
            continue;
        }
        ev.insert(0, format!("transport verdict {}{}", v.transport.name(), net_of(v)));
        if let Some(l) = &v.nccl_log {
            ev.push(format!("NCCL log: via {}", l.nccl_says));
        }
        out.push((v.pid, ev));
    }
    out
}

pub(super) fn plugin_failed(r: &Report) -> Hits {
    let mut out = Vec::new();
    for v in r.verdicts.iter().filter(|v| v.transport == Transport::Socket) {
        let Some(l) = log_process(r, v.pid).filter(|l| !l.failed_plugins.is_empty()) else {
            continue;
        };
        let mut ev = vec![format!("transport verdict socket{}", net_of(v))];
        ev.extend(
            l.failed_plugins
                .iter()
                .map(|p| format!("NCCL log: Failed to initialize NET plugin {p}")),
        );
        // The plugin's own warnings say why (aws-ofi-nccl: `NET/OFI ...`).
        ev.extend(
            l.warnings
                .iter()
                .filter(|w| w.contains("NET/"))
                .map(|w| format!("NCCL log: WARN {w}")),
        );
        if let Some(n) = &l.network {
            ev.push(format!("NCCL log: Using network {n}"));
        }
        out.push((v.pid, ev));
    }
    out
}

pub(super) fn far_paths(r: &Report) -> Vec<String> {
    r.facts
        .gpu_nic_paths
        .iter()
        .filter(|[_, _, class]| matches!(class.as_str(), "SYS" | "NODE"))
        .map(|[gpu, nic, class]| {
            let crosses = if class == "SYS" {
                "the inter-socket link"
            } else {
                "host bridges within a NUMA node"
            };
            format!("{gpu} to {nic}: {class} (the path crosses {crosses})")
        })
        .collect()
}

/// Whether a process moved GPU data through host memory on the way to a NIC.
pub(super) fn staged_for_network(r: &Report, pid: u32) -> Option<String> {
    let reg = registration(r).iter().find(|x| x.pid == pid)?;
    let host = registrations(reg, "host");
    let gpu = registrations(reg, "gpu/peer-mem") + registrations(reg, "gpu/dma-buf");
    if host > 0 && gpu == 0 && gpu_allocations(reg) > 0 {
        return Some(format!(
            "{host} MRs on host memory and none on the process's {} GPU allocations",
            gpu_allocations(reg)
        ));
    }
    None
}

/// NCCL's `GPU Direct RDMA Disabled for GPU ... (distance D > L)` lines of a process.
fn distance_lines(r: &Report, pid: u32) -> Vec<String> {
    log_process(r, pid).map_or(Vec::new(), |l| {
        l.gdr_lines
            .iter()
            .filter(|x| x.contains("GPU Direct RDMA Disabled") && x.contains("distance"))
            .map(|x| format!("NCCL log: {x}"))
            .collect()
    })
}

pub(super) fn gpu_nic_far(r: &Report) -> Hits {
    let far = far_paths(r);
    let mut out = Vec::new();
    for p in &r.processes {
        let distance = distance_lines(r, p.pid);
        if far.is_empty() {
            // NCCL's own distance decision, without topology facts.
            if !distance.is_empty() {
                out.push((p.pid, distance));
            }
            continue;
        }
        let mut ev = distance;
        if let Some(x) = staged_for_network(r, p.pid) {
            ev.push(x);
        }
        let comms = r.nccl_log.as_ref().map_or(&[][..], |l| &l.communicators);
        for c in comms {
            if c.pid == p.pid && c.gdr == Some(false) {
                ev.push(format!("NCCL log: communicator {} uses GDR 0", c.communicator));
            }
        }
        if !ev.is_empty() {
            ev.extend(far.iter().cloned());
            out.push((p.pid, ev));
        }
    }
    out
}

pub(super) fn acs_iommu(r: &Report) -> Hits {
    let bridges = &r.facts.acs_redirect;
    if bridges.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for v in &r.verdicts {
        let t = v.transport.name();
        // Between hosts (to NCCL) P2P is not the question.
        if !matches!(t, "shm" | "socket" | "host-staged") || v.other_hosts.is_some() {
            continue;
        }
        let forced = process(r, v.pid).is_some_and(|p| {
            ["NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"]
                .iter()
                .any(|k| env(p, k).is_some())
        });
        if forced {
            continue;
        }
        let mut ev = vec![
            format!("transport verdict {t} with no NCCL variable disabling P2P"),
            format!(
                "ACS request/completion redirect enabled on PCI bridge(s) {}: peer-to-peer TLPs are sent up to the root complex",
                bridges.join(", ")
            ),
        ];
        let iommu = &r.facts.iommu;
        if iommu.groups > 0 {
            ev.push(format!(
                "IOMMU active ({} groups; kernel command line: {})",
                iommu.groups,
                if iommu.cmdline.is_empty() {
                    "no iommu= option".to_string()
                } else {
                    iommu.cmdline.join(" ")
                }
            ));
        }
        out.push((v.pid, ev));
    }
    out
}

pub(super) fn host_memory_registered(r: &Report) -> Hits {
    let mut out = Vec::new();
    for reg in registration(r) {
        let pid = reg.pid;
        let mut ev = Vec::new();
        if let Some(x) = staged_for_network(r, pid) {
            ev.push(x);
        }
        for g in &r.transfers.groups {
            if g.op.starts_with("ibv_reg") {
                let hit = g.sample.iter().filter(|t| t.pid == pid).find(|t| {
                    t.evidence.contains("managed memory") || (!ev.is_empty() && t.transport == Transport::HostOnly)
                });
                if let Some(t) = hit {
                    ev.push(t.evidence.clone());
                    break;
                }
            }
        }
        if !ev.is_empty() {
            out.push((pid, ev));
        }
    }
    out
}

pub(super) fn churn(r: &Report) -> Hits {
    const TIMES: u64 = 4;
    let mut out = Vec::new();
    for reg in registration(r) {
        let Some(range) = &reg.most_registered_range else {
            continue;
        };
        let times = range.times;
        let dereg: u64 = reg.by_backing.values().map(|x| x.deregistrations).sum();
        if times < TIMES || dereg + 1 < TIMES {
            continue;
        }
        let what = if range.io_uring {
            format!(
                "io_uring buffer set (iovec array {:#x}, {} buffers)",
                range.addr, range.length
            )
        } else {
            format!("range {:#x}+{}", range.addr, range.length)
        };
        let mut ev = vec![format!(
            "{what} registered {times} times ({} re-registrations of a range seen before, {dereg} deregistrations)",
            reg.reregistrations_of_seen_range
        )];
        for (k, b) in &reg.by_backing {
            ev.push(format!(
                "{k}: {:.0} registrations/s, {:.0} deregistrations/s",
                b.registrations_per_s, b.deregistrations_per_s
            ));
        }
        if let Some(l) = &reg.lifetime {
            ev.push(format!("registration lifetime p50 {} us", l.p50 / 1000));
        }
        out.push((reg.pid, ev));
    }
    out
}

/// A line per (process, op): the first sample of each op whose evidence
/// matches, in the groups `wanted` picks.
fn copy_lines(r: &Report, wanted: impl Fn(&crate::report::accounting::TransferGroup) -> bool, evidence: &str) -> Hits {
    let mut out: Hits = Vec::new();
    for g in r.transfers.groups.iter().filter(|g| wanted(g)) {
        for t in g.sample.iter().filter(|t| t.evidence.contains(evidence)) {
            let line = format!("{} x{} ({} bytes): {}", g.op, g.count, g.bytes, t.evidence);
            match out.iter_mut().find(|(pid, _)| *pid == t.pid) {
                Some((_, ev)) if !ev.iter().any(|e| e.starts_with(g.op.as_str())) => ev.push(line),
                Some(_) => {}
                None => out.push((t.pid, vec![line])),
            }
        }
    }
    out
}

pub(super) fn peer_access(r: &Report) -> Hits {
    copy_lines(
        r,
        |g| g.op.starts_with("cuMemcpy") && g.transport == Transport::HostStaged.name(),
        "without cuCtxEnablePeerAccess",
    )
}

pub(super) fn pageable_copies(r: &Report) -> Hits {
    let mut hits = copy_lines(
        r,
        |g| {
            g.op.starts_with("cuMemcpy")
                && !g.op.starts_with("cuMemcpyPeer")
                && g.transport == Transport::HostStaged.name()
        },
        "pageable",
    );
    // A library's own staging (a staged path of its transport layer) is
    // explained by that path's cause, not by the application's buffers.
    hits.retain(|(pid, _)| {
        !r.paths
            .iter()
            .any(|p| p.pid == *pid && p.host_staged && p.peer_kind != crate::classify::path::PeerKind::NcclCommunicator)
    });
    hits
}

pub(super) fn app_staged(r: &Report) -> Hits {
    let mut out = Vec::new();
    for g in r
        .transfers
        .groups
        .iter()
        .filter(|g| g.op == "cuMemcpyDtoH+cuMemcpyHtoD")
    {
        let mut pids: Vec<u32> = g.sample.iter().map(|t| t.pid).collect();
        pids.dedup();
        for pid in pids {
            let ev = g
                .sample
                .iter()
                .filter(|t| t.pid == pid)
                .map(|t| t.evidence.clone())
                .take(1)
                .chain([format!("{} such transfers, {} bytes", g.count, g.bytes)])
                .collect();
            out.push((pid, ev));
        }
    }
    out
}

/// The rule table.
pub static RULES: &[Rule] = &[
    Rule {
        id: "no-peer-memory-client",
        looks_at: "registration.processes[].failed_registrations on GPU memory, kernel_failures (ib_umem_get: EFAULT), nccl_log GDR lines, facts.modules, facts.memory_peers",
        cause: "No peer-memory client: nvidia_peermem is not loaded (or not registered with ib_core), so the RDMA stack cannot pin GPU memory; registering it fails with EFAULT and the data is staged through host memory. Load it (modprobe nvidia-peermem) or register GPU memory through dma-buf (ibv_reg_dmabuf_mr).",
        check: no_peer_memory,
    },
    Rule {
        id: "dmabuf-unsupported",
        looks_at: "registration.processes[].failed_registrations (ibv_reg_dmabuf_mr), kernel_failures (ib_umem_dmabuf_get*), nccl_log warnings",
        cause: "dma-buf MRs are not supported here (EOPNOTSUPP from the RDMA driver or kernel): GPU memory cannot be registered through dma-buf. Use a kernel and RDMA driver with dma-buf MR support, or peer memory (nvidia_peermem) with NCCL_DMABUF_ENABLE=0.",
        check: dmabuf_unsupported,
    },
    Rule {
        id: "nccl-env-forced",
        looks_at: "processes[].env (NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_IB_DISABLE, NCCL_NET_GDR_LEVEL, NCCL_NET_GDR_READ, NCCL_DMABUF_ENABLE, NCCL_P2P_LEVEL, NCCL_NET) of processes that call NCCL, verdicts (net, other_hosts)",
        cause: "NCCL's transport was forced by the environment: a variable switched a direct path off, so NCCL used a slower one. Unset it unless it works around a known problem.",
        check: nccl_env,
    },
    Rule {
        id: "nccl-no-rdma-device",
        looks_at: "verdicts (socket, net, other_hosts), facts.rdma_devices, ibv_* calls, nccl_log processes (NET/IB : No device found., Using network, NET/Socket lines, NCCL_HOSTID), processes[].env",
        cause: "Traffic between hosts over TCP sockets: NCCL found no usable RDMA device (no InfiniBand/RoCE NIC, or none it could open), so its network transport is NET/Socket and every byte goes through host memory and the kernel's TCP stack. Give the hosts an RDMA NIC with its driver and libibverbs (ibv_devices lists it); ranks that share one machine can share a host identity (NCCL_HOSTID) and use P2P or SHM instead.",
        check: no_rdma_device,
    },
    Rule {
        id: "nccl-net-plugin-failed",
        looks_at: "verdicts (socket), nccl_log processes (Failed to initialize NET plugin NAME, the plugin's WARN lines, Using network)",
        cause: "NCCL found a network plugin (libnccl-net.so: aws-ofi-nccl on EFA, the SHARP plugin on InfiniBand) but it failed to initialize, so NCCL fell back to its socket network: traffic between hosts goes over TCP through host memory. The plugin's own lines in NCCL's log say why (aws-ofi-nccl: no EFA device or libfabric provider, a libfabric or CUDA it cannot use); fix that, or set NCCL_NET to the plugin's name so that NCCL fails instead of falling back.",
        check: plugin_failed,
    },
    Rule {
        id: "nccl-net-plugin-no-gdr",
        looks_at: "verdicts (host-staged, net of a network plugin: NET/Libfabric, NET/AWS Libfabric, NET/OFI, NET/IBext, COLLNET, others), nccl_log processes (NET/OFI lines on GDR, FI_HMEM and dma-buf; NET/<plugin> : GPU Direct RDMA Disabled)",
        cause: "NCCL's network plugin moved GPU data through host buffers instead of GPUDirect RDMA. For aws-ofi-nccl on EFA: use an instance type with GPUDirect RDMA (p4d, p5 and later), the efa provider with libfabric 1.18 or later (FI_HMEM for CUDA), and a peer-memory client or dma-buf; its NET/OFI lines in NCCL's log say which was missing. For the IBext/SHARP plugin and others, what NET/IB needs applies: a peer-memory client or dma-buf, and a NIC close to the GPU.",
        check: plugin_no_gdr,
    },
    Rule {
        id: "gpu-nic-far",
        looks_at: "facts.gpu_nic_paths (SYS, NODE), registration by backing, nccl_log communicators' GDR decision, nccl_log GDR lines (distance D > L)",
        cause: "The GPU and the NIC are too far apart (the PCIe path crosses the CPU socket link to a NIC on the remote socket, SYS, or host bridges, NODE): NCCL does not use GPUDirect RDMA beyond NCCL_NET_GDR_LEVEL and stages through host memory. Use a NIC close to the GPU (PIX/PXB) or raise NCCL_NET_GDR_LEVEL if the platform handles it.",
        check: gpu_nic_far,
    },
    Rule {
        id: "acs-iommu-blocks-p2p",
        looks_at: "facts.acs_redirect, facts.iommu, verdicts (shm/socket/host-staged without an NCCL variable disabling P2P)",
        cause: "PCIe ACS redirect (and the IOMMU) sends peer-to-peer traffic up to the root complex, where it is blocked or slow, so GPU-to-GPU traffic fell back through host memory. Disable ACS redirect on the bridges between the GPUs (setpci) or use iommu=pt.",
        check: acs_iommu,
    },
    Rule {
        id: "host-memory-registered",
        looks_at: "registration.processes[].by_backing and allocations, ibv_reg_* transfer evidence (managed memory)",
        cause: "Host (pageable or pinned) or managed memory was registered for RDMA while the process has GPU memory: the NIC reads and writes host memory and the data is copied to or from the GPU, a silent fallback from GPUDirect RDMA. Register the device buffers (cuMemAlloc) instead.",
        check: host_memory_registered,
    },
    Rule {
        id: "ucx-emulated-rma",
        looks_at: "paths[] (a UCX GET or PUT on GPU memory staged through host memory while CUDA IPC was set up), the path's UCX log agreement, ucx.log version",
        cause: "UCX has no cuda_ipc protocol for this one-sided operation on GPU memory here and emulates it in software over its host transport (tcp or shared memory), through bounce buffers: a NIXL READ (pull) then runs at a fraction of a WRITE's speed although the same peers write over cuda_ipc. Push instead (NIXL WRITE, ucp_put), or use a UCX/NIXL release with a cuda_ipc protocol for the operation (nixl PR #2208); UCX_PROTO_INFO=y shows `software emulation` in the operation's table.",
        check: super::ucx::emulated_rma,
    },
    Rule {
        id: "ucx-tls-excludes-direct",
        looks_at: "paths[] (host-staged GPU data of UCX processes), processes[].env UCX_TLS, facts.rdma_devices",
        cause: "UCX_TLS leaves out a direct transport (cuda_ipc between GPUs of one node, rc/dc for GPUDirect RDMA), so UCX staged GPU data through host memory with cuda_copy. Allow it (add cuda_ipc, or drop the ^ exclusion) unless it works around a known problem.",
        check: super::ucx::tls_excludes_direct,
    },
    Rule {
        id: "ucx-cuda-ipc-unavailable",
        looks_at: "paths[] (host-staged GPU data of UCX processes), processes[].env UCX_TLS, CUDA IPC calls (cuIpc*, cuMem export/import), ucx.processes[].modules, facts.nvlink, ucx.log warnings",
        cause: "cuda_ipc was not used although UCX_TLS allows it: the processes could not map each other's GPU memory (different containers or IPC namespaces, no peer access between the GPUs, or a UCX without its CUDA transport module), so UCX staged GPU data through host memory. Run the peers in one IPC namespace on GPUs with peer access, with a UCX that loads libuct_cuda.",
        check: super::ucx::cuda_ipc_unavailable,
    },
    Rule {
        id: "ucx-gpu-rdma-without-peer-memory",
        looks_at: "paths[] (UCX GPU data staged for rc/ud), registration failures on GPU memory, MRs by backing, facts.modules, facts.memory_peers",
        cause: "UCX could not register GPU memory with the NIC: no peer-memory client (nvidia_peermem) and no dma-buf MRs, so rc/dc moved GPU data through host bounce buffers (cuda_copy) instead of GPUDirect RDMA. Load nvidia-peermem or use a kernel, driver and UCX with dma-buf registration.",
        check: super::ucx::gpu_rdma_without_peer_memory,
    },
    Rule {
        id: "ucx-rcache-disabled",
        looks_at: "processes[].env (UCX_RCACHE_ENABLE, UCX_IB_REG_METHODS), ucx.processes[] registrations, data calls, rcache lookups",
        cause: "UCX's registration cache is off (UCX_RCACHE_ENABLE=n, or UCX_IB_REG_METHODS without rcache): every rendezvous transfer registers and deregisters its buffer, pinning pages and programming the NIC each time. Leave the cache on, or map long-lived buffers once (ucp_mem_map) and pass their memory handles.",
        check: super::ucx::rcache_disabled,
    },
    Rule {
        id: "ucx-rcache-thrashing",
        looks_at: "ucx.processes[].rcache (lookups, misses, misses of ranges that missed before), registrations per data call",
        cause: "UCX's registration cache is thrashing: its regions are evicted or invalidated (cache limits UCX_RCACHE_MAX_REGIONS/MAX_SIZE, or buffers freed and allocated again) and registered again, so transfers keep paying for registration. Raise the limits, or keep buffers allocated (a memory pool).",
        check: super::ucx::rcache_thrashing,
    },
    Rule {
        id: "gds-forced-compat",
        looks_at: "paths[] (file paths in compat mode), processes[].env and gds.processes[].env (CUFILE_FORCE_COMPAT_MODE)",
        cause: "CUFILE_FORCE_COMPAT_MODE forces cuFile's compat mode: every read and write goes through POSIX I/O into host bounce buffers and copies, as if nvidia-fs were absent. Unset it unless it works around a known problem.",
        check: super::gds::forced_compat,
    },
    Rule {
        id: "gds-nvidia-fs-not-loaded",
        looks_at: "paths[] (file paths in compat mode), facts.gds (nvidia_fs in /proc/modules, /dev/nvidia-fs*), gds.processes[].config (use_pci_p2pdma), gds.log",
        cause: "nvidia-fs is not loaded (and P2PDMA is not enabled): cuFile runs in compat mode, reading and writing files with POSIX I/O through pinned host bounce buffers and copying them to and from the GPU, without an error. Install and load nvidia-fs (the GDS packages, modprobe nvidia-fs), or on a kernel with PCI P2PDMA enable properties.use_pci_p2pdma in cufile.json; gdsio and gdscheck -p check the set-up.",
        check: super::gds::nvidia_fs_not_loaded,
    },
    Rule {
        id: "gds-file-not-o-direct",
        looks_at: "paths[] (file paths in compat mode), gds.processes[].files[].file.flags (O_DIRECT)",
        cause: "The file was opened without O_DIRECT: cuFile reads and writes it with buffered POSIX I/O through the page cache and host bounce buffers. Open files for GDS with O_DIRECT.",
        check: super::gds::not_o_direct,
    },
    Rule {
        id: "gds-denylisted",
        looks_at: "paths[] (file paths in compat mode), gds.processes[].config.denylist, the file's mount, filesystem and device",
        cause: "The file's mount, filesystem or device is in cufile.json's deny list: cuFile uses POSIX I/O through host memory there. Remove it from the list if GDS should be used.",
        check: super::gds::denylisted,
    },
    Rule {
        id: "gds-filesystem-not-supported",
        looks_at: "paths[] (file paths in compat mode), gds.processes[].files[].file (filesystem type, source device, mount options), gds.log",
        cause: "The file is on a filesystem or device GPUDirect Storage does not support (GDS needs ext4 with data=ordered or xfs on NVMe or NVMe-oF, or a distributed filesystem with a GDS client: NFS over RDMA, Lustre, GPFS, WekaFS, BeeGFS), so cuFile reads and writes it through host memory. Put the data on such a filesystem.",
        check: super::gds::fs_unsupported,
    },
    Rule {
        id: "gds-io-small-or-unaligned",
        looks_at: "paths[] (file paths in compat mode), gds.processes[].io[].sample (size, file offset), config posix_gds_min_kb and posix_unaligned_writes",
        cause: "The I/O is smaller than posix_gds_min_kb or not aligned to 4 KiB: cuFile sends it through POSIX I/O and host memory. Read and write 4 KiB multiples at aligned offsets, in larger requests.",
        check: super::gds::small_or_unaligned,
    },
    Rule {
        id: "gds-p2p-blocked",
        looks_at: "paths[] (file paths in compat mode), facts.iommu, facts.acs_redirect",
        cause: "IOMMU translation or PCIe ACS redirect stands between the NVMe device and the GPU: nvidia-fs cannot set up the peer-to-peer DMA and cuFile falls back to compat mode. Use iommu=pt (or off) and disable ACS redirect on the bridges between them.",
        check: super::gds::p2p_blocked,
    },
    Rule {
        id: "gds-buffer-not-registered",
        looks_at: "paths[] (direct file paths with device copies), gds.processes[].buffers and io[].sample.registered",
        cause: "The GPU buffer was not registered with cuFile (cuFileBufRegister): each direct read or write went through cuFile's own registered GPU buffer and an extra device-to-device copy. Register long-lived buffers once.",
        check: super::gds::buffer_not_registered,
    },
    Rule {
        id: "registration-churn",
        looks_at: "registration.processes[].most_registered_range, by_backing rates, lifetime",
        cause: "Registration churn: the same range is registered and deregistered again and again; every registration pins pages and programs the NIC or IOMMU. Register once and reuse (an MR cache, io_uring buffers kept registered).",
        check: churn,
    },
    Rule {
        id: "peer-access-not-enabled",
        looks_at: "transfers of cuMemcpyPeer* and cross-device cuMemcpyDtoD/cuMemcpy with a host-staged verdict (no peer access for the pair)",
        cause: "GPU-to-GPU copies without peer access: cuCtxEnablePeerAccess (cudaDeviceEnablePeerAccess) was not called for the pair, so the driver stages every copy through host memory. Enable peer access once per GPU pair.",
        check: peer_access,
    },
    Rule {
        id: "app-staged-gpu-copies",
        looks_at: "transfers cuMemcpyDtoH+cuMemcpyHtoD (a device-to-host copy followed by a host-to-device copy through the same host buffer on one thread)",
        cause: "The application moves data between GPU buffers through host memory itself (D2H then H2D): two PCIe crossings and a CPU round trip. Copy device to device (cuMemcpyPeer with peer access, or cuMemcpyDtoD) instead.",
        check: app_staged,
    },
    Rule {
        id: "pageable-host-copies",
        looks_at: "transfers of cuMemcpy* with a host-staged verdict from pageable memory",
        cause: "Copies between the GPU and pageable host memory: the driver stages them through its own pinned bounce buffer (an extra copy on the CPU). Allocate the host buffers with cuMemAllocHost/cuMemHostAlloc or pin them with cuMemHostRegister.",
        check: pageable_copies,
    },
];
