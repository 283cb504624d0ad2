//! Every network NCCL can name (issue 44): `gdrtrace explain RECORDING
//! --nccl-log LOG`, through the real binary, for each NCCL log of
//! `tests/fixtures/logs/nccl-net-*.log` (composed from the format strings of
//! NCCL 2.28.9, aws-ofi-nccl and nccl-rdma-sharp-plugins by
//! `make-nccl-net.py` there, not captured from a cluster) on a stand-in
//! recording of the same ranks. Each gives its verdict (from the tracer's
//! evidence), its network as NCCL names it and its cause; a log of another
//! network disagrees and changes neither; a network whose set-up the tracer
//! did not see is said to be unseen, not confirmed.
use std::{path::PathBuf, process::Command};

use gdrtrace::{classify::path::PeerGroup, cmd::explain::ExplainDoc, report::Report};

fn fixtures() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// `gdrtrace ARGS` in `tests/fixtures`: its standard output (it must succeed).
fn gdrtrace(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_gdrtrace"))
        .args(args)
        .current_dir(fixtures())
        .output()
        .expect("running gdrtrace");
    assert!(
        o.status.success(),
        "gdrtrace {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("UTF-8 output")
}

fn paths(recording: &str, log: &str) -> (String, String) {
    (
        format!("recordings/{recording}.rec"),
        format!("logs/nccl-net-{log}.log"),
    )
}

/// `explain --format json` and `explain` (text) of a recording with a log.
fn explain(recording: &str, log: &str) -> (ExplainDoc, String) {
    let (rec, log) = paths(recording, log);
    let json = gdrtrace(&["explain", "--format", "json", "--nccl-log", &log, &rec]);
    let doc: ExplainDoc = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{rec} with {log}: {e}\n{json}"));
    (doc, gdrtrace(&["explain", "--nccl-log", &log, &rec]))
}

/// The replayed report of a recording with a log (its paths).
fn replay(recording: &str, log: &str) -> Report {
    let (rec, log) = paths(recording, log);
    let json = gdrtrace(&["replay", "--format", "json", "--nccl-log", &log, &rec]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("a report");
    gdrtrace::report::read_typed(&v).unwrap_or_else(|e| panic!("{rec} with {log}: {e}"))
}

/// One network: its log, the recording of its ranks, and what explain must say.
struct Case {
    log: &'static str,
    recording: &'static str,
    transport: &'static str,
    /// The verdict's `net`, as NCCL names the network.
    net: Option<&'static str>,
    /// The start of the verdict's cause (None: no fallback, no cause).
    cause: Option<&'static str>,
    /// A rule that must name the cause.
    rule: Option<&'static str>,
}

const CASES: &[Case] = &[
    Case {
        log: "socket",
        recording: "standin-nccl-nodes",
        transport: "socket",
        net: Some("NET/Socket"),
        cause: Some("inter-node traffic over TCP sockets (NET/Socket): NCCL found no usable RDMA device"),
        rule: Some("nccl-no-rdma-device"),
    },
    Case {
        log: "ib",
        recording: "standin-nccl-nodes-staged",
        transport: "host-staged",
        net: Some("NET/IB"),
        cause: Some("NET/IB without GPUDirect RDMA"),
        rule: Some("host-memory-registered"),
    },
    Case {
        log: "ib-gdrdma",
        recording: "standin-nccl-nodes-gdr",
        transport: "gpudirect-rdma/dma-buf",
        net: Some("NET/IB/GDRDMA"),
        cause: None,
        rule: None,
    },
    Case {
        log: "libfabric",
        recording: "standin-nccl-nodes-gdr",
        transport: "gpudirect-rdma/dma-buf",
        net: Some("NET/Libfabric/GDRDMA"),
        cause: None,
        rule: None,
    },
    Case {
        log: "aws-libfabric",
        recording: "standin-nccl-nodes-staged",
        transport: "host-staged",
        net: Some("NET/AWS Libfabric"),
        cause: Some("NET/AWS Libfabric (aws-ofi-nccl) without GPUDirect RDMA"),
        rule: Some("nccl-net-plugin-no-gdr"),
    },
    Case {
        log: "ofi",
        recording: "standin-nccl-nodes-gdr",
        transport: "gpudirect-rdma/dma-buf",
        net: Some("NET/OFI/GDRDMA"),
        cause: None,
        rule: None,
    },
    Case {
        log: "libfabric-failed",
        recording: "standin-nccl-nodes",
        transport: "socket",
        net: Some("NET/Socket"),
        cause: Some("inter-node traffic over TCP sockets (NET/Socket)"),
        rule: Some("nccl-net-plugin-failed"),
    },
    Case {
        log: "ibext",
        recording: "standin-nccl-nodes-gdr",
        transport: "gpudirect-rdma/dma-buf",
        net: Some("NET/IBext_v11/GDRDMA"),
        cause: None,
        rule: None,
    },
    Case {
        log: "collnet",
        recording: "standin-nccl-nodes-gdr",
        transport: "gpudirect-rdma/dma-buf",
        net: Some("NET/IBext_v11/GDRDMA"),
        cause: None,
        rule: None,
    },
    Case {
        log: "ucx",
        recording: "standin-nccl-nodes-gdr",
        transport: "gpudirect-rdma/dma-buf",
        net: Some("NET/UCX/GDRDMA"),
        cause: None,
        rule: None,
    },
    Case {
        log: "nvls",
        recording: "standin-nccl-p2p",
        transport: "p2p/nvlink",
        net: Some("NVLS"),
        cause: None,
        rule: None,
    },
    Case {
        log: "ib-2x2",
        recording: "standin-nccl-nodes-2x2",
        transport: "mixed",
        net: Some("NET/IB/GDRDMA"),
        cause: None,
        rule: None,
    },
    Case {
        log: "libfabric-2x2",
        recording: "standin-nccl-nodes-2x2-p2p",
        transport: "mixed",
        net: None,
        cause: None,
        rule: None,
    },
];

#[test]
fn every_network_nccl_names_gets_its_verdict_net_and_cause() {
    for c in CASES {
        let what = format!("nccl-net-{}.log on {}", c.log, c.recording);
        let (doc, text) = explain(c.recording, c.log);
        assert_eq!(doc.verdicts.len(), 2, "{what}: {:?}", doc.verdicts);
        for v in &doc.verdicts {
            assert_eq!(v.transport.name(), c.transport, "{what}: pid {}", v.pid);
            assert_eq!(v.net.map(|n| n.name()), c.net, "{what}: pid {}", v.pid);
            match c.cause {
                Some(cause) => assert!(
                    v.cause.as_deref().is_some_and(|x| x.starts_with(cause)),
                    "{what}: pid {} cause {:?}",
                    v.pid,
                    v.cause
                ),
                None => assert_eq!(v.cause, None, "{what}: pid {}", v.pid),
            }
            let l = v
                .nccl_log
                .as_ref()
                .unwrap_or_else(|| panic!("{what}: pid {} has no NCCL log", v.pid));
            assert!(l.agrees, "{what}: pid {} {l:?}", v.pid);
        }
        if let Some(rule) = c.rule {
            let pids: Vec<u32> = doc
                .findings
                .iter()
                .filter(|f| f.rule == rule)
                .filter_map(|f| f.pid)
                .collect();
            assert_eq!(pids.len(), 2, "{what}: {rule} for each rank: {:?}", doc.findings);
        }
        assert!(!text.contains("DISAGREES"), "{what}:\n{text}");
        assert!(text.contains("(agrees"), "{what}:\n{text}");
    }
}

/// Every plugin log of the fixtures directory is a case above.
#[test]
fn every_plugin_fixture_is_tested() {
    let mut logs: Vec<String> = std::fs::read_dir(fixtures().join("logs"))
        .expect("the logs directory")
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            Some(name.strip_prefix("nccl-net-")?.strip_suffix(".log")?.to_string())
        })
        .collect();
    logs.sort();
    let mut cases: Vec<String> = CASES.iter().map(|c| c.log.to_string()).collect();
    cases.sort();
    assert_eq!(logs, cases);
}

/// The log never decides alone: aws-ofi-nccl with GPUDirect RDMA said of
/// ranks whose NICs registered host memory disagrees, and the verdict, its
/// network and its cause stay as the evidence gave them.
#[test]
fn a_plugin_log_of_another_path_disagrees_and_changes_nothing() {
    let (doc, text) = explain("standin-nccl-nodes-staged", "libfabric");
    for v in &doc.verdicts {
        assert_eq!(v.transport.name(), "host-staged");
        assert_eq!(v.net.map(|n| n.name()), Some("NET/IB"));
        assert!(
            v.cause.as_deref().unwrap().starts_with("NET/IB without GPUDirect RDMA"),
            "{v:?}"
        );
        assert!(!v.nccl_log.as_ref().unwrap().agrees, "{v:?}");
    }
    assert!(text.contains("via NET/Libfabric/0/GDRDMA (DISAGREES)"), "{text}");
    assert!(
        !doc.findings.iter().any(|f| f.rule == "nccl-net-plugin-no-gdr"),
        "{:?}",
        doc.findings
    );
}

/// 2 hosts x 2 GPUs: each rank's communicator becomes one path to its local
/// peer (P2P) and one to the other host's ranks (NCCL's network), each
/// judged from its own evidence; where the tracer saw no network set-up,
/// NCCL's network is unseen, neither confirmed nor contradicted.
#[test]
fn ranks_with_local_and_remote_peers_get_a_path_per_peer_group() {
    let r = replay("standin-nccl-nodes-2x2", "ib-2x2");
    let groups = |pid: u32| -> Vec<(Option<PeerGroup>, Vec<u32>, &'static str, String)> {
        r.paths
            .iter()
            .filter(|p| p.pid == pid)
            .map(|p| (p.peer_group, p.peer_ranks.clone(), p.transport.name(), p.via.clone()))
            .collect()
    };
    assert_eq!(
        groups(4100),
        vec![
            (Some(PeerGroup::Local), vec![1], "p2p/nvlink", "P2P/CUMEM".into()),
            (
                Some(PeerGroup::Remote),
                vec![2, 3],
                "gpudirect-rdma/dma-buf",
                "NET/IB/GDRDMA".into()
            ),
        ]
    );
    assert_eq!(groups(4101)[1].1, vec![2], "rank 1 sends to rank 2 only");
    // The communicator's bytes, split by the channels each group is sent on.
    let comm: u64 = r.collectives.iter().filter(|c| c.pid == 4100).map(|c| c.bytes).sum();
    let split: Vec<u64> = r.paths.iter().filter(|p| p.pid == 4100).map(|p| p.bytes).collect();
    assert_eq!(split, vec![comm / 2, comm / 2]);
    // Without the log: one path per communicator, the process's verdict.
    let json = gdrtrace(&["replay", "--format", "json", "recordings/standin-nccl-nodes-2x2.rec"]);
    let plain = gdrtrace::report::read_typed(&serde_json::from_str(&json).unwrap()).unwrap();
    let mine: Vec<_> = plain.paths.iter().filter(|p| p.pid == 4100).collect();
    assert_eq!(mine.len(), 1);
    assert_eq!((mine[0].peer_group, mine[0].transport.name()), (None, "p2p/nvlink"));

    let r = replay("standin-nccl-nodes-2x2-p2p", "libfabric-2x2");
    let remote = r
        .paths
        .iter()
        .find(|p| p.pid == 4100 && p.peer_group == Some(PeerGroup::Remote))
        .expect("a remote path");
    assert_eq!(
        (remote.transport.name(), remote.via.as_str()),
        ("unknown", "NET/Libfabric/GDRDMA")
    );
    let v = r.verdicts.iter().find(|v| v.pid == 4100).unwrap();
    let l = v.nccl_log.as_ref().unwrap();
    assert!(
        l.unseen.as_deref().is_some_and(
            |u| u.starts_with("NCCL says NET/Libfabric/0/GDRDMA") && u.contains("the tracer saw p2p/nvlink")
        ),
        "{l:?}"
    );
}

/// CollNet (SHARP): the switches reduce the collective's data; a path of
/// its own beside NCCL's network, GPUDirect RDMA as the evidence says, and
/// no cause: in-network reduction is no fallback.
#[test]
fn collnet_is_a_path_to_the_switches() {
    let r = replay("standin-nccl-nodes-gdr", "collnet");
    let switch: Vec<_> = r
        .paths
        .iter()
        .filter(|p| p.peer_group == Some(PeerGroup::Switch))
        .collect();
    assert_eq!(switch.len(), 2, "{:?}", r.paths);
    for p in switch {
        assert_eq!(
            (p.transport.name(), p.via.as_str(), p.cause.as_deref()),
            ("gpudirect-rdma/dma-buf", "COLLNET/SHARP/GDRDMA", None)
        );
        assert!(p.peer_ranks.is_empty());
        assert!(p.label().contains("CollNet switches"), "{}", p.label());
    }
}

/// A `mixed` rank's host-staged communicator paths count in its staged
/// bytes: the accounting agrees with the paths, whichever peer group
/// staged.
#[test]
fn a_mixed_ranks_staged_paths_count_in_its_staged_bytes() {
    use gdrtrace::classify::path::PeerKind;
    for c in CASES.iter().filter(|c| c.transport == "mixed") {
        let r = replay(c.recording, c.log);
        for p in &r.processes {
            let staged: u64 = r
                .paths
                .iter()
                .filter(|x| x.pid == p.pid && x.host_staged && x.peer_kind == PeerKind::NcclCommunicator)
                .map(|x| x.staged_bytes)
                .sum();
            assert!(
                p.staged_bytes >= staged,
                "{} on {}: pid {} staged {} < its paths' {staged}",
                c.log,
                c.recording,
                p.pid,
                p.staged_bytes
            );
        }
    }
}
