//! `explain`: one table of rules over a report (the JSON document, so a
//! saved `--json` file, a live trace and a replay are explained alike).
//! Each rule names what it looks at, the cause it stands for, and returns
//! its findings with the evidence lines that made it fire. Rules fire on
//! evidence, never on the absence of it: a report without the signals a
//! rule needs gives no finding from that rule.
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

/// What a rule's check returns: (pid, evidence lines) per affected process.
pub type Hits = Vec<(u32, Vec<String>)>;

mod rules;

pub use self::rules::RULES;
use self::rules::{groups, staged_for_network};

/// One rule of the table.
pub struct Rule {
    pub id: &'static str,
    /// The report fields the rule reads.
    pub looks_at: &'static str,
    /// The cause the rule stands for (what is wrong, and what to do).
    pub cause: &'static str,
    /// Findings: (pid, evidence lines) per affected process (pid 0: the host).
    pub check: fn(&Value) -> Hits,
}

/// A rule that fired for one process (or the host).
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Finding {
    #[serde(deserialize_with = "crate::intern::str")]
    pub rule: crate::intern::Name,
    /// The process it concerns (None: the host as a whole).
    pub pid: Option<u32>,
    pub comm: Option<String>,
    #[serde(deserialize_with = "crate::intern::str")]
    pub cause: crate::intern::Name,
    pub evidence: Vec<String>,
}

/// A staged or unexpected path the report shows.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Path {
    pub pid: u32,
    pub comm: String,
    pub what: String,
    /// Rules that explain it (empty: no rule recognised a cause).
    #[serde(deserialize_with = "crate::intern::vec")]
    pub explained_by: Vec<&'static str>,
}

/// What `explain` says about a report.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Explain {
    pub paths: Vec<Path>,
    pub findings: Vec<Finding>,
}

impl Explain {
    /// Whether rule `id` fired (for any process).
    pub fn fired(&self, id: &str) -> bool {
        self.findings.iter().any(|f| f.rule == id)
    }
}

pub(crate) fn arr(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], |a| a.as_slice())
}

pub(crate) fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

pub(crate) fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

pub(crate) fn pid_of(v: &Value) -> u32 {
    u(&v["pid"]) as u32
}

pub(crate) fn process(r: &Value, pid: u32) -> Option<&Value> {
    arr(&r["processes"]).iter().find(|p| pid_of(p) == pid)
}

pub(crate) fn registration(r: &Value) -> &[Value] {
    arr(&r["registration"]["processes"])
}

fn has_module(r: &Value, m: &str) -> bool {
    arr(&r["facts"]["modules"]).iter().any(|x| s(x) == m)
}

pub(crate) fn peer_client(r: &Value) -> bool {
    (has_module(r, "nvidia_peermem") || has_module(r, "nv_peer_mem")) && r["facts"]["memory_peers"] == true
}

fn uses_nccl(p: &Value) -> bool {
    p["calls"]
        .as_object()
        .is_some_and(|c| c.keys().any(|k| k.starts_with("nccl")))
}

pub(crate) fn env<'a>(p: &'a Value, var: &str) -> Option<&'a str> {
    p["env"][var].as_str()
}

fn gpu_allocations(reg: &Value) -> u64 {
    ["cuMemAlloc", "cuMemAllocAsync", "ncclMemAlloc"]
        .iter()
        .map(|k| u(&reg["allocations"][*k]))
        .sum()
}

fn hex(v: &Value) -> String {
    format!("{:#x}", u(v))
}

pub(crate) fn peer_client_evidence(r: &Value) -> Vec<String> {
    let mut ev = Vec::new();
    if !has_module(r, "nvidia_peermem") && !has_module(r, "nv_peer_mem") {
        ev.push("nvidia_peermem (nv_peer_mem) is not loaded (/proc/modules)".into());
    }
    if r["facts"]["memory_peers"] != true {
        ev.push("/sys/kernel/mm/memory_peers is absent: no peer-memory client is registered with ib_core".into());
    }
    ev
}

fn comm_of(r: &Value, pid: u32) -> Option<String> {
    process(r, pid).map(|p| s(&p["comm"]).to_string())
}

/// Runs every rule over a report.
pub fn findings(r: &Value) -> Vec<Finding> {
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
    "gpu-nic-far",
    "acs-iommu-blocks-p2p",
    "host-memory-registered",
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

/// Staged or unexpected paths: staged verdicts and copies, host MRs in a
/// GPU process, failed registrations; each with the rules that explain it.
pub fn paths(r: &Value, findings: &[Finding]) -> Vec<Path> {
    let mut out: Vec<(u32, String, &[&str])> = Vec::new();
    for v in arr(&r["verdicts"]) {
        if v["host_staged"] == true || matches!(s(&v["transport"]), "unknown" | "ambiguous") {
            out.push((
                pid_of(v),
                format!(
                    "communication verdict {}{}",
                    s(&v["transport"]),
                    v["net"].as_str().map_or(String::new(), |n| format!(" ({n})"))
                ),
                PATH_RULES,
            ));
        }
    }
    for g in &groups(r) {
        let t = s(&g["transport"]);
        if super::Transport::from_name(t).staged() && g["sample"][0]["calls"].is_null() {
            let mut pids: Vec<u32> = arr(&g["sample"]).iter().map(pid_of).collect();
            pids.dedup();
            let rules = if s(&g["op"]).starts_with("cuMemcpy") {
                COPY_RULES
            } else {
                PATH_RULES
            };
            for pid in pids {
                let what = format!(
                    "{} {t}: {} transfers, {} bytes",
                    s(&g["op"]),
                    u(&g["count"]),
                    u(&g["bytes"])
                );
                out.push((pid, what, rules));
            }
        }
    }
    for reg in registration(r) {
        if let Some(x) = staged_for_network(r, pid_of(reg)) {
            out.push((pid_of(reg), format!("RDMA through host memory: {x}"), PATH_RULES));
        }
        let n = arr(&reg["failed_registrations"]).len();
        if n > 0 {
            out.push((pid_of(reg), format!("{n} failed memory registrations"), REG_RULES));
        }
    }
    for (pid, what) in super::ucx::rules::registering_paths(r) {
        out.push((pid, what, UCX_REG_RULES));
    }
    out.into_iter()
        .map(|(pid, what, rules)| Path {
            pid,
            comm: comm_of(r, pid).unwrap_or_default(),
            explained_by: {
                let mut ids: Vec<&'static str> = findings
                    .iter()
                    .filter(|f| f.pid.unwrap_or(0) == pid && rules.contains(&f.rule))
                    .map(|f| f.rule)
                    .collect();
                ids.dedup();
                ids
            },
            what,
        })
        .collect()
}

pub fn explain(r: &Value) -> Explain {
    let findings = findings(r);
    Explain {
        paths: paths(r, &findings),
        findings,
    }
}

/// The text form: verdicts, staged paths, root causes, overrides, NCCL log.
pub fn render(r: &Value, e: &Explain) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "Explain");
    if e.paths.is_empty() {
        let _ = writeln!(o, "  no staged or unexpected path in this trace");
    }
    for p in &e.paths {
        let by = if p.explained_by.is_empty() {
            "no rule recognised a cause".to_string()
        } else {
            format!("cause: {}", p.explained_by.join(", "))
        };
        let who = if p.pid == 0 {
            "all processes".to_string()
        } else {
            format!("pid {} {}", p.pid, p.comm)
        };
        let _ = writeln!(o, "  {who}: {} ({by})", p.what);
    }
    if !e.findings.is_empty() {
        let _ = writeln!(o, "\nRoot causes");
    }
    for f in &e.findings {
        let who = match (f.pid, &f.comm) {
            (Some(pid), Some(c)) => format!("pid {pid} {c}"),
            (Some(pid), None) => format!("pid {pid}"),
            _ => "host".into(),
        };
        let _ = writeln!(o, "  [{}] {who}", f.rule);
        let _ = writeln!(o, "    {}", f.cause);
        for ev in &f.evidence {
            let _ = writeln!(o, "    evidence: {ev}");
        }
    }
    let overrides = arr(&r["overrides"]);
    if !overrides.is_empty() {
        let _ = writeln!(o, "\nNCCL/UCX variables in effect");
        for x in overrides {
            let _ = writeln!(o, "  pid {} {}={}", pid_of(x), s(&x["var"]), s(&x["value"]));
        }
    }
    let comms = arr(&r["nccl_log"]["communicators"]);
    if !comms.is_empty() {
        let _ = writeln!(o, "\nNCCL log, per communicator");
        for c in comms {
            let agree = match c["agrees"].as_bool() {
                Some(true) => "agrees",
                Some(false) => "DISAGREES",
                None => "not compared",
            };
            let vias: Vec<&str> = arr(&c["vias"]).iter().map(s).collect();
            let gdr = match c["gdr"].as_bool() {
                Some(true) => " GDR 1",
                Some(false) => " GDR 0",
                None => "",
            };
            let _ = writeln!(
                o,
                "  pid {} comm {} rank {}: via {}{gdr}; tracer {} ({agree})",
                pid_of(c),
                s(&c["communicator"]),
                c["rank"].as_u64().map_or("?".into(), |v| v.to_string()),
                if vias.is_empty() { "-".into() } else { vias.join(", ") },
                c["tracer_says"].as_str().unwrap_or("-")
            );
        }
    }
    o.push_str(&super::ucx::rules::explain_text(r));
    let staged: u64 = arr(&r["staging"]["processes"])
        .iter()
        .map(|p| u(&p["staged_bytes"]))
        .sum();
    let moved: u64 = arr(&r["staging"]["processes"])
        .iter()
        .map(|p| u(&p["moved_bytes"]))
        .sum();
    if moved > 0 {
        let _ = writeln!(
            o,
            "\nhost-staged bytes: {staged} of {moved} moved ({:.1}%)",
            staged as f64 * 100.0 / moved as f64
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_ids_are_unique_and_documented() {
        let mut ids: Vec<&str> = RULES.iter().map(|r| r.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), RULES.len());
        assert!(RULES.iter().all(|r| !r.cause.is_empty() && !r.looks_at.is_empty()));
        // An empty report explains nothing.
        assert!(findings(&serde_json::json!({})).is_empty());
    }

    /// A report of the emulated two-node job as the judge writes it, with
    /// NCCL's log lines as that job printed them (one H200, 2026-12-01).
    fn two_nodes(extra_env: serde_json::Value, rdma: serde_json::Value, log: bool) -> Value {
        let mut env = serde_json::json!({"NCCL_HOSTID": "gdrtrace-emu-0", "NCCL_DEBUG": "INFO"});
        for (k, v) in extra_env.as_object().unwrap() {
            env[k] = v.clone();
        }
        let cause = crate::classify::comm::cause(
            &serde_json::from_value(env.clone()).unwrap(),
            crate::classify::Transport::Socket,
            &crate::classify::comm::Network {
                other_hosts: Some("x".into()),
                rdma_devices: None,
            },
        );
        let mut r = serde_json::json!({
            "processes": [{"pid": 101, "comm": "python3", "env": env,
                           "calls": {"ncclCommInitRankConfig": 1, "cuMemHostAlloc": 8}}],
            "verdicts": [{"pid": 101, "comm": "python3", "transport": "socket", "host_staged": true,
                          "net": "NET/Socket", "cause": cause,
                          "other_hosts": "NCCL_HOSTID=gdrtrace-emu-0 here, NCCL_HOSTID=gdrtrace-emu-1 for pid 102 of the same job: NCCL's host hash differs"}],
            "facts": {"rdma_devices": rdma, "acs_redirect": ["0000:00:01.0"]},
        });
        if log {
            r["nccl_log"] = serde_json::json!({"processes": [{"pid": 101, "gdr_lines": [], "warnings": [],
                "host_id": "gdrtrace-emu-0", "network": "Socket",
                "net_lines": ["NET/IB : No device found.", "NET/Socket : Using [0]eth0:10.0.0.2<0>"]}]});
        }
        r
    }

    #[test]
    fn inter_node_socket_is_explained() {
        let none = serde_json::json!([]);
        let e = explain(&two_nodes(serde_json::json!({}), none.clone(), true));
        assert!(e.fired("nccl-no-rdma-device"), "{:?}", e.findings);
        assert!(!e.fired("nccl-env-forced"), "{:?}", e.findings);
        // ACS redirect does not explain traffic between hosts.
        assert!(!e.fired("acs-iommu-blocks-p2p"), "{:?}", e.findings);
        let f = e.findings.iter().find(|f| f.rule == "nccl-no-rdma-device").unwrap();
        for want in [
            "transport verdict socket (NET/Socket)",
            "/sys/class/infiniband is empty",
            "NCCL log: NET/IB : No device found.",
            "NCCL log: Using network Socket",
            "NCCL log: NET/Socket : Using [0]eth0",
            "NCCL log: NCCL_HOSTID set by environment to gdrtrace-emu-0",
            "NCCL_HOSTID=gdrtrace-emu-1 for pid 102",
        ] {
            assert!(f.evidence.iter().any(|l| l.contains(want)), "{want}: {:?}", f.evidence);
        }
        let p = &e.paths[0];
        assert_eq!(p.explained_by, vec!["nccl-no-rdma-device"], "{p:?}");
        assert_eq!(p.what, "communication verdict socket (NET/Socket)");
        assert!(
            render(&two_nodes(serde_json::json!({}), none.clone(), true), &e).contains("cause: nccl-no-rdma-device")
        );
        // The log alone is evidence (a report without host facts).
        let e = explain(&two_nodes(serde_json::json!({}), Value::Null, true));
        assert!(e.fired("nccl-no-rdma-device"), "{:?}", e.findings);
        // One rank's report (its peer traced on another node): the log's
        // host identities say the ranks are on different hosts.
        let mut one = two_nodes(serde_json::json!({}), none.clone(), true);
        one["verdicts"][0]["other_hosts"] = Value::Null;
        one["nccl_log"]["processes"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"pid": 102, "host_id": "gdrtrace-emu-1"}));
        let e = explain(&one);
        let f = e.findings.iter().find(|f| f.rule == "nccl-no-rdma-device").unwrap();
        assert!(
            f.evidence.iter().any(|l| l
                == "NCCL log: ranks on different hosts to NCCL: NCCL_HOSTID=gdrtrace-emu-0 (pid 101), NCCL_HOSTID=gdrtrace-emu-1 (pid 102)"),
            "{:?}",
            f.evidence
        );
        // Neither facts nor log: no evidence, no finding.
        let e = explain(&two_nodes(serde_json::json!({}), Value::Null, false));
        assert!(!e.fired("nccl-no-rdma-device"), "{:?}", e.findings);
        // A device exists and no log says otherwise: not this cause.
        let e = explain(&two_nodes(serde_json::json!({}), serde_json::json!(["mlx5_0"]), false));
        assert!(!e.fired("nccl-no-rdma-device"), "{:?}", e.findings);
        // A variable chose the socket network: nccl-env-forced names it.
        for (var, value) in [("NCCL_IB_DISABLE", "1"), ("NCCL_NET", "Socket")] {
            let r = two_nodes(serde_json::json!({ var: value }), none.clone(), true);
            let e = explain(&r);
            assert!(!e.fired("nccl-no-rdma-device"), "{var}: {:?}", e.findings);
            let f = e.findings.iter().find(|f| f.rule == "nccl-env-forced").unwrap();
            assert!(f.evidence[0].starts_with(&format!("{var}={value}")), "{f:?}");
            assert!(f.evidence.iter().any(|l| l.contains("NET/Socket")), "{f:?}");
            assert_eq!(e.paths[0].explained_by, vec!["nccl-env-forced"]);
            assert!(r["verdicts"][0]["cause"].as_str().unwrap().starts_with(var));
        }
    }

    /// NCCL's distance decision (`GPU Direct RDMA Disabled for GPU ...
    /// (distance D > L)`, src/graph/paths.cc) is gpu-nic-far's evidence,
    /// not a missing peer-memory client.
    #[test]
    fn gdr_distance_line_is_gpu_nic_far() {
        let r = serde_json::json!({
            "processes": [{"pid": 7, "comm": "rank", "calls": {"ncclCommInitRank": 1}}],
            "verdicts": [{"pid": 7, "transport": "host-staged", "host_staged": true, "net": "NET/IB"}],
            "facts": {"modules": ["nvidia_peermem"], "memory_peers": true},
            "nccl_log": {"processes": [{"pid": 7,
                "gdr_lines": ["GPU Direct RDMA Disabled for GPU/0-1b000 (rank 0) - NET/0-0 (distance 6 > 4)"]}]},
        });
        let e = explain(&r);
        assert!(e.fired("gpu-nic-far"), "{:?}", e.findings);
        assert!(!e.fired("no-peer-memory-client"), "{:?}", e.findings);
        assert_eq!(e.paths[0].explained_by, vec!["gpu-nic-far"]);
    }
}
