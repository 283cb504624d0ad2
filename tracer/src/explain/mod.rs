//! `explain`: the stage after `report`. One table of rules over the typed
//! report, so a live trace, a replay and a saved `--json` file (read into
//! the same `Report`) are explained alike. Each rule names what it looks
//! at, the cause it stands for, and returns its findings with the evidence
//! lines that made it fire. Rules fire on evidence, never on the absence of
//! it: a report without the signals a rule needs gives no finding from
//! that rule. What they find goes into the report's `explain` section
//! ([`fill`]; the types are `report::findings`).
pub use crate::report::findings::{Explain, Finding, Path};
use crate::{
    classify::Transport,
    report::{Process, Report, accounting::RegistrationProcess},
};

mod fabric;
mod gds;
mod rules;
mod ucx;

pub use self::rules::RULES;
use self::rules::staged_for_network;

/// What a rule's check returns: (pid, evidence lines) per affected process.
pub type Hits = Vec<(u32, Vec<String>)>;

/// One rule of the table.
pub struct Rule {
    pub id: &'static str,
    /// The report fields the rule reads.
    pub looks_at: &'static str,
    /// The cause the rule stands for (what is wrong, and what to do).
    pub cause: &'static str,
    /// Findings: (pid, evidence lines) per affected process (pid 0: the host).
    pub check: fn(&Report) -> Hits,
}

pub(crate) fn process(r: &Report, pid: u32) -> Option<&Process> {
    r.processes.iter().find(|p| p.pid == pid)
}

pub(crate) fn registration(r: &Report) -> &[RegistrationProcess] {
    &r.registration.processes
}

fn has_module(r: &Report, m: &str) -> bool {
    r.facts.modules.iter().any(|x| x == m)
}

/// A peer-memory client is loaded and registered with ib_core.
pub(crate) fn peer_client(r: &Report) -> bool {
    (has_module(r, "nvidia_peermem") || has_module(r, "nv_peer_mem")) && r.facts.memory_peers
}

fn uses_nccl(p: &Process) -> bool {
    p.calls.keys().any(|k| k.starts_with("nccl"))
}

pub(crate) fn env<'a>(p: &'a Process, var: &str) -> Option<&'a str> {
    p.env.get(var).map(String::as_str)
}

fn gpu_allocations(reg: &RegistrationProcess) -> u64 {
    ["cuMemAlloc", "cuMemAllocAsync", "ncclMemAlloc"]
        .iter()
        .map(|k| reg.allocations.get(k).copied().unwrap_or(0))
        .sum()
}

/// Registrations of one backing (`host`, `gpu/peer-mem`, ...).
fn registrations(reg: &RegistrationProcess, backing: &str) -> u64 {
    reg.by_backing.get(backing).map_or(0, |b| b.registrations)
}

pub(crate) fn peer_client_evidence(r: &Report) -> Vec<String> {
    let mut ev = Vec::new();
    if !has_module(r, "nvidia_peermem") && !has_module(r, "nv_peer_mem") {
        ev.push("nvidia_peermem (nv_peer_mem) is not loaded (/proc/modules)".into());
    }
    if !r.facts.memory_peers {
        ev.push("/sys/kernel/mm/memory_peers is absent: no peer-memory client is registered with ib_core".into());
    }
    ev
}

fn comm_of(r: &Report, pid: u32) -> Option<String> {
    process(r, pid).map(|p| p.comm.clone())
}

/// Runs every rule over a report.
pub fn findings(r: &Report) -> Vec<Finding> {
    let mut out = Vec::new();
    for rule in RULES {
        for (pid, evidence) in (rule.check)(r) {
            out.push(Finding {
                rule: rule.id,
                pid: (pid != 0).then_some(pid),
                comm: (pid != 0).then(|| comm_of(r, pid)).flatten(),
                cause: rule.cause,
                evidence,
            });
        }
    }
    out
}

/// Rules that can explain a communication path (verdicts, network staging).
const PATH_RULES: &[&str] = &[
    "no-peer-memory-client",
    "dmabuf-unsupported",
    "nccl-env-forced",
    "nccl-no-rdma-device",
    "nccl-net-plugin-failed",
    "nccl-net-plugin-no-gdr",
    "gpu-nic-far",
    "acs-iommu-blocks-p2p",
    "host-memory-registered",
    "ucx-emulated-rma",
    "ucx-tls-excludes-direct",
    "ucx-cuda-ipc-unavailable",
    "ucx-gpu-rdma-without-peer-memory",
];
/// Rules that can explain a staged copy.
const COPY_RULES: &[&str] = &[
    "peer-access-not-enabled",
    "pageable-host-copies",
    "app-staged-gpu-copies",
    "acs-iommu-blocks-p2p",
];
/// Rules that can explain a failed registration.
const REG_RULES: &[&str] = &[
    "no-peer-memory-client",
    "dmabuf-unsupported",
    "ucx-gpu-rdma-without-peer-memory",
];
/// Rules that can explain UCX registering on its transfers.
const UCX_REG_RULES: &[&str] = &["ucx-rcache-disabled", "ucx-rcache-thrashing"];

/// ` (NET/Socket)`: NCCL's network path of a verdict, where it has one.
fn net_of(v: &crate::classify::comm::Verdict) -> String {
    v.net.map_or(String::new(), |n| format!(" ({})", n.name()))
}

/// Staged or unexpected paths: staged verdicts and copies, host MRs in a
/// GPU process, failed registrations; each with the rules that explain it.
/// Whether a path needs a cause: it went through host memory, or could
/// not be decided.
fn wants_cause(t: Transport, staged: bool) -> bool {
    staged || matches!(t, Transport::Unknown | Transport::Ambiguous)
}

pub fn paths(r: &Report, findings: &[Finding]) -> Vec<Path> {
    use crate::classify::path::PeerKind;
    // (pid, what, the rules that can explain it, the path's label).
    let mut out: Vec<(u32, String, &[&str], Option<String>)> = Vec::new();
    for v in &r.verdicts {
        let mine: Vec<_> = r.paths.iter().filter(|p| p.pid == v.pid).collect();
        if mine.is_empty() {
            if wants_cause(v.transport, v.host_staged) {
                let t = v.transport.name();
                out.push((
                    v.pid,
                    format!("communication verdict {t}{}", net_of(v)),
                    PATH_RULES,
                    None,
                ));
            }
            continue;
        }
        for p in mine
            .into_iter()
            .filter(|p| wants_cause(p.transport, p.host_staged) || (p.peer_kind == PeerKind::File && p.cause.is_some()))
        {
            let mut what = format!("path {}: {} via {}", p.label(), p.transport.name(), p.via);
            // An undecided path says why it is (its last evidence line).
            if let (Transport::Unknown, Some(why)) = (p.transport, p.evidence.last()) {
                what = format!("{what}: {why}");
            }
            let rules = if p.peer_kind == PeerKind::File {
                gds::FILE_RULES
            } else {
                PATH_RULES
            };
            out.push((v.pid, what, rules, Some(p.label())));
        }
    }
    // Copies that a library's staged path made are that path's bytes.
    let library_staged = |pid: u32| {
        r.paths
            .iter()
            .any(|p| p.pid == pid && p.host_staged && p.peer_kind != PeerKind::NcclCommunicator)
    };
    for g in &r.transfers.groups {
        let t = g.transport;
        // Kernel-aggregated records (collectives) stand for their verdict.
        let aggregated = g.sample.first().is_some_and(|x| x.calls.is_some());
        if Transport::from_name(t).staged() && !aggregated {
            let copy = g.op.starts_with("cuMemcpy");
            let all = pids_of(g);
            let rules = if copy { COPY_RULES } else { PATH_RULES };
            // The group's figures are every process's together: with more
            // than one, each pid names its own calls of the op.
            for pid in all.iter().copied().filter(|pid| !(copy && library_staged(*pid))) {
                let mine = process(r, pid).and_then(|p| p.calls.get(&g.op)).copied();
                let what = match mine {
                    Some(n) if all.len() > 1 => format!(
                        "{} {t}: {n} calls of this process ({} transfers, {} bytes in all processes)",
                        g.op, g.count, g.bytes
                    ),
                    _ => format!("{} {t}: {} transfers, {} bytes", g.op, g.count, g.bytes),
                };
                out.push((pid, what, rules, None));
            }
        }
    }
    for reg in registration(r) {
        if let Some(x) = staged_for_network(r, reg.pid) {
            out.push((reg.pid, format!("RDMA through host memory: {x}"), PATH_RULES, None));
        }
        let n = reg.failed_registrations.len();
        if n > 0 {
            out.push((reg.pid, format!("{n} failed memory registrations"), REG_RULES, None));
        }
    }
    for (pid, what) in ucx::registering_paths(r) {
        out.push((pid, what, UCX_REG_RULES, None));
    }
    // A finding whose evidence names paths of its process explains those
    // paths; one that names none is about the process and explains all.
    let names = |f: &Finding, label: &str| f.evidence.iter().any(|e| e.contains(label));
    let labels: Vec<(u32, String)> = r.paths.iter().map(|p| (p.pid, p.label())).collect();
    let about = |f: &Finding, pid: u32, label: &Option<String>| {
        label
            .as_deref()
            .is_none_or(|l| names(f, l) || !labels.iter().any(|(q, other)| *q == pid && names(f, other)))
    };
    out.into_iter()
        .map(|(pid, what, rules, label)| Path {
            pid,
            comm: comm_of(r, pid).unwrap_or_default(),
            explained_by: {
                let mut ids: Vec<&'static str> = findings
                    .iter()
                    .filter(|f| f.pid.unwrap_or(0) == pid && rules.contains(&f.rule) && about(f, pid, &label))
                    .map(|f| f.rule)
                    .collect();
                ids.dedup();
                ids
            },
            what,
        })
        .collect()
}

/// The processes of a transfer group's sample, each once.
fn pids_of(g: &crate::report::accounting::TransferGroup) -> Vec<u32> {
    let mut v: Vec<u32> = g.sample.iter().map(|x| x.pid).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// What the rules say about a report.
pub fn explain(r: &Report) -> Explain {
    let findings = findings(r);
    Explain {
        paths: paths(r, &findings),
        findings,
    }
}

/// Explains the report as it stands into its `explain` section: after it
/// is judged (`Report::judge_with`) and after UCX's log corroborated it.
pub fn fill(r: &mut Report) {
    r.explain = explain(r);
}

#[cfg(test)]
mod tests;
