use super::*;

pub(super) fn ev(calls: &[(&str, u64)], env: &[(&str, &str)]) -> Evidence {
    Evidence {
        pid: 7,
        comm: "rank0".into(),
        calls: calls.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        nvlink: Some(true),
        nccl_ranks: Vec::new(),
        registrations: BTreeMap::new(),
        network: Network::default(),
    }
}

// A one-rank torch job on one H200 (2026-12-01): NCCL allocated its
// pinned host buffers as for a socket transport, but had no peer.
#[test]
fn one_rank_communicator_has_no_transport() {
    let calls = [
        ("ncclCommInitRankConfig", 1),
        ("cuMemHostAlloc", 4),
        ("ncclAllReduce", 106_360),
    ];
    let mut e = ev(&calls, &[]);
    assert_eq!(
        verdict(&e).unwrap().transport,
        Transport::Socket,
        "without the rank count"
    );
    e.nccl_ranks = vec![1];
    let v = verdict(&e).unwrap();
    assert_eq!(v.transport, Transport::Unknown);
    assert!(!v.host_staged);
    assert!(is_one_rank(&v), "{:?}", v.evidence);
    // One communicator of two ranks among them: judged as before.
    e.nccl_ranks = vec![1, 2];
    assert_eq!(verdict(&e).unwrap().transport, Transport::Socket);
}

// Counts as measured with NCCL 2.28 on 2xH200 (ENVIRONMENT notes).
#[test]
fn nccl_modes() {
    let auto = ev(
        &[
            ("ncclCommInitRank", 1),
            ("cuDeviceCanAccessPeer", 104),
            ("cuMemExportToShareableHandle", 96),
            ("cuMemImportFromShareableHandle", 96),
        ],
        &[],
    );
    let v = verdict(&auto).unwrap();
    assert_eq!(v.transport, Transport::P2pNvlink);
    assert!(!v.host_staged && v.cause.is_none());

    let shm = ev(
        &[
            ("ncclCommInitRank", 1),
            ("cuMemExportToShareableHandle", 16),
            ("cuMemImportFromShareableHandle", 16),
        ],
        &[("NCCL_P2P_DISABLE", "1")],
    );
    let v = verdict(&shm).unwrap();
    assert_eq!(v.transport, Transport::Shm);
    assert!(v.host_staged);
    assert!(v.cause.as_deref().unwrap().contains("NCCL_P2P_DISABLE=1"));

    let sock = ev(
        &[("ncclCommInitRank", 1), ("cuMemHostAlloc", 16)],
        &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
    );
    let v = verdict(&sock).unwrap();
    assert_eq!(v.transport, Transport::Socket);
    assert!(v.cause.as_deref().unwrap().contains("NCCL_SHM_DISABLE=1"));

    assert!(verdict(&ev(&[("cuMemAlloc", 3)], &[])).is_none());
    // Attached after set-up: collectives and the application's own pinned
    // allocations are no evidence of NCCL's choice (no socket verdict).
    assert!(verdict(&ev(&[("ncclAllReduce", 900), ("cuMemHostAlloc", 4)], &[])).is_none());
}

#[test]
fn log_lines_and_agreement() {
    let log = "h:4242:4300 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n\
               h:4243:4301 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct\n\
               h:4244:4302 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0\n\
               h:4245:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/2/GDRDMA\n";
    let m = parse_nccl_log(log);
    assert_eq!(m[&4242], vec!["P2P/CUMEM"]);
    assert_eq!(transport_of_via(&m[&4243][0]), Transport::Shm);
    assert_eq!(transport_of_via(&m[&4244][0]), Transport::Socket);
    assert_eq!(transport_of_via(&m[&4245][0]), Transport::GdrPeerMem);
    let mut v = vec![Verdict {
        pid: 4243,
        comm: String::new(),
        transport: Transport::P2pNvlink,
        host_staged: false,
        basis: Basis::SetUp,
        evidence: vec![],
        cause: None,
        cause_kind: None,
        nccl_log: None,
        net: None,
        other_hosts: None,
        paths: Vec::new(),
    }];
    corroborate(&mut v, &m, &Context::default());
    assert!(!v[0].nccl_log.as_ref().unwrap().agrees);
}

#[test]
fn log_per_communicator_and_gdr_lines() {
    // Lines as NCCL 2.28 prints them (NVIDIA/nccl issues #778, #1537; 2xH200 runs).
    let log = "vm:639:639 [0] NCCL INFO ncclCommInitRank comm 0x55d9dbb07aa0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0x76 - Init START\n\
               vm:639:639 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n\
               vm:639:639 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC\n\
               vm:639:639 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1\n\
               vm:639:639 [0] NCCL INFO ncclCommInitRank comm 0x55d9dbb07aa0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0x76 - Init COMPLETE\n\
               vm:700:700 [0] NCCL INFO ncclCommInitRank comm 0x1000 rank 0 nranks 2 cudaDev 0 - Init START\n\
               vm:700:700 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'\n\
               vm:700:700 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0\n\
               vm:700:700 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0\n\
               vm:700:700 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 0\n\
               vm:701:701 [1] NCCL INFO NET/IB : GPU Direct RDMA (DMABUF) enabled for HCA 0 'mlx5_0'\n\
               vm:701:701 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/IB/0/GDRDMA\n\
               vm:701:701 [1] misc/ibvwrap.cc:288 NCCL WARN Call to ibv_reg_dmabuf_mr failed with error Operation not supported\n\
               vm:702:702 [0] NCCL INFO Channel 03 : 0[0] -> 1[1] via SHM/direct/direct\n";
    let mut r = crate::report::tests_support::empty_report();
    r.collectives.push(crate::report::Collective {
        lower_bound: false,
        pid: 639,
        op: "ncclAllReduce".into(),
        communicator: "0x55d9dbb07aa0".into(),
        calls: 3,
        bytes: 300,
        transport: "p2p/nvlink",
        counted: None,
        comm_id: None,
        rank: None,
        nranks: None,
    });
    r.verdicts.push(Verdict {
        pid: 700,
        comm: String::new(),
        transport: Transport::Socket,
        host_staged: true,
        basis: Basis::SetUp,
        evidence: vec![],
        cause: None,
        cause_kind: None,
        nccl_log: None,
        net: None,
        other_hosts: None,
        paths: Vec::new(),
    });
    let l = crate::report::judged::nccl_log_agreement(log, &r);
    let c0 = &l.communicators[0];
    assert_eq!(
        (c0.pid, c0.communicator.as_str(), c0.rank, c0.nranks),
        (639, "0x55d9dbb07aa0", Some(0), Some(2))
    );
    assert_eq!(c0.vias, vec!["P2P/CUMEM", "P2P/IPC"]);
    assert_eq!((c0.gdr, c0.agrees), (Some(true), Some(true)));
    let c1 = &l.communicators[1];
    assert_eq!(c1.gdr, Some(false));
    assert_eq!(c1.nccl_says, vec!["host-staged", "socket"]);
    assert_eq!(
        c1.agrees,
        Some(false),
        "NET/IB without GDRDMA is host-staged, not socket"
    );
    let p700 = l.processes.iter().find(|p| p.pid == 700).unwrap();
    assert!(p700.gdr_lines[0].contains("GPU Direct RDMA Disabled for HCA 0"));
    let p701 = l.processes.iter().find(|p| p.pid == 701).unwrap();
    assert!(p701.gdr_lines[0].contains("(DMABUF) enabled"));
    assert!(p701.warnings[0].contains("ibv_reg_dmabuf_mr failed"));
    assert_eq!(transport_of_via("NET/IB/0/GDRDMA"), Transport::GdrPeerMem);
    assert_eq!(transport_of_via("SHM/direct/direct"), Transport::Shm);
}

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// NCCL's host identity: NCCL_HOSTID, else this machine (src/misc/utils.cc).
#[test]
fn other_hosts_compare_nccl_host_identities() {
    let a = env(&[("NCCL_HOSTID", "gdrtrace-emu-0")]);
    let b = env(&[("NCCL_HOSTID", "gdrtrace-emu-1")]);
    let none = env(&[("NCCL_DEBUG", "INFO")]);
    let why = other_hosts(1, &a, [(1, &a), (2, &b)]).unwrap();
    assert!(
        why.contains("NCCL_HOSTID=gdrtrace-emu-0 here, NCCL_HOSTID=gdrtrace-emu-1 for pid 2"),
        "{why}"
    );
    assert!(
        other_hosts(1, &a, [(1, &a), (2, &a.clone())]).is_none(),
        "same identity"
    );
    assert!(other_hosts(1, &none, [(2, &none.clone())]).is_none(), "one machine");
    // One rank with NCCL_HOSTID, one without: two hosts to NCCL.
    let why = other_hosts(2, &none, [(1, &a), (2, &none)]).unwrap();
    assert!(why.starts_with("no NCCL_HOSTID (this machine"), "{why}");
    // Alone: nothing to compare with.
    assert!(other_hosts(1, &a, [(1, &a)]).is_none());
    // NCCL hashes an empty NCCL_HOSTID as it is: another identity.
    assert_eq!(host_id(&env(&[("NCCL_HOSTID", "")])), Some(""));
    assert_eq!(host_id(&none), None);
}

/// The emulated two-node job on one H200 (2026-12-01): two ranks on
/// GPU 0 with their own NCCL_HOSTID, NET/Socket, no RDMA device.
#[test]
fn inter_node_socket_cause() {
    let calls = [("ncclCommInitRankConfig", 1), ("cuMemHostAlloc", 8)];
    let two_hosts = |vars: &[(&str, &str)]| {
        let mut e = ev(&calls, vars);
        e.nccl_ranks = vec![2];
        let peer = env(&[("NCCL_HOSTID", "gdrtrace-emu-1")]);
        e.network = Network {
            other_hosts: other_hosts(e.pid, &e.env, [(e.pid, &e.env), (8, &peer)]),
            rdma_devices: Some(Vec::new()),
        };
        verdict(&e).unwrap()
    };
    let v = two_hosts(&[("NCCL_HOSTID", "gdrtrace-emu-0")]);
    assert_eq!(
        (v.transport, v.host_staged, v.net),
        (Transport::Socket, true, Some(Net::SOCKET))
    );
    let c = v.cause.as_deref().unwrap();
    assert!(
        c.starts_with("inter-node traffic over TCP sockets (NET/Socket): NCCL found no usable RDMA device"),
        "{c}"
    );
    assert!(!c.contains("P2P was not possible"), "{c}");
    assert!(v.other_hosts.as_deref().unwrap().contains("gdrtrace-emu-1"));
    assert!(
        v.evidence.iter().any(|l| l.contains("different hosts")),
        "{:?}",
        v.evidence
    );
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(json["net"], "NET/Socket");
    assert_eq!(json["transport"], "socket");
    let back: Verdict = serde_json::from_value(json).unwrap();
    // The cause's kind is serve's label, not in reports: read back without it.
    assert_eq!(v.cause_kind, Some(CauseKind::NoRdmaDevice));
    assert_eq!(
        back,
        Verdict {
            cause_kind: None,
            ..v.clone()
        }
    );

    let v = two_hosts(&[("NCCL_HOSTID", "gdrtrace-emu-0"), ("NCCL_IB_DISABLE", "1")]);
    assert!(
        v.cause.as_deref().unwrap().starts_with("NCCL_IB_DISABLE=1"),
        "{:?}",
        v.cause
    );
    let v = two_hosts(&[("NCCL_HOSTID", "gdrtrace-emu-0"), ("NCCL_NET", "Socket")]);
    assert!(
        v.cause.as_deref().unwrap().starts_with("NCCL_NET=Socket"),
        "{:?}",
        v.cause
    );
    // RDMA devices present but unused.
    let mut e = ev(&calls, &[("NCCL_HOSTID", "a")]);
    e.network = Network {
        other_hosts: Some("differs".into()),
        rdma_devices: Some(vec!["mlx5_0".into()]),
    };
    let c = verdict(&e).unwrap().cause.unwrap();
    assert!(c.contains("mlx5_0") && c.contains("did not use"), "{c}");

    // One host, nothing disabled: NCCL's network without a known second
    // host; the cause says when NCCL does that, not "P2P was not possible".
    let v = verdict(&ev(&calls, &[])).unwrap();
    let c = v.cause.unwrap();
    assert!(
        c.contains("different hosts") && !c.contains("P2P was not possible"),
        "{c}"
    );
    assert!(v.other_hosts.is_none());
    // One host, P2P and SHM disabled: the variables, as before.
    let v = verdict(&ev(&calls, &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")])).unwrap();
    assert!(
        v.cause
            .unwrap()
            .starts_with("NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1")
    );
}

/// NET/IB: NCCL registers its buffers with the NIC; GPU memory when
/// GPUDirect RDMA is on, host staging buffers when not (stand-in counts).
#[test]
fn net_ib_paths_from_registrations() {
    let calls = [("ncclCommInitRank", 1), ("cuMemHostAlloc", 2), ("ibv_reg_mr", 2)];
    let with = |backing: &[(&str, u64)], vars: &[(&str, &str)]| {
        let mut e = ev(&calls, vars);
        e.registrations = backing.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        verdict(&e).unwrap()
    };
    let v = with(&[("host", 2)], &[]);
    assert_eq!(
        (v.transport, v.host_staged, v.net),
        (Transport::HostStaged, true, Some(Net::IB))
    );
    assert!(v.cause.as_deref().unwrap().starts_with("NET/IB without GPUDirect RDMA"));
    let v = with(&[("host", 2)], &[("NCCL_NET_GDR_LEVEL", "LOC")]);
    assert!(
        v.cause.as_deref().unwrap().starts_with("NCCL_NET_GDR_LEVEL=LOC"),
        "{:?}",
        v.cause
    );
    let v = with(&[("host", 2)], &[("NCCL_NET_GDR_READ", "0")]);
    assert!(
        v.cause.as_deref().unwrap().starts_with("NCCL_NET_GDR_READ=0"),
        "{:?}",
        v.cause
    );
    let v = with(&[("host", 1), ("gpu/peer-mem", 4)], &[]);
    assert_eq!(
        (v.transport, v.host_staged, v.net),
        (Transport::GdrPeerMem, false, Some(Net::IB_GDR))
    );
    assert!(v.cause.is_none());
    let v = with(&[("gpu/dma-buf", 4)], &[]);
    assert_eq!((v.transport, v.net), (Transport::GdrDmabuf, Some(Net::IB_GDR)));
    // NCCL's GDRDMA does not say how the memory was registered: both agree.
    assert!(via_agrees("NET/IB/0/GDRDMA", Transport::GdrDmabuf));
    assert!(via_agrees("NET/IB/0/GDRDMA", Transport::GdrPeerMem));
    assert!(!via_agrees("NET/IB/0", Transport::GdrPeerMem));
    assert_eq!(Net::of_via("NET/IB/0/GDRDMA"), Some(Net::IB_GDR));
    assert_eq!(Net::of_via("NET/Socket/0"), Some(Net::SOCKET));
    assert_eq!(Net::of_via("P2P/CUMEM"), None);
}

/// NCCL's network lines, shaped exactly as NCCL 2.28 printed them for
/// the emulated two-node job on one H200 (2026-12-01) and as its
/// sources format them (net_socket.cc, init.cc, net_ib/init.cc,
/// topo.cc, transport/generic.cc).
#[test]
fn log_network_lines() {
    let log = "h200:2001:2001 [0] NCCL INFO NCCL_HOSTID set by environment to gdrtrace-emu-0\n\
               h200:2001:2001 [0] NCCL INFO NET/IB : No device found.\n\
               h200:2001:2001 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>\n\
               h200:2001:2001 [0] NCCL INFO Using network Socket\n\
               h200:2001:2001 [0] NCCL INFO ncclCommInitRankConfig comm 0x1b7feae0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x5e3c1d2a9b8f7a61 - Init START\n\
               h200:2001:2001 [0] NCCL INFO NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'\n\
               h200:2001:2044 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n\
               h200:2001:2044 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0\n\
               h200:2001:2001 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 0\n\
               h200:2001:2001 [0] NCCL INFO ncclCommInitRankConfig comm 0x1b7feae0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x5e3c1d2a9b8f7a61 - Init COMPLETE\n\
               h200:2002:2002 [0] NCCL INFO NCCL_HOSTID set by environment to gdrtrace-emu-1\n\
               h200:2002:2002 [0] NCCL INFO NET/IB : No device found.\n\
               h200:2002:2002 [0] NCCL INFO Using network Socket\n\
               h200:2003:2003 [0] NCCL INFO NET/IB : GPU Direct RDMA (DMABUF) enabled for HCA 0 'mlx5_0'\n\
               h200:2003:2003 [0] NCCL INFO Using network IB\n\
               h200:2003:2050 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n";
    let l = nccl_log_against(log, &|pid, _| match pid {
        2001 => vec![Transport::Socket],
        2003 => vec![Transport::GdrDmabuf],
        _ => vec![],
    });
    let p = |pid: u32| l.processes.iter().find(|p| p.pid == pid).unwrap();
    assert_eq!(p(2001).host_id.as_deref(), Some("gdrtrace-emu-0"));
    assert_eq!(p(2002).host_id.as_deref(), Some("gdrtrace-emu-1"));
    assert_eq!(p(2001).network.as_deref(), Some("Socket"));
    assert_eq!(p(2001).no_ib_device(), Some("NET/IB : No device found."));
    assert_eq!(
        p(2001).net_lines,
        vec!["NET/IB : No device found.", "NET/Socket : Using [0]eth0:10.0.0.2<0>"]
    );
    assert_eq!(
        p(2001).gdr_lines,
        vec!["NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'"]
    );
    assert_eq!(p(2003).network.as_deref(), Some("IB"));
    assert_eq!(p(2003).no_ib_device(), None);
    let c = &l.communicators[0];
    assert_eq!(c.vias, vec!["NET/Socket/0"]);
    assert_eq!((c.gdr, c.agrees), (Some(false), Some(true)));
    assert_eq!(c.nccl_says, vec!["socket"]);
    // The per-pid view corroborate() uses.
    let m = parse_nccl_log(log);
    assert_eq!(m[&2001], vec!["NET/Socket/0"]);
    assert_eq!(m[&2003], vec!["NET/IB/0/GDRDMA"]);
}

/// 2 emulated nodes x 2 GPUs: within a host P2P, between hosts the
/// network; the rank answers for the network path, and so does the log.
#[test]
fn ranks_spanning_hosts_answer_for_the_network() {
    let calls = [
        ("ncclCommInitRankConfig", 1),
        ("cuDeviceCanAccessPeer", 8),
        ("cuMemExportToShareableHandle", 16),
        ("cuMemImportFromShareableHandle", 16),
        ("cuMemHostAlloc", 8),
    ];
    let mut e = ev(&calls, &[("NCCL_HOSTID", "gdrtrace-emu-0")]);
    assert_eq!(verdict(&e).unwrap().transport, Transport::P2pNvlink, "one host known");
    e.network.other_hosts = Some("NCCL_HOSTID differs".into());
    let v = verdict(&e).unwrap();
    assert_eq!((v.transport, v.net), (Transport::Socket, Some(Net::SOCKET)));
    assert!(
        v.evidence
            .iter()
            .any(|l| l.contains("P2P or SHM to ranks of its own host")),
        "{:?}",
        v.evidence
    );
    let vias = vec!["P2P/CUMEM".to_string(), "NET/Socket/0".to_string()];
    assert_eq!(judged_vias(&vias).collect::<Vec<_>>(), vec!["NET/Socket/0"]);
    let only_p2p = vec!["P2P/CUMEM".to_string(), "P2P/IPC".to_string()];
    assert_eq!(judged_vias(&only_p2p).count(), 2);
}

#[test]
fn every_cause_kind_has_its_own_label_and_the_decision_names_the_variable() {
    let ids: std::collections::BTreeSet<&str> = CauseKind::ALL.iter().map(|k| k.id()).collect();
    assert_eq!(ids.len(), CauseKind::ALL.len(), "two kinds share a label");
    let env = |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let remote = Network {
        other_hosts: Some("NCCL_HOSTID differs".into()),
        rdma_devices: Some(vec![]),
    };
    let local = Network {
        other_hosts: None,
        rdma_devices: Some(vec!["rxe0".into()]),
    };
    let cases = [
        (
            env(&[]),
            Transport::Socket,
            &remote,
            CauseKind::NoRdmaDevice,
            "NCCL found no usable RDMA device",
        ),
        (
            env(&[("NCCL_IB_DISABLE", "1")]),
            Transport::Socket,
            &remote,
            CauseKind::IbDisabled,
            "NCCL_IB_DISABLE=1",
        ),
        (
            env(&[("NCCL_NET", "Socket")]),
            Transport::Socket,
            &remote,
            CauseKind::NetSocketForced,
            "NCCL_NET=Socket",
        ),
        (
            env(&[]),
            Transport::Socket,
            &local,
            CauseKind::NetBetweenLocalRanks,
            "rxe0",
        ),
        (
            env(&[("NCCL_P2P_DISABLE", "1")]),
            Transport::Shm,
            &local,
            CauseKind::P2pDisabled,
            "NCCL_P2P_DISABLE=1",
        ),
        (
            env(&[("NCCL_NET_GDR_LEVEL", "LOC")]),
            Transport::HostStaged,
            &local,
            CauseKind::IbGdrLevel,
            "NCCL_NET_GDR_LEVEL=LOC",
        ),
        (
            env(&[]),
            Transport::Shm,
            &local,
            CauseKind::P2pNotPossible,
            "P2P was not possible",
        ),
    ];
    for (e, t, net, kind, says) in cases {
        assert_eq!(cause_kind(&e, t, net), Some(kind), "{e:?} {t:?}");
        let text = cause(&e, t, net).expect("a cause");
        assert!(text.contains(says), "{kind:?}: {text}");
    }
    assert_eq!(cause_kind(&env(&[]), Transport::P2pNvlink, &local), None);
}

#[test]
fn staged_plugins_have_their_own_cause() {
    let none = BTreeMap::new();
    let local = Network::default();
    let on = |via: &str| Net::of_via(via);
    let staged = Transport::HostStaged;
    assert_eq!(
        cause_kind_on(&none, staged, &local, on("NET/Libfabric/0")),
        Some(CauseKind::OfiNoGdr)
    );
    assert_eq!(
        cause_kind_on(&none, staged, &local, on("NET/UCX/0")),
        Some(CauseKind::PluginNoGdr)
    );
    assert_eq!(
        cause_kind_on(&none, staged, &local, on("NET/IBext_v8/0")),
        Some(CauseKind::IbNoGdr)
    );
    let c = cause_on(&none, staged, &local, on("NET/IBext_v8/0")).unwrap();
    assert!(
        c.starts_with("NET/IBext_v8 (nccl-rdma-sharp-plugins) without GPUDirect RDMA"),
        "{c}"
    );
    let c = cause_on(&none, staged, &local, on("COLLNET/SHARP/0")).unwrap();
    assert!(
        c.starts_with("COLLNET/SHARP (CollNet, in-network reduction) without"),
        "{c}"
    );
    // The variables apply to every network, and the cause names it.
    let level = [("NCCL_NET_GDR_LEVEL".to_string(), "LOC".to_string())].into();
    assert_eq!(
        cause_kind_on(&level, staged, &local, on("NET/OFI/0")),
        Some(CauseKind::IbGdrLevel)
    );
    assert!(
        cause_on(&level, staged, &local, on("NET/OFI/0"))
            .unwrap()
            .ends_with("NET/OFI (aws-ofi-nccl) stages through host buffers")
    );
    // Direct paths have no cause.
    assert_eq!(
        cause_kind_on(&none, Transport::GdrDmabuf, &local, on("NET/OFI/0/GDRDMA")),
        None
    );
}
