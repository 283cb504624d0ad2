//! The rule table on reports built for one cause each: typed reports
//! from partial JSON (`report`: what a test leaves out takes its default).
use serde_json::Value;

use super::*;

/// The defaults an element of each array of a partial report takes (and
/// a section the empty report lacks).
fn element_template(path: &str) -> Option<Value> {
    use serde_json::json;
    Some(match path {
        "processes" => json!({"pid": 0}),
        "verdicts" => json!({"pid": 0, "comm": "", "transport": "unknown", "host_staged": false, "evidence": []}),
        "nccl_log.communicators" => {
            json!({"pid": 0, "communicator": "", "vias": [], "nccl_says": []})
        }
        // Not an array: the section itself, where a test adds it.
        "ucx" => serde_json::to_value(crate::classify::ucx::UcxReport::default()).ok()?,
        "ucx.processes" => serde_json::to_value(crate::classify::ucx::UcxProcess::default()).ok()?,
        "paths" => json!({"pid": 0, "peer_kind": "ucx-endpoint", "peer": "0x1", "op": "send", "memory": "",
                          "transport": "unknown", "via": "", "calls": 0, "bytes": 0, "host_staged": false,
                          "staged_bytes": 0, "evidence": []}),
        _ => return None,
    })
}

/// `patch` laid over `base`: objects key by key, arrays element by element
/// over their template.
fn merge(base: &mut Value, patch: &Value, path: &str) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                let at = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                let slot = b.entry(k.clone()).or_insert_with(|| match element_template(&at) {
                    Some(t) if v.is_object() => t,
                    _ if v.is_object() => Value::Object(Default::default()),
                    _ => Value::Null,
                });
                merge(slot, v, &at);
            }
        }
        (b, Value::Array(items)) => {
            *b = Value::Array(
                items
                    .iter()
                    .map(|x| match element_template(path) {
                        Some(mut t) => {
                            merge(&mut t, x, path);
                            t
                        }
                        None => x.clone(),
                    })
                    .collect(),
            );
        }
        (b, p) => *b = p.clone(),
    }
}

/// A typed report from the parts a test gives (the rest as an empty
/// report has it).
fn report(partial: Value) -> Report {
    let mut v = serde_json::to_value(crate::report::tests_support::empty_report()).expect("serializable");
    merge(&mut v, &partial, "");
    crate::report::read_typed(&v).unwrap_or_else(|e| panic!("a report: {e}"))
}

/// What the rules say of a partial report.
fn explain_json(partial: &Value) -> Explain {
    explain(&report(partial.clone()))
}

/// The text of a partial report's explanation.
fn render(partial: &Value) -> String {
    let mut r = report(partial.clone());
    fill(&mut r);
    crate::report::text::explain(&r)
}

#[test]
fn rule_ids_are_unique_and_documented() {
    let mut ids: Vec<&str> = RULES.iter().map(|r| r.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), RULES.len());
    assert!(RULES.iter().all(|r| !r.cause.is_empty() && !r.looks_at.is_empty()));
    // An empty report explains nothing.
    assert!(findings(&report(serde_json::json!({}))).is_empty());
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
    let e = explain_json(&two_nodes(serde_json::json!({}), none.clone(), true));
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
    assert!(render(&two_nodes(serde_json::json!({}), none.clone(), true)).contains("cause: nccl-no-rdma-device"));
    // The log alone is evidence (the host lists a device NCCL could not use).
    let e = explain_json(&two_nodes(serde_json::json!({}), serde_json::json!(["mlx5_0"]), true));
    assert!(e.fired("nccl-no-rdma-device"), "{:?}", e.findings);
    // One rank's report (its peer traced on another node): the log's
    // host identities say the ranks are on different hosts.
    let mut one = two_nodes(serde_json::json!({}), none.clone(), true);
    one["verdicts"][0]["other_hosts"] = Value::Null;
    one["nccl_log"]["processes"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"pid": 102, "host_id": "gdrtrace-emu-1"}));
    let e = explain_json(&one);
    let f = e.findings.iter().find(|f| f.rule == "nccl-no-rdma-device").unwrap();
    assert!(
        f.evidence.iter().any(|l| l
            == "NCCL log: ranks on different hosts to NCCL: NCCL_HOSTID=gdrtrace-emu-0 (pid 101), NCCL_HOSTID=gdrtrace-emu-1 (pid 102)"),
        "{:?}",
        f.evidence
    );
    // A device exists and no log says otherwise: no evidence, no finding.
    let e = explain_json(&two_nodes(serde_json::json!({}), serde_json::json!(["mlx5_0"]), false));
    assert!(!e.fired("nccl-no-rdma-device"), "{:?}", e.findings);
    // A variable chose the socket network: nccl-env-forced names it.
    for (var, value) in [("NCCL_IB_DISABLE", "1"), ("NCCL_NET", "Socket")] {
        let r = two_nodes(serde_json::json!({ var: value }), none.clone(), true);
        let e = explain_json(&r);
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
    let e = explain_json(&r);
    assert!(e.fired("gpu-nic-far"), "{:?}", e.findings);
    assert!(!e.fired("no-peer-memory-client"), "{:?}", e.findings);
    assert_eq!(e.paths[0].explained_by, vec!["gpu-nic-far"]);
}

/// A report's JSON with one UCX process and one path.
fn report_json(
    env: serde_json::Value,
    calls: serde_json::Value,
    path: serde_json::Value,
    rcache: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({
        "processes": [{"pid": 7, "comm": "ucx_perftest", "env": env, "calls": calls}],
        "facts": {"nvlink": true, "modules": [], "memory_peers": false, "rdma_devices": []},
        "ucx": {"processes": [{
            "pid": 7, "comm": "ucx_perftest", "registrations": 40, "deregistrations": 40, "data_calls": 40,
            "registrations_per_data_call": 1.0, "modules": ["libuct_cma.so.0"], "rcache": rcache
        }]},
        "paths": [path]
    })
}

fn fired(r: &serde_json::Value) -> Vec<&'static str> {
    findings(&report(r.clone())).iter().map(|f| f.rule).collect()
}

#[test]
fn rules_on_staged_gpu_data() {
    let staged = serde_json::json!({"memory": "cuda", "transport": "host-staged", "via": "cuda_copy+shm", "pid": 7,
        "host_staged": true, "staged_bytes": 1024});
    let no_cache = serde_json::json!({"gets": 0, "misses": 0, "repeat_misses": 0});
    let r = report_json(
        serde_json::json!({"UCX_TLS": "^cuda_ipc"}),
        serde_json::json!({}),
        staged.clone(),
        no_cache.clone(),
    );
    let f = fired(&r);
    assert!(
        f.contains(&"ucx-tls-excludes-direct") && !f.contains(&"ucx-cuda-ipc-unavailable"),
        "{f:?}"
    );
    let r = report_json(
        serde_json::json!({}),
        serde_json::json!({}),
        staged.clone(),
        no_cache.clone(),
    );
    let findings = findings(&report(r.clone()));
    let ipc = findings
        .iter()
        .find(|f| f.rule == "ucx-cuda-ipc-unavailable")
        .expect("cuda_ipc unavailable");
    assert!(
        ipc.evidence
            .iter()
            .any(|e| e.contains("libuct_cuda") && e.contains("not loaded")),
        "{ipc:?}"
    );
    // CUDA IPC handles were exchanged: something else staged the data.
    let r = report_json(
        serde_json::json!({}),
        serde_json::json!({"cuIpcGetMemHandle": 2}),
        staged,
        no_cache.clone(),
    );
    assert!(!fired(&r).contains(&"ucx-cuda-ipc-unavailable"));
    let rdma = serde_json::json!({"memory": "cuda", "transport": "host-staged", "via": "cuda_copy+rc/ud", "pid": 7,
        "host_staged": true, "staged_bytes": 1024});
    let r = report_json(
        serde_json::json!({"UCX_TLS": "rc,cuda_copy,cuda_ipc"}),
        serde_json::json!({}),
        rdma,
        no_cache,
    );
    assert!(fired(&r).contains(&"ucx-gpu-rdma-without-peer-memory"));
}

#[test]
fn rules_on_the_registration_cache() {
    let host =
        serde_json::json!({"memory": "host", "transport": "host-only", "via": "rc/ud", "pid": 7, "host_staged": false});
    let thrash = serde_json::json!({"gets": 40, "misses": 30, "repeat_misses": 12});
    let r = report_json(serde_json::json!({}), serde_json::json!({}), host.clone(), thrash);
    let f = fired(&r);
    assert!(
        f.contains(&"ucx-rcache-thrashing") && !f.contains(&"ucx-rcache-disabled"),
        "{f:?}"
    );
    let warm = serde_json::json!({"gets": 40, "misses": 2, "repeat_misses": 0});
    assert!(
        fired(&report_json(
            serde_json::json!({}),
            serde_json::json!({}),
            host.clone(),
            warm.clone()
        ))
        .is_empty()
    );
    let off = report_json(
        serde_json::json!({"UCX_RCACHE_ENABLE": "n"}),
        serde_json::json!({}),
        host,
        warm,
    );
    assert_eq!(fired(&off), vec!["ucx-rcache-disabled"]);
}

/// A finding that names one path of its process explains that path, not
/// the process's other paths; one that names none explains them all. And
/// an undecided path says why it is (the NIXL READ on one H100,
/// 2026-12-07: a 49-byte AM beside the emulated GET).
#[test]
fn a_finding_explains_the_paths_it_names() {
    let mut r = report(serde_json::json!({
        "processes": [{"pid": 7, "comm": "python3"}],
        "verdicts": [{"pid": 7, "comm": "python3", "transport": "host-staged", "host_staged": true}],
    }));
    let path = |op, memory, transport: &str, evidence: &str| {
        let mut p = crate::classify::path::Path::new(
            7,
            crate::classify::path::PeerKind::UcxEndpoint,
            "0x10".into(),
            op,
            memory,
        );
        p.transport = Transport::from_name(transport);
        p.host_staged = p.transport.staged();
        p.evidence = vec![evidence.into()];
        p
    };
    use crate::classify::path::OpClass;
    r.paths = vec![
        path(OpClass::Get, "cuda", "host-staged", "copied through host memory"),
        path(OpClass::Am, "unknown", "unknown", "too small to judge apart"),
    ];
    let finding = |evidence: String| Finding {
        rule: "ucx-emulated-rma",
        pid: Some(7),
        comm: Some("python3".into()),
        cause: "emulated",
        evidence: vec![evidence],
    };
    let by = |f: Finding| -> Vec<Vec<&'static str>> { paths(&r, &[f]).into_iter().map(|p| p.explained_by).collect() };
    let get = r.paths[0].label();
    assert_eq!(
        by(finding(format!("{get}: cuda memory went host-staged"))),
        vec![vec!["ucx-emulated-rma"], vec![]]
    );
    assert_eq!(
        by(finding("CUDA IPC was set up".into())),
        vec![vec!["ucx-emulated-rma"]; 2]
    );
    let am = &paths(&r, &[])[1].what;
    assert!(am.ends_with("unknown via unknown: too small to judge apart"), "{am}");
}
