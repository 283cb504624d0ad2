//! The replays of the recordings under `tests/fixtures/recordings/`
//! (real ones recorded on a machine, and stand-ins written for hardware no
//! test machine has; see the README there), through the same path as
//! `gdrtrace replay`, and what they must show: the verdicts, accounting and
//! explain rules (each rule fires on one recording and stays quiet on
//! another). Public API only.
use gdrtrace::{explain::Explain, report::Report};

/// The recordings directory of the repository.
fn dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/recordings")
}

/// Replays `tests/fixtures/recordings/<name>.rec` (or `.rec.gz`; name
/// without either): the judged report and what `explain` says about it.
fn replay_fixture(name: &str) -> (Report, Explain) {
    replay_fixture_with_log(name, None)
}

/// As `replay_fixture`, corroborated with an NCCL log.
fn replay_fixture_with_log(name: &str, nccl_log: Option<&str>) -> (Report, Explain) {
    let plain = dir().join(format!("{name}.rec"));
    let path = if plain.exists() {
        plain
    } else {
        dir().join(format!("{name}.rec.gz"))
    };
    let rec = gdrtrace::cmd::replay::load(&path).unwrap_or_else(|e| panic!("fixture {name}: {e}"));
    let (report, _) = gdrtrace::cmd::replay::rebuild(&rec, nccl_log).unwrap_or_else(|e| panic!("fixture {name}: {e}"));
    let explain = report.explain.clone();
    (report, explain)
}

fn op<'a>(r: &'a Report, name: &str, transport: &str) -> Option<&'a gdrtrace::report::Operation> {
    r.operations.iter().find(|o| o.name == name && o.transport == transport)
}

fn transfer<'a>(r: &'a Report, op: &str) -> &'a gdrtrace::report::accounting::TransferGroup {
    r.transfers
        .groups
        .iter()
        .find(|g| g.op == op)
        .unwrap_or_else(|| panic!("no transfer group {op}: {:?}", r.transfers.groups))
}

/// Each rule: a fixture that triggers it and one that must not.
const RULE_CASES: &[(&str, &str, &str)] = &[
    ("no-peer-memory-client", "standin-peermem-efault", "standin-peermem-ok"),
    ("no-peer-memory-client", "standin-peermem-efault", "standin-dmabuf-ok"),
    ("dmabuf-unsupported", "standin-dmabuf-eopnotsupp", "standin-dmabuf-ok"),
    ("nccl-env-forced", "standin-nccl-no-p2p", "standin-nccl-p2p"),
    (
        "nccl-no-rdma-device",
        "standin-nccl-nodes",
        "gpu-h200-nccl-no-p2p-no-shm",
    ),
    ("nccl-no-rdma-device", "standin-nccl-nodes", "standin-nccl-nic-far"),
    ("gpu-nic-far", "standin-nccl-nic-far", "standin-peermem-ok"),
    ("acs-iommu-blocks-p2p", "standin-nccl-acs", "standin-nccl-no-p2p"),
    ("acs-iommu-blocks-p2p", "standin-nccl-acs", "standin-nccl-p2p"),
    ("host-memory-registered", "standin-uapi", "standin-peermem-ok"),
    ("host-memory-registered", "standin-managed-mr", "standin-dmabuf-ok"),
    ("registration-churn", "pin-churn", "standin-uapi"),
    (
        "peer-access-not-enabled",
        "standin-peer-copy-no-access",
        "standin-peer-copy-enabled",
    ),
    ("app-staged-gpu-copies", "standin-peer-copy-enabled", "standin-uapi"),
    ("pageable-host-copies", "standin-uapi", "standin-peer-copy-enabled"),
    ("ucx-emulated-rma", "standin-nixl-read-write", "standin-ucx-ipc"),
    ("ucx-emulated-rma", "standin-nixl-read-write", "standin-ucx-no-ipc"),
    ("ucx-tls-excludes-direct", "standin-ucx-no-ipc", "standin-ucx-ipc"),
    (
        "ucx-tls-excludes-direct",
        "standin-ucx-no-ipc",
        "standin-ucx-ipc-unavailable",
    ),
    (
        "ucx-cuda-ipc-unavailable",
        "standin-ucx-ipc-unavailable",
        "standin-ucx-no-ipc",
    ),
    (
        "ucx-cuda-ipc-unavailable",
        "standin-ucx-ipc-unavailable",
        "standin-ucx-ipc",
    ),
    (
        "ucx-gpu-rdma-without-peer-memory",
        "standin-ucx-rc-staged",
        "standin-ucx-no-ipc",
    ),
    ("ucx-rcache-disabled", "ucx-host-tcp-rcache-off", "ucx-host-tcp"),
    ("ucx-rcache-thrashing", "standin-ucx-rcache-thrash", "ucx-host-tcp"),
    (
        "network-lost-packets",
        "standin-nccl-nodes-tcp-drops",
        "standin-nccl-nodes-tcp",
    ),
    ("network-lost-packets", "standin-nccl-ib-retries", "standin-nccl-ib"),
    (
        "staged-not-network",
        "standin-nccl-nodes-tcp",
        "standin-nccl-nodes-tcp-drops",
    ),
    ("staged-not-network", "standin-nccl-nodes-tcp", "standin-nccl-ib"),
    (
        "fabric-link-down",
        "standin-nccl-ib-link-down",
        "standin-nccl-ib-retries",
    ),
];

fn ucx_paths(r: &Report) -> Vec<(u32, String, &'static str, String)> {
    assert!(r.ucx.is_some(), "a UCX section");
    r.paths
        .iter()
        .map(|x| (x.pid, x.memory.clone(), x.transport.name(), x.via.clone()))
        .collect()
}

/// UCX's GPU paths from their evidence (stand-ins: IPC handles and
/// device copies; cuda_copy staging through pinned host buffers).
#[test]
fn ucx_gpu_paths_replayed() {
    let (r, _) = replay_fixture("standin-ucx-ipc");
    let paths = ucx_paths(&r);
    assert_eq!(paths.len(), 2, "{paths:?}");
    assert!(
        paths
            .iter()
            .all(|(_, m, t, p)| m == "cuda" && *t == "p2p/nvlink" && p == "cuda_ipc"),
        "{paths:?}"
    );
    let ux = r.ucx.as_ref().unwrap();
    assert!(
        ux.endpoints
            .iter()
            .all(|e| e.memory == "cuda" && e.transport.name() == "p2p/nvlink")
    );
    assert_eq!(
        ux.endpoints.iter().map(|e| e.calls).sum::<u64>(),
        16,
        "8 sends and 8 receives posted"
    );
    // A UCX process's verdict is UCX's, not NCCL's reading of IPC handles.
    assert!(
        r.verdicts.iter().all(|v| v.transport.name() == "p2p/nvlink"),
        "{:?}",
        r.verdicts
    );

    let (r, e) = replay_fixture("standin-ucx-no-ipc");
    let ux = r.ucx.as_ref().unwrap();
    for p in &ux.processes {
        let x = r.paths.iter().find(|x| x.pid == p.pid).expect("a path per process");
        assert_eq!((x.transport.name(), x.via.as_str()), ("host-staged", "cuda_copy+shm"));
        assert_eq!(
            x.staged_bytes,
            8 * (16 << 20),
            "every byte copied through the bounce buffers"
        );
        assert!(
            x.cause.as_deref().is_some_and(|c| c.contains("UCX_TLS=^cuda_ipc")),
            "{x:?}"
        );
        // The pinned-buffer copies count as staged in the process accounting too.
        let staging = r.staging.processes.iter().find(|s| s.pid == p.pid).unwrap();
        assert_eq!(staging.staged_bytes, x.staged_bytes);
    }
    assert!(
        e.paths
            .iter()
            .any(|p| p.what.contains("host-staged") && p.explained_by.contains(&"ucx-tls-excludes-direct")),
        "{:?}",
        e.paths
    );
}

/// A NIXL-like READ then WRITE on one GPU (stand-in of the GPU machine's
/// run): each path judged from where its bytes went. The GET went through
/// host memory although CUDA IPC was set up (UCX's software emulation),
/// the PUT over cuda_ipc; the initiator is `mixed`, the target served the
/// GETs through host memory; the tiny AM beside the PUTs is not judged.
#[test]
fn nixl_read_and_write_paths_replayed() {
    use gdrtrace::classify::path::{OpClass, PeerKind};
    let (r, e) = replay_fixture("standin-nixl-read-write");
    let of = |pid: u32, op: OpClass| {
        r.paths
            .iter()
            .find(|p| p.pid == pid && p.op == op)
            .unwrap_or_else(|| panic!("pid {pid} {op:?}: {:?}", r.paths))
    };
    let get = of(4101, OpClass::Get);
    assert_eq!(
        (get.transport.name(), get.host_staged),
        ("host-staged", true),
        "{get:?}"
    );
    assert!(get.via.contains("software emulation"), "{}", get.via);
    assert_eq!(
        get.staged_bytes,
        4 * (32 << 20),
        "every byte of the GETs, the tail after the last call too"
    );
    assert!(
        get.cause.as_deref().is_some_and(|c| c.contains("emulated a GET")),
        "{get:?}"
    );
    let put = of(4101, OpClass::Put);
    assert_eq!(
        (put.transport.name(), put.host_bytes),
        ("ipc/same-device", 0),
        "{put:?}"
    );
    assert_eq!(put.device_bytes, 4 * (32 << 20));
    let am = of(4101, OpClass::Am);
    assert_eq!(am.transport.name(), "unknown", "too small to judge apart: {am:?}");
    let served = of(4100, OpClass::Served);
    assert_eq!(
        (served.peer_kind, served.transport.name()),
        (PeerKind::Remote, "host-staged")
    );
    // No path called direct has bytes in host memory.
    assert!(
        r.paths.iter().all(|p| !p.direct() || p.host_bytes == 0),
        "{:?}",
        r.paths
    );
    let v = |pid: u32| r.verdicts.iter().find(|v| v.pid == pid).expect("a verdict");
    assert_eq!(v(4101).transport.name(), "mixed");
    assert_eq!(v(4101).paths.len(), 2, "the GET and the PUT, not the AM");
    assert_eq!(v(4100).transport.name(), "host-staged");
    assert!(e.fired("ucx-emulated-rma"));
    assert!(
        !e.fired("pageable-host-copies"),
        "UCX's own staging is not the application's copies"
    );
}

/// The emulated two-node NCCL job over NET/Socket: its paths carry their
/// process's TCP figures (retransmissions only on the lossy network), and
/// the verdict stays NET/Socket either way.
#[test]
fn socket_paths_carry_their_process_tcp() {
    for (name, want) in [("standin-nccl-nodes-tcp", 0), ("standin-nccl-nodes-tcp-drops", 240)] {
        let (r, _) = replay_fixture(name);
        let paths: Vec<_> = r.paths.iter().filter(|p| p.over_tcp()).collect();
        assert_eq!(paths.len(), 2, "{name}: one socket path per rank: {:?}", r.paths);
        for p in paths {
            assert_eq!(p.via, "NET/Socket", "{name}: {p:?}");
            let t = p
                .tcp
                .as_ref()
                .unwrap_or_else(|| panic!("{name}: no TCP figures on {p:?}"));
            assert_eq!((t.retransmits, t.lossy), (want, want > 0), "{name}: {t:?}");
            assert_eq!(Some(t.bytes_sent), r.fabric.tcp_of(p.pid).map(|x| x.bytes_sent));
        }
    }
    let (ib, _) = replay_fixture("standin-nccl-ib-retries");
    assert!(ib.paths.iter().all(|p| p.tcp.is_none()), "no TCP on an RDMA path");
}

/// Real recordings of Debian's ucx_perftest over tcp: counts, the path,
/// and the registration cache on and off.
#[test]
fn ucx_host_tcp_replayed() {
    let (r, _) = replay_fixture("ucx-host-tcp");
    let ux = r.ucx.as_ref().unwrap();
    let sender = ux.processes.iter().find(|p| p.data_calls > 0).expect("the sender");
    assert_eq!((sender.data_calls, sender.data_bytes), (8, 8 * 256 * 1024));
    let receiver = ux.processes.iter().find(|p| p.receives > 0).expect("the receiver");
    assert_eq!(receiver.receives, 8);
    assert!(
        ucx_paths(&r)
            .iter()
            .all(|(_, m, t, p)| m == "host" && *t == "socket" && p == "tcp")
    );
    let (off, e) = replay_fixture("ucx-host-tcp-rcache-off");
    let sender = off
        .ucx
        .as_ref()
        .unwrap()
        .processes
        .iter()
        .find(|p| p.data_calls > 0)
        .unwrap();
    assert!(sender.registrations_per_data_call.unwrap() >= 1.0, "{sender:?}");
    assert_eq!(sender.rcache.gets, 0, "no lookups with the cache off");
    let f = e.findings.iter().find(|f| f.rule == "ucx-rcache-disabled").unwrap();
    assert!(f.evidence[0].contains("UCX_RCACHE_ENABLE=n"), "{f:?}");
}

/// Recorded on 2×H200 (NCCL 2.28.3, driver 580; `validate --record`,
/// docs/validation/2026-11-30-gpu-h200-3.md): the three transport modes.
#[test]
fn gpu_nccl_modes_replayed() {
    for (mode, want, env) in [
        ("auto", "p2p/nvlink", None),
        ("no-p2p", "shm", Some("NCCL_P2P_DISABLE")),
        ("no-p2p-no-shm", "socket", Some("NCCL_SHM_DISABLE")),
    ] {
        let (r, e) = replay_fixture(&format!("gpu-h200-nccl-{mode}"));
        let ranks: Vec<_> = r.verdicts.iter().filter(|v| v.comm == "gdrtrace").collect();
        assert_eq!(ranks.len(), 2, "{mode}: two ranks: {:?}", r.verdicts);
        for v in &ranks {
            assert_eq!(v.transport.name(), want, "{mode}: {v:?}");
            assert_eq!(v.host_staged, want != "p2p/nvlink", "{mode}: {v:?}");
        }
        let collective: u64 = r.collectives.iter().map(|c| c.bytes).sum();
        assert!(collective > 1 << 30, "{mode}: collective bytes {collective}");
        match env {
            None => {
                assert!(!e.fired("nccl-env-forced"), "{mode}: {:?}", e.findings);
                assert!(ranks.iter().all(|v| v.cause.is_none()));
            }
            Some(var) => {
                let f: Vec<_> = e.findings.iter().filter(|f| f.rule == "nccl-env-forced").collect();
                assert_eq!(f.len(), 2, "{mode}: one finding per rank: {:?}", e.findings);
                assert!(
                    f.iter().all(|f| f.evidence.iter().any(|l| l.contains(var))),
                    "{mode}: {f:?}"
                );
            }
        }
        // Socket bytes come from the send/recv syscall probes: only the
        // socket transport moves the collectives through them.
        let socket: u64 = r
            .processes
            .iter()
            .map(|p| p.socket.bytes_sent + p.socket.bytes_received)
            .sum();
        if want == "socket" {
            assert!(socket >= collective / 2, "{mode}: socket {socket} of {collective}");
        } else {
            assert!(socket < collective / 100, "{mode}: socket {socket} of {collective}");
        }
    }
}

/// Peer copies after cuCtxEnablePeerAccess between GPUs that no NVLink
/// joins (stand-in: no such machine here) go over PCIe.
#[test]
fn peer_copies_without_nvlink_are_p2p_pcie() {
    let (r, e) = replay_fixture("standin-peer-copy-pcie");
    let peer = op(&r, "cuMemcpyPeer", "p2p/pcie").expect("cuMemcpyPeer p2p/pcie");
    assert_eq!(peer.calls, 5);
    assert!(op(&r, "cuMemcpyPeer", "p2p/nvlink").is_none());
    assert!(!e.fired("peer-access-not-enabled"), "{:?}", e.findings);
    let (r, _) = replay_fixture("standin-peer-copy-enabled");
    assert_eq!(op(&r, "cuMemcpyPeer", "p2p/nvlink").map(|o| o.calls), Some(5));
}

/// The same machine's cuda-copy workload: pageable copies host-staged,
/// pinned ones direct, peer copies with peer access over NVLink.
#[test]
fn gpu_cuda_copy_replayed() {
    let (r, _) = replay_fixture("gpu-h200-cuda-copy");
    let calls = |name: &str, transport: &str| op(&r, name, transport).map_or(0, |o| o.calls);
    // The workload's own count: every case ran this many copies.
    let per_case = r.workloads[0]["summary"]["calls_by_function"]["cuMemcpyPeer"]
        .as_u64()
        .expect("workload summary");
    assert!(per_case > 0);
    for name in ["cuMemcpyHtoD", "cuMemcpyDtoH"] {
        // One pageable case staged; the pinned case and the pinned half
        // of g2g-staged are direct DMA.
        assert_eq!(calls(name, "host-staged"), per_case, "{name} pageable");
        assert_eq!(calls(name, "gpu-host-dma"), 2 * per_case, "{name} pinned");
    }
    assert_eq!(
        calls("cuMemcpyPeer", "p2p/nvlink"),
        per_case,
        "peer copies: {:?}",
        r.operations
    );
    assert_eq!(calls("cuMemcpyPeer", "host-staged"), 0);
}

/// A copy loop that began 3.5 ms before the beat that closed its probes
/// and exited 11 ms later (a real `run` on the development host): the
/// estimates carry on alone a rate mostly of the time before the loop
/// began, so they are lower bounds, and say so; the verdict stands.
#[test]
fn copy_loop_begun_late_is_a_lower_bound() {
    let (r, _) = replay_fixture("standin-copy-loop-late");
    for name in ["cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync"] {
        let o = op(&r, name, "host-staged").unwrap_or_else(|| panic!("{name}: {:?}", r.operations));
        let counted = o.counted.expect("estimated, not counted");
        assert!((130..=140).contains(&counted), "{name}: {counted} counted");
        assert!(o.calls >= counted, "{name}: {} of {counted}", o.calls);
        assert!(o.lower_bound, "{name}: {} calls, not marked a lower bound", o.calls);
    }
}

/// Rules that read NCCL's log: (rule, recording, the log it fires with
/// under `tests/fixtures/logs`, a log of the same recording it must not).
const LOG_RULE_CASES: &[(&str, &str, &str, &str)] = &[
    (
        "nccl-net-plugin-no-gdr",
        "standin-nccl-nodes-staged",
        "nccl-net-aws-libfabric",
        "nccl-net-ib",
    ),
    (
        "nccl-net-plugin-failed",
        "standin-nccl-nodes",
        "nccl-net-libfabric-failed",
        "nccl-net-socket",
    ),
];

/// The GPUDirect Storage rules have no shipped recording yet (no GPU
/// recording of cuFile is kept); their causes are judged in
/// tracer/src/judge/files/tests.rs and on the libcufile stand-in's live
/// runs in tests/it/gds.rs.
const LIVE_ONLY_RULES: &[&str] = &[
    "gds-forced-compat",
    "gds-nvidia-fs-not-loaded",
    "gds-file-not-o-direct",
    "gds-denylisted",
    "gds-filesystem-not-supported",
    "gds-io-small-or-unaligned",
    "gds-p2p-blocked",
    "gds-buffer-not-registered",
];

#[test]
fn every_rule_has_a_triggering_and_a_quiet_fixture() {
    for rule in gdrtrace::explain::RULES {
        assert!(
            RULE_CASES.iter().any(|(id, _, _)| *id == rule.id)
                || LOG_RULE_CASES.iter().any(|(id, ..)| *id == rule.id)
                || LIVE_ONLY_RULES.contains(&rule.id),
            "rule {} has no fixture test",
            rule.id
        );
    }
    let log = |name: &str| {
        std::fs::read_to_string(dir().join(format!("../logs/{name}.log"))).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    for (id, rec, fires, quiet) in LOG_RULE_CASES {
        let (_, e) = replay_fixture_with_log(rec, Some(&log(fires)));
        let f = e
            .findings
            .iter()
            .find(|f| f.rule == *id)
            .unwrap_or_else(|| panic!("{id} did not fire on {rec} with {fires}: {:?}", e.findings));
        assert!(!f.evidence.is_empty() && f.pid.is_some(), "{id}: {f:?}");
        let (_, e) = replay_fixture_with_log(rec, Some(&log(quiet)));
        assert!(!e.fired(id), "{id} fired on {rec} with {quiet}: {:?}", e.findings);
        // Without a log neither fires: they read NCCL's own lines.
        let (_, e) = replay_fixture(rec);
        assert!(!e.fired(id), "{id} fired on {rec} without a log: {:?}", e.findings);
    }
    for (id, fires, quiet) in RULE_CASES {
        let (_, e) = replay_fixture(fires);
        let f = e
            .findings
            .iter()
            .find(|f| f.rule == *id)
            .unwrap_or_else(|| panic!("{id} did not fire on {fires}: {:?}", e.findings));
        assert!(!f.evidence.is_empty(), "{id} on {fires}: no evidence");
        assert!(f.pid.is_some(), "{id} on {fires}: no process");
        let (_, e) = replay_fixture(quiet);
        assert!(!e.fired(id), "{id} fired on {quiet}: {:?}", e.findings);
    }
}

#[test]
fn rules_name_their_evidence() {
    let (_, e) = replay_fixture("standin-peermem-efault");
    let f = e.findings.iter().find(|f| f.rule == "no-peer-memory-client").unwrap();
    assert!(
        f.evidence.iter().any(|l| l.contains("ib_umem_get failed with EFAULT")),
        "{f:?}"
    );
    assert!(f.evidence.iter().any(|l| l.contains("nvidia_peermem")), "{f:?}");
    assert!(f.evidence.iter().any(|l| l.contains("(cuMemAlloc) failed")), "{f:?}");
    // The failed registration is a path explained by the rule.
    assert!(
        e.paths
            .iter()
            .any(|p| p.what.contains("failed memory registrations") && p.explained_by == ["no-peer-memory-client"]),
        "{:?}",
        e.paths
    );
    let (_, e) = replay_fixture("standin-dmabuf-eopnotsupp");
    let f = e.findings.iter().find(|f| f.rule == "dmabuf-unsupported").unwrap();
    assert!(f.evidence.iter().any(|l| l.contains("EOPNOTSUPP")), "{f:?}");
    let (r, e) = replay_fixture("standin-nccl-no-p2p");
    assert_eq!(e.findings.iter().filter(|f| f.rule == "nccl-env-forced").count(), 2);
    assert!(
        e.findings
            .iter()
            .all(|f| f.evidence[0].starts_with("NCCL_P2P_DISABLE=1"))
    );
    // Every NCCL_* override is listed, informational variables are not.
    assert!(r.overrides.iter().any(|o| o.var == "NCCL_TOPO_FILE"));
    assert!(!r.overrides.iter().any(|o| o.var == "NCCL_DEBUG"));
}

#[test]
fn gpudirect_verdicts_of_the_registration_paths() {
    let (r, _) = replay_fixture("standin-peermem-ok");
    let mr = op(&r, "ibv_reg_mr", "gpudirect-rdma/peer-mem").expect("peer-mem MR");
    assert!(
        mr.evidence
            .contains("MR lkey 0x1234 covers GPU allocation 0x7f3a00000000 (cuMemAlloc)"),
        "{}",
        mr.evidence
    );
    assert!(op(&r, "nvidia_p2p_get_pages", "gpudirect-rdma/peer-mem").is_some());
    let reg = &r.registration.processes[0];
    assert_eq!(reg.by_backing["gpu/peer-mem"].registrations, 1);
    assert_eq!(reg.by_backing["gpu/peer-mem"].deregistrations, 1);
    assert!(r.registration.latency_by_backing.contains_key("gpu/peer-mem"));
    assert!(r.registration.latency_by_kernel_path.contains_key("ib_umem_get"));
    assert!(
        r.registration
            .latency_by_kernel_path
            .contains_key("nvidia_p2p_get_pages")
    );

    let (r, _) = replay_fixture("standin-dmabuf-ok");
    let mr = op(&r, "ibv_reg_dmabuf_mr", "gpudirect-rdma/dma-buf").expect("dma-buf MR");
    assert!(
        mr.evidence
            .contains("registered through dma-buf fd 17 exported by cuMemGetHandleForAddressRange"),
        "{}",
        mr.evidence
    );
    assert!(mr.evidence.contains("(cuMemAlloc)"), "{}", mr.evidence);
    assert_eq!(r.registration.processes[0].by_backing["gpu/dma-buf"].registrations, 1);

    // Failed registrations moved nothing: unknown, counted as errors.
    let (r, _) = replay_fixture("standin-dmabuf-eopnotsupp");
    let mr = op(&r, "ibv_reg_dmabuf_mr", "unknown").expect("failed dma-buf MR");
    assert_eq!(mr.errors, 1);
    assert_eq!(
        r.registration.processes[0]
            .kernel_failures
            .get("ib_umem_dmabuf_get: EOPNOTSUPP"),
        Some(&1)
    );
}

#[test]
fn copy_verdicts_and_staged_pairs() {
    let (r, _) = replay_fixture("standin-peer-copy-enabled");
    assert_eq!(op(&r, "cuMemcpyPeer", "p2p/nvlink").map(|o| o.calls), Some(5));
    // Pinned copies are direct DMA; together they stage one GPU-to-GPU transfer.
    assert!(op(&r, "cuMemcpyDtoH", "gpu-host-dma").is_some());
    assert!(op(&r, "cuMemcpyHtoD", "gpu-host-dma").is_some());
    let pair = transfer(&r, "cuMemcpyDtoH+cuMemcpyHtoD");
    assert_eq!((pair.transport, pair.count, pair.bytes), ("host-staged", 1, 16 << 20));
    assert!(
        pair.sample[0].evidence.contains("(pinned)"),
        "{}",
        pair.sample[0].evidence
    );
    let s = &r.staging.processes[0];
    assert_eq!((s.staged_pairs, s.staging_copies, s.staged_bytes), (1, 1, 16 << 20));
    assert!(s.staged_ratio > 0.0 && s.staged_ratio < 1.0, "{}", s.staged_ratio);
    assert!(s.cpu_s_per_gb.is_some());

    // Devices come from the context current at allocation time.
    let o = op(&r, "cuMemcpyDtoD", "p2p/nvlink").expect("peer DtoD");
    assert!(
        o.evidence
            .contains("from device 0 to device 1 after cuCtxEnablePeerAccess"),
        "{}",
        o.evidence
    );

    let (r, e) = replay_fixture("standin-peer-copy-no-access");
    let o = op(&r, "cuMemcpyPeer", "host-staged").expect("staged peer copies");
    assert!(o.evidence.contains("without cuCtxEnablePeerAccess"), "{}", o.evidence);
    let o = op(&r, "cuMemcpyDtoD", "host-staged").expect("staged cross-device DtoD");
    assert!(
        o.evidence.contains("from device 0 to device 1 without"),
        "{}",
        o.evidence
    );
    let s = &r.staging.processes[0];
    assert_eq!((s.staging_copies, s.staged_ratio), (8, 1.0));
    assert!((s.staging_copies_per_s - 4.0).abs() < 1e-9, "8 copies in 2 s");
    let f = e.findings.iter().find(|f| f.rule == "peer-access-not-enabled").unwrap();
    assert_eq!(f.evidence.len(), 2, "cuMemcpyPeer and cuMemcpyDtoD: {f:?}");

    // Real: pageable copies through the libcuda stand-in are host-staged.
    let (r, _) = replay_fixture("standin-uapi");
    assert_eq!(op(&r, "cuMemcpyHtoD", "host-staged").map(|o| o.calls), Some(2));
    assert!(transfer(&r, "ibv_reg_mr").sample[0].evidence.starts_with("MR lkey 0x"));
}

#[test]
fn churn_and_staging_accounting() {
    // Real pin-churn recording: 40 io_uring register/unregister cycles.
    let (r, _) = replay_fixture("pin-churn");
    let reg = &r.registration.processes[0];
    let u = &reg.by_backing["io_uring"];
    assert_eq!((u.registrations, u.deregistrations), (40, 40));
    assert!(u.registrations_per_s > 0.0);
    assert_eq!(reg.reregistrations_of_seen_range, 39);
    let range = reg.most_registered_range.as_ref().unwrap();
    assert!(range.io_uring && range.times == 40 && range.length == 2, "{range:?}");
    assert_eq!(reg.lifetime.as_ref().map(|l| l.count), Some(40));
    assert_eq!(r.registration.latency_by_backing["io_uring"].count, 40);

    // Communicators take their process's verdict; staged bytes follow it.
    let (r, _) = replay_fixture("standin-nccl-p2p");
    assert!(
        r.staging
            .communicators
            .iter()
            .all(|c| c.transport == "p2p/nvlink" && c.staged_bytes == 0)
    );
    let (r, _) = replay_fixture("standin-nccl-no-p2p");
    assert_eq!(r.staging.communicators.len(), 2);
    assert!(
        r.staging
            .communicators
            .iter()
            .all(|c| c.transport == "shm" && c.staged_ratio == 1.0)
    );
    let g = transfer(&r, "ncclAllReduce");
    assert_eq!((g.transport, g.count), ("shm", 400));
    assert_eq!(g.sample[0].communicator.as_deref(), Some("0x55d9dbb07aa0"));
}

#[test]
fn nccl_log_per_communicator_on_a_replay() {
    let log = "h:4100:4100 [0] NCCL INFO ncclCommInitRank comm 0x55d9dbb07aa0 rank 0 nranks 2 cudaDev 0 - Init START\n\
               h:4100:4100 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct\n\
               h:4101:4101 [1] NCCL INFO ncclCommInitRank comm 0x55d9dbb08aa0 rank 1 nranks 2 cudaDev 1 - Init START\n\
               h:4101:4101 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM\n";
    let (r, _) = replay_fixture_with_log("standin-nccl-no-p2p", Some(log));
    let l = r.nccl_log.as_ref().unwrap();
    let c: Vec<_> = l.communicators.iter().map(|c| (c.pid, c.agrees)).collect();
    assert_eq!(c, vec![(4100, Some(true)), (4101, Some(false))]);
}

/// A one-rank torch all-reduce job under `run` on one H200 (2026-12-01):
/// its set-up looks like NCCL's socket transport (pinned host buffers,
/// no exports), but its one communicator has one rank.
#[test]
fn one_rank_job_on_one_gpu() {
    let (r, _) = replay_fixture("gpu-h200-one-rank-run");
    let ranks: Vec<_> = r
        .processes
        .iter()
        .filter(|p| !p.nccl_ranks.is_empty())
        .map(|p| p.nccl_ranks.clone())
        .collect();
    assert_eq!(ranks, vec![vec![1]]);
    assert_eq!(r.verdicts.len(), 1);
    assert!(
        gdrtrace::classify::comm::is_one_rank(&r.verdicts[0]),
        "{:?}",
        r.verdicts[0]
    );
}

/// The same job moved nothing between devices (issue 23): its
/// all-reduces were counted, but on a one-rank communicator, so none
/// of their bytes (816 MB in this recording) is "moved" in the staging
/// section, which the text report's MOVED column prints.
#[test]
fn one_rank_job_moves_nothing_between_devices() {
    let (r, _) = replay_fixture("gpu-h200-one-rank-run");
    let counted: u64 = r.collectives.iter().map(|c| c.bytes).sum();
    assert!(counted > 0, "the all-reduces were counted");
    assert!(
        r.collectives.iter().all(|c| c.nranks == Some(1) && c.rank == Some(0)),
        "{:?}",
        r.collectives
    );
    assert!(
        r.staging
            .communicators
            .iter()
            .all(|c| c.bytes == 0 && c.staged_bytes == 0)
    );
    for s in &r.staging.processes {
        let p = r.processes.iter().find(|p| p.pid == s.pid).expect("process");
        assert_eq!(s.moved_bytes, p.moved_bytes, "only its copies count as moved: {s:?}");
    }
}

/// Every report under `tests/fixtures/reports/` that carries verdicts
/// (drop a full `attach --json` report there, with its NCCL log as
/// `tests/fixtures/logs/<name>.log` and its `--record` recording as
/// `tests/fixtures/recordings/<name>.rec[.gz]`, and it is checked too):
/// - judged again from the inputs it holds (what `explain` does), it
///   reaches the verdicts the live trace wrote;
/// - with its log, no rank and no communicator disagrees with NCCL, and
///   every decided rank agrees;
/// - its recording, replayed, reaches the same verdicts.
#[test]
fn saved_reports_are_judged_alike_by_explain_and_replay() {
    use gdrtrace::classify::Transport;
    // Verdicts per process and transports per (process, communicator).
    type Judged = (Vec<(u32, Transport)>, Vec<(u32, String, String)>);
    let judged = |r: &Report| -> Judged {
        (
            r.verdicts.iter().map(|v| (v.pid, v.transport)).collect(),
            r.collectives
                .iter()
                .map(|c| (c.pid, c.communicator.clone(), c.transport.to_string()))
                .collect(),
        )
    };
    let root = dir().join("..");
    let mut checked = Vec::new();
    let mut with_recording = Vec::new();
    for entry in std::fs::read_dir(root.join("reports")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        if v["schema"] != gdrtrace::report::SCHEMA {
            // Trimmed excerpts (no schema) are not reports.
            continue;
        }
        let carried: Report = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let log = std::fs::read_to_string(root.join("logs").join(format!("{name}.log"))).ok();
        // `explain` of the report's JSON: the typed report, judged again.
        let (explained, notes) = gdrtrace::cmd::explain::read_and_rejudge(v, log.as_deref()).unwrap();
        assert!(notes.is_empty(), "{name}: {notes:?}");
        assert_eq!(judged(&explained), judged(&carried), "{name}: explain");
        if log.is_some() {
            for v in &explained.verdicts {
                let decided = !matches!(v.transport, Transport::Unknown | Transport::Ambiguous);
                if let Some(l) = &v.nccl_log {
                    assert!(!decided || l.agrees, "{name}: {v:?}");
                }
            }
            for c in &explained.nccl_log.as_ref().unwrap().communicators {
                assert_ne!(c.agrees, Some(false), "{name}: {c:?}");
            }
        }
        let rec = ["rec", "rec.gz"]
            .iter()
            .map(|x| dir().join(format!("{name}.{x}")))
            .find(|p| p.exists());
        if let Some(rec) = rec {
            let rec = gdrtrace::cmd::replay::load(&rec).unwrap();
            let (replayed, _) = gdrtrace::cmd::replay::rebuild(&rec, log.as_deref()).unwrap();
            assert_eq!(judged(&replayed), judged(&carried), "{name}: replay");
            with_recording.push(name.clone());
        }
        checked.push(name);
    }
    for want in [
        "standin-attach-no-p2p-no-shm",
        "standin-attach-no-p2p",
        "standin-attach-auto",
        "standin-attach-two-jobs",
    ] {
        assert!(checked.iter().any(|c| c == want), "{want} not checked: {checked:?}");
    }
    for want in [
        "gpu-h200-attach-full-auto",
        "gpu-h200-attach-full-no-p2p",
        "gpu-h200-attach-full-no-p2p-no-shm",
        "standin-attach-two-jobs",
    ] {
        assert!(
            with_recording.iter().any(|c| c == want),
            "{want} not replayed: {with_recording:?}"
        );
    }
}

/// Two jobs on the same GPUs under one attach (issue 12), replayed from
/// the real two-job recording (a default job and an NCCL_P2P_DISABLE=1
/// one, over the libnccl stand-in) with the GPU link counters a GPU
/// machine would have given (none here): NVLink busy, no NIC.
#[test]
fn two_jobs_sharing_gpus_replayed() {
    use gdrtrace::{classify::steady::GpuLinks, stats::source::Fact};
    let path = dir().join("standin-attach-two-jobs.rec");
    let with_links = |strip_p2p_env: bool| {
        let mut rec = gdrtrace::cmd::replay::load(&path).unwrap();
        rec.footer.gpu_links = Some(GpuLinks {
            nvlink_between_gpus: true,
            nvlink_bytes: 500 << 30,
            rdma_nics: 0,
            gpu_processes: None,
        });
        if strip_p2p_env {
            // As if NCCL_P2P_DISABLE came from an nccl.conf (not in the environment).
            for (_, facts) in &mut rec.inputs {
                for f in facts {
                    if let Fact::Process { env, .. } | Fact::Env { env, .. } = f {
                        env.remove("NCCL_P2P_DISABLE");
                    }
                }
            }
        }
        gdrtrace::cmd::replay::rebuild(&rec, None).unwrap().0
    };
    let (live, _) = replay_fixture("standin-attach-two-jobs");
    let p2p_off: Vec<u32> = live
        .processes
        .iter()
        .filter(|p| p.env.contains_key("NCCL_P2P_DISABLE"))
        .map(|p| p.pid)
        .collect();
    assert_eq!(p2p_off.len(), 3, "launcher and two ranks of the SHM job");

    // The SHM job's own environment rules it off NVLink: the counters
    // are the other job's.
    let r = with_links(false);
    assert_eq!(r.verdicts.len(), 4);
    for v in &r.verdicts {
        let want = if p2p_off.contains(&v.pid) { "shm" } else { "p2p/nvlink" };
        assert_eq!(v.transport.name(), want, "{v:?}");
    }
    // Nothing of its own decides: neither job is labelled.
    let r = with_links(true);
    for v in &r.verdicts {
        assert_eq!(v.transport.name(), "ambiguous", "{v:?}");
        assert!(
            v.evidence.iter().any(|e| e.contains("another job, traced")),
            "{:?}",
            v.evidence
        );
    }
}

/// NCCL's network paths on the stand-ins: two ranks on emulated hosts
/// without an RDMA device (NET/Socket, the inter-node cause), and NET/IB
/// through host buffers with the NIC on the remote socket (the GPU-NIC
/// distance, not a missing peer-memory client, explains it).
#[test]
fn nccl_network_paths_on_the_stand_ins() {
    let (r, e) = replay_fixture("standin-nccl-nodes");
    assert_eq!(r.verdicts.len(), 2, "{:?}", r.verdicts);
    for v in &r.verdicts {
        assert_eq!(
            (v.transport.name(), v.host_staged, v.net.map(|n| n.name())),
            ("socket", true, Some("NET/Socket")),
            "{v:?}"
        );
        let c = v.cause.as_deref().unwrap();
        assert!(
            c.starts_with("inter-node traffic over TCP sockets (NET/Socket): NCCL found no usable RDMA device"),
            "{c}"
        );
        assert!(v.other_hosts.as_deref().unwrap().contains("gdrtrace-emu-"), "{v:?}");
    }
    assert!(
        e.paths.iter().all(|p| p.explained_by == vec!["nccl-no-rdma-device"]),
        "{:?}",
        e.paths
    );
    let (r, e) = replay_fixture("standin-nccl-nic-far");
    for v in &r.verdicts {
        assert_eq!(
            (v.transport.name(), v.host_staged, v.net.map(|n| n.name())),
            ("host-staged", true, Some("NET/IB")),
            "{v:?}"
        );
        assert!(
            v.cause.as_deref().unwrap().starts_with("NET/IB without GPUDirect RDMA"),
            "{v:?}"
        );
        assert!(v.other_hosts.is_none());
    }
    assert!(
        e.fired("gpu-nic-far") && !e.fired("nccl-no-rdma-device"),
        "{:?}",
        e.findings
    );
    let far = e.findings.iter().find(|f| f.rule == "gpu-nic-far").unwrap();
    assert!(far.evidence.iter().any(|l| l.contains("inter-socket link")), "{far:?}");
    // The real one-node socket job (P2P and SHM disabled) keeps its cause.
    let (r, _) = replay_fixture("gpu-h200-nccl-no-p2p-no-shm");
    for v in r.verdicts.iter().filter(|v| v.comm == "gdrtrace") {
        assert_eq!(v.net.map(|n| n.name()), Some("NET/Socket"));
        assert!(v.other_hosts.is_none());
        assert!(
            v.cause
                .as_deref()
                .unwrap()
                .starts_with("NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1"),
            "{v:?}"
        );
    }
}

/// validate's emulated-node checks hold on the stand-in of that job and
/// catch a one-host socket job (no inter-node cause, no rule for it).
/// The summary `drive nccl` writes, of `ranks` ranks making `calls` calls each.
fn nccl_summary(ranks: usize, calls: u64) -> gdrtrace::drive::nccl::NcclReport {
    gdrtrace::drive::nccl::NcclReport {
        ranks,
        hosts: 2,
        mode: gdrtrace::drive::nccl::NcclMode::Auto,
        op: gdrtrace::drive::nccl::NcclOp::AllReduce,
        env: Default::default(),
        calls,
        calls_by_function: Default::default(),
        control_calls: 0,
        duration_s: None,
        duration_iters: 0,
        sizes: Vec::new(),
        verified: true,
        nccl_version: String::new(),
        nccl_library: String::new(),
        parent_pid: 0,
        rank_reports: Vec::new(),
        elapsed_s: 0.0,
    }
}

#[test]
fn validate_node_checks() {
    let summary = nccl_summary(2, 200);
    let (r, _) = replay_fixture("standin-nccl-nodes");
    let checks = gdrtrace::cmd::validate::nodes_checks(&r, Some(&summary), "2 nodes x 1 GPU");
    assert_eq!(checks.len(), 5);
    assert!(checks.iter().all(|c| c.ok), "{checks:?}");
    let (r, _) = replay_fixture("gpu-h200-nccl-no-p2p-no-shm");
    let calls = r
        .collectives
        .iter()
        .find(|c| c.op == "ncclAllReduce")
        .map_or(0, |c| c.calls);
    let summary = nccl_summary(2, calls);
    let failed: Vec<String> = gdrtrace::cmd::validate::nodes_checks(&r, Some(&summary), "one host")
        .into_iter()
        .filter(|c| !c.ok)
        .map(|c| c.name)
        .collect();
    assert_eq!(
        failed,
        vec![
            "one host: cause is inter-node, from the host identities",
            "one host: explain names a cause for every rank"
        ],
        "{failed:?}"
    );
}

/// The emulated two-node job on one H200 (`scripts/gpu/nodes.sh`: two
/// ranks on GPU 0, each with its own NCCL_HOSTID): its untrimmed
/// reports `gpu-h200-nodes-{run,attach}-{default,ib-disable,net-socket}`
/// with their NCCL logs and recordings. Each file present is checked
/// (the files come from the GPU machine; the generic check above holds
/// them to replay and the log as well): every rank socket on NET/Socket,
/// host-staged, with the variant's cause (inter-node without an RDMA
/// device, or the variable that chose sockets) and the rule that names
/// it, no path `explain` cannot explain, NCCL's log agreeing, and the
/// recording replayed to the same verdicts and causes.
#[test]
fn emulated_nodes_fixtures() {
    let root = dir().join("..");
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(root.join("reports")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        if !name.starts_with("gpu-h200-nodes-") || path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let (cause, rule) = if name.ends_with("-ib-disable") {
            ("NCCL_IB_DISABLE=1", "nccl-env-forced")
        } else if name.ends_with("-net-socket") {
            ("NCCL_NET=Socket", "nccl-env-forced")
        } else {
            ("inter-node traffic over TCP sockets", "nccl-no-rdma-device")
        };
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let log = std::fs::read_to_string(root.join("logs").join(format!("{name}.log"))).ok();
        let (r, _) = gdrtrace::cmd::explain::read_and_rejudge(v, log.as_deref()).unwrap();
        let ranks: Vec<_> = r.verdicts.iter().filter(|v| v.net.is_some()).collect();
        assert_eq!(ranks.len(), 2, "{name}: two ranks: {:?}", r.verdicts);
        for v in &ranks {
            assert_eq!(
                (v.transport.name(), v.host_staged, v.net.map(|n| n.name())),
                ("socket", true, Some("NET/Socket")),
                "{name}: {v:?}"
            );
            assert!(
                v.cause.as_deref().is_some_and(|c| c.starts_with(cause)),
                "{name}: {v:?}"
            );
            assert!(v.other_hosts.is_some(), "{name}: {v:?}");
        }
        let e = &r.explain;
        assert!(e.fired(rule), "{name}: {:?}", e.findings);
        let unexplained: Vec<_> = e.paths.iter().filter(|p| p.explained_by.is_empty()).collect();
        assert!(unexplained.is_empty(), "{name}: {unexplained:?}");
        if let Some(l) = &r.nccl_log {
            assert!(l.communicators.iter().all(|c| c.agrees != Some(false)), "{name}: {l:?}");
            assert!(l.communicators.iter().any(|c| c.agrees == Some(true)), "{name}: {l:?}");
        }
        let rec = ["rec", "rec.gz"]
            .iter()
            .map(|x| dir().join(format!("{name}.{x}")))
            .find(|p| p.exists());
        if let Some(rec) = rec {
            let rec = gdrtrace::cmd::replay::load(&rec).unwrap();
            let (replayed, _) = gdrtrace::cmd::replay::rebuild(&rec, log.as_deref()).unwrap();
            let said = |r: &Report| -> Vec<(u32, Option<String>)> {
                r.verdicts.iter().map(|v| (v.pid, v.cause.clone())).collect()
            };
            assert_eq!(said(&replayed), said(&r), "{name}: replay");
        }
        checked.push(name);
    }
    if checked.is_empty() {
        eprintln!(
            "skipping: no gpu-h200-nodes-* reports in tests/fixtures/reports yet (scripts/gpu/nodes.sh writes them)"
        );
    }
}

#[test]
fn replay_is_deterministic() {
    for name in ["pin-churn", "standin-uapi", "standin-nccl-acs"] {
        let a = serde_json::to_string(&replay_fixture(name).0).unwrap();
        let b = serde_json::to_string(&replay_fixture(name).0).unwrap();
        assert_eq!(a, b, "{name}");
    }
}
